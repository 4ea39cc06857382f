// The shrinker (shrink.h): delta debugging over operation sequences, then per-op simplification.
#include "props/shrink.h"

#include <algorithm>

#include "core/check.h"

namespace kvtwin::props {
namespace {

// Shorter versions of an id list: the first half, the second half, then each list with one
// element removed (at most 16 of those, first elements first).
std::vector<std::vector<std::int64_t>> shorter_lists(const std::vector<std::int64_t>& ids) {
  std::vector<std::vector<std::int64_t>> out;
  if (ids.size() >= 2) {
    const auto mid = ids.begin() + static_cast<std::ptrdiff_t>(ids.size() / 2);
    out.emplace_back(ids.begin(), mid);
    out.emplace_back(mid, ids.end());
  }
  for (std::size_t i = 0; i < ids.size() && i < 16; ++i) {
    std::vector<std::int64_t> v = ids;
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
    if (ids.size() >= 2 || !v.empty()) out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

std::vector<Op> simpler_variants(const Op& op) {
  std::vector<Op> out;
  if (const auto* f = std::get_if<Free>(&op)) {
    for (auto& ids : shorter_lists(f->ids))
      if (!ids.empty()) out.push_back(Free{f->unit, std::move(ids)});
  } else if (const auto* f = std::get_if<FreeSwa>(&op)) {
    for (auto& ids : shorter_lists(f->ids))
      if (!ids.empty()) out.push_back(FreeSwa{f->unit, std::move(ids)});
  } else if (const auto* s = std::get_if<SwaTranslate>(&op)) {
    for (auto& ids : shorter_lists(s->ids)) out.push_back(SwaTranslate{std::move(ids)});
  } else if (const auto* t = std::get_if<Translate>(&op)) {
    if (t->shape.size() == 1 && t->input_stride == 0 && t->out == OutPlacement::fresh) {
      for (auto& ids : shorter_lists(t->ids)) {
        Translate v = *t;
        v.shape = {static_cast<std::int64_t>(ids.size())};
        v.ids = std::move(ids);
        if (v.out_width != 0 && v.out_width < v.ids.size()) v.out_width = 0;
        out.push_back(std::move(v));
      }
    }
  } else if (const auto* m = std::get_if<AllocMany>(&op)) {
    for (std::size_t i = 0; i < m->tokens.size() && m->tokens.size() > 1; ++i) {
      AllocMany v = *m;
      v.tokens.erase(v.tokens.begin() + static_cast<std::ptrdiff_t>(i));
      out.push_back(std::move(v));
    }
  } else if (const auto* b = std::get_if<MakeBatch>(&op)) {
    if (b->encoder_tokens.empty()) {
      for (auto& ids : shorter_lists(b->tokens))
        if (!ids.empty()) out.push_back(MakeBatch{b->batch, std::move(ids), {}});
    }
  }
  return out;
}

std::vector<Op> shrink_ops(std::vector<Op> ops, const StillFails& still_fails, const ShrinkOptions& options,
                           ShrinkStats* stats) {
  ShrinkStats local;
  ShrinkStats& st = stats != nullptr ? *stats : local;
  st.ops_before = ops.size();
  const auto spent = [&] {
    return st.replays >= options.max_replays ||
           (options.max_replayed_ops != 0 && st.replayed_ops >= options.max_replayed_ops);
  };
  const auto try_candidate = [&](const std::vector<Op>& candidate) {
    if (spent()) return false;
    ++st.replays;
    st.replayed_ops += candidate.size();
    return still_fails(candidate);
  };

  // Delta debugging: remove chunks, largest first.
  std::size_t chunks = 2;
  while (ops.size() >= 2 && !spent()) {
    const std::size_t chunk = (ops.size() + chunks - 1) / chunks;
    bool removed = false;
    for (std::size_t start = 0; start < ops.size(); start += chunk) {
      std::vector<Op> candidate;
      candidate.reserve(ops.size());
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (i < start || i >= start + chunk) candidate.push_back(ops[i]);
      if (try_candidate(candidate)) {
        ops = std::move(candidate);
        chunks = std::max<std::size_t>(chunks - 1, 2);
        removed = true;
        break;
      }
    }
    if (removed) continue;
    if (chunk == 1) break;
    chunks = std::min(chunks * 2, ops.size());
  }
  if (ops.size() == 1 && try_candidate({})) ops.clear();

  // Simplify operations one at a time, repeating while anything gets simpler.
  bool changed = true;
  while (changed && !spent()) {
    changed = false;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      for (Op& variant : simpler_variants(ops[i])) {
        std::vector<Op> candidate = ops;
        candidate[i] = std::move(variant);
        if (try_candidate(candidate)) {
          ops = std::move(candidate);
          changed = true;
          break;
        }
      }
    }
  }
  st.ops_after = ops.size();
  return ops;
}

}  // namespace kvtwin::props
