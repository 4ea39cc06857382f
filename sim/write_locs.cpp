// Write locs and their mark (SPEC.md section 6). See write_locs.h.
#include "sim/write_locs.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "core/check.h"
#include "sim/allocation_faults.h"
#include "sim/translation.h"

namespace kvtwin::sim {
namespace {
std::string num(std::uint64_t v) { return std::to_string(v); }
std::string num(std::int64_t v) { return std::to_string(v); }
}  // namespace

Status make_batch(const MakeBatch& op, Batch& into) {
  if (op.tokens.size() > kMaxLanes)
    return make_error(ErrorKind::invalid_argument, "batch " + num(std::uint64_t{op.batch}) + " has " +
                                                       num(std::uint64_t{op.tokens.size()}) + " lanes; at most " +
                                                       num(kMaxLanes) + " are allowed");
  if (!op.encoder_tokens.empty() && op.encoder_tokens.size() != op.tokens.size())
    return make_error(ErrorKind::invalid_argument,
                      "batch " + num(std::uint64_t{op.batch}) + " has " + num(std::uint64_t{op.tokens.size()}) +
                          " tokens but " + num(std::uint64_t{op.encoder_tokens.size()}) +
                          " encoder tokens; give one encoder token per lane, or none");
  allocation_point();
  into.tokens.assign(op.tokens.begin(), op.tokens.end());
  into.loc.assign(op.tokens.begin(), op.tokens.end());  // virtual ids, unmarked
  into.physical = false;
  into.encoder_loc.assign(op.encoder_tokens.begin(), op.encoder_tokens.end());  // never translated (SPEC 6)
  return ok_status();
}

Status rebind_batch(Batch& batch, std::uint64_t out_width, const std::vector<std::int64_t>& v2p,
                    std::int64_t page_size) {
  const std::uint64_t n = batch.tokens.size();
  const std::uint64_t width = out_width == 0 ? n : out_width;
  if (width < n)
    return make_error(ErrorKind::invalid_argument, "rebind out_width " + num(out_width) + " is smaller than the batch's " +
                                                       num(n) + " lanes; give a width of at least " + num(n));
  if (width > kMaxLanes)
    return make_error(ErrorKind::invalid_argument,
                      "rebind out_width " + num(width) + " exceeds " + num(kMaxLanes) + " lanes");
  allocation_point();
  batch.tokens.resize(width, -1);  // lanes past the batch are padding
  batch.loc.assign(width, 0);      // SPEC 5: lanes N .. W-1 are zero-filled (the sink)
  // translate_token lane by lane, except that lanes in a row of one page (a prompt's tokens)
  // share the page's v2p entry: the last page's tokens [run_begin, run_end) and its first slot
  // are kept, so such a lane costs no division: max(v2p[page] * ps + t % ps, 0) all the same.
  std::int64_t run_begin = 0, run_end = 0, run_base = 0;
  const auto table_pages = static_cast<std::int64_t>(v2p.size());
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::int64_t t = batch.tokens[i];
    if (t < run_begin || t >= run_end) {
      if (t < 0 || t / page_size >= table_pages) {
        batch.loc[i] = translate_token(v2p, page_size, t);  // the sink
        continue;
      }
      const std::int64_t page = t / page_size;
      run_begin = page * page_size;
      run_end = run_begin + page_size;
      run_base = v2p[static_cast<std::size_t>(page)] * page_size;
    }
    batch.loc[i] = std::max<std::int64_t>(run_base + (t - run_begin), 0);  // a tombstone goes to the sink
  }
  if (!batch.encoder_loc.empty()) batch.encoder_loc.resize(width, 0);
  batch.physical = true;  // SPEC 6: rebind sets the mark
  return ok_status();
}

Result<std::pair<Batch, Batch>> split_batch(const Batch& batch, std::uint64_t at) {
  const std::uint64_t n = batch.loc.size();
  if (at > n)
    return make_error(ErrorKind::out_of_range,
                      "split at lane " + num(at) + " is past the batch's " + num(n) + " lanes; split at 0 .. " + num(n));
  auto slice = [&](std::uint64_t begin, std::uint64_t end) {
    Batch child;
    child.tokens.assign(batch.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                        batch.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    child.loc.assign(batch.loc.begin() + static_cast<std::ptrdiff_t>(begin),
                     batch.loc.begin() + static_cast<std::ptrdiff_t>(end));
    if (!batch.encoder_loc.empty())
      child.encoder_loc.assign(batch.encoder_loc.begin() + static_cast<std::ptrdiff_t>(begin),
                               batch.encoder_loc.begin() + static_cast<std::ptrdiff_t>(end));
    child.physical = batch.physical;  // SPEC 6: a child copies the parent's mark, never the default
    return child;
  };
  return std::make_pair(slice(0, at), slice(at, n));
}

WriteLoc for_batch(const Batch& batch) { return WriteLoc{batch.loc, batch.physical, batch.tokens, std::nullopt}; }

Result<WriteLoc> for_layer(const Batch& batch, LayerKind kind, std::uint32_t model_layer) {
  if (kind != LayerKind::cross) return for_batch(batch);
  // SPEC 6: a cross-attention layer writes through encoder_out_cache_loc, which nothing
  // translates and so is never marked. Its rows are the encoder tokens'.
  if (batch.encoder_loc.empty())
    return make_error(ErrorKind::invalid_argument,
                      "layer " + num(std::uint64_t{model_layer}) +
                          " is a cross-attention layer, which writes through the batch's encoder loc, but the batch "
                          "has none; declare the batch with encoder_tokens");
  return WriteLoc{batch.encoder_loc, false, batch.encoder_loc, std::nullopt};
}

Status check_mark(const WriteLoc& loc, std::uint32_t model_layer) {
  if (loc.physical) return ok_status();
  return make_error(ErrorKind::unmarked_loc,
                    "write to layer " + num(std::uint64_t{model_layer}) +
                        ": the unified pool refuses an unmarked loc (its ids may be virtual); rebind the batch "
                        "first (a rebind op translates it and marks it physical), or, for ids already translated "
                        "elsewhere, give the explicit loc with physical: true");
}

void LocStamps::Free::operator()(LocStamp* p) const { std::free(p); }

Status check_duplicates(std::span<const std::int64_t> locs, std::int64_t sink_end, std::uint32_t model_layer,
                        const std::string& sub_pool,
                        LocStamps* stamps, std::int64_t slots) {
  // (loc, lane) pairs of the non-sink lanes, sorted: equal locs end up adjacent, each group's lanes
  // ascending. Sink lanes write nothing (SPEC 6) and are left out.
  const auto refuse = [&](std::size_t first, std::size_t second, std::int64_t loc) {
    return make_error(ErrorKind::duplicate_loc,
                      "write to layer " + num(std::uint64_t{model_layer}) + ": lanes " + num(std::uint64_t{first}) +
                          " and " + num(std::uint64_t{second}) + " both write token " + num(loc) + " of sub-pool '" +
                          sub_pool + "' (last writer wins would race on a GPU); give each lane its own loc or "
                          "route padding lanes to the sink (0)");
  };
  if (stamps != nullptr && slots > 0 && static_cast<std::uint64_t>(slots) <= kMaxLocStampSlots) {
    // A lane-order scan: the first lane whose loc an earlier lane took is the duplicate reported,
    // with the first lane that took it (the same pair as the sort below names).
    if (stamps->slots != static_cast<std::size_t>(slots) || ++stamps->current == 0) {
      // A new size, or every epoch used (after 2^32 writes): zeroed stamps, from the system.
      stamps->at.reset(static_cast<LocStamp*>(std::calloc(static_cast<std::size_t>(slots), sizeof(LocStamp))));
      if (!stamps->at) throw std::bad_alloc();
      stamps->slots = static_cast<std::size_t>(slots);
      stamps->current = 1;
    }
    LocStamp* const at = stamps->at.get();
    for (std::size_t i = 0; i < locs.size(); ++i) {
      const std::int64_t l = locs[i];
      if (l < sink_end) continue;
      KVTWIN_CHECK(l < slots, "a loc checked for duplicates lies inside the sub-pool");
      LocStamp& stamp = at[static_cast<std::size_t>(l)];
      if (stamp.epoch == stamps->current) {
        const std::size_t first = static_cast<std::size_t>(std::find(locs.begin(), locs.begin() + i, l) - locs.begin());
        KVTWIN_CHECK(first < i, "a stamped slot was taken by an earlier lane of this check");
        return refuse(first, i, l);
      }
      stamp.epoch = stamps->current;
    }
    return ok_status();
  }
  std::vector<std::pair<std::int64_t, std::size_t>> by_loc;
  by_loc.reserve(locs.size());
  for (std::size_t i = 0; i < locs.size(); ++i)
    if (locs[i] >= sink_end) by_loc.emplace_back(locs[i], i);
  std::sort(by_loc.begin(), by_loc.end());
  // Report the duplicate a lane-order scan meets first: the group whose second lane is smallest,
  // named by its first and second lanes.
  std::size_t best = by_loc.size();
  for (std::size_t k = 1; k < by_loc.size(); ++k) {
    const bool starts_group = k == 1 || by_loc[k - 2].first != by_loc[k - 1].first;
    if (by_loc[k].first == by_loc[k - 1].first && starts_group &&
        (best == by_loc.size() || by_loc[k].second < by_loc[best].second))
      best = k;
  }
  if (best == by_loc.size()) return ok_status();
  const auto [loc, second] = by_loc[best];
  return refuse(by_loc[best - 1].second, second, loc);
}

}  // namespace kvtwin::sim
