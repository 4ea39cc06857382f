// The host copy of a side's tables and its plans (side_copy.h). Comments cite the SPEC.md rule
// each step implements.
#include "gpu/side_copy.h"

#include <algorithm>

#include "core/check.h"

namespace kvtwin::gpu {

void SideCopy::init(const SubPoolGeometry& geometry, std::int64_t num_virtual, bool owner) {
  KVTWIN_CHECK(geometry.direction != GrowDirection::float_middle, "a float middle's copy is FloatSpan");
  grows_up_ = geometry.direction == GrowDirection::up;
  owner_ = owner;
  min_page_ = static_cast<std::int64_t>(geometry.min_page_index);
  num_pages_ = static_cast<std::int64_t>(geometry.num_pages);
  watermark_ = grows_up_ ? min_page_ : num_pages_ - 1;
  allocated_ = 0;
  holes_.clear();
  queue_.clear();
  if (owner)
    for (std::int64_t v = min_page_; v < num_virtual; ++v) queue_.push_back(v);
  // SPEC 4: all -1, except the sink row 0; the last row is the -1 sentinel.
  v2p_.assign(static_cast<std::size_t>(num_virtual) + 1, -1);
  p2v_.assign(static_cast<std::size_t>(num_pages_) + 1, -1);
  v2p_[0] = p2v_[0] = 0;
}

std::int64_t SideCopy::physical_of(std::int64_t vpage) const {
  return vpage >= 0 && vpage < static_cast<std::int64_t>(v2p_.size()) ? v2p_[static_cast<std::size_t>(vpage)] : -1;
}

std::int64_t SideCopy::virtual_of(std::int64_t ppage) const {
  return ppage >= 0 && ppage < static_cast<std::int64_t>(p2v_.size()) ? p2v_[static_cast<std::size_t>(ppage)] : -1;
}

std::vector<std::int64_t> SideCopy::queue_front(std::int64_t k) const {
  KVTWIN_CHECK(owner_ && k >= 0 && k <= static_cast<std::int64_t>(queue_.size()), "queue_front beyond the free queue");
  return {queue_.begin(), queue_.begin() + k};
}

std::vector<std::int64_t> SideCopy::pages_for(std::int64_t k) const {
  std::vector<std::int64_t> pages;
  pages.reserve(static_cast<std::size_t>(k));
  // docs/decisions.md "Lazy mode, alloc": the lowest holes first.
  for (auto it = holes_.begin(); it != holes_.end() && static_cast<std::int64_t>(pages.size()) < k; ++it)
    pages.push_back(*it);
  // Then the band, ascending: up [wm, wm + rest), down [wm - rest + 1, wm].
  const std::int64_t rest = k - static_cast<std::int64_t>(pages.size());
  const std::int64_t first = grows_up_ ? watermark_ : watermark_ - rest + 1;
  for (std::int64_t i = 0; i < rest; ++i) pages.push_back(first + i);
  return pages;
}

SideMoves SideCopy::plan_compaction(std::vector<std::int64_t> freed) const {
  std::sort(freed.begin(), freed.end());
  const auto k = static_cast<std::int64_t>(freed.size());
  const auto is_freed = [&](std::int64_t p) { return std::binary_search(freed.begin(), freed.end(), p); };
  SideMoves moves;
  // SPEC 4.1: up new_wm = wm - K, survivors in [new_wm, wm), holes below new_wm; down new_wm =
  // wm + K, survivors in (wm, new_wm], holes above new_wm. Only the band's last K pages are read.
  std::int64_t survivors_lo = 0, survivors_hi = 0;
  if (grows_up_) {
    moves.new_watermark = watermark_ - k;
    survivors_lo = moves.new_watermark, survivors_hi = watermark_;
  } else {
    moves.new_watermark = watermark_ + k;
    survivors_lo = watermark_ + 1, survivors_hi = moves.new_watermark + 1;
  }
  for (std::int64_t p = survivors_lo; p < survivors_hi; ++p)
    if (virtual_of(p) >= 0 && !is_freed(p)) moves.sources.push_back(p);
  for (std::int64_t p : freed)
    if (grows_up_ ? p < moves.new_watermark : p > moves.new_watermark) moves.destinations.push_back(p);
  KVTWIN_CHECK(moves.sources.size() == moves.destinations.size(), "compaction: survivors and holes differ in number");
  return moves;
}

SideMoves SideCopy::plan_flush() const { return plan_compaction({holes_.begin(), holes_.end()}); }

void SideCopy::take_virtual(std::int64_t k) {
  KVTWIN_CHECK(owner_ && k >= 0 && k <= static_cast<std::int64_t>(queue_.size()), "take_virtual beyond the free queue");
  queue_.erase(queue_.begin(), queue_.begin() + k);
}

void SideCopy::put_virtual(const std::vector<std::int64_t>& vpages) {
  KVTWIN_CHECK(owner_, "only the owner side keeps the free queue");
  queue_.insert(queue_.end(), vpages.begin(), vpages.end());
}

void SideCopy::bind(const std::vector<std::int64_t>& vpages, const std::vector<std::int64_t>& pages) {
  KVTWIN_CHECK(vpages.size() == pages.size(), "bind pairs each virtual page with one physical page");
  std::int64_t band = 0;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    const std::int64_t v = vpages[i], p = pages[i];
    v2p_[static_cast<std::size_t>(v)] = p;
    p2v_[static_cast<std::size_t>(p)] = v;
    if (holes_.erase(p) == 0) ++band;
  }
  watermark_ = grows_up_ ? watermark_ + band : watermark_ - band;
  allocated_ += static_cast<std::int64_t>(pages.size());
}

std::vector<std::int64_t> SideCopy::unbind(const std::vector<std::int64_t>& vpages, bool only_positive) {
  std::vector<std::int64_t> released;
  for (std::int64_t v : vpages) {
    const std::int64_t p = physical_of(v);
    if (only_positive ? p <= 0 : p < 0) continue;
    v2p_[static_cast<std::size_t>(v)] = -1;
    p2v_[static_cast<std::size_t>(p)] = -1;
    released.push_back(p);
  }
  allocated_ -= static_cast<std::int64_t>(released.size());
  return released;
}

void SideCopy::add_holes(const std::vector<std::int64_t>& pages) { holes_.insert(pages.begin(), pages.end()); }

void SideCopy::apply(const SideMoves& moves, bool clears_holes) {
  for (std::size_t i = 0; i < moves.sources.size(); ++i) {
    const std::int64_t src = moves.sources[i], dst = moves.destinations[i];
    const std::int64_t v = p2v_[static_cast<std::size_t>(src)];
    v2p_[static_cast<std::size_t>(v)] = dst;
    p2v_[static_cast<std::size_t>(dst)] = v;
    p2v_[static_cast<std::size_t>(src)] = -1;
  }
  watermark_ = moves.new_watermark;
  if (clears_holes) holes_.clear();
}

}  // namespace kvtwin::gpu
