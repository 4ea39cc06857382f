// The operation generator. See op_gen.h. Each generator puts its simplest, most valid choice
// at draw 0, so that RapidCheck's shrinking walks toward plain, valid operations.
#include "props/op_gen.h"

#include <algorithm>
#include <optional>
#include <set>

#include "core/checked.h"
#include "props/config_gen.h"

namespace kvtwin::props {
namespace {

using Ids = std::vector<std::int64_t>;

// (A function, not a literal assignment: GCC 12 warns falsely on string = "q" at -O2.)
const std::string& unknown_part() {
  static const std::string name = "q";
  return name;
}

class Generator {
 public:
  Generator(Choices& c, const PoolShadow& s, const OpGenOptions& o) : c_(c), s_(s), o_(o), ps_(s.page_size()) {}

  Op make(OpKind kind) {
    switch (kind) {
      case OpKind::alloc: return alloc();
      case OpKind::free: return free();
      case OpKind::alloc_many: return alloc_many();
      case OpKind::free_swa: return free_swa();
      case OpKind::flush: return Flush{};
      case OpKind::translate: return translate();
      case OpKind::batch: return batch();
      case OpKind::rebind: return rebind();
      case OpKind::write: return write();
      case OpKind::read: return read();
      case OpKind::split: return split();
      case OpKind::drop_batch: return DropBatch{batch_id()};
      case OpKind::begin_read: return begin_read();
      case OpKind::end_read: return end_read();
      case OpKind::move_pages: return move_pages();
      case OpKind::swa_translate: return swa_translate();
      case OpKind::page_table: return page_table();
      case OpKind::remap_indices: return remap_indices();
      case OpKind::capture: return capture();
      case OpKind::replay: return replay();
      case OpKind::checkpoint: return Checkpoint{};
      case OpKind::rebuild: return rebuild();
      case OpKind::host_alloc: return host_alloc();
      case OpKind::host_free: return host_free();
      case OpKind::lease_acquire: return LeaseAcquire{thread()};
      case OpKind::lease_release: return lease_release();
      case OpKind::record_event: return record_event();
      case OpKind::offload: return offload();
      case OpKind::load_back: return load_back();
      case OpKind::transfer_wait: return transfer_wait();
    }
    return Checkpoint{};
  }

 private:
  // A deliberately invalid variant this time?
  bool invalid() { return o_.invalid_one_in > 0 && c_.chance(1, o_.invalid_one_in); }
  // An operation at a serving engine's sizes this time (OpGenOptions::large_one_in)?
  bool large() { return o_.large_one_in > 0 && c_.chance(1, o_.large_one_in); }
  // A count in [1, max], log-uniform (as many 10s as 1000s), shrinking toward 1.
  std::int64_t log_count(std::int64_t max) {
    if (max <= 1) return 1;
    std::int64_t bits = 0;
    while ((std::int64_t{1} << (bits + 1)) <= max) ++bits;
    const std::int64_t b = c_.between(0, bits);
    const std::int64_t lo = std::int64_t{1} << b;
    return c_.between(lo, std::min(max, 2 * lo - 1));
  }
  // How many of something: 1..small mostly, 1..large (log-uniform) for a large operation.
  std::size_t count(std::int64_t small, std::int64_t large_max, bool is_large) {
    return static_cast<std::size_t>(is_large ? log_count(large_max) : c_.between(1, small));
  }

  // The live virtual pages of the owner side, gathered once (the shadow does not change while
  // one operation is generated).
  const Ids& live_pages() {
    if (!live_pages_) {
      live_pages_.emplace();
      for (const auto& [page, physical] : s_.sides()[0].v2p) live_pages_->push_back(page);
    }
    return *live_pages_;
  }
  // A token of a live page (or a random token when nothing is live).
  std::int64_t live_token() {
    const Ids& pages = live_pages();
    if (pages.empty()) return c_.between(-1, s_.num_virtual() * ps_);
    return c_.pick(pages) * ps_ + static_cast<std::int64_t>(c_.below(static_cast<std::uint64_t>(ps_)));
  }
  // n distinct live tokens (fewer when fewer exist).
  Ids live_tokens(std::size_t n) {
    std::set<std::int64_t> seen;
    Ids out;
    for (std::size_t tries = 0; out.size() < n && tries < 4 * n; ++tries) {
      const std::int64_t t = live_token();
      if (seen.insert(t).second) out.push_back(t);
    }
    return out;
  }
  // An id for a batch, reader or graph: existing ones first, a few more so that new ids appear.
  template <class Map>
  std::uint32_t id_from(const Map& existing, std::uint32_t spare) {
    std::vector<std::uint32_t> ids;
    for (const auto& [id, value] : existing) ids.push_back(id);
    if (!ids.empty() && c_.chance(7, 8)) return c_.pick(ids);
    return static_cast<std::uint32_t>(c_.below(spare));
  }
  std::uint32_t batch_id() { return id_from(s_.batches(), 8); }
  // An id not in use (or any id, when all are taken).
  template <class Map>
  std::uint32_t fresh_id(const Map& existing, std::uint32_t spare) {
    for (std::uint32_t tries = 0; tries < 8; ++tries) {
      const auto id = static_cast<std::uint32_t>(c_.below(spare));
      if (!existing.count(id)) return id;
    }
    return static_cast<std::uint32_t>(c_.below(spare));
  }

  // ------------------------------------------------------------ allocation

  Op alloc() {
    const auto ps = static_cast<std::uint64_t>(ps_);
    if (invalid() && ps > 1) return Alloc{static_cast<std::uint64_t>(c_.between(0, 4)) * ps + static_cast<std::uint64_t>(c_.between(1, ps_ - 1))};
    // Mostly a few pages; sometimes anything up to past the free ids, to reach "no room".
    const std::uint64_t pages = c_.chance(1, 6) ? static_cast<std::uint64_t>(c_.between(0, static_cast<std::int64_t>(s_.free_queue().size()) + 2))
                                                : static_cast<std::uint64_t>(c_.between(0, 6));
    return Alloc{pages * ps};
  }

  Op alloc_many() {
    const auto ps = static_cast<std::uint64_t>(ps_);
    AllocMany op;
    const std::size_t n = count(3, 64, large());
    for (std::size_t i = 0; i < n; ++i) op.tokens.push_back(static_cast<std::uint64_t>(c_.between(0, 3)) * ps);
    if (invalid()) {
      if (c_.chance(1, 2) || ps == 1)
        op.tokens.clear();
      else
        op.tokens.back() += 1;
    }
    return op;
  }

  // Ids of pages as `unit` asks: pages as they are, or a token inside each (repeats allowed).
  std::pair<IdUnit, Ids> ids_of(const Ids& pages) {
    if (c_.chance(1, 2)) return {IdUnit::pages, pages};
    Ids tokens;
    for (std::int64_t v : pages) {
      tokens.push_back(v * ps_ + static_cast<std::int64_t>(c_.below(static_cast<std::uint64_t>(ps_))));
      if (c_.chance(1, 6)) tokens.push_back(v * ps_);
    }
    return {IdUnit::tokens, tokens};
  }

  // A wrong virtual page: free, the sink, past the table, or negative.
  std::int64_t wrong_page() {
    switch (c_.below(4)) {
      case 0:
        if (!s_.free_queue().empty()) return s_.free_queue()[c_.below(s_.free_queue().size())];
        return 0;
      case 1: return 0;
      case 2: return s_.num_virtual() + static_cast<std::int64_t>(c_.below(3));
      default: return -1 - static_cast<std::int64_t>(c_.below(3));
    }
  }

  // Pages of one live allocation: all of it, or a subset.
  Ids some_allocation_pages() {
    const auto& groups = s_.allocations();
    if (groups.empty()) return {};
    const Ids& g = c_.pick(groups);
    if (c_.chance(1, 2)) return g;
    Ids out;
    for (std::int64_t v : g)
      if (c_.chance(1, 2)) out.push_back(v);
    if (out.empty()) out.push_back(c_.pick(g));
    return out;
  }

  Op free() {
    Ids pages = some_allocation_pages();
    if (pages.empty() || invalid()) pages.push_back(wrong_page());
    auto [unit, ids] = ids_of(pages);
    if (unit == IdUnit::tokens)
      for (std::int64_t& t : ids)
        if (t < 0) t = -1;
    return Free{unit, ids};
  }

  Op free_swa() {
    // Pages leave the window from an allocation's start: the first ones still in the window.
    Ids pages;
    if (s_.is_composite() && !s_.allocations().empty()) {
      const Ids& g = c_.pick(s_.allocations());
      const std::size_t take = static_cast<std::size_t>(c_.between(1, static_cast<std::int64_t>(g.size())));
      for (std::int64_t v : g)
        if (s_.sides()[1].v2p.count(v) && pages.size() < take) pages.push_back(v);
    }
    if (pages.empty() || invalid()) {
      // A tombstone (already left the window) or a wrong page.
      Ids tombstones;
      if (s_.is_composite())
        for (std::int64_t v : live_pages())
          if (!s_.sides()[1].v2p.count(v)) tombstones.push_back(v);
      pages.push_back(!tombstones.empty() && c_.chance(1, 2) ? c_.pick(tombstones) : wrong_page());
    }
    auto [unit, ids] = ids_of(pages);
    for (std::int64_t& t : ids)
      if (t < 0) t = -1;
    return FreeSwa{unit, ids};
  }

  // ------------------------------------------------------------ moves and readers

  std::size_t side_index() { return static_cast<std::size_t>(c_.below(s_.sides().size())); }

  Op move_pages() {
    const std::size_t si = side_index();
    const ShadowSide& side = s_.sides()[si];
    MovePages op;
    op.sub_pool = side.name;
    // Destinations: unbound pages whose bytes stay clear of the other side's band.
    Ids free_pages;
    for (std::int64_t p = side.min_page; p < side.num_pages; ++p) {
      if (side.p2v.count(p)) continue;
      if (s_.is_composite()) {
        const ShadowSide& other = s_.sides()[1 - si];
        const std::uint64_t b = static_cast<std::uint64_t>(p) * side.page_bytes, e = b + side.page_bytes;
        if (b < static_cast<std::uint64_t>(other.band_end()) * other.page_bytes &&
            static_cast<std::uint64_t>(other.band_begin()) * other.page_bytes < e)
          continue;
      }
      free_pages.push_back(p);
    }
    const std::size_t n = count(2, 256, large());
    std::set<std::int64_t> used;
    for (std::size_t i = 0; i < n && !free_pages.empty(); ++i) {
      const std::int64_t dst = c_.pick(free_pages);
      const std::int64_t src = c_.between(side.min_page, side.num_pages - 1);
      if (used.count(dst) || used.count(src) || src == dst) continue;
      used.insert(dst);
      used.insert(src);
      op.dst.push_back(dst);
      op.src.push_back(src);
    }
    if (op.dst.empty() || invalid()) {
      // A bound destination, a page past the sub-pool, the sink, or (in a composite) a page whose
      // bytes lie in the other side's band.
      const Ids in_other_band = pages_in_other_band(si);
      if (!in_other_band.empty() && c_.chance(1, 3))
        op.dst.push_back(c_.pick(in_other_band));
      else
        op.dst.push_back(side.p2v.empty() || c_.chance(1, 2) ? c_.pick(Ids{0, side.num_pages}) : side.p2v.begin()->first);
      op.src.push_back(c_.between(side.min_page, side.num_pages - 1));
    }
    return op;
  }

  // Unbound pages of side `si` whose bytes overlap the other side's band (at most 64 of them).
  Ids pages_in_other_band(std::size_t si) const {
    Ids out;
    if (!s_.is_composite()) return out;
    const ShadowSide& side = s_.sides()[si];
    const ShadowSide& other = s_.sides()[1 - si];
    const std::uint64_t ob = static_cast<std::uint64_t>(other.band_begin()) * other.page_bytes;
    const std::uint64_t oe = static_cast<std::uint64_t>(other.band_end()) * other.page_bytes;
    for (std::int64_t p = std::max<std::int64_t>(side.min_page, static_cast<std::int64_t>(ob / side.page_bytes));
         p < side.num_pages && out.size() < 64; ++p) {
      const std::uint64_t b = static_cast<std::uint64_t>(p) * side.page_bytes;
      if (b >= oe) break;
      if (!side.p2v.count(p) && b + side.page_bytes > ob) out.push_back(p);
    }
    return out;
  }

  Op begin_read() {
    BeginRead op;
    op.reader = fresh_id(s_.readers(), 6);
    const std::size_t si = side_index();
    const ShadowSide& side = s_.sides()[si];
    op.sub_pool = side.name;
    // Hold bound pages (so that later compactions may run into the reader), sometimes any page.
    Ids bound;
    for (const auto& [p, v] : side.p2v) bound.push_back(p);
    const std::size_t n = count(3, 256, large());
    for (std::size_t i = 0; i < n; ++i)
      op.pages.push_back(!bound.empty() && c_.chance(3, 4) ? c_.pick(bound) : c_.between(0, side.num_pages - 1));
    if (invalid()) op.pages.push_back(c_.chance(1, 2) ? side.num_pages : -1);
    return op;
  }

  Op end_read() { return EndRead{id_from(s_.readers(), 6)}; }

  // ------------------------------------------------------------ batches and writes

  Op batch() {
    MakeBatch op;
    op.batch = fresh_id(s_.batches(), 8);
    op.tokens = live_tokens(count(6, kLargeLanes, large()));
    if (c_.chance(1, 5)) op.tokens.push_back(-1);  // a padding lane
    if (c_.chance(1, 4)) {
      for (std::size_t i = 0; i < op.tokens.size(); ++i) op.encoder_tokens.push_back(live_token());
      if (invalid()) op.encoder_tokens.pop_back();
    }
    return op;
  }

  std::size_t lanes_of(std::uint32_t id) const {
    auto it = s_.batches().find(id);
    return it == s_.batches().end() ? 0 : it->second.loc.size();
  }

  Op rebind() {
    Rebind op;
    op.batch = batch_id();
    const std::size_t lanes = lanes_of(op.batch);
    if (c_.chance(1, 3)) op.out_width = lanes + static_cast<std::uint64_t>(c_.between(0, 3));
    if (invalid() && lanes > 0) op.out_width = static_cast<std::uint64_t>(c_.between(0, static_cast<std::int64_t>(lanes) - 1));
    return op;
  }

  Op split() {
    Split op;
    op.batch = batch_id();
    const std::size_t lanes = lanes_of(op.batch);
    op.at = static_cast<std::uint64_t>(c_.between(0, static_cast<std::int64_t>(lanes) + (invalid() ? 2 : 0)));
    op.left = fresh_id(s_.batches(), 8);
    op.right = fresh_id(s_.batches(), 8);
    if (op.right == op.left && !invalid()) op.right = (op.left + 1 + static_cast<std::uint32_t>(c_.below(7))) % 8;
    return op;
  }

  std::uint32_t layer() {
    const auto layers = static_cast<std::int64_t>(s_.derived().plan.layer_map.size());
    return static_cast<std::uint32_t>(c_.between(0, layers - 1));
  }

  Op write() {
    Write op;
    op.layer = layer();
    op.write_number = static_cast<std::uint64_t>(c_.between(1, 1000));
    if (invalid()) op.layer = static_cast<std::uint32_t>(s_.derived().plan.layer_map.size());
    if (!s_.batches().empty() && c_.chance(2, 3)) {
      // Mostly a batch that was rebound (marked); sometimes any, which the door may refuse.
      std::vector<std::uint32_t> marked;
      for (const auto& [id, b] : s_.batches())
        if (b.physical) marked.push_back(id);
      op.batch = !marked.empty() && c_.chance(3, 4) ? c_.pick(marked) : batch_id();
      return op;
    }
    // Explicit form: live tokens at their physical ids, marked.
    op.tokens = live_tokens(count(5, kLargeLanes, large()));
    for (std::int64_t t : op.tokens) op.loc.push_back(s_.translate(t));
    op.physical = true;
    if (invalid()) {
      switch (c_.below(4)) {
        case 0: op.physical = false; break;                                 // unmarked
        case 1: op.loc.push_back(op.loc.front()); op.tokens.push_back(0); break;  // a duplicate (unless at the sink)
        case 2: op.loc.back() = c_.chance(1, 2) ? -1 : 1 << 30; break;      // out of range
        default: op.tokens.push_back(1); break;                             // lanes and tokens differ
      }
    }
    return op;
  }

  Op read() {
    Read op;
    op.layer = layer();
    const LayerPlacement& place = s_.derived().plan.layer_map[op.layer];
    const DenseEntryLayout& layout = s_.derived().layouts[place.sub_pool];
    op.part = layout.parts[c_.below(layout.parts.size())].name;
    const std::size_t n = count(4, kLargeLanes, large());
    const auto slots = static_cast<std::int64_t>(s_.derived().geometry.sub_pools[place.sub_pool].max_slots);
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t id = c_.between(0, slots - 1);
      if (c_.chance(3, 4)) {
        const std::int64_t full = s_.translate(live_token());
        id = place.kind == LayerKind::swa ? s_.swa_of(full) : full;
      }
      op.ids.push_back(id);
    }
    if (invalid()) {
      if (c_.chance(1, 2))
        op.part = unknown_part();  // a name no layout has
      else
        op.ids.push_back(slots);
    }
    return op;
  }

  // ------------------------------------------------------------ translation

  std::int64_t some_id() {
    switch (c_.below(6)) {
      case 4: return -1 - static_cast<std::int64_t>(c_.below(ps_ * 2));            // negative: the sink
      case 5: return (s_.num_virtual() + static_cast<std::int64_t>(c_.below(3))) * ps_;  // past the table
      default: return live_token();
    }
  }

  Op translate() {
    Translate op;
    std::size_t n = static_cast<std::size_t>(c_.between(0, 6));
    if (large()) n = static_cast<std::size_t>(log_count(c_.chance(1, 32) ? kHugeTranslateIds : kLargeLanes));
    for (std::size_t i = 0; i < n; ++i) op.ids.push_back(some_id());
    op.shape = {static_cast<std::int64_t>(n)};
    if (n >= 2 && n % 2 == 0 && c_.chance(1, 3)) op.shape = {2, static_cast<std::int64_t>(n / 2)};
    const bool two = op.shape.size() == 2;
    const std::int64_t cols = two ? op.shape[1] : 1;
    op.index_dtype = c_.chance(1, 3) ? IndexDtype::int32 : IndexDtype::int64;
    if (c_.chance(1, 3)) op.input_stride = cols + c_.between(0, 3);
    switch (c_.below(3)) {
      case 1: op.out = op.index_dtype == IndexDtype::int64 ? OutPlacement::alias : OutPlacement::fresh; break;
      case 2: op.out = OutPlacement::strided; op.out_stride = c_.chance(1, 2) ? 0 : cols + c_.between(0, 3); break;
      default: break;
    }
    if (!two && c_.chance(1, 3)) op.out_width = n + static_cast<std::uint64_t>(c_.between(0, 4));
    if (invalid()) {
      switch (c_.below(5)) {
        case 0: op.out_dtype = IndexDtype::int32; break;
        case 1: op.shape = {static_cast<std::int64_t>(n) + 1}; break;
        case 2: op.index_dtype = IndexDtype::int32; op.out = OutPlacement::alias; break;
        case 3: op.input_stride = -1; break;
        default: op.out_width = n > 0 ? n - 1 : 0; if (n == 0) op.out_stride = 2; break;
      }
    }
    return op;
  }

  Op swa_translate() {
    SwaTranslate op;
    const auto slots = static_cast<std::int64_t>(s_.derived().geometry.sub_pools[0].max_slots);
    const std::size_t n = count(5, kLargeLanes, large());
    for (std::size_t i = 0; i < n; ++i)
      op.ids.push_back(c_.chance(3, 4) ? s_.translate(live_token()) : c_.between(-2, slots + 4));
    return op;
  }

  // A request: the tokens of one live allocation's pages, in order, up to `max_tokens`.
  Ids request_tokens(const Ids& group, std::int64_t max_tokens) {
    Ids out;
    for (std::int64_t v : group)
      for (std::int64_t slot = 0; slot < ps_; ++slot) out.push_back(v * ps_ + slot);
    const auto limit = std::min<std::int64_t>(static_cast<std::int64_t>(out.size()), max_tokens);
    out.resize(static_cast<std::size_t>(c_.between(1, std::max<std::int64_t>(1, limit))));
    return out;
  }
  // A request over scattered pages, as a serving engine's decode sees them after prefix sharing
  // and compaction: up to `max_pages` live pages from anywhere (distinct, in random order), every
  // slot of each, cut at a random length. Empty when nothing is live.
  Ids scattered_request(std::int64_t max_pages) {
    const Ids& pages = live_pages();
    Ids out;
    if (pages.empty()) return out;
    const auto n = std::min<std::int64_t>(log_count(max_pages), static_cast<std::int64_t>(pages.size()));
    std::set<std::int64_t> used;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t v = c_.pick(pages);
      if (!used.insert(v).second) continue;
      for (std::int64_t slot = 0; slot < ps_; ++slot) out.push_back(v * ps_ + slot);
    }
    out.resize(static_cast<std::size_t>(c_.between(1, static_cast<std::int64_t>(out.size()))));
    return out;
  }
  // In a composite, a request whose last token lies on a page that has left the window (live on
  // the full side, a tombstone on the SWA side): a live allocation's pages up to that one, at most
  // `max_tokens`. Empty when there is none.
  Ids request_ending_past_the_window(std::int64_t max_tokens) {
    if (!s_.is_composite()) return {};
    std::vector<std::pair<const Ids*, std::size_t>> candidates;  // allocation, index of a tombstone page
    for (const Ids& g : s_.allocations())
      for (std::size_t k = 0; k < g.size() && static_cast<std::int64_t>(k) * ps_ < max_tokens; ++k)
        if (!s_.sides()[1].v2p.count(g[k])) candidates.emplace_back(&g, k);
    if (candidates.empty()) return {};
    const auto& [group, k] = candidates[c_.below(candidates.size())];
    Ids out;
    for (std::size_t i = 0; i < k; ++i)
      for (std::int64_t slot = 0; slot < ps_; ++slot) out.push_back((*group)[i] * ps_ + slot);
    const std::int64_t last_slots = std::min<std::int64_t>(ps_, max_tokens - static_cast<std::int64_t>(out.size()));
    const std::int64_t take = c_.between(1, last_slots);
    for (std::int64_t slot = 0; slot < take; ++slot) out.push_back((*group)[k] * ps_ + slot);
    return out;
  }

  // One request row: a live allocation's prefix mostly, scattered pages for a large operation.
  Ids some_request(std::int64_t max_pages, bool is_large) {
    const auto& groups = s_.allocations();
    if (is_large || (!groups.empty() && c_.chance(1, 8))) {
      Ids r = scattered_request(is_large ? max_pages : std::min<std::int64_t>(max_pages, 4));
      if (!r.empty()) return r;
    }
    return groups.empty() ? Ids{live_token()} : request_tokens(c_.pick(groups), max_pages * ps_);
  }

  Op page_table() {
    PageTable op;
    const bool big = large();
    const std::size_t slots = count(3, 256, big);
    for (std::size_t i = 0; i < slots; ++i) op.req_to_token.push_back(some_request(big ? kLargeRequestPages : 6, big));
    const std::size_t bs = big ? static_cast<std::size_t>(log_count(256)) : static_cast<std::size_t>(c_.between(0, 3));
    for (std::size_t b = 0; b < bs; ++b) {
      const auto slot = static_cast<std::int64_t>(c_.below(slots));
      const auto& row = op.req_to_token[static_cast<std::size_t>(slot)];
      const std::int64_t len = c_.between(0, static_cast<std::int64_t>(row.size()));
      op.req.push_back(slot);
      op.seq_len.push_back(len);
      const std::uint64_t pages = ceil_div(static_cast<std::uint64_t>(len), static_cast<std::uint64_t>(ps_));
      op.prior.push_back(Ids(pages + static_cast<std::uint64_t>(c_.between(0, 2)), 7));  // stale entries beyond
    }
    if (invalid() && bs > 0) {
      switch (c_.below(3)) {
        case 0: op.req.back() = static_cast<std::int64_t>(slots); break;
        case 1: op.seq_len.back() = -1; break;
        default: op.prior.back().clear(); op.seq_len.back() = std::max<std::int64_t>(op.seq_len.back(), 1); break;
      }
    }
    return op;
  }

  Op remap_indices() {
    RemapIndices op;
    const bool big = large();
    op.bs = big ? static_cast<std::uint64_t>(log_count(256)) : static_cast<std::uint64_t>(c_.between(0, 3));
    op.kv_indptr.push_back(0);
    for (std::uint64_t b = 0; b < op.bs; ++b) op.kv_indptr.push_back(op.kv_indptr.back() + c_.between(0, big ? 64 : 3));
    op.kv_indptr.push_back(op.kv_indptr.back() + 5);  // a stale entry past bs
    const std::int64_t live = op.kv_indptr[op.bs];
    for (std::int64_t i = 0; i < live; ++i) op.kv_indices.push_back(live_token());
    for (std::int64_t i = c_.between(0, 3); i > 0; --i) op.kv_indices.push_back(99999);  // the stale tail
    if (invalid()) {
      if (c_.chance(1, 2))
        op.kv_indices.clear(), op.kv_indptr[op.bs] += 1;
      else
        op.bs = op.kv_indptr.size();
    }
    return op;
  }

  // ------------------------------------------------------------ the decode step

  Op capture() {
    Capture op;
    op.graph = fresh_id(s_.graphs(), 4);
    std::vector<std::uint32_t> layers;
    const auto& map = s_.derived().plan.layer_map;
    for (std::uint32_t l = 0; l < map.size(); ++l)
      if (map[l].kind == LayerKind::full || map[l].kind == LayerKind::mla) layers.push_back(l);
    op.layer = layers.empty() ? 0 : c_.pick(layers);
    // A serving engine captures one graph per batch size, up to 256 requests, with tables wide
    // enough for its longest context: a large capture's attention runs past 256 tokens.
    const bool big = large();
    op.max_batch = static_cast<std::uint32_t>(count(4, 256, big));
    op.max_pages = static_cast<std::uint32_t>(big ? c_.between(1, kLargeRequestPages) : c_.between(1, 4));
    const std::uint32_t kv = s_.derived().plan.sub_pools[map[op.layer].sub_pool].heads_per_rank;
    op.query_heads = kv * static_cast<std::uint32_t>(c_.between(1, 3));
    if (invalid()) {
      switch (c_.below(3)) {
        case 0: op.query_heads += 1; if (kv == 1) op.query_heads = 0; break;
        case 1: op.layer = static_cast<std::uint32_t>(map.size()); break;
        default: op.max_pages = 0; break;
      }
    }
    return op;
  }

  Op replay() {
    Replay op;
    op.graph = id_from(s_.graphs(), 4);
    op.write_number = static_cast<std::uint64_t>(c_.between(1, 1000));
    op.query_seed = c_.below(1 << 16);
    auto it = s_.graphs().find(op.graph);
    const std::uint32_t max_batch = it == s_.graphs().end() ? 2 : it->second.shape.max_batch;
    const std::uint32_t max_pages = it == s_.graphs().end() ? 2 : it->second.shape.max_pages;
    if (large() && !live_pages().empty()) {
      // Up to the graph's batch of requests over scattered pages (requests may share pages, as
      // shared prefixes do); the new token (last) differs between requests.
      const std::size_t bs = static_cast<std::size_t>(log_count(max_batch));
      std::set<std::int64_t> new_tokens;
      for (std::size_t b = 0; b < bs; ++b) {
        Ids r = scattered_request(max_pages);
        if (new_tokens.insert(r.back()).second) op.requests.push_back(std::move(r));
      }
    } else if (Ids r = request_ending_past_the_window(std::int64_t{max_pages} * ps_); !r.empty() && c_.chance(1, 4)) {
      // The new token on a page that has left the sliding window: its SWA write goes to the
      // sink (SPEC 5, 6), in the graph as out of it.
      op.requests.push_back(std::move(r));
    } else {
      // Distinct allocations, one request each: the new token (last) differs between requests.
      std::vector<std::size_t> order(s_.allocations().size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      const std::size_t bs = std::min<std::size_t>(order.size(), static_cast<std::size_t>(c_.between(1, max_batch)));
      for (std::size_t b = 0; b < bs; ++b) {
        const std::size_t pick = b + c_.below(order.size() - b);
        std::swap(order[b], order[pick]);
        op.requests.push_back(request_tokens(s_.allocations()[order[b]], std::int64_t{max_pages} * ps_));
      }
    }
    if (invalid()) {
      switch (c_.below(4)) {
        case 0: op.requests.push_back(op.requests.empty() ? Ids{live_token()} : op.requests.front()); break;  // duplicate new token
        case 1: op.requests.push_back(Ids{s_.num_virtual() * ps_}); break;  // not allocated
        case 2: {
          // A token of the sink page or a reserved page (v2p row 0, not -1): never allocated,
          // though a `>= 0` test would take it for allocated (SPEC 10.9/10.10).
          const std::int64_t reserved = std::max<std::int64_t>(1, s_.sides()[0].min_page) * ps_;
          op.requests.push_back(Ids{static_cast<std::int64_t>(c_.below(static_cast<std::uint64_t>(reserved)))});
          break;
        }
        default: op.requests.push_back(Ids{}); break;
      }
    }
    return op;
  }

  // ------------------------------------------------------------ rebuilds

  // The pool rebuilt: the same configuration again (a reset), a new small one, or one that must
  // be refused and leave the pool as it was (SPEC 3, 10.17).
  Op rebuild() {
    if (!invalid()) {
      if (c_.chance(1, 3)) return BuildPool{s_.config()};
      return BuildPool{generate_config(c_)};
    }
    PoolConfig config = generate_config(c_);
    if (c_.chance(1, 2)) {
      // Rows of 8 or 24 bytes: one head of 4 bf16 values, or 3 heads of 2 fp32 values.
      ModelShape& shape = config.shape;
      const bool bf16 = c_.chance(1, 2);
      shape = ModelShape{};
      shape.name = "misaligned-rows";
      shape.source = "generated (props/op_gen)";
      shape.attention = AttentionKind::mha;
      shape.layers.assign(static_cast<std::size_t>(c_.between(1, 3)), LayerKind::full);
      shape.num_kv_heads = bf16 ? 1 : 3;
      shape.k_head_dim = shape.v_head_dim = bf16 ? 4 : 2;
      shape.dtype = bf16 ? DType::bf16 : DType::fp32;
      config.tp = 1;
    } else {
      config.total_bytes = static_cast<std::uint64_t>(c_.between(0, 64));  // not even the sink fits
    }
    return BuildPool{config};
  }

  // ------------------------------------------------------------ host arena and transfers (SPEC 8)
  //
  // Simulated concurrency: four threads and three copy streams, interleaved by the draws. Valid
  // operations name live host pages, transfers in flight and events that capture them, so that
  // runs reach the orderings that matter (a load-back of a host page an offload still fills, on
  // another stream, after an event; a free, a move or a host compaction under a transfer).

  std::uint32_t thread() { return static_cast<std::uint32_t>(c_.below(4)); }
  std::uint32_t stream() { return static_cast<std::uint32_t>(c_.between(1, 3)); }
  std::uint32_t transfer_id() { return fresh_id(s_.transfers(), 12); }
  std::size_t host_side() { return static_cast<std::size_t>(c_.below(std::max<std::size_t>(1, s_.host_sides().size()))); }

  // Allocated host pages of a side no transfer uses (`with_rows`: only those an offload filled).
  Ids free_host_pages(std::size_t side, bool with_rows) const {
    Ids out;
    if (side >= s_.host_sides().size()) return out;
    for (const auto& [l, p] : s_.host_sides()[side].l2p)
      if (!s_.host_page_in_use(side, l) && (!with_rows || s_.host_page_has_rows(side, l))) out.push_back(l);
    return out;
  }

  // n distinct host pages from `pool` (fewer when it has fewer).
  Ids pick_distinct(Ids pool, std::size_t n) {
    Ids out;
    while (out.size() < n && !pool.empty()) {
      const std::size_t i = c_.below(pool.size());
      out.push_back(pool[i]);
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return out;
  }

  Op host_alloc() {
    HostAlloc op;
    op.thread = thread();
    const std::size_t sides = std::max<std::size_t>(1, s_.host_sides().size());
    for (std::size_t i = 0; i < sides; ++i) {
      // Mostly a few pages; now and then up to the whole arena (compaction, no room).
      const std::int64_t most = std::max<std::int64_t>(1, s_.host_page_num());
      op.pages.push_back(static_cast<std::uint64_t>(c_.chance(1, 5) ? c_.between(0, most) : c_.between(0, 3)));
    }
    if (invalid()) op.pages.push_back(1);  // one count too many
    return op;
  }

  Op host_free() {
    HostFree op;
    const std::size_t side = host_side();
    op.side = side < s_.host_sides().size() ? s_.host_sides()[side].name : "full";
    Ids live;
    if (side < s_.host_sides().size())
      for (const auto& [l, p] : s_.host_sides()[side].l2p) live.push_back(l);
    op.pages = pick_distinct(live, static_cast<std::size_t>(c_.between(1, 3)));
    if (op.pages.empty() || invalid()) {
      // A page not allocated, past the arena, negative, or one a transfer uses.
      op.pages.push_back(c_.chance(1, 2) ? c_.between(0, s_.host_page_num()) : -1);
    }
    return op;
  }

  Op lease_release() {
    std::vector<std::uint32_t> holders;
    for (const auto& [t, depth] : s_.leases()) holders.push_back(t);
    if (holders.empty() || invalid()) return LeaseRelease{thread()};
    return LeaseRelease{c_.pick(holders)};
  }

  Op record_event() {
    RecordEvent op;
    op.event = static_cast<std::uint32_t>(c_.below(4));
    // Mostly on a stream with transfers in flight (an event worth waiting for).
    std::vector<std::uint32_t> busy;
    for (const auto& [id, t] : s_.transfers()) busy.push_back(t.stream);
    op.stream = !busy.empty() && c_.chance(3, 4) ? c_.pick(busy) : static_cast<std::uint32_t>(c_.between(0, 3));
    return op;
  }

  // A wait_event and stream for a transfer that reads or writes `host_pages` of `side`: for pages
  // another transfer still uses, mostly one that orders it after that one (its stream, or an
  // event recorded after it there), sometimes none (a race, refused).
  void order_after_users(std::size_t side, const Ids& host_pages, std::uint32_t& stream_out,
                         std::optional<std::uint32_t>& wait_event) {
    stream_out = stream();
    if (c_.chance(1, 4) && !s_.events().empty()) {
      std::vector<std::uint32_t> ids;
      for (const auto& [id, captured] : s_.events()) ids.push_back(id);
      wait_event = c_.pick(ids);
    }
    for (const auto& [id, t] : s_.transfers())
      for (const ShadowCopy& copy : t.copies)
        if (copy.side == side && std::find(host_pages.begin(), host_pages.end(), copy.host) != host_pages.end()) {
          if (c_.chance(1, 8)) return;  // leave the race in
          // An event that captured it, on another stream, when one exists; else its stream.
          std::vector<std::uint32_t> events;
          for (const auto& [event, captured] : s_.events())
            if (std::find(captured.begin(), captured.end(), t.sequence) != captured.end()) events.push_back(event);
          if (!events.empty() && c_.chance(7, 8)) {
            wait_event = c_.pick(events);
            if (stream_out == t.stream) stream_out = t.stream % 3 + 1;
          } else {
            stream_out = t.stream;
          }
          return;
        }
  }

  Op offload() {
    Offload op;
    op.transfer = transfer_id();
    op.thread = thread();
    const std::size_t side = side_index();
    op.side = s_.sides()[side].name;
    // The pages of a live allocation (some of them), as pages, or as a token window that may
    // start and end inside a page (a sliding window's tokens: partial pages are skipped whole).
    // Mostly pages with rows, so that what travels can be checked.
    Ids pages = some_allocation_pages();
    for (int tries = 0; tries < 3 && !pages.empty() && !s_.page_has_rows(side, pages.front()); ++tries)
      pages = some_allocation_pages();
    if (!pages.empty() && c_.chance(1, 2)) {
      op.unit = IdUnit::tokens;
      const std::int64_t cut_front = ps_ > 1 && c_.chance(1, 3) ? c_.between(1, ps_ - 1) : 0;
      const std::int64_t cut_back = ps_ > 1 && c_.chance(1, 4) ? c_.between(0, ps_ - 1) : 0;
      for (std::size_t i = 0; i < pages.size(); ++i)
        for (std::int64_t t = 0; t < ps_; ++t) {
          if (i == 0 && t < cut_front) continue;
          if (i + 1 == pages.size() && t >= ps_ - cut_back) continue;
          op.ids.push_back(pages[i] * ps_ + t);
        }
    } else {
      op.unit = IdUnit::pages;
      op.ids = pages;
    }
    if (op.ids.empty() || invalid()) op.ids.push_back(wrong_page());
    if (op.unit == IdUnit::tokens)
      for (std::int64_t& t : op.ids)
        if (t < 0) t = -1;
    // One host page per selected page, from the pages no transfer uses (or any, sometimes).
    Result<Ids> selected = s_.offload_pages(side, op.unit, op.ids);
    const std::size_t wanted = selected.ok() ? selected->size() : static_cast<std::size_t>(c_.between(0, 2));
    Ids pool = free_host_pages(side, false);
    if (c_.chance(1, 6) && side < s_.host_sides().size())
      for (const auto& [l, p] : s_.host_sides()[side].l2p) pool.push_back(l);
    op.host = pick_distinct(pool, wanted);
    std::sort(op.host.begin(), op.host.end());
    if (invalid()) op.host.push_back(c_.chance(1, 2) ? s_.host_page_num() : 0);
    order_after_users(side, op.host, op.stream, op.wait_event);
    if (invalid() && c_.chance(1, 2)) op.stream = 0;
    return op;
  }

  Op load_back() {
    LoadBack op;
    op.transfer = transfer_id();
    op.thread = thread();
    // Host pages with rows mostly (a prefix cache hit brings back what was offloaded).
    Ids full = free_host_pages(0, c_.chance(3, 4));
    // Including pages an offload still fills: the load-back must land after it.
    Ids filling;
    for (const auto& [id, t] : s_.transfers())
      for (const ShadowCopy& copy : t.copies)
        if (t.offload && copy.side == 0) filling.push_back(copy.host);
    std::sort(filling.begin(), filling.end());
    filling.erase(std::unique(filling.begin(), filling.end()), filling.end());
    if (!filling.empty() && c_.chance(3, 4)) full = filling;
    op.host.push_back(pick_distinct(full, static_cast<std::size_t>(c_.between(0, 3))));
    const std::size_t k = op.host[0].size();
    if (s_.is_composite() && c_.chance(2, 3)) {
      Ids swa = pick_distinct(free_host_pages(1, false), k);
      Ids row;
      for (std::size_t i = 0; i < k; ++i) row.push_back(i < swa.size() && c_.chance(2, 3) ? swa[i] : -1);
      op.host.push_back(row);
    }
    if (invalid()) {
      if (c_.chance(1, 2))
        op.host[0].push_back(c_.chance(1, 2) ? -1 : s_.host_page_num());
      else
        op.host.push_back({0});
    }
    Ids all = op.host[0];
    order_after_users(0, all, op.stream, op.wait_event);
    if (invalid() && c_.chance(1, 2)) op.stream = 0;
    return op;
  }

  Op transfer_wait() {
    std::vector<std::uint32_t> ids;
    for (const auto& [id, t] : s_.transfers()) ids.push_back(id);
    if (ids.empty() || invalid()) return TransferWait{static_cast<std::uint32_t>(c_.below(12))};
    return TransferWait{c_.pick(ids)};
  }

  Choices& c_;
  const PoolShadow& s_;
  const OpGenOptions& o_;
  std::int64_t ps_;
  std::optional<Ids> live_pages_;

 public:
  // The storage tier (docs/storage.md): allocated host pages of a side, a few hashes drawn from a
  // small set (so that a later read hits), sometimes a page no transfer may touch or a bad count.
  Op storage_op() {
    const std::size_t side = host_side();
    const std::string name = side < s_.host_sides().size() ? s_.host_sides()[side].name : "full";
    Ids live;
    if (side < s_.host_sides().size())
      for (const auto& [l, p] : s_.host_sides()[side].l2p) live.push_back(l);
    Ids host = pick_distinct(live, static_cast<std::size_t>(c_.between(1, 3)));
    if (host.empty() || invalid()) host.push_back(c_.chance(1, 2) ? c_.between(0, s_.host_page_num()) : -1);
    std::vector<std::uint64_t> hashes;
    for (std::size_t i = 0; i < host.size(); ++i) hashes.push_back(static_cast<std::uint64_t>(c_.between(1, 6)));
    if (c_.chance(1, 2)) {
      StorePages op;
      op.thread = static_cast<std::uint32_t>(c_.below(3));
      op.side = name;
      op.host = host;
      op.hashes = hashes;
      op.page_count = static_cast<std::uint64_t>(c_.between(0, static_cast<std::int64_t>(host.size()) + (invalid() ? 1 : 0)));
      if (c_.chance(1, 6)) op.layout = c_.chance(1, 2) ? "page_major" : "untagged";
      return op;
    }
    LoadStored op;
    op.thread = static_cast<std::uint32_t>(c_.below(3));
    op.side = name;
    op.host = host;
    op.hashes = hashes;
    return op;
  }


  // ------------------------------------------------------------ the state sub-pool (SPEC 11)

  // One state operation; `kind` is the analog whose swarm weight it takes (alloc, free, write,
  // read, translate, begin_read).
  Op state_op(OpKind kind) {
    const std::set<std::uint64_t>& live = s_.state_requests();
    const auto live_request = [&]() -> std::uint64_t {
      if (!live.empty() && c_.chance(7, 8)) {
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(c_.below(live.size())));
        return *it;
      }
      return c_.below(16);
    };
    const PoolDerived& d = s_.derived();
    const std::int64_t slots = d.geometry.state ? static_cast<std::int64_t>(d.geometry.state->max_slots) : 1;
    // Physical slots near the state's low end, where live slots are (a few past them).
    const auto slot = [&]() { return c_.between(0, std::min<std::int64_t>(slots - 1, static_cast<std::int64_t>(live.size()) + 3)); };
    switch (kind) {
      case OpKind::alloc: {
        std::uint64_t r = c_.below(16);
        for (int tries = 0; tries < 4 && live.count(r) && !invalid(); ++tries) r = c_.below(16);
        return StateAlloc{r};
      }
      case OpKind::free: return StateFree{live_request()};
      case OpKind::write: return StateWrite{live_request(), static_cast<std::uint64_t>(c_.between(1, 1000))};
      case OpKind::read: {
        StateRead op;
        for (std::size_t i = 0, n = count(3, 3, false); i < n; ++i) op.slots.push_back(slot());
        const std::vector<StateBlock>& blocks = d.state_layout ? d.state_layout->blocks : std::vector<StateBlock>{};
        op.block = blocks.empty() || invalid() ? "ssm" : c_.pick(blocks).name;
        const std::uint32_t layers = blocks.empty() ? 1 : blocks.front().layer_num;
        op.layer = static_cast<std::uint32_t>(c_.below(invalid() ? layers + 1 : layers));
        return op;
      }
      case OpKind::begin_read: {
        BeginRead op;
        op.reader = fresh_id(s_.readers(), 8);
        op.sub_pool = "state";
        for (std::size_t i = 0, n = count(2, 2, false); i < n; ++i) op.pages.push_back(slot());
        return op;
      }
      default: {
        StateSlots op;
        for (std::size_t i = 0, n = count(3, 3, false); i < n; ++i) op.requests.push_back(live_request());
        return op;
      }
    }
  }
};

}  // namespace

Op generate_op(Choices& choices, const PoolShadow& shadow, const SwarmWeights& weights, const OpGenOptions& options) {
  std::vector<std::uint32_t> w(weights.weight.begin(), weights.weight.end());
  // Host operations only where every backend has a host arena (OpGenOptions::host_ops).
  if (!options.host_ops)
    for (std::size_t i = 0; i < w.size(); ++i)
      if (is_host_kind(static_cast<OpKind>(i))) w[i] = 0;
  if (std::all_of(w.begin(), w.end(), [](std::uint32_t x) { return x == 0; })) w[static_cast<std::size_t>(OpKind::alloc)] = 1;
  OpKind kind = static_cast<OpKind>(choices.weighted(w));
  // An operation with nothing to act on is mostly replaced by the one that makes its subject,
  // so that runs spend their length on valid work; the rest stay, as invalid operations.
  if (!choices.chance(1, 8)) {
    const bool no_allocations = shadow.allocations().empty();
    switch (kind) {
      case OpKind::free:
      case OpKind::page_table:
        if (no_allocations) kind = OpKind::alloc;
        break;
      case OpKind::free_swa:
        if (!shadow.is_composite()) kind = OpKind::free;
        if (no_allocations) kind = OpKind::alloc;
        break;
      case OpKind::swa_translate:
        if (!shadow.is_composite()) kind = OpKind::translate;
        break;
      case OpKind::rebind:
      case OpKind::split:
      case OpKind::drop_batch:
        if (shadow.batches().empty()) kind = OpKind::batch;
        break;
      case OpKind::write:
        // Batches exist but none is marked yet: rebind one first.
        if (!shadow.batches().empty() &&
            std::none_of(shadow.batches().begin(), shadow.batches().end(), [](const auto& b) { return b.second.physical; }))
          kind = OpKind::rebind;
        break;
      case OpKind::end_read:
        if (shadow.readers().empty()) kind = OpKind::begin_read;
        break;
      case OpKind::replay:
        if (shadow.graphs().empty()) kind = OpKind::capture;
        if (no_allocations) kind = OpKind::alloc;
        break;
      case OpKind::host_free:
        if (shadow.has_host() && std::all_of(shadow.host_sides().begin(), shadow.host_sides().end(),
                                             [](const ShadowHostSide& s) { return s.l2p.empty(); }))
          kind = OpKind::host_alloc;
        break;
      case OpKind::offload:
        if (no_allocations) kind = OpKind::alloc;
        break;
      case OpKind::transfer_wait:
        if (shadow.transfers().empty()) kind = OpKind::offload;
        break;
      case OpKind::load_back:
        if (shadow.has_host() && shadow.host_sides().front().l2p.empty()) {
          kind = OpKind::host_alloc;
          break;
        }
        // An offload in flight that no event captured yet: mostly record one after it first, so
        // that a load-back of its host page can wait for it from another stream.
        for (const auto& [id, t] : shadow.transfers()) {
          if (!t.offload) continue;
          bool captured = false;
          for (const auto& [event, seqs] : shadow.events())
            captured = captured || std::find(seqs.begin(), seqs.end(), t.sequence) != seqs.end();
          if (!captured && choices.chance(1, 2)) kind = OpKind::record_event;
          break;
        }
        break;
      default:
        break;
    }
    // Without a host arena a host operation is refused; mostly, do something else.
    if (is_host_kind(kind) && !shadow.has_host()) kind = OpKind::alloc;
  }
  Generator g(choices, shadow, options);
  // The storage tier, now and then, where the pool has one (drawn only then: other pools' cases
  // draw what they always drew).
  if (shadow.has_storage() && options.storage_one_in != 0 && choices.chance(1, options.storage_one_in))
    return g.storage_op();
  // SPEC 11: on a hybrid chain, now and then a state operation, weighted like its token analog.
  if (shadow.hybrid() && options.state_one_in != 0 && choices.chance(1, options.state_one_in)) {
    const OpKind analogs[] = {OpKind::alloc, OpKind::free, OpKind::write, OpKind::read, OpKind::translate, OpKind::begin_read};
    std::vector<std::uint32_t> aw;
    for (OpKind a : analogs) aw.push_back(std::max<std::uint32_t>(weights.of(a), a == OpKind::alloc ? 1 : 0));
    return g.state_op(analogs[choices.weighted(aw)]);
  }
  return g.make(kind);
}

}  // namespace kvtwin::props
