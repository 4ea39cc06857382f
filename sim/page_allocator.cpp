// The multi-ended page allocator (SPEC.md section 4). See page_allocator.h.
#include "sim/page_allocator.h"

#include <algorithm>

#include "core/check.h"
#include "core/tables_digest.h"
#include "sim/allocation_faults.h"

namespace kvtwin::sim {

std::vector<PagePair> pair_in_order(const std::vector<std::int64_t>& survivors,
                                    const std::vector<std::int64_t>& holes) {
  KVTWIN_CHECK(survivors.size() == holes.size(), "compaction pairs as many survivors as holes");
  std::vector<PagePair> moves;
  moves.reserve(survivors.size());
  for (std::size_t i = 0; i < survivors.size(); ++i) moves.push_back(PagePair{survivors[i], holes[i]});
  return moves;
}

// ---------------------------------------------------------------- AllocatorSide

AllocatorSide::AllocatorSide(const SubPoolGeometry& geometry, std::int64_t num_virtual, CompactionMode mode,
                             std::int64_t float_start_page)
    : geometry_(geometry), mode_(mode) {
  // SPEC 4: v2p[num_virtual + 1] and p2v[num_pages + 1], all -1 except the sink row 0.
  allocation_point();
  v2p_.assign(static_cast<std::size_t>(num_virtual) + 1, -1);
  p2v_.assign(static_cast<std::size_t>(geometry_.num_pages) + 1, -1);
  v2p_[0] = 0;
  p2v_[0] = 0;
  // Up side: occupied [min_page_index, wm), wm starts at min_page_index.
  // Down side: occupied [wm + 1, num_pages), wm starts at num_pages - 1.
  watermark_ = grows_up() ? min_page() : num_pages() - 1;
  // SPEC 11: a float's span [span_low, watermark) starts empty at the middle of the buffer.
  if (floats()) {
    span_low_ = std::clamp<std::int64_t>(float_start_page, min_page(), num_pages());
    watermark_ = span_low_;
  }
}

std::int64_t AllocatorSide::physical_of(std::int64_t vpage) const {
  if (vpage < 0 || vpage >= static_cast<std::int64_t>(v2p_.size())) return -1;
  return v2p_[static_cast<std::size_t>(vpage)];
}

std::int64_t AllocatorSide::virtual_of(std::int64_t ppage) const {
  if (ppage < 0 || ppage >= static_cast<std::int64_t>(p2v_.size())) return -1;
  return p2v_[static_cast<std::size_t>(ppage)];
}

std::int64_t AllocatorSide::band_begin() const {
  if (floats()) return span_low_;
  return grows_up() ? min_page() : watermark_ + 1;
}

std::int64_t AllocatorSide::band_end() const {
  if (floats()) return watermark_;
  return grows_up() ? watermark_ : num_pages();
}

std::vector<std::int64_t> AllocatorSide::pages_for(std::uint64_t k) const {
  std::vector<std::int64_t> pages;
  pages.reserve(k);
  // Lazy mode: holes first, in ascending physical order (SPEC 4.2; docs/decisions.md).
  for (auto it = holes_.begin(); it != holes_.end() && pages.size() < k; ++it) pages.push_back(*it);
  const auto rest = static_cast<std::int64_t>(k - pages.size());
  // Then the band's growing end, ascending: up [wm, wm + rest), down [wm - rest + 1, wm] (SPEC 4).
  const std::int64_t first = grows_up() ? watermark_ : watermark_ - rest + 1;
  for (std::int64_t i = 0; i < rest; ++i) pages.push_back(first + i);
  return pages;
}

std::vector<std::int64_t> AllocatorSide::bind(const std::vector<std::int64_t>& vpages) {
  KVTWIN_CHECK(!floats(), "a float binds the pages its plan chose (bind_pages)");
  const std::vector<std::int64_t> pages = pages_for(vpages.size());
  std::int64_t band_taken = 0;
  for (std::size_t i = 0; i < vpages.size(); ++i) {
    const std::int64_t v = vpages[i], p = pages[i];
    KVTWIN_CHECK(v >= 1 && v + 1 < static_cast<std::int64_t>(v2p_.size()) && v2p_[v] == -1,
                 "alloc binds a free virtual page of side '" + name() + "'");
    KVTWIN_CHECK(p >= min_page() && p < num_pages() && p2v_[p] == -1,
                 "alloc binds an unbound usable physical page of side '" + name() + "'");
    if (holes_.empty() || holes_.erase(p) == 0) ++band_taken;  // (an eager side has no holes)
    // SPEC 4: v2p[v_i] = start + i, p2v[start + i] = v_i.
    v2p_[v] = p;
    p2v_[p] = v;
    changed_virtual_.push_back(v);
    changed_physical_.push_back(p);
  }
  watermark_ += grows_up() ? band_taken : -band_taken;
  allocated_ += vpages.size();
  return pages;
}

std::int64_t AllocatorSide::unbind(std::int64_t vpage) {
  const std::int64_t p = physical_of(vpage);
  KVTWIN_CHECK(vpage >= 1 && p >= min_page() && in_band(p), "free unbinds a bound virtual page of side '" + name() + "'");
  // SPEC 4 free: clear v2p[v] and p2v[v2p[v]].
  v2p_[vpage] = -1;
  p2v_[p] = -1;
  changed_virtual_.push_back(vpage);
  changed_physical_.push_back(p);
  --allocated_;
  // SPEC 4.2: in lazy mode the freed physical page becomes a hole of the band. A float's freed
  // page is always a hole: the float never compacts on a free (SPEC 11).
  if (mode_ == CompactionMode::lazy || floats()) holes_.insert(p);
  return p;
}

// ---------------------------------------------------------------- the float middle (SPEC 11)

std::vector<std::int64_t> AllocatorSide::float_pages_for(std::uint64_t k, std::uint64_t low_limit,
                                                         std::uint64_t high_limit) const {
  KVTWIN_CHECK(floats(), "float_pages_for is the float's");
  // Whole pages between the limits, never below the sink's floor.
  const std::int64_t lo = std::max<std::int64_t>(min_page(), static_cast<std::int64_t>((low_limit + page_bytes() - 1) / page_bytes()));
  const std::int64_t hi = std::min<std::int64_t>(num_pages(), static_cast<std::int64_t>(high_limit / page_bytes()));
  std::vector<std::int64_t> pages;
  if (hi < lo) return pages;
  std::int64_t low = span_low_, high = watermark_;
  if (allocated_ == 0) {
    // An empty float is transparent: its point moves into the gap the ends left.
    low = high = std::clamp(low, lo, hi);
  } else if (low < lo || high > hi) {
    return pages;  // an end cuts into the span: only a relocation can make room
  }
  const std::uint64_t capacity = holes_.size() * (allocated_ == 0 ? 0 : 1) + static_cast<std::uint64_t>((low - lo) + (hi - high));
  if (capacity < k) return pages;
  // Holes first, ascending: no copy.
  if (allocated_ != 0)
    for (auto it = holes_.begin(); it != holes_.end() && pages.size() < k; ++it) pages.push_back(*it);
  // Then the span grows one page at a time toward the larger gap (in bytes; a tie goes up).
  const std::vector<std::int64_t> more = float_extension(low, high, k - pages.size(), low_limit, high_limit);
  pages.insert(pages.end(), more.begin(), more.end());
  std::sort(pages.begin(), pages.end());
  return pages;
}

std::vector<std::int64_t> AllocatorSide::float_extension(std::int64_t low, std::int64_t high, std::uint64_t k,
                                                         std::uint64_t low_limit, std::uint64_t high_limit) const {
  const auto epp = static_cast<std::int64_t>(page_bytes());
  const std::int64_t lo = std::max<std::int64_t>(min_page(), static_cast<std::int64_t>((low_limit + page_bytes() - 1) / page_bytes()));
  const std::int64_t hi = std::min<std::int64_t>(num_pages(), static_cast<std::int64_t>(high_limit / page_bytes()));
  std::vector<std::int64_t> pages;
  while (pages.size() < k) {
    const std::int64_t gap_below = low * epp - static_cast<std::int64_t>(low_limit);
    const std::int64_t gap_above = static_cast<std::int64_t>(high_limit) - high * epp;
    const bool up = high < hi && (gap_above >= gap_below || low <= lo);
    KVTWIN_CHECK(up || low > lo, "a float extension has the room its caller counted");
    pages.push_back(up ? high++ : --low);
  }
  return pages;
}

void AllocatorSide::bind_pages(const std::vector<std::int64_t>& vpages, const std::vector<std::int64_t>& pages) {
  KVTWIN_CHECK(floats() && vpages.size() == pages.size(), "bind_pages binds one float page per virtual page");
  if (allocated_ == 0) {
    for (std::int64_t h : holes_) changed_physical_.push_back(h);
    holes_.clear();
  }
  for (std::size_t i = 0; i < vpages.size(); ++i) {
    const std::int64_t v = vpages[i], p = pages[i];
    KVTWIN_CHECK(v >= 1 && v + 1 < static_cast<std::int64_t>(v2p_.size()) && v2p_[v] == -1,
                 "alloc binds a free virtual page of side '" + name() + "'");
    KVTWIN_CHECK(p >= min_page() && p < num_pages() && p2v_[p] == -1,
                 "alloc binds an unbound usable physical page of side '" + name() + "'");
    holes_.erase(p);
    v2p_[v] = p;
    p2v_[p] = v;
    changed_virtual_.push_back(v);
    changed_physical_.push_back(p);
  }
  if (!pages.empty()) {
    // The pages are holes of the span and pages next to its ends (float_pages_for): the span
    // grows over them and gains no hole.
    const auto [first, last] = std::minmax_element(pages.begin(), pages.end());
    if (allocated_ == 0) {
      span_low_ = *first;
      watermark_ = *last + 1;
    } else {
      span_low_ = std::min(span_low_, *first);
      watermark_ = std::max(watermark_, *last + 1);
    }
  }
  allocated_ += vpages.size();
}

CompactionPlan AllocatorSide::plan_relocation(std::int64_t new_low) const {
  KVTWIN_CHECK(floats(), "plan_relocation is the float's");
  CompactionPlan plan;
  plan.new_span_low = new_low;
  plan.new_watermark = new_low + static_cast<std::int64_t>(allocated_);
  // Live page i (ascending) goes to new_low + i. dst - src never grows with i, so the pages that
  // move up come first and the ones that move down last, and neither group's destinations are
  // the other's sources: the downward moves ascending, then the upward ones descending, write
  // every destination while it is free.
  std::vector<PagePair> down, up;
  std::int64_t target = new_low;
  for (std::int64_t p = span_low_; p < watermark_; ++p) {
    if (p2v_[static_cast<std::size_t>(p)] < 0) continue;
    if (target < p) down.push_back(PagePair{p, target});
    if (target > p) up.push_back(PagePair{p, target});
    ++target;
  }
  plan.moves = std::move(down);
  plan.moves.insert(plan.moves.end(), up.rbegin(), up.rend());
  plan.freed.assign(holes_.begin(), holes_.end());
  return plan;
}

void AllocatorSide::apply_relocation(const CompactionPlan& plan) {
  for (const PagePair& m : plan.moves) {
    const std::int64_t v = virtual_of(m.src);
    KVTWIN_CHECK(v >= 1 && p2v_[m.dst] == -1, "a relocation moves a live page to a free one");
    p2v_[m.src] = -1;
    v2p_[v] = m.dst;
    p2v_[m.dst] = v;
    changed_virtual_.push_back(v);
    changed_physical_.push_back(m.src);
    changed_physical_.push_back(m.dst);
  }
  for (std::int64_t h : holes_) changed_physical_.push_back(h);
  holes_.clear();
  span_low_ = plan.new_span_low;
  watermark_ = plan.new_watermark;
}

void AllocatorSide::absorb_boundary_holes() {
  KVTWIN_CHECK(floats(), "absorb_boundary_holes is the float's");
  if (allocated_ == 0) {
    // Transparent when empty: no holes, a point.
    for (std::int64_t h : holes_) changed_physical_.push_back(h);
    holes_.clear();
    watermark_ = span_low_;
    return;
  }
  while (span_low_ < watermark_ && holes_.erase(span_low_)) changed_physical_.push_back(span_low_++);
  while (watermark_ > span_low_ && holes_.erase(watermark_ - 1)) changed_physical_.push_back(--watermark_);
}

CompactionPlan AllocatorSide::plan_compaction(const std::vector<std::int64_t>& freed,
                                              const PairingRule& pairing) const {
  KVTWIN_CHECK(std::is_sorted(freed.begin(), freed.end()) &&
                   std::adjacent_find(freed.begin(), freed.end()) == freed.end(),
               "compaction's freed pages are sorted and unique");
  for (std::int64_t p : freed) KVTWIN_CHECK(in_band(p), "compaction frees pages of the band only");
  CompactionPlan plan;
  plan.freed = freed;
  const auto k = static_cast<std::int64_t>(freed.size());
  plan.survivors.reserve(freed.size());  // at most K of each
  plan.holes.reserve(freed.size());
  auto is_freed = [&](std::int64_t p) { return std::binary_search(freed.begin(), freed.end(), p); };
  if (grows_up()) {
    // SPEC 4.1 grow-up: new_wm = wm - K; survivors are the still-bound pages in [new_wm, wm),
    // holes the freed pages below new_wm, both ascending.
    plan.new_watermark = watermark_ - k;
    for (std::int64_t p = plan.new_watermark; p < watermark_; ++p)
      if (!is_freed(p)) plan.survivors.push_back(p);
    for (std::int64_t p : freed)
      if (p < plan.new_watermark) plan.holes.push_back(p);
  } else {
    // SPEC 4.1 grow-down mirrors it: new_wm = wm + K; survivors in (wm, new_wm], holes above
    // new_wm, both ascending.
    plan.new_watermark = watermark_ + k;
    for (std::int64_t p = watermark_ + 1; p <= plan.new_watermark; ++p)
      if (!is_freed(p)) plan.survivors.push_back(p);
    for (std::int64_t p : freed)
      if (p > plan.new_watermark) plan.holes.push_back(p);
  }
  KVTWIN_CHECK(plan.survivors.size() == plan.holes.size(), "a band shrinking by K pages has as many survivors as holes");
  plan.moves = pairing(plan.survivors, plan.holes);
  return plan;
}

void AllocatorSide::apply_compaction(const CompactionPlan& plan) {
  for (std::int64_t p : plan.freed) KVTWIN_CHECK(p2v_[p] == -1, "compaction runs after its freed pages are unbound");
  // SPEC 4.1: each move copies the page envelope (pool_bytes does the bytes), then
  // v2p[p2v[src]] = dst, p2v[dst] = that v, p2v[src] = -1.
  for (const PagePair& m : plan.moves) {
    const std::int64_t v = virtual_of(m.src);
    KVTWIN_CHECK(v >= 1 && p2v_[m.dst] == -1, "a compaction move takes a bound page to an unbound one");
    v2p_[v] = m.dst;
    p2v_[m.dst] = v;
    p2v_[m.src] = -1;
    changed_virtual_.push_back(v);
    changed_physical_.push_back(m.src);
    changed_physical_.push_back(m.dst);
  }
  for (std::int64_t p : plan.freed) {
    if (!holes_.empty()) holes_.erase(p);  // (an eager side has no holes)
    changed_physical_.push_back(p);
  }
  watermark_ = plan.new_watermark;
}

// ---------------------------------------------------------------- PageAllocator

PageAllocator::PageAllocator(const PoolGeometry& geometry, CompactionMode mode) : mode_(mode) {
  KVTWIN_CHECK(geometry.sub_pools.size() == 1 || geometry.sub_pools.size() == 2, "a chain holds one or two sub-pools");
  // docs/decisions.md: the full side (chain index 0) owns the virtual ids; the SWA side's v2p has
  // the same length.
  const auto num_virtual = static_cast<std::int64_t>(geometry.sub_pools.front().num_pages);
  for (const SubPoolGeometry& g : geometry.sub_pools)
    sides_.emplace_back(g, num_virtual, mode, static_cast<std::int64_t>(geometry.float_start_page));
  // SPEC 4: the owner's free queue starts min_page_index .. num_pages - 1, ascending.
  for (std::int64_t v = owner().min_page(); v < owner().num_pages(); ++v) push_free_back(v);
}

std::vector<std::int64_t> PageAllocator::pop_free_front(std::uint64_t k) {
  KVTWIN_CHECK(k <= free_queue_.size(), "the queue gives only the ids it holds");
  std::vector<std::int64_t> vpages(free_queue_.begin(), free_queue_.begin() + static_cast<std::ptrdiff_t>(k));
  // The front's term and its link leave; the next id becomes the front.
  for (std::uint64_t i = 0; i < k; ++i) {
    queue_terms_ -= free_queue_front_term(0, vpages[i]);
    if (i + 1 < free_queue_.size()) {
      const std::int64_t next = free_queue_[i + 1];
      queue_terms_ -= free_queue_link_term(0, vpages[i], next);
      queue_terms_ += free_queue_front_term(0, next);
    }
  }
  free_queue_.erase(free_queue_.begin(), free_queue_.begin() + static_cast<std::ptrdiff_t>(k));
  return vpages;
}

void PageAllocator::push_free_back(std::int64_t v) {
  queue_terms_ += free_queue_.empty() ? free_queue_front_term(0, v) : free_queue_link_term(0, free_queue_.back(), v);
  free_queue_.push_back(v);
}

void PageAllocator::recount_free_queue_terms() {
  queue_terms_ = 0;
  for (std::size_t j = 0; j < free_queue_.size(); ++j)
    queue_terms_ += j == 0 ? free_queue_front_term(0, free_queue_[0]) : free_queue_link_term(0, free_queue_[j - 1], free_queue_[j]);
}

std::vector<std::int64_t> PageAllocator::take_free_ids(std::uint64_t k) {
  KVTWIN_CHECK(k <= free_queue_.size(), "take_free_ids takes ids the queue holds");
  return pop_free_front(k);
}

std::uint64_t PageAllocator::gap_bytes() const {
  const AllocatorSide& up = sides_.front();
  const std::uint64_t up_end = up.band_end_byte();
  const std::uint64_t down_begin =
      is_composite() ? sides_.back().band_begin_byte() : static_cast<std::uint64_t>(up.num_pages()) * up.page_bytes();
  KVTWIN_CHECK(up_end <= down_begin, "the two frontiers never cross");
  return down_begin - up_end;
}

bool PageAllocator::fits(std::uint64_t k) const {
  // k <= free virtual ids (and so k is at most num_pages: the products below fit in 64 bits).
  if (k > free_queue_.size()) return false;
  std::uint64_t gap_needed = 0;
  for (const AllocatorSide& s : sides_) {
    // SPEC 4.3: R = num_pages - min_page_index - allocated, per side.
    if (k > s.remaining_pages()) return false;
    // SPEC 4.2: holes count too; only pages beyond them come from the gap.
    const std::uint64_t from_holes = std::min<std::uint64_t>(k, s.holes().size());
    gap_needed += (k - from_holes) * s.page_bytes();
  }
  // Eager mode (no holes): k * (epp_full + epp_swa) <= gap, i.e. SPEC 4.3's gap // (epp_full + epp_swa).
  return gap_needed <= gap_bytes();
}

std::vector<std::int64_t> PageAllocator::alloc(std::uint64_t k) {
  KVTWIN_CHECK(fits(k), "alloc is only called for an allocation that fits");
  // SPEC 4: the k virtual pages from the queue front, bound in order.
  std::vector<std::int64_t> vpages = pop_free_front(k);
  // SPEC 4.3: full alloc, then SWA alloc on the same virtual pages.
  for (AllocatorSide& s : sides_) s.bind(vpages);
  return vpages;
}

SideFreeStep PageAllocator::plan_side_free(std::size_t side, const std::vector<std::int64_t>& vpages, bool release,
                                           const PairingRule& pairing) const {
  const AllocatorSide& s = sides_.at(side);
  SideFreeStep step;
  step.side = side;
  step.virtual_pages = vpages;
  step.release_virtual_ids = release;
  step.physical_pages.reserve(vpages.size());
  for (std::int64_t v : vpages) step.physical_pages.push_back(s.physical_of(v));
  std::sort(step.physical_pages.begin(), step.physical_pages.end());
  // SPEC 11: a float never compacts on a free; its boundary holes leave the span at once in eager
  // mode (at the flush in lazy mode).
  if (s.floats()) {
    step.absorb = mode_ == CompactionMode::eager;
    return step;
  }
  // SPEC 4.1: eager mode packs the side again right after the free; lazy mode leaves holes (4.2).
  if (mode_ == CompactionMode::eager) {
    step.compact = true;
    step.compaction = s.plan_compaction(step.physical_pages, pairing);
  }
  return step;
}

FreePlan PageAllocator::plan_free(const std::vector<std::int64_t>& vpages, const PairingRule& pairing) const {
  FreePlan plan;
  if (is_composite()) {
    // SPEC 4.3 free: SWA only where swa_v2p[v] > 0 (strict: -1 is a tombstone, 0 is the sink).
    std::vector<std::int64_t> swa_pages;
    for (std::int64_t v : vpages)
      if (sides_[1].physical_of(v) > 0) swa_pages.push_back(v);
    plan.steps.push_back(plan_side_free(1, swa_pages, false, pairing));
  }
  plan.steps.push_back(plan_side_free(0, vpages, true, pairing));
  return plan;
}

FreePlan PageAllocator::plan_free_swa(const std::vector<std::int64_t>& vpages, const PairingRule& pairing) const {
  KVTWIN_CHECK(is_composite(), "free_swa needs a composite");
  FreePlan plan;
  // SPEC 4.3 free_swa: swa_v2p[v] = -1 (a tombstone), the SWA page is freed, the full page stays.
  plan.steps.push_back(plan_side_free(1, vpages, false, pairing));
  return plan;
}

FreePlan PageAllocator::plan_flush(const PairingRule& pairing) const {
  FreePlan plan;
  // SPEC 4.2 flush compacts exactly as 4.1, with the side's holes as the freed pages. SWA side
  // first, like free (docs/decisions.md).
  for (std::size_t i = sides_.size(); i-- > 0;) {
    SideFreeStep step;
    step.side = i;
    if (sides_[i].floats()) {
      step.absorb = true;  // SPEC 11: a flush absorbs the float's boundary holes, moving nothing
      plan.steps.push_back(std::move(step));
      continue;
    }
    step.compact = true;
    const std::vector<std::int64_t> holes(sides_[i].holes().begin(), sides_[i].holes().end());
    step.compaction = sides_[i].plan_compaction(holes, pairing);
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

void PageAllocator::commit(const FreePlan& plan) {
  for (const SideFreeStep& step : plan.steps) {
    AllocatorSide& s = sides_.at(step.side);
    for (std::int64_t v : step.virtual_pages) s.unbind(v);
    if (step.compact) s.apply_compaction(step.compaction);
    if (s.floats() && (step.absorb || s.allocated_pages() == 0)) s.absorb_boundary_holes();
    // SPEC 4: freed ids are appended to the queue's back in ascending order.
    if (step.release_virtual_ids)
      for (std::int64_t v : step.virtual_pages) push_free_back(v);
  }
}

}  // namespace kvtwin::sim
