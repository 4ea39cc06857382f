// The float middle's host plans (float_span.h). Comments cite the SPEC.md section 11 rule each
// step implements.
#include "gpu/float_span.h"

#include <algorithm>

#include "core/check.h"

namespace kvtwin::gpu {

void FloatSpan::init(const SubPoolGeometry& geometry, std::int64_t num_virtual, std::int64_t start_page) {
  KVTWIN_CHECK(geometry.direction == GrowDirection::float_middle, "FloatSpan is a float middle's");
  page_bytes_ = geometry.page_bytes;
  min_page_ = static_cast<std::int64_t>(geometry.min_page_index);
  num_pages_ = static_cast<std::int64_t>(geometry.num_pages);
  // The empty span at the middle of the buffer, and the tables as DeviceSide::init leaves them.
  low_ = high_ = std::clamp<std::int64_t>(start_page, min_page_, num_pages_);
  allocated_ = 0;
  holes_.clear();
  v2p_.assign(static_cast<std::size_t>(num_virtual) + 1, -1);
  p2v_.assign(static_cast<std::size_t>(num_pages_) + 1, -1);
  v2p_[0] = p2v_[0] = 0;
}

std::int64_t FloatSpan::first_page_within(std::uint64_t low_limit) const {
  // Whole pages at or above the limit, never below the sink's floor.
  return std::max<std::int64_t>(min_page_, static_cast<std::int64_t>((low_limit + page_bytes_ - 1) / page_bytes_));
}

std::int64_t FloatSpan::last_page_within(std::uint64_t high_limit) const {
  return std::min<std::int64_t>(num_pages_, static_cast<std::int64_t>(high_limit / page_bytes_));
}

std::vector<std::int64_t> FloatSpan::pages_for(std::uint64_t k, std::uint64_t low_limit, std::uint64_t high_limit) const {
  const std::int64_t lo = first_page_within(low_limit), hi = last_page_within(high_limit);
  std::vector<std::int64_t> pages;
  if (hi < lo) return pages;
  std::int64_t low = low_, high = high_;
  if (allocated_ == 0) {
    low = high = std::clamp(low, lo, hi);  // transparent when empty: the point moves into the gap
  } else if (low < lo || high > hi) {
    return pages;  // an end cuts into the span: only a relocation makes room
  }
  const std::uint64_t room = (allocated_ == 0 ? 0 : holes_.size()) + static_cast<std::uint64_t>((low - lo) + (hi - high));
  if (room < k) return pages;
  // Holes first, ascending (no copy); then the extension.
  if (allocated_ != 0)
    for (auto it = holes_.begin(); it != holes_.end() && pages.size() < k; ++it) pages.push_back(*it);
  const std::vector<std::int64_t> more = extension(low, high, k - pages.size(), low_limit, high_limit);
  pages.insert(pages.end(), more.begin(), more.end());
  std::sort(pages.begin(), pages.end());
  return pages;
}

std::vector<std::int64_t> FloatSpan::extension(std::int64_t low, std::int64_t high, std::uint64_t k,
                                               std::uint64_t low_limit, std::uint64_t high_limit) const {
  const std::int64_t lo = first_page_within(low_limit), hi = last_page_within(high_limit);
  const auto epp = static_cast<std::int64_t>(page_bytes_);
  std::vector<std::int64_t> pages;
  while (pages.size() < k) {
    // One page at a time toward the larger gap in bytes; a tie goes up.
    const std::int64_t gap_below = low * epp - static_cast<std::int64_t>(low_limit);
    const std::int64_t gap_above = static_cast<std::int64_t>(high_limit) - high * epp;
    const bool up = high < hi && (gap_above >= gap_below || low <= lo);
    KVTWIN_CHECK(up || low > lo, "a float extension has the room its caller counted");
    pages.push_back(up ? high++ : --low);
  }
  std::sort(pages.begin(), pages.end());
  return pages;
}

std::optional<FloatRelocation> FloatSpan::plan_make_room(std::uint64_t low_limit, std::uint64_t high_limit,
                                                         std::uint64_t extra) const {
  const std::int64_t lo = first_page_within(low_limit), hi = last_page_within(high_limit);
  const std::int64_t need = allocated_ + static_cast<std::int64_t>(extra);
  if (hi - lo < need) return std::nullopt;  // cannot: nothing changes
  // The live pages side by side in the middle of the room left once they and the new pages fit
  // (so that the float meets an end again as late as it can).
  FloatRelocation plan;
  plan.new_low = lo + (hi - lo - need) / 2;
  plan.new_high = plan.new_low + allocated_;
  // Live page i (ascending) goes to new_low + i: dst - src never grows with i, so the pages that
  // move down come first in the span and those that move up last. Copying the downward ones
  // ascending, then the upward ones descending, writes every destination after it was read.
  std::vector<std::int64_t> down_src, down_dst, up_src, up_dst;
  std::int64_t target = plan.new_low;
  for (std::int64_t p = low_; p < high_; ++p) {
    if (p2v_[static_cast<std::size_t>(p)] < 0) continue;
    if (target < p) down_src.push_back(p), down_dst.push_back(target);
    if (target > p) up_src.push_back(p), up_dst.push_back(target);
    ++target;
  }
  plan.sources = std::move(down_src);
  plan.destinations = std::move(down_dst);
  plan.sources.insert(plan.sources.end(), up_src.rbegin(), up_src.rend());
  plan.destinations.insert(plan.destinations.end(), up_dst.rbegin(), up_dst.rend());
  return plan;
}

std::int64_t FloatSpan::bind(const std::vector<std::int64_t>& vpages, const std::vector<std::int64_t>& pages) {
  KVTWIN_CHECK(vpages.size() == pages.size(), "a float binds one page per virtual page");
  KVTWIN_CHECK(allocated_ != 0 || holes_.empty(), "an empty float has no holes");
  std::int64_t from_holes = 0;
  for (std::size_t i = 0; i < vpages.size(); ++i) {
    const std::int64_t v = vpages[i], p = pages[i];
    KVTWIN_CHECK(v >= 1 && v + 1 < static_cast<std::int64_t>(v2p_.size()) && v2p_[static_cast<std::size_t>(v)] == -1,
                 "a float binds a free virtual page");
    KVTWIN_CHECK(p >= min_page_ && p < num_pages_ && p2v_[static_cast<std::size_t>(p)] == -1,
                 "a float binds an unbound usable page");
    from_holes += static_cast<std::int64_t>(holes_.erase(p));
    v2p_[static_cast<std::size_t>(v)] = p;
    p2v_[static_cast<std::size_t>(p)] = v;
  }
  if (!pages.empty()) {
    // The span grows over the pages (holes of it and pages next to its ends) and gains no hole.
    const auto [first, last] = std::minmax_element(pages.begin(), pages.end());
    low_ = allocated_ == 0 ? *first : std::min(low_, *first);
    high_ = allocated_ == 0 ? *last + 1 : std::max(high_, *last + 1);
  }
  allocated_ += static_cast<std::int64_t>(vpages.size());
  return from_holes;
}

std::int64_t FloatSpan::unbind(std::int64_t vpage) {
  const std::int64_t p = physical_of(vpage);
  KVTWIN_CHECK(vpage >= 1 && p >= low_ && p < high_, "a float unbinds a bound page of its span");
  v2p_[static_cast<std::size_t>(vpage)] = -1;
  p2v_[static_cast<std::size_t>(p)] = -1;
  --allocated_;
  holes_.insert(p);  // a float never compacts on a free
  return p;
}

std::vector<std::int64_t> FloatSpan::absorb() {
  std::vector<std::int64_t> gone;
  if (allocated_ == 0) {
    gone.assign(holes_.begin(), holes_.end());  // transparent when empty: a point
    holes_.clear();
    high_ = low_;
    return gone;
  }
  while (low_ < high_ && holes_.erase(low_)) gone.push_back(low_++);
  while (high_ > low_ && holes_.erase(high_ - 1)) gone.push_back(--high_);
  return gone;
}

void FloatSpan::relocate(const FloatRelocation& plan) {
  // The owners first (sources and destinations overlap), then the rows.
  std::vector<std::int64_t> owners;
  owners.reserve(plan.sources.size());
  for (std::int64_t s : plan.sources) owners.push_back(p2v_[static_cast<std::size_t>(s)]);
  for (std::int64_t s : plan.sources) p2v_[static_cast<std::size_t>(s)] = -1;
  for (std::size_t i = 0; i < owners.size(); ++i) {
    KVTWIN_CHECK(owners[i] >= 1, "a relocation moves live pages");
    v2p_[static_cast<std::size_t>(owners[i])] = plan.destinations[i];
    p2v_[static_cast<std::size_t>(plan.destinations[i])] = owners[i];
  }
  holes_.clear();
  low_ = plan.new_low;
  high_ = plan.new_high;
}

}  // namespace kvtwin::gpu
