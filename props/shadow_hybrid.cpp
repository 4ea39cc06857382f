// The shadow of a hybrid chain (SPEC.md section 11). See shadow_hybrid.h.
#include "props/shadow_hybrid.h"

#include <algorithm>

#include "core/check.h"
#include "core/oracle.h"
#include "core/reasons.h"

namespace kvtwin::props {
namespace {

OpResult no(ErrorKind kind, std::string_view why = {}) {
  return OpResult(Error{kind, "(predicted by the hybrid shadow)", std::string(why)});
}
OpResult yes(Outcome o) { return OpResult(std::move(o)); }

std::int64_t up_div(std::uint64_t a, std::uint64_t b) { return static_cast<std::int64_t>((a + b - 1) / b); }

}  // namespace

HybridShadow::HybridShadow(const PoolConfig& config, const PoolDerived& d) {
  KVTWIN_CHECK(d.has_state(), "the hybrid shadow shadows a hybrid chain");
  lazy_ = config.mode == CompactionMode::lazy;
  tables_only_ = config.tables_only;
  page_size_ = static_cast<std::int64_t>(config.page_size);
  const auto end_of = [](const SubPoolGeometry& g) {
    End e;
    e.name = g.name;
    e.min_page = static_cast<std::int64_t>(g.min_page_index);
    e.num_pages = static_cast<std::int64_t>(g.num_pages);
    e.page_bytes = g.page_bytes;
    return e;
  };
  owner_ = end_of(d.geometry.sub_pools[0]);
  owner_low_ = owner_.num_pages;  // an empty band at the top
  for (std::int64_t v = owner_.min_page; v < owner_.num_pages; ++v) queue_.push_back(v);
  if (d.geometry.sub_pools.size() == 2) {
    float_ = end_of(d.geometry.sub_pools[1]);
    // SPEC 11: an empty float at the middle of the buffer.
    float_low_ = float_high_ = std::clamp<std::int64_t>(static_cast<std::int64_t>(d.geometry.float_start_page),
                                                         float_->min_page, float_->num_pages);
  }
  state_ = end_of(*d.geometry.state);
  state_top_ = state_.min_page;
  for (std::int64_t v = state_.min_page; v < state_.num_pages; ++v) state_queue_.push_back(v);
  seed_ = config.seed;
  for (const StateBlock& b : d.state_layout->blocks) {
    state_block_dtypes_.push_back(b.dtype);
    state_blocks_.push_back(b.name);
    state_block_bytes_.push_back(b.layer_stride_bytes);
    state_layers_ = b.layer_num;
  }
}

std::uint64_t HybridShadow::state_end_bytes() const {
  std::int64_t top = state_top_;
  if (!quarantine_.empty()) top = std::max(top, *quarantine_.rbegin() + 1);
  return static_cast<std::uint64_t>(top) * state_.page_bytes;
}

bool HybridShadow::held(const std::string& sub_pool, std::int64_t page) const {
  for (const auto& [id, r] : readers_)
    if (r.first == sub_pool && r.second.count(page)) return true;
  return false;
}

std::optional<OpResult> HybridShadow::apply(const Op& op) {
  last_rows_.reset();
  // Bytes the shadow does not follow may land on state slots: what it knew of them is forgotten.
  if (std::holds_alternative<Write>(op) || std::holds_alternative<Replay>(op) || std::holds_alternative<MovePages>(op))
    contents_.clear();
  if (const auto* o = std::get_if<Alloc>(&op)) {
    if (o->tokens % static_cast<std::uint64_t>(page_size_) != 0) return no(ErrorKind::invalid_argument);
    if (o->tokens == 0) return yes(Allocated{});
    return alloc(o->tokens / static_cast<std::uint64_t>(page_size_), nullptr);
  }
  if (const auto* o = std::get_if<AllocMany>(&op)) {
    if (o->tokens.empty()) return no(ErrorKind::invalid_argument);
    std::vector<std::uint64_t> split;
    std::uint64_t total = 0;
    for (std::uint64_t n : o->tokens) {
      if (n % static_cast<std::uint64_t>(page_size_) != 0) return no(ErrorKind::invalid_argument);
      split.push_back(n / static_cast<std::uint64_t>(page_size_));
      if (__builtin_add_overflow(total, split.back(), &total)) return no(ErrorKind::overflow);
    }
    return alloc(total, &split);
  }
  if (const auto* o = std::get_if<Free>(&op)) return free(*o);
  if (const auto* o = std::get_if<FreeSwa>(&op)) return free_swa(*o);
  if (std::holds_alternative<Flush>(op)) return flush();
  if (const auto* o = std::get_if<StateAlloc>(&op)) return state_alloc(*o);
  if (const auto* o = std::get_if<StateFree>(&op)) return state_free(*o);
  if (const auto* o = std::get_if<StateWrite>(&op)) {
    auto it = requests_.find(o->request);
    if (it == requests_.end()) return no(ErrorKind::invalid_argument);
    if (!tables_only_) contents_[it->second] = {o->request, o->write_number};
    return yes(Done{});
  }
  if (const auto* o = std::get_if<StateRead>(&op)) return state_read(*o);
  if (const auto* o = std::get_if<StateSlots>(&op)) {
    Ids out;
    for (std::uint64_t r : o->requests) {
      auto it = requests_.find(r);
      out.values.push_back(it == requests_.end() ? 0 : state_.v2p.at(it->second));
    }
    return yes(std::move(out));
  }
  if (const auto* o = std::get_if<BeginRead>(&op)) return begin_read(*o);
  if (const auto* o = std::get_if<EndRead>(&op)) return end_read(*o);
  if (std::holds_alternative<Checkpoint>(op)) return yes(Done{});
  return std::nullopt;  // not predicted (shadow_hybrid.h)
}

// ---------------------------------------------------------------- the owner and the float

std::optional<OpResult> HybridShadow::alloc(std::uint64_t k, const std::vector<std::uint64_t>* split) {
  const std::int64_t owner_free = owner_.num_pages - owner_.min_page - static_cast<std::int64_t>(owner_.v2p.size());
  if (k > queue_.size() || static_cast<std::int64_t>(k) > owner_free) return yes(NoRoom{});
  const auto kk = static_cast<std::int64_t>(k);
  // The owner: its holes, lowest first, then pages just below its band.
  std::vector<std::int64_t> owner_pages(owner_.holes.begin(), owner_.holes.end());
  if (static_cast<std::int64_t>(owner_pages.size()) > kk) owner_pages.resize(k);
  const std::int64_t fresh = kk - static_cast<std::int64_t>(owner_pages.size());
  const std::int64_t new_low = owner_low_ - fresh;
  if (new_low < owner_.min_page) return yes(NoRoom{});
  const std::uint64_t owner_begin = static_cast<std::uint64_t>(new_low) * owner_.page_bytes;
  const std::uint64_t state_end = state_end_bytes();
  if (owner_begin < state_end) return yes(NoRoom{});
  for (std::int64_t p = new_low; p < owner_low_; ++p) owner_pages.push_back(p);

  std::vector<std::int64_t> float_pages;
  std::vector<Move> relocation;
  std::int64_t relocated_low = 0;
  if (tri()) {
    End& f = *float_;
    const std::int64_t live = static_cast<std::int64_t>(f.v2p.size());
    if (kk > f.num_pages - f.min_page - live) return yes(NoRoom{});
    // The whole pages between the state's end and the owner's new band.
    const std::int64_t lo = std::max(f.min_page, up_div(state_end, f.page_bytes));
    const std::int64_t hi = std::min(f.num_pages, static_cast<std::int64_t>(owner_begin / f.page_bytes));
    std::int64_t low = float_low_, high = float_high_;
    // One page at a time toward the larger gap, in bytes; a tie goes up.
    const auto extend = [&](std::int64_t& l, std::int64_t& h) {
      const std::int64_t below = l * static_cast<std::int64_t>(f.page_bytes) - static_cast<std::int64_t>(state_end);
      const std::int64_t above = static_cast<std::int64_t>(owner_begin) - h * static_cast<std::int64_t>(f.page_bytes);
      if (h < hi && (above >= below || l <= lo))
        float_pages.push_back(h++);
      else
        float_pages.push_back(--l);
    };
    bool placed = false;
    if (hi >= lo) {
      if (live == 0) low = high = std::clamp(low, lo, hi);  // transparent: the point moves into the gap
      const bool inside = live == 0 || (low >= lo && high <= hi);
      const std::int64_t room = (live == 0 ? 0 : static_cast<std::int64_t>(f.holes.size())) + (low - lo) + (hi - high);
      if (inside && room >= kk) {
        if (live != 0)
          for (std::int64_t h : f.holes)
            if (static_cast<std::int64_t>(float_pages.size()) < kk) float_pages.push_back(h);
        while (static_cast<std::int64_t>(float_pages.size()) < kk) extend(low, high);
        placed = true;
      }
    }
    if (!placed) {
      // make_room: laid side by side away from the owner, in the middle of the room left once
      // they and the new pages fit; the new pages then extend them.
      if (live == 0 || hi - lo < live + kk) return yes(NoRoom{});
      relocated_low = lo + (hi - lo - live - kk) / 2;
      relocation = pack_float(relocated_low);
      std::int64_t l = relocated_low, h = relocated_low + live;
      while (static_cast<std::int64_t>(float_pages.size()) < kk) extend(l, h);
    }
    for (const Move& m : relocation)
      if (held(f.name, m.src) || held(f.name, m.dst)) return no(ErrorKind::reader_conflict);
    std::sort(float_pages.begin(), float_pages.end());
  }
  // The step.
  std::vector<std::int64_t> vids(queue_.begin(), queue_.begin() + kk);
  queue_.erase(queue_.begin(), queue_.begin() + kk);
  for (std::int64_t i = 0; i < kk; ++i) {
    owner_.holes.erase(owner_pages[i]);
    owner_.v2p[vids[i]] = owner_pages[i];
    owner_.p2v[owner_pages[i]] = vids[i];
  }
  owner_low_ = new_low;
  std::vector<PageMove> moves;
  if (tri()) {
    End& f = *float_;
    if (!relocation.empty() || relocated_low != 0) {
      for (const Move& m : relocation) moves.push_back(PageMove{f.name, m.src, m.dst});
      apply_float_moves(relocation, relocated_low);
    }
    const bool was_empty = f.v2p.empty();
    for (std::int64_t i = 0; i < kk; ++i) {
      f.holes.erase(float_pages[i]);
      f.v2p[vids[i]] = float_pages[i];
      f.p2v[float_pages[i]] = vids[i];
    }
    if (kk > 0) {
      float_low_ = was_empty ? float_pages.front() : std::min(float_low_, float_pages.front());
      float_high_ = was_empty ? float_pages.back() + 1 : std::max(float_high_, float_pages.back() + 1);
    }
  }
  if (!split) return yes(Allocated{vids, moves});
  AllocatedMany out;
  std::size_t at = 0;
  for (std::uint64_t n : *split) {
    out.pages.emplace_back(vids.begin() + static_cast<std::ptrdiff_t>(at), vids.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return yes(std::move(out));
}

std::vector<HybridShadow::Move> HybridShadow::pack_float(std::int64_t first) const {
  // The pages that go down, lowest first, then the ones that go up, highest first: a page is
  // never written over before it has left.
  std::vector<Move> down, up;
  std::int64_t to = first;
  for (const auto& [p, v] : float_->p2v) {
    if (to < p) down.push_back(Move{p, to});
    if (to > p) up.push_back(Move{p, to});
    ++to;
  }
  down.insert(down.end(), up.rbegin(), up.rend());
  return down;
}

void HybridShadow::apply_float_moves(const std::vector<Move>& moves, std::int64_t first) {
  End& f = *float_;
  for (const Move& m : moves) {
    const std::int64_t v = f.p2v.at(m.src);
    f.p2v.erase(m.src);
    f.p2v[m.dst] = v;
    f.v2p[v] = m.dst;
  }
  f.holes.clear();
  float_low_ = first;
  float_high_ = first + static_cast<std::int64_t>(f.v2p.size());
}

void HybridShadow::tidy_float(bool absorb) {
  End& f = *float_;
  if (f.v2p.empty()) {
    f.holes.clear();
    float_high_ = float_low_;
    return;
  }
  if (!absorb) return;
  while (float_low_ < float_high_ && f.holes.erase(float_low_)) ++float_low_;
  while (float_high_ > float_low_ && f.holes.erase(float_high_ - 1)) --float_high_;
}

std::vector<HybridShadow::Move> HybridShadow::owner_compaction(const std::set<std::int64_t>& freed) const {
  // The band [low, top) loses K pages at its low end: bound pages below the new low end move,
  // ascending, onto the freed pages at or above it, ascending.
  const std::int64_t new_low = owner_low_ + static_cast<std::int64_t>(freed.size());
  std::vector<std::int64_t> movers, targets;
  for (std::int64_t p = owner_low_; p < new_low; ++p)
    if (!freed.count(p)) movers.push_back(p);
  for (std::int64_t p : freed)
    if (p >= new_low) targets.push_back(p);
  std::vector<Move> out;
  for (std::size_t i = 0; i < movers.size(); ++i) out.push_back(Move{movers[i], targets[i]});
  return out;
}

std::optional<OpResult> HybridShadow::free(const Free& op) {
  std::set<std::int64_t> pages;
  for (std::int64_t id : op.ids) {
    if (id < 0) return no(ErrorKind::out_of_range, reason::negative_id);
    pages.insert(op.unit == IdUnit::tokens ? id / page_size_ : id);
  }
  for (std::int64_t v : pages) {
    if (v < owner_.min_page) return no(ErrorKind::out_of_range, reason::reserved_page);
    if (v >= owner_.num_pages) return no(ErrorKind::out_of_range, reason::past_last_page);
  }
  for (std::int64_t v : pages)
    if (!owner_.v2p.count(v)) return no(ErrorKind::double_free, reason::not_allocated);
  std::set<std::int64_t> freed;
  for (std::int64_t v : pages) freed.insert(owner_.v2p.at(v));
  const std::vector<Move> moves = lazy_ ? std::vector<Move>{} : owner_compaction(freed);
  for (const Move& m : moves)
    if (held(owner_.name, m.src) || held(owner_.name, m.dst)) return no(ErrorKind::reader_conflict);
  // The float's pages of these ids first (holes), then the owner's.
  if (tri()) {
    End& f = *float_;
    for (std::int64_t v : pages) {
      auto it = f.v2p.find(v);
      if (it == f.v2p.end()) continue;
      f.holes.insert(it->second);
      f.p2v.erase(it->second);
      f.v2p.erase(it);
    }
    tidy_float(!lazy_);
  }
  for (std::int64_t v : pages) {
    owner_.p2v.erase(owner_.v2p.at(v));
    owner_.v2p.erase(v);
  }
  Compaction out;
  if (lazy_) {
    for (std::int64_t p : freed) owner_.holes.insert(p);
  } else {
    for (const Move& m : moves) {
      const std::int64_t v = owner_.p2v.at(m.src);
      owner_.p2v.erase(m.src);
      owner_.p2v[m.dst] = v;
      owner_.v2p[v] = m.dst;
      out.moves.push_back(PageMove{owner_.name, m.src, m.dst});
    }
    owner_low_ += static_cast<std::int64_t>(freed.size());
  }
  for (std::int64_t v : pages) queue_.push_back(v);
  return yes(std::move(out));
}

std::optional<OpResult> HybridShadow::free_swa(const FreeSwa& op) {
  if (!tri()) return no(ErrorKind::invalid_argument);
  std::set<std::int64_t> pages;
  for (std::int64_t id : op.ids) {
    if (id < 0) return no(ErrorKind::out_of_range, reason::negative_id);
    pages.insert(op.unit == IdUnit::tokens ? id / page_size_ : id);
  }
  for (std::int64_t v : pages) {
    if (v < owner_.min_page) return no(ErrorKind::out_of_range, reason::reserved_page);
    if (v >= owner_.num_pages) return no(ErrorKind::out_of_range, reason::past_last_page);
  }
  End& f = *float_;
  for (std::int64_t v : pages)
    if (!owner_.v2p.count(v)) return no(ErrorKind::double_free, reason::not_allocated);
  for (std::int64_t v : pages)
    if (!f.v2p.count(v)) return no(ErrorKind::double_free, reason::left_window);
  for (std::int64_t v : pages) {
    f.holes.insert(f.v2p.at(v));
    f.p2v.erase(f.v2p.at(v));
    f.v2p.erase(v);
  }
  tidy_float(!lazy_);
  return yes(Compaction{});
}

std::optional<OpResult> HybridShadow::flush() {
  const std::vector<Move> owner_moves = owner_compaction(owner_.holes);
  for (const Move& m : owner_moves)
    if (held(owner_.name, m.src) || held(owner_.name, m.dst)) return no(ErrorKind::reader_conflict);
  const std::vector<Move> state_moves = state_compaction(state_.holes);
  for (const Move& m : state_moves)
    if (held(state_.name, m.dst)) return no(ErrorKind::reader_conflict);
  if (tri()) tidy_float(true);
  Compaction out;
  for (const Move& m : owner_moves) {
    const std::int64_t v = owner_.p2v.at(m.src);
    owner_.p2v.erase(m.src);
    owner_.p2v[m.dst] = v;
    owner_.v2p[v] = m.dst;
    out.moves.push_back(PageMove{owner_.name, m.src, m.dst});
  }
  owner_low_ += static_cast<std::int64_t>(owner_.holes.size());
  owner_.holes.clear();
  for (const Move& m : state_moves) {
    if (held(state_.name, m.src)) quarantine_.insert(m.src);
    const std::int64_t v = state_.p2v.at(m.src);
    state_.p2v.erase(m.src);
    state_.p2v[m.dst] = v;
    state_.v2p[v] = m.dst;
    out.moves.push_back(PageMove{state_.name, m.src, m.dst});
  }
  state_top_ -= static_cast<std::int64_t>(state_.holes.size());
  state_.holes.clear();
  return yes(std::move(out));
}

// ---------------------------------------------------------------- the state end

std::vector<HybridShadow::Move> HybridShadow::state_compaction(const std::set<std::int64_t>& freed) const {
  // The band [min, top) loses K slots at its top: bound slots at or above the new top move,
  // ascending, onto the freed slots below it, ascending.
  const std::int64_t new_top = state_top_ - static_cast<std::int64_t>(freed.size());
  std::vector<std::int64_t> movers, targets;
  for (std::int64_t s = new_top; s < state_top_; ++s)
    if (!freed.count(s)) movers.push_back(s);
  for (std::int64_t s : freed)
    if (s < new_top) targets.push_back(s);
  std::vector<Move> out;
  for (std::size_t i = 0; i < movers.size(); ++i) out.push_back(Move{movers[i], targets[i]});
  return out;
}

std::optional<OpResult> HybridShadow::state_alloc(const StateAlloc& op) {
  if (requests_.count(op.request)) return no(ErrorKind::invalid_argument);
  const std::int64_t slots_free = state_.num_pages - state_.min_page - static_cast<std::int64_t>(state_.v2p.size());
  if (state_queue_.empty() || slots_free == 0) return yes(NoRoom{});
  const std::int64_t slot = state_.holes.empty() ? state_top_ : *state_.holes.begin();
  // SPEC 10.22: still read at its old place by a forward: not yet.
  if (quarantine_.count(slot)) return yes(NoRoom{});
  std::vector<Move> relocation;
  std::int64_t relocated_low = 0;
  if (slot == state_top_) {
    const std::uint64_t slot_end = static_cast<std::uint64_t>(slot + 1) * state_.page_bytes;
    const bool float_live = tri() && !float_->v2p.empty();
    if (!float_live) {
      if (slot_end > owner_begin_bytes()) return yes(NoRoom{});  // an empty float is transparent
    } else if (slot_end > static_cast<std::uint64_t>(float_low_) * float_->page_bytes) {
      // make_room: the float laid away from the state, in the middle of what is left.
      const End& f = *float_;
      const std::int64_t lo = std::max(f.min_page, up_div(slot_end, f.page_bytes));
      const std::int64_t hi = std::min(f.num_pages, static_cast<std::int64_t>(owner_begin_bytes() / f.page_bytes));
      const auto live = static_cast<std::int64_t>(f.v2p.size());
      if (hi - lo < live) return yes(NoRoom{});
      relocated_low = lo + (hi - lo - live) / 2;
      relocation = pack_float(relocated_low);
      for (const Move& m : relocation)
        if (held(f.name, m.src) || held(f.name, m.dst)) return no(ErrorKind::reader_conflict);
    }
  }
  std::vector<PageMove> moves;
  if (relocated_low != 0) {
    for (const Move& m : relocation) moves.push_back(PageMove{float_->name, m.src, m.dst});
    apply_float_moves(relocation, relocated_low);
  }
  const std::int64_t v = state_queue_.front();
  state_queue_.pop_front();
  state_.holes.erase(slot);
  state_.v2p[v] = slot;
  state_.p2v[slot] = v;
  if (slot == state_top_) ++state_top_;
  requests_[op.request] = v;
  return yes(Allocated{{v}, moves});
}

std::optional<OpResult> HybridShadow::state_free(const StateFree& op) {
  auto it = requests_.find(op.request);
  if (it == requests_.end()) return no(ErrorKind::double_free, reason::not_allocated);
  const std::int64_t v = it->second, slot = state_.v2p.at(v);
  const std::vector<Move> moves = lazy_ ? std::vector<Move>{} : state_compaction({slot});
  for (const Move& m : moves)
    if (held(state_.name, m.dst)) return no(ErrorKind::reader_conflict);
  state_.v2p.erase(v);
  state_.p2v.erase(slot);
  contents_.erase(v);  // a freed slot holds no state
  Compaction out;
  if (lazy_) {
    state_.holes.insert(slot);
  } else {
    for (const Move& m : moves) {
      if (held(state_.name, m.src)) quarantine_.insert(m.src);
      const std::int64_t w = state_.p2v.at(m.src);
      state_.p2v.erase(m.src);
      state_.p2v[m.dst] = w;
      state_.v2p[w] = m.dst;
      out.moves.push_back(PageMove{state_.name, m.src, m.dst});
    }
    --state_top_;
  }
  requests_.erase(it);
  state_queue_.push_back(v);
  return yes(std::move(out));
}

std::optional<OpResult> HybridShadow::state_read(const StateRead& op) {
  if (tables_only_) return no(ErrorKind::unsupported);
  const auto b = std::find(state_blocks_.begin(), state_blocks_.end(), op.block);
  if (b == state_blocks_.end()) return no(ErrorKind::invalid_argument);
  if (op.layer >= state_layers_) return no(ErrorKind::out_of_range);
  for (std::int64_t s : op.slots)
    if (s < 0 || s >= state_.num_pages) return no(ErrorKind::out_of_range);
  const auto block = static_cast<std::size_t>(b - state_blocks_.begin());
  const std::uint64_t row = state_block_bytes_[block];
  KnownRows rows;
  rows.row_bytes = row;
  rows.bytes.assign(op.slots.size() * row, 0);
  for (std::size_t i = 0; i < op.slots.size(); ++i) {
    const std::int64_t s = op.slots[i];
    if (s < state_.min_page) {
      rows.known.push_back(true);  // the sink reads as zeros
      continue;
    }
    auto slot = state_.p2v.find(s);
    auto content = slot == state_.p2v.end() ? contents_.end() : contents_.find(slot->second);
    if (content == contents_.end()) {
      rows.known.push_back(false);
      continue;
    }
    // The oracle's state of the slot's last write: identity {request, sub-pool 7, layer, block,
    // write} (docs/decisions.md).
    const RowIdentity id{static_cast<std::int64_t>(content->second.first), 7, op.layer, static_cast<std::uint32_t>(block),
                         content->second.second};
    fill_oracle_row(seed_, id, state_block_dtypes_[block],
                    std::span<std::uint8_t>(rows.bytes.data() + i * row, row));
    rows.known.push_back(true);
  }
  last_rows_ = std::move(rows);
  Bytes size_only;
  size_only.size = op.slots.size() * row;
  return yes(size_only);  // compared by size, and the rows known exactly (the caller)
}

std::optional<OpResult> HybridShadow::begin_read(const BeginRead& op) {
  if (readers_.count(op.reader)) return no(ErrorKind::invalid_argument);
  const End* side = op.sub_pool == owner_.name ? &owner_
                    : tri() && op.sub_pool == float_->name ? &*float_
                    : op.sub_pool == state_.name           ? &state_
                                                           : nullptr;
  if (!side) return no(ErrorKind::invalid_argument);
  for (std::int64_t p : op.pages)
    if (p < 0 || p >= side->num_pages) return no(ErrorKind::out_of_range);
  readers_[op.reader] = {op.sub_pool, std::set<std::int64_t>(op.pages.begin(), op.pages.end())};
  return yes(Done{});
}

std::optional<OpResult> HybridShadow::end_read(const EndRead& op) {
  auto it = readers_.find(op.reader);
  if (it == readers_.end()) return no(ErrorKind::invalid_argument);
  readers_.erase(it);
  for (auto q = quarantine_.begin(); q != quarantine_.end();) q = held(state_.name, *q) ? std::next(q) : quarantine_.erase(q);
  return yes(Done{});
}

// ---------------------------------------------------------------- tables

PoolTables HybridShadow::tables() const {
  const auto side = [](const End& e, std::int64_t virtual_rows) {
    SideTables t;
    t.name = e.name;
    t.v2p.assign(static_cast<std::size_t>(virtual_rows) + 1, -1);
    t.p2v.assign(static_cast<std::size_t>(e.num_pages) + 1, -1);
    t.v2p[0] = t.p2v[0] = 0;
    for (const auto& [v, p] : e.v2p) t.v2p[static_cast<std::size_t>(v)] = p;
    for (const auto& [p, v] : e.p2v) t.p2v[static_cast<std::size_t>(p)] = v;
    t.holes.assign(e.holes.begin(), e.holes.end());
    t.allocated_pages = e.v2p.size();
    return t;
  };
  PoolTables out;
  SideTables owner = side(owner_, owner_.num_pages);
  owner.free_queue.assign(queue_.begin(), queue_.end());
  owner.watermark = owner_low_ - 1;  // a band that grows down: (watermark, num_pages)
  out.sides.push_back(std::move(owner));
  if (tri()) {
    SideTables f = side(*float_, owner_.num_pages);
    f.watermark = float_high_;
    f.span_low = float_low_;
    out.sides.push_back(std::move(f));
  }
  SideTables st = side(state_, state_.num_pages);
  st.free_queue.assign(state_queue_.begin(), state_queue_.end());
  st.watermark = state_top_;
  out.state = std::move(st);
  out.state_requests.assign(requests_.begin(), requests_.end());
  out.state_quarantine.assign(quarantine_.begin(), quarantine_.end());
  return out;
}

}  // namespace kvtwin::props
