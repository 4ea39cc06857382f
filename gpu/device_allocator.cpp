// The page allocator on the device (device_allocator.h). Comments cite the SPEC.md rule (or
// docs/decisions.md entry) each branch implements.
#include "gpu/device_allocator.h"

#include <algorithm>
#include <set>

#include "core/reasons.h"
#include "gpu/device_invariants.h"
#include "gpu/state_pool.h"

namespace kvtwin::gpu {
namespace {

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
Error out_of_range(std::string message) { return make_error(ErrorKind::out_of_range, std::move(message)); }

std::string list_ids(const std::vector<std::int64_t>& ids, std::size_t at_most = 8) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < at_most; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > at_most) out += ", ... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

}  // namespace

Status DeviceAllocator::init(const PoolConfig& config, const PoolDerived& derived, cudaStream_t stream) {
  reset();
  config_ = &config;
  derived_ = &derived;
  // The full (or MLA) side owns the virtual ids; the SWA side's v2p has the same length.
  const std::int64_t num_virtual = static_cast<std::int64_t>(derived.geometry.sub_pools[0].num_pages);
  std::int64_t max_pages = 0;
  copies_.resize(derived.geometry.sub_pools.size());
  for (std::size_t i = 0; i < derived.geometry.sub_pools.size(); ++i) {
    auto side = std::make_unique<DeviceSide>();
    KVTWIN_TRY_STATUS(side->init(derived.geometry.sub_pools[i], num_virtual, i == 0, stream,
                                 static_cast<std::int64_t>(derived.geometry.float_start_page)));
    if (side->floats())
      float_.init(derived.geometry.sub_pools[i], num_virtual, side->span_low());
    else
      copies_[i].init(derived.geometry.sub_pools[i], num_virtual, i == 0);
    max_pages = std::max(max_pages, side->num_pages() + 1);
    sides_.push_back(std::move(side));
  }
  // The lists sized once for the largest operation, so that no upload reallocates one a queued
  // kernel still reads.
  const auto most = static_cast<std::size_t>(std::max(max_pages, num_virtual + 1));
  KVTWIN_TRY_STATUS(bound_virtual_.reserve(most));
  KVTWIN_TRY_STATUS(bind_holes_.reserve(most));
  KVTWIN_TRY_STATUS(freed_virtual_.reserve(most));
  KVTWIN_TRY_STATUS(new_holes_.reserve(most));
  KVTWIN_TRY_STATUS(compaction_moves_.reserve(2 * most));
  return ok_status();
}

void DeviceAllocator::reset() {
  sides_.clear();
  copies_.clear();
  config_ = nullptr;
  derived_ = nullptr;
}

std::int64_t DeviceAllocator::sink_end(std::size_t side) const {
  return sides_[side]->min_page() * static_cast<std::int64_t>(config_->page_size);
}

std::int64_t DeviceAllocator::slot_count(std::size_t side) const {
  return static_cast<std::int64_t>(derived_->geometry.sub_pools[side].max_slots);
}

std::uint64_t DeviceAllocator::band_begin_byte(std::size_t side) const {
  const DeviceSide& s = *sides_[side];
  if (s.floats()) return static_cast<std::uint64_t>(s.span_low()) * s.geometry().page_bytes;
  const std::int64_t page = s.grows_up() ? s.min_page() : s.watermark() + 1;
  return static_cast<std::uint64_t>(page) * s.geometry().page_bytes;
}

std::uint64_t DeviceAllocator::band_end_byte(std::size_t side) const {
  const DeviceSide& s = *sides_[side];
  if (s.floats()) return static_cast<std::uint64_t>(s.watermark()) * s.geometry().page_bytes;
  const std::int64_t page = s.grows_up() ? s.watermark() : s.num_pages();
  return static_cast<std::uint64_t>(page) * s.geometry().page_bytes;
}

// ---------------------------------------------------------------- allocation (SPEC 4, 4.2, 4.3)

bool DeviceAllocator::fits(std::int64_t k, std::uint64_t low_end_bytes) const {
  const DeviceSide& full = *sides_[0];
  if (k > full.queue_count()) return false;  // free virtual ids
  const std::int64_t need_full = std::max<std::int64_t>(k - full.holes(), 0);  // lazy: holes first
  if (!full.grows_up()) {
    // SPEC 11 [state up | owner down]: the band (wm, num_pages) grows down to its first usable
    // page and never below the state's frontier (the state end is never moved by the owner).
    if (sides_.size() != 1 || k > full.remaining()) return false;
    const std::int64_t new_begin = full.watermark() + 1 - need_full;
    return new_begin >= full.min_page() &&
           static_cast<std::uint64_t>(new_begin) * full.geometry().page_bytes >= low_end_bytes;
  }
  if (sides_.size() == 1) return need_full <= full.band_room_single();
  // Composite: joint pre-check (SPEC 4.3; lazy mode per docs/decisions.md).
  const DeviceSide& swa = *sides_[1];
  if (k > swa.remaining()) return false;
  const std::int64_t need_swa = std::max<std::int64_t>(k - swa.holes(), 0);
  const std::int64_t epp_full = static_cast<std::int64_t>(full.geometry().page_bytes);
  const std::int64_t epp_swa = static_cast<std::int64_t>(swa.geometry().page_bytes);
  const std::int64_t gap = (swa.watermark() + 1) * epp_swa - full.watermark() * epp_full;
  return need_full * epp_full + need_swa * epp_swa <= gap;
}

SideCopy& DeviceAllocator::copy(std::size_t side) {
  KVTWIN_CHECK(!sides_[side]->floats(), "a float's host copy is float_");
  return copies_[side];
}

const SideCopy& DeviceAllocator::copy(std::size_t side) const {
  KVTWIN_CHECK(!sides_[side]->floats(), "a float's host copy is float_");
  return copies_[side];
}

Status DeviceAllocator::bind_side(std::size_t side, const std::vector<std::int64_t>& vpages, const std::int64_t* dv,
                                  cudaStream_t stream) {
  SideCopy& c = copy(side);
  const auto k = static_cast<std::int64_t>(vpages.size());
  // docs/decisions.md "Lazy mode, alloc": the lowest holes first (their list goes up), then the
  // band, which the device numbers itself.
  const std::vector<std::int64_t> pages = c.pages_for(k);
  const std::int64_t h = std::min<std::int64_t>(k, static_cast<std::int64_t>(c.holes().size()));
  const std::int64_t* holes = nullptr;
  if (h > 0) {
    KVTWIN_TRY(holes, upload_ids(bind_holes_, {pages.begin(), pages.begin() + h}, stream));
  }
  KVTWIN_TRY_STATUS(sides_[side]->bind(dv, k, holes, h, stream));
  c.bind(vpages, pages);
  return ok_status();
}

Result<std::vector<std::int64_t>> DeviceAllocator::alloc(std::int64_t k, cudaStream_t stream) {
  // The k virtual pages from the queue front, bound in order to the side's pages (SPEC 4): the
  // device takes them off its queue (no upload), the host off its copy.
  std::vector<std::int64_t> vpages = copy(0).queue_front(k);
  std::int64_t* dv = bound_virtual_.get();
  KVTWIN_TRY_STATUS(sides_[0]->take_virtual(k, dv, stream));
  copy(0).take_virtual(k);
  for (std::size_t i = 0; i < sides_.size(); ++i) KVTWIN_TRY_STATUS(bind_side(i, vpages, dv, stream));
  return vpages;
}

// ---------------------------------------------------------------- the tri-pool's float (SPEC 11)

DeviceAllocator::ChainAlloc DeviceAllocator::plan_chain_alloc(std::int64_t k, std::uint64_t state_end) const {
  ChainAlloc plan;
  plan.k = k;
  const DeviceSide& owner = *sides_[0];
  if (k > owner.queue_count() || k > owner.remaining()) return plan;
  // The owner (grows down): its holes first, then band pages below its band (SPEC 4, 4.2).
  const std::int64_t new_pages = k - std::min(k, owner.holes());
  const std::int64_t new_begin = owner.watermark() + 1 - new_pages;
  if (new_begin < owner.min_page()) return plan;
  const std::uint64_t owner_begin = static_cast<std::uint64_t>(new_begin) * owner.geometry().page_bytes;
  if (owner_begin < state_end) return plan;  // the state end is never moved by the owner
  // The float: its holes, then the gaps, between the state frontier and the owner's new band.
  if (k > float_.remaining()) return plan;
  plan.float_pages = float_.pages_for(static_cast<std::uint64_t>(k), state_end, owner_begin);
  if (static_cast<std::int64_t>(plan.float_pages.size()) == k) {
    plan.fits = true;
    return plan;
  }
  plan.float_pages.clear();
  if (!float_.live()) return plan;  // an empty float that does not fit: no room
  // make_room: the owner's growth cuts into the span; the new pages extend the packed span.
  plan.relocation = float_.plan_make_room(state_end, owner_begin, static_cast<std::uint64_t>(k));
  if (!plan.relocation) return plan;
  plan.float_pages = float_.extension(plan.relocation->new_low, plan.relocation->new_high,
                                      static_cast<std::uint64_t>(k), state_end, owner_begin);
  plan.fits = true;
  return plan;
}

Result<std::vector<std::int64_t>> DeviceAllocator::commit_chain_alloc(const ChainAlloc& plan,
                                                                      const DevicePoolBytes& bytes,
                                                                      const Faults& faults, cudaStream_t stream) {
  KVTWIN_CHECK(plan.fits && floats(), "commit_chain_alloc commits a tri-pool plan that fits");
  if (plan.relocation) KVTWIN_TRY_STATUS(relocate_float(*plan.relocation, bytes, faults, stream));
  const std::int64_t k = plan.k;
  // SPEC 4.3: the owner first, then the float on the same virtual pages.
  std::vector<std::int64_t> virtual_pages = copy(0).queue_front(k);
  std::int64_t* vpages = bound_virtual_.get();
  KVTWIN_TRY_STATUS(sides_[0]->take_virtual(k, vpages, stream));
  copy(0).take_virtual(k);
  KVTWIN_TRY_STATUS(bind_side(0, virtual_pages, vpages, stream));
  const std::int64_t from_holes = float_.bind(virtual_pages, plan.float_pages);
  KVTWIN_TRY(const std::int64_t* pages, upload_ids(float_pages_, plan.float_pages, stream));
  KVTWIN_TRY_STATUS(sides_[1]->bind_at(vpages, pages, k, from_holes, float_.low(), float_.high(), stream));
  return virtual_pages;
}

DeviceAllocator::StateRoom DeviceAllocator::plan_state_room(std::uint64_t slot_end) const {
  StateRoom room;
  const std::uint64_t owner_begin = band_begin_byte(0);
  if (!float_.live()) {
    room.fits = slot_end <= owner_begin;  // an empty float is transparent
    return room;
  }
  if (slot_end <= float_.begin_byte()) {
    room.fits = true;
    return room;
  }
  // make_room away from the state end, in the middle of the room between the slot and the owner.
  room.relocation = float_.plan_make_room(slot_end, owner_begin, 0);
  room.fits = room.relocation.has_value();
  return room;
}

Status DeviceAllocator::relocate_float(const FloatRelocation& plan, const DevicePoolBytes& bytes, const Faults& faults,
                                       cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(plan.sources.size());
  std::vector<std::int64_t> sources = plan.sources, destinations = plan.destinations;
  if (faults.float_relocation_source_order) {
    // The fault: the envelopes copied in source order, as a plain loop over the span would.
    std::vector<std::size_t> order(sources.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return plan.sources[a] < plan.sources[b]; });
    for (std::size_t i = 0; i < order.size(); ++i) {
      sources[i] = plan.sources[order[i]];
      destinations[i] = plan.destinations[order[i]];
    }
  }
  if (n > 0) {
    KVTWIN_TRY(const std::int64_t* src, upload_ids(float_sources_, sources, stream));
    KVTWIN_TRY(const std::int64_t* dst, upload_ids(float_destinations_, destinations, stream));
    // The copies in waves, each one launch of the page-move kernel (its moves run at once): a
    // wave ends before a move that reads a page the wave writes, or writes one it reads. Waves run
    // in stream order, so the copies keep the sequential meaning of the order.
    std::set<std::int64_t> wave_reads, wave_writes;
    std::int64_t wave_begin = 0;
    for (std::int64_t i = 0; i <= n; ++i) {
      const bool end = i == n || wave_writes.count(sources[static_cast<std::size_t>(i)]) != 0 ||
                       wave_reads.count(destinations[static_cast<std::size_t>(i)]) != 0;
      if (end && i > wave_begin) {
        KVTWIN_TRY_STATUS(bytes.move_pages(1, src + wave_begin, dst + wave_begin, i - wave_begin, faults, stream));
        wave_reads.clear();
        wave_writes.clear();
        wave_begin = i;
      }
      if (i < n) {
        wave_reads.insert(sources[static_cast<std::size_t>(i)]);
        wave_writes.insert(destinations[static_cast<std::size_t>(i)]);
      }
    }
    KVTWIN_TRY_STATUS(float_owners_.reserve(static_cast<std::size_t>(n)));
    KVTWIN_TRY_STATUS(sides_[1]->relocate(src, dst, n, plan.new_low, plan.new_high, float_owners_.get(), stream));
  } else {
    KVTWIN_TRY_STATUS(sides_[1]->relocate(nullptr, nullptr, 0, plan.new_low, plan.new_high, nullptr, stream));
  }
  float_.relocate(plan);
  return ok_status();
}

Status DeviceAllocator::free_float_pages(const std::vector<std::int64_t>& vpages, const std::int64_t* dv, std::int64_t n,
                                         cudaStream_t stream) {
  // SPEC 4.3 as on any composite: only where swa_v2p[v] > 0 (a tombstone is -1, the sink 0).
  std::vector<std::int64_t> freed;
  for (std::int64_t v : vpages)
    if (float_.physical_of(v) > 0) freed.push_back(float_.unbind(v));
  KVTWIN_TRY_STATUS(sides_[1]->unbind(dv, n, true, static_cast<std::int64_t>(freed.size()), stream));
  // SPEC 11: a float never compacts on a free; its freed pages are holes.
  KVTWIN_TRY(const std::int64_t* holes, upload_ids(float_pages_, freed, stream));
  KVTWIN_TRY_STATUS(sides_[1]->add_holes(holes, static_cast<std::int64_t>(freed.size()), stream));
  // Its boundary holes leave the span at once in eager mode, and an empty float becomes a point.
  if (config_->mode == CompactionMode::eager || !float_.live()) return absorb_float(stream);
  return ok_status();
}

Status DeviceAllocator::absorb_float(cudaStream_t stream) {
  const std::vector<std::int64_t> gone = float_.absorb();
  KVTWIN_TRY(const std::int64_t* pages, upload_ids(float_pages_, gone, stream));
  return sides_[1]->absorb(pages, static_cast<std::int64_t>(gone.size()), float_.low(), float_.high(), stream);
}

Status DeviceAllocator::verify_float_copy(const SideSnapshot& device) const {
  const auto broken = [](const std::string& what) {
    return make_error(ErrorKind::internal, "gpu invariant broken: the float's host copy of " + what +
                                               " differs from its device tables");
  };
  if (device.v2p != float_.v2p() || device.p2v != float_.p2v()) return broken("v2p / p2v");
  if (device.span_low != float_.low() || device.watermark != float_.high() || device.allocated != float_.allocated())
    return broken("the span [" + std::to_string(float_.low()) + ", " + std::to_string(float_.high()) + ") and " +
                  std::to_string(float_.allocated()) + " live pages (the device counts [" +
                  std::to_string(device.span_low) + ", " + std::to_string(device.watermark) + ") and " +
                  std::to_string(device.allocated) + ")");
  for (std::size_t p = 0; p < device.hole_flags.size(); ++p)
    if ((device.hole_flags[p] != 0) != (float_.holes().count(static_cast<std::int64_t>(p)) != 0))
      return broken("its holes at page " + std::to_string(p));
  return ok_status();
}

Result<std::vector<std::int64_t>> DeviceAllocator::virtual_pages_of(IdUnit unit, const std::vector<std::int64_t>& ids,
                                                                    std::string_view what) const {
  const std::int64_t ps = static_cast<std::int64_t>(config_->page_size);
  const DeviceSide& full = *sides_[0];
  std::vector<std::int64_t> pages;
  pages.reserve(ids.size());
  for (std::int64_t id : ids) {
    if (id < 0)
      return make_refusal(ErrorKind::out_of_range, reason::negative_id,
                          std::string(what) + ": id " + std::to_string(id) + " is negative; give virtual " +
                              (unit == IdUnit::tokens ? "token" : "page") + " ids");
    pages.push_back(unit == IdUnit::tokens ? id / ps : id);  // SPEC 4 free: v = t // page_size
  }
  // docs/decisions.md: duplicates are allowed (made sorted-unique); the sink and pages below the
  // first usable page are out of range.
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  std::vector<std::int64_t> outside;
  for (std::int64_t v : pages)
    if (v < full.min_page() || v >= full.num_pages()) outside.push_back(v);
  // The smallest page outside names the reason (core/reasons.h).
  if (!outside.empty())
    return make_refusal(ErrorKind::out_of_range,
                        outside.front() < full.min_page() ? reason::reserved_page : reason::past_last_page,
                        std::string(what) + ": virtual pages " + list_ids(outside) + " are outside the usable range [" +
                            std::to_string(full.min_page()) + ", " + std::to_string(full.num_pages()) +
                            ") (page 0 is the sink and is never allocated); free only ids that alloc returned");
  return pages;
}

// ---------------------------------------------------------------- compactions (SPEC 4.1, 4.2)

DeviceAllocator::SideCompaction DeviceAllocator::plan_compaction(std::size_t index, const std::vector<std::int64_t>& freed,
                                                                 const Faults& faults) const {
  SideCompaction plan;
  plan.side = index;
  plan.moves = copy(index).plan_compaction(freed);
  // Fault 11: the holes paired with the survivors in the wrong order.
  if (faults.pairing_out_of_order) std::reverse(plan.moves.destinations.begin(), plan.moves.destinations.end());
  return plan;
}

Status DeviceAllocator::commit_compaction(const SideCompaction& plan, bool clears_holes, const DevicePoolBytes& bytes,
                                          const Faults& faults, cudaStream_t stream) {
  const SideMoves& moves = plan.moves;
  const auto n = static_cast<std::int64_t>(moves.sources.size());
  const std::int64_t* src = nullptr;
  const std::int64_t* dst = nullptr;
  if (n > 0) {
    // The sources, then the destinations, in one upload.
    std::vector<std::int64_t> lists = moves.sources;
    lists.insert(lists.end(), moves.destinations.begin(), moves.destinations.end());
    KVTWIN_TRY(src, upload_ids(compaction_moves_, lists, stream));
    dst = src + n;
  }
  // Each move copies the whole page envelope, then v2p[p2v[src]] = dst, p2v[dst] = v, p2v[src] = -1.
  KVTWIN_TRY_STATUS(bytes.move_pages(plan.side, src, dst, n, faults, stream));
  KVTWIN_TRY_STATUS(sides_[plan.side]->apply_compaction(src, dst, n, moves.new_watermark, clears_holes, stream));
  copy(plan.side).apply(moves, clears_holes);
  return ok_status();
}

void DeviceAllocator::append_moves(Compaction& out, const SideCompaction& plan) const {
  for (std::size_t i = 0; i < plan.moves.sources.size(); ++i)
    out.moves.push_back(PageMove{side_name(plan.side), plan.moves.sources[i], plan.moves.destinations[i]});
}

Result<std::int64_t> DeviceAllocator::unbind_side(std::size_t side, const std::vector<std::int64_t>& vpages,
                                                  const std::int64_t* dv, bool only_positive, bool as_holes,
                                                  cudaStream_t stream) {
  const std::vector<std::int64_t> released = copy(side).unbind(vpages, only_positive);
  const auto n = static_cast<std::int64_t>(released.size());
  KVTWIN_TRY_STATUS(sides_[side]->unbind(dv, static_cast<std::int64_t>(vpages.size()), only_positive, n, stream));
  if (as_holes && n > 0) {  // SPEC 4.2
    KVTWIN_TRY(const std::int64_t* holes, upload_ids(new_holes_, released, stream));
    KVTWIN_TRY_STATUS(sides_[side]->add_holes(holes, n, stream));
    copy(side).add_holes(released);
  }
  return n;
}

// ---------------------------------------------------------------- free, free_swa, flush

Result<DeviceAllocator::FreePlan> DeviceAllocator::plan_free(const std::vector<std::int64_t>& vpages,
                                                            const Faults& faults) const {
  FreePlan plan;
  plan.kind = FreePlan::Kind::free;
  plan.pages = static_cast<std::int64_t>(vpages.size());
  plan.virtual_pages = vpages;
  if (vpages.empty()) return plan;
  // SPEC 4: any v2p[v] < 0 is "double free or never allocated", and nothing changes.
  std::vector<std::int64_t> full_pages, unbound;
  for (std::int64_t v : vpages) {
    const std::int64_t p = copy(0).physical_of(v);
    if (p < 0) unbound.push_back(v);
    full_pages.push_back(p);
  }
  if (!unbound.empty())
    return make_refusal(ErrorKind::double_free, reason::not_allocated,
                        "free: virtual pages " + list_ids(unbound) +
                            " are not allocated (double free or never allocated); nothing was freed");
  const bool eager = config_->mode == CompactionMode::eager;
  if (sides_.size() == 2) {
    // SPEC 4.3: free SWA only where swa_v2p[v] > 0, first.
    std::vector<std::int64_t> swa_pages;
    for (std::int64_t v : vpages) {
      const std::int64_t p = floats() ? float_.physical_of(v) : copy(1).physical_of(v);
      if (p > 0) swa_pages.push_back(p);
    }
    plan.swa_freed = static_cast<std::int64_t>(swa_pages.size());
    if (eager && !floats()) plan.compactions.push_back(plan_compaction(1, swa_pages, faults));  // SPEC 11: a float never compacts on a free
  }
  if (eager) plan.compactions.push_back(plan_compaction(0, full_pages, faults));
  return plan;
}

Result<DeviceAllocator::FreePlan> DeviceAllocator::plan_free_swa(const std::vector<std::int64_t>& vpages,
                                                                const Faults& faults) const {
  FreePlan plan;
  plan.kind = FreePlan::Kind::free_swa;
  plan.pages = static_cast<std::int64_t>(vpages.size());
  plan.virtual_pages = vpages;
  if (vpages.empty()) return plan;
  // docs/decisions.md: a virtual page not allocated, or an SWA page already a tombstone, is a
  // double free; a page not allocated at all names the reason first (core/reasons.h).
  std::vector<std::int64_t> swa_pages, unallocated, tombstoned;
  for (std::int64_t v : vpages) {
    const std::int64_t p = floats() ? float_.physical_of(v) : copy(1).physical_of(v);
    if (copy(0).physical_of(v) < 0)
      unallocated.push_back(v);
    else if (p < 1)
      tombstoned.push_back(v);
    swa_pages.push_back(p);
  }
  if (!unallocated.empty())
    return make_refusal(ErrorKind::double_free, reason::not_allocated,
                        "free_swa: virtual pages " + list_ids(unallocated) + " are not allocated; nothing was freed");
  if (!tombstoned.empty())
    return make_refusal(ErrorKind::double_free, reason::left_window,
                        "free_swa: virtual pages " + list_ids(tombstoned) +
                            " already left the window (their SWA pages are tombstones); nothing was freed");
  if (config_->mode == CompactionMode::eager && !floats())  // SPEC 11: a float never compacts on a free
    plan.compactions.push_back(plan_compaction(1, swa_pages, faults));
  return plan;
}

DeviceAllocator::FreePlan DeviceAllocator::plan_flush(const Faults& faults) const {
  // SPEC 4.2: compacts every side exactly as 4.1, with the holes as the freed pages. SWA side
  // first, as in free.
  FreePlan plan;
  plan.kind = FreePlan::Kind::flush;
  for (std::size_t i = sides_.size(); i-- > 0;) {
    if (sides_[i]->holes() == 0 || sides_[i]->floats()) continue;  // SPEC 11: a float's flush absorbs, moving nothing
    const std::set<std::int64_t>& holes = copy(i).holes();
    plan.compactions.push_back(plan_compaction(i, {holes.begin(), holes.end()}, faults));
  }
  return plan;
}

Result<Compaction> DeviceAllocator::commit(const FreePlan& plan, const DevicePoolBytes& bytes, const Faults& faults,
                                           cudaStream_t stream) {
  Compaction out;
  const bool lazy = config_->mode == CompactionMode::lazy;
  const std::int64_t n = plan.pages;
  switch (plan.kind) {
    case FreePlan::Kind::free: {
      if (n == 0) return out;
      KVTWIN_TRY(const std::int64_t* dv, upload_ids(freed_virtual_, plan.virtual_pages, stream));
      // Commit: SWA side first, then the full side (docs/decisions.md).
      if (floats()) {
        KVTWIN_TRY_STATUS(free_float_pages(plan.virtual_pages, dv, n, stream));
      } else if (sides_.size() == 2) {
        KVTWIN_TRY(const std::int64_t released, unbind_side(1, plan.virtual_pages, dv, true, lazy, stream));
        KVTWIN_CHECK(released == plan.swa_freed, "free: the SWA pages released are the ones planned");
        if (!lazy) {
          KVTWIN_TRY_STATUS(commit_compaction(plan.compactions.front(), false, bytes, faults, stream));
          append_moves(out, plan.compactions.front());
        }
      }
      KVTWIN_TRY(const std::int64_t released, unbind_side(0, plan.virtual_pages, dv, false, lazy, stream));
      KVTWIN_CHECK(released == n, "free: every page planned is released");
      if (!lazy) {
        KVTWIN_TRY_STATUS(commit_compaction(plan.compactions.back(), false, bytes, faults, stream));
        append_moves(out, plan.compactions.back());
      }
      // Freed virtual ids go to the back of the queue, ascending.
      KVTWIN_TRY_STATUS(sides_[0]->put_virtual(dv, n, stream));
      copy(0).put_virtual(plan.virtual_pages);
      break;
    }
    case FreePlan::Kind::free_swa: {
      if (n == 0) return out;
      KVTWIN_TRY(const std::int64_t* dv, upload_ids(freed_virtual_, plan.virtual_pages, stream));
      if (floats()) {
        KVTWIN_TRY_STATUS(free_float_pages(plan.virtual_pages, dv, n, stream));
        break;
      }
      // swa_v2p[v] = -1: a tombstone.
      KVTWIN_TRY(const std::int64_t released, unbind_side(1, plan.virtual_pages, dv, false, lazy, stream));
      KVTWIN_CHECK(released == n, "free_swa: every page planned is released");
      if (!lazy) {
        KVTWIN_TRY_STATUS(commit_compaction(plan.compactions.front(), false, bytes, faults, stream));
        append_moves(out, plan.compactions.front());
      }
      break;
    }
    case FreePlan::Kind::flush:
      if (floats()) KVTWIN_TRY_STATUS(absorb_float(stream));  // SPEC 11: the float's boundary holes leave it
      for (const SideCompaction& c : plan.compactions) {
        KVTWIN_TRY_STATUS(commit_compaction(c, true, bytes, faults, stream));  // a flushed side has no holes left
        append_moves(out, c);
      }
      break;
  }
  return out;  // no synchronization: the answer is known on the host (docs/gpu.md "Synchronization")
}

// ---------------------------------------------------------------- raw moves (SPEC 7)

Result<DeviceAllocator::RawMove> DeviceAllocator::plan_raw_move(std::size_t index, const MovePages& op,
                                                                cudaStream_t stream) {
  const DeviceSide& side = *sides_[index];
  if (op.dst.size() != op.src.size())
    return invalid("move_pages: " + std::to_string(op.dst.size()) + " destinations for " +
                   std::to_string(op.src.size()) + " sources; give one destination per source");
  for (const std::vector<std::int64_t>* list : {&op.src, &op.dst})
    for (std::int64_t page : *list)
      if (page < side.min_page() || page >= side.num_pages())
        return out_of_range("move_pages: page " + std::to_string(page) + " is outside sub-pool '" + op.sub_pool +
                            "''s usable pages [" + std::to_string(side.min_page()) + ", " +
                            std::to_string(side.num_pages()) + "); the sink pages never move");
  std::set<std::int64_t> seen;
  for (const std::vector<std::int64_t>* list : {&op.src, &op.dst})
    for (std::int64_t page : *list)
      if (!seen.insert(page).second)
        return invalid("move_pages: page " + std::to_string(page) +
                       " appears twice; sources and destinations must be disjoint and without repeats");
  RawMove move;
  move.side = index;
  move.pages = static_cast<std::int64_t>(op.dst.size());
  if (move.pages == 0) return move;
  const std::uint64_t page_bytes = side.geometry().page_bytes;
  for (std::size_t i = 0; i < op.dst.size(); ++i) {
    // docs/decisions.md: every dst is an unbound page, and its bytes lie outside the other side's band.
    const std::size_t page = static_cast<std::size_t>(op.dst[i]);
    const std::int64_t owner = side.floats() ? float_.p2v()[page] : copy(index).p2v()[page];
    if (owner >= 0)
      return invalid("move_pages: destination page " + std::to_string(op.dst[i]) + " of sub-pool '" + op.sub_pool +
                     "' is bound to virtual page " + std::to_string(owner) +
                     "; a raw move may only overwrite an unbound page");
    if (sides_.size() == 2) {
      const std::size_t other = 1 - index;
      const std::uint64_t begin = static_cast<std::uint64_t>(op.dst[i]) * page_bytes, end = begin + page_bytes;
      if (begin < band_end_byte(other) && band_begin_byte(other) < end)
        return invalid("move_pages: destination page " + std::to_string(op.dst[i]) + " of sub-pool '" + op.sub_pool +
                       "' overlaps the occupied band of sub-pool '" + side_name(other) +
                       "'; choose a destination in the gap");
    }
  }
  KVTWIN_TRY(move.destinations, upload_ids(raw_move_destinations_, op.dst, stream));
  KVTWIN_TRY(move.sources, upload_ids(raw_move_sources_, op.src, stream));
  return move;
}

// ---------------------------------------------------------------- what a checker compares

Result<std::vector<SideSnapshot>> DeviceAllocator::snapshots(cudaStream_t stream) const {
  std::vector<SideSnapshot> out;
  for (const auto& side : sides_) {
    KVTWIN_TRY(SideSnapshot s, side->snapshot(sides_[0]->min_page(), stream));
    out.push_back(std::move(s));
  }
  return out;
}

PoolTables DeviceAllocator::tables_of(std::vector<SideSnapshot>&& snapshots) const {
  PoolTables out;
  // Each side's queue and holes read off its snapshot (side_tables_of).
  for (std::size_t i = 0; i < snapshots.size(); ++i) out.sides.push_back(side_tables_of(side_name(i), std::move(snapshots[i])));
  return out;
}

Result<PoolTables> DeviceAllocator::tables(cudaStream_t stream) const {
  KVTWIN_TRY(std::vector<SideSnapshot> s, snapshots(stream));
  return tables_of(std::move(s));
}

Result<std::uint64_t> DeviceAllocator::add_tables_digest_terms(unsigned long long* sum, cudaStream_t stream,
                                                               const DeviceStatePool* state) const {
  std::vector<DigestRanges> device_rows;
  const std::uint64_t host_terms = tables_digest_rows(device_rows, state);
  KVTWIN_TRY_STATUS(launch_tables_digest(device_rows, sum, stream));
  return host_terms;
}

std::uint64_t DeviceAllocator::tables_digest_rows(std::vector<DigestRanges>& device_rows,
                                                  const DeviceStatePool* state) const {
  std::uint64_t host_terms = 0;
  device_rows.clear();
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    device_rows.push_back(sides_[i]->digest_ranges(i));
    host_terms += sides_[i]->digest_counter_terms(i);
  }
  if (state != nullptr) {
    device_rows.push_back(state->digest_ranges());
    host_terms += state->digest_host_terms();
  }
  return host_terms;
}

Result<std::uint64_t> DeviceAllocator::tables_digest(cudaStream_t stream, const DeviceStatePool* state) const {
  KVTWIN_TRY_STATUS(digest_sum_.reserve(1));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(digest_sum_.get(), 0, sizeof(unsigned long long), stream));
  KVTWIN_TRY(const std::uint64_t host_terms, add_tables_digest_terms(digest_sum_.get(), stream, state));
  unsigned long long device_terms = 0;
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(&device_terms, digest_sum_.get(), sizeof device_terms, cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_SYNC(stream);
  return static_cast<std::uint64_t>(device_terms) + host_terms;
}

Status DeviceAllocator::verify(cudaStream_t stream, PoolTables* tables_read) const {
  KVTWIN_TRY(std::vector<SideSnapshot> s, snapshots(stream));
  KVTWIN_TRY_STATUS(check_device_sides(s, config_->mode == CompactionMode::lazy));
  // The host copies every plan is made from, against the tables they must mirror.
  for (std::size_t i = 0; i < sides_.size(); ++i)
    KVTWIN_TRY_STATUS(sides_[i]->floats() ? verify_float_copy(s[i]) : check_side_copy(copy(i), s[i]));
  if (tables_read != nullptr) *tables_read = tables_of(std::move(s));
  return ok_status();
}
}  // namespace kvtwin::gpu
