// The pinned host arena (host_arena.h). Comments cite the SPEC.md section 8 rule or the
// docs/host_arena.md decision each branch implements.
#include "gpu/host_arena.h"

#include <algorithm>
#include <cstring>

#include "core/reasons.h"
#include "gpu/cuda_check.h"

namespace kvtwin::gpu {
namespace {

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

std::string ids_text(const std::vector<std::int64_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < 16; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 16) out += ", ... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

}  // namespace

void PinnedHostArena::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  sides_.clear();
  leases_.clear();
  event_leases_.clear();
  bytes_.reset();
  maps_.reset();
  device_maps_.clear();
  device_bytes_ = nullptr;
  page_num_ = 0;
  total_bytes_ = 0;
}

Status PinnedHostArena::init(std::uint64_t total_bytes, std::vector<HostArenaSide> sides, bool with_bytes) {
  reset();
  std::lock_guard<std::mutex> lock(mutex_);
  sides_.clear();
  leases_.clear();
  event_leases_.clear();
  bytes_.reset();
  maps_.reset();
  device_maps_.clear();
  device_bytes_ = nullptr;
  page_num_ = 0;
  total_bytes_ = total_bytes;
  if (sides.empty() || sides.size() > 2)
    return invalid("a host arena holds the sides of one device pool: 1 or 2, not " + std::to_string(sides.size()));
  std::uint64_t max_page_bytes = 0;
  for (const HostArenaSide& s : sides) {
    if (s.page_bytes == 0) return invalid("host arena side '" + s.name + "' has pages of 0 bytes");
    max_page_bytes = std::max(max_page_bytes, s.page_bytes);
  }
  // SPEC 8: page_num = total // max(page_bytes) host pages in each side's numbering.
  const std::uint64_t pages = total_bytes / max_page_bytes;
  if (pages == 0)
    return make_error(ErrorKind::sizing, "a host arena of " + std::to_string(total_bytes) + " bytes holds no page of " +
                                             std::to_string(max_page_bytes) + " bytes; give host_bytes at least that");
  for (std::size_t i = 0; i < sides.size(); ++i) {
    Side s;
    s.name = sides[i].name;
    s.grows_up = i == 0;  // side 0 grows up, side 1 grows down (docs/host_arena.md)
    s.page_bytes = sides[i].page_bytes;
    s.to_physical.assign(pages, -1);
    s.to_logical.assign(pages, -1);
    for (std::uint64_t l = 0; l < pages; ++l) s.free_ids.insert(static_cast<std::int64_t>(l));
    s.watermark = s.grows_up ? 0 : static_cast<std::int64_t>(pages) - 1;
    sides_.push_back(std::move(s));
  }
  if (with_bytes) {
    // One pinned, mapped allocation carved by the arena: page p of side s at byte p * page_bytes_s.
    KVTWIN_TRY_STATUS(bytes_.allocate(total_bytes, cudaHostAllocMapped));
    std::memset(bytes_.get(), 0, total_bytes);
    void* device = nullptr;
    KVTWIN_CUDA_TRY(cudaHostGetDevicePointer(&device, bytes_.get(), 0));
    device_bytes_ = static_cast<std::uint8_t*>(device);
    // The logical -> physical maps, mirrored where a resolve kernel reads them.
    KVTWIN_TRY_STATUS(maps_.allocate(pages * sides_.size(), cudaHostAllocMapped));
    std::fill(maps_.get(), maps_.get() + maps_.size(), std::int64_t{-1});
    void* device_maps = nullptr;
    KVTWIN_CUDA_TRY(cudaHostGetDevicePointer(&device_maps, maps_.get(), 0));
    for (std::size_t s = 0; s < sides_.size(); ++s)
      device_maps_.push_back(static_cast<const std::int64_t*>(device_maps) + s * pages);
  }
  page_num_ = static_cast<std::int64_t>(pages);
  return ok_status();
}

void PinnedHostArena::map(std::size_t side, std::int64_t logical, std::int64_t physical) {
  Side& s = sides_[side];
  s.to_physical[static_cast<std::size_t>(logical)] = physical;
  s.to_logical[static_cast<std::size_t>(physical)] = logical;
  if (maps_.get() != nullptr) maps_.get()[side * static_cast<std::size_t>(page_num_) + logical] = physical;
}

void PinnedHostArena::unmap_physical(std::size_t side, std::int64_t physical) {
  Side& s = sides_[side];
  const std::int64_t logical = s.to_logical[static_cast<std::size_t>(physical)];
  s.to_logical[static_cast<std::size_t>(physical)] = -1;
  if (logical >= 0) {
    s.to_physical[static_cast<std::size_t>(logical)] = -1;
    if (maps_.get() != nullptr) maps_.get()[side * static_cast<std::size_t>(page_num_) + logical] = -1;
  }
}

// ---------------------------------------------------------------- room (SPEC 8)

std::uint64_t PinnedHostArena::gap_now() const {
  const Side& up = sides_.front();
  const std::uint64_t up_end = static_cast<std::uint64_t>(up.watermark) * up.page_bytes;
  const std::uint64_t down_begin = sides_.size() == 2
                                       ? static_cast<std::uint64_t>(sides_.back().watermark + 1) * sides_.back().page_bytes
                                       : static_cast<std::uint64_t>(page_num_) * up.page_bytes;
  KVTWIN_CHECK(up_end <= down_begin, "the host bands never overlap");
  return down_begin - up_end;
}

bool PinnedHostArena::fits_now(const std::vector<std::uint64_t>& k) const {
  // Each side has the logical ids, and the pages beyond its holes fit the gap together.
  std::uint64_t bytes = 0;
  for (std::size_t s = 0; s < sides_.size(); ++s) {
    if (k[s] > sides_[s].free_ids.size()) return false;
    const std::uint64_t beyond = k[s] > sides_[s].holes.size() ? k[s] - sides_[s].holes.size() : 0;
    bytes += beyond * sides_[s].page_bytes;  // at most page_num pages per side: no overflow
  }
  return bytes <= gap_now();
}

bool PinnedHostArena::fits_packed(const std::vector<std::uint64_t>& k) const {
  // Once packed: up [0, live_up), down [page_num - live_down, page_num).
  const Side& up = sides_.front();
  const std::uint64_t up_end = up.live * up.page_bytes;
  const std::uint64_t down_begin = sides_.size() == 2
                                       ? (static_cast<std::uint64_t>(page_num_) - sides_.back().live) * sides_.back().page_bytes
                                       : static_cast<std::uint64_t>(page_num_) * up.page_bytes;
  std::uint64_t bytes = 0;
  for (std::size_t s = 0; s < sides_.size(); ++s) {
    if (k[s] > sides_[s].free_ids.size()) return false;
    bytes += k[s] * sides_[s].page_bytes;
  }
  return up_end <= down_begin && bytes <= down_begin - up_end;
}

Status PinnedHostArena::gate_compaction(HostThread thread, HostWait wait, const Faults& faults,
                                        std::unique_lock<std::mutex>& lock) {
  // docs/host_arena.md's gates, in order: the caller's own lease; another thread's; a transfer
  // whose finish event is recorded and not yet settled.
  if (const auto own = leases_.find(thread); own != leases_.end())
    return invalid("host_alloc by thread " + std::to_string(thread) +
                   " fits only once the host arena is compacted, but that thread holds a lease (depth " +
                   std::to_string(own->second) + "), and a compaction waits for every lease: release it first");
  if (wait == HostWait::block) {
    // SPEC 8: compaction waits for every recorded transfer event (synchronized here, which lets
    // go of the leases the events hold) and for every thread's lease.
    while (!event_leases_.empty() || !leases_.empty()) {
      if (!event_leases_.empty() && !faults.compaction_ignores_transfers) {
        // Synchronized with the mutex held: an event's owner settles it (and only then destroys
        // it) through the arena, so none is destroyed while this waits on it.
        for (const auto& [event, depth] : event_leases_) KVTWIN_CUDA_TRY(cudaEventSynchronize(event));
        event_leases_.clear();
        continue;
      }
      if (faults.compaction_ignores_transfers) event_leases_.clear();  // fault 20: forgets the copies in flight
      if (!leases_.empty()) leases_released_.wait(lock);
    }
    return ok_status();
  }
  if (!leases_.empty())
    return make_refusal(ErrorKind::reader_conflict, reason::lease_held,
                        "host_alloc by thread " + std::to_string(thread) +
                            " fits only once the host arena is compacted, and a compaction would wait for the lease "
                            "of thread " + std::to_string(leases_.begin()->first) + "; retry once it is released");
  // Fault 20: the compaction goes ahead with copies in flight.
  if (!event_leases_.empty() && !faults.compaction_ignores_transfers)
    return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                        "host_alloc by thread " + std::to_string(thread) +
                            " fits only once the host arena is compacted, and " +
                            std::to_string(event_leases_.size()) +
                            " transfer(s) still in flight hold host pages; wait for them (transfer_wait) and retry");
  return ok_status();
}

// ---------------------------------------------------------------- alloc_many, free

Result<Outcome> PinnedHostArena::alloc_many(HostThread thread, const std::vector<std::uint64_t>& k, HostWait wait,
                                            const Faults& faults) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (k.size() != sides_.size())
    return invalid("host_alloc takes one page count per side of the host arena (" + std::to_string(sides_.size()) +
                   "), not " + std::to_string(k.size()));
  HostGrant grant;
  // SPEC 8: fits as it stands -> allocate; fits once packed -> compact every side, then
  // allocate; else no room, nothing changed.
  if (!fits_now(k)) {
    if (!fits_packed(k)) return Outcome(NoRoom{});
    KVTWIN_TRY_STATUS(gate_compaction(thread, wait, faults, lock));
    if (!fits_packed(k)) return Outcome(NoRoom{});  // (only when it waited: others allocated meanwhile)
    // Pack every side against its end in physical order; a page in place stays. Each move's
    // destination is free when it runs (docs/host_arena.md), so the bytes move one by one.
    for (std::size_t si = 0; si < sides_.size(); ++si) {
      Side& s = sides_[si];
      const bool up = s.grows_up;
      std::int64_t dst = up ? 0 : page_num_ - 1;
      for (std::int64_t src = up ? 0 : page_num_ - 1; up ? src < s.watermark : src > s.watermark; src += up ? 1 : -1) {
        const std::int64_t logical = s.to_logical[static_cast<std::size_t>(src)];
        if (logical < 0) continue;
        if (src != dst) {
          KVTWIN_CHECK(s.to_logical[static_cast<std::size_t>(dst)] < 0, "a host compaction moves a page to a free one");
          if (bytes_.get() != nullptr)
            std::memmove(bytes_.get() + static_cast<std::uint64_t>(dst) * s.page_bytes,
                         bytes_.get() + static_cast<std::uint64_t>(src) * s.page_bytes, s.page_bytes);
          unmap_physical(si, src);
          map(si, logical, dst);
          grant.moves.push_back(PageMove{s.name, src, dst});
        }
        dst += up ? 1 : -1;
      }
      s.watermark = dst;
      s.holes.clear();
    }
  }
  for (std::size_t si = 0; si < sides_.size(); ++si) {
    Side& s = sides_[si];
    std::vector<std::int64_t> logical, physical;
    // Logical ids lowest first; physical pages from the holes first (up ascending, down
    // descending), then the watermark outward.
    for (std::uint64_t i = 0; i < k[si]; ++i) {
      const std::int64_t l = *s.free_ids.begin();
      s.free_ids.erase(s.free_ids.begin());
      std::int64_t p = 0;
      if (!s.holes.empty()) {
        auto hole = s.grows_up ? s.holes.begin() : std::prev(s.holes.end());
        p = *hole;
        s.holes.erase(hole);
      } else {
        p = s.watermark;
        s.watermark += s.grows_up ? 1 : -1;
      }
      map(si, l, p);
      logical.push_back(l);
      physical.push_back(p);
    }
    s.live += k[si];
    grant.logical.push_back(std::move(logical));
    grant.physical.push_back(std::move(physical));
  }
  KVTWIN_CHECK(gap_now() <= total_bytes_, "an allocation keeps both host bands inside the arena");
  HostAllocated out;
  out.logical = std::move(grant.logical);
  out.physical = std::move(grant.physical);
  out.moves = std::move(grant.moves);
  return Outcome(std::move(out));
}

Status PinnedHostArena::free(std::size_t side, const std::vector<std::int64_t>& logical) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (side >= sides_.size())
    return invalid("the host arena has " + std::to_string(sides_.size()) + " side(s); there is no side " +
                   std::to_string(side));
  Side& s = sides_[side];
  // Sorted unique, every id checked before anything changes (docs/host_arena.md).
  std::vector<std::int64_t> ids = logical;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<std::int64_t> negative, past, unallocated;
  for (std::int64_t l : ids) {
    if (l < 0) negative.push_back(l);
    else if (l >= page_num_) past.push_back(l);
    else if (s.to_physical[static_cast<std::size_t>(l)] < 0) unallocated.push_back(l);
  }
  const std::string who = "host_free of side '" + s.name + "' ids ";
  if (!negative.empty())
    return make_refusal(ErrorKind::out_of_range, reason::negative_id, who + ids_text(negative) + ": ids are 0 or more");
  if (!past.empty())
    return make_refusal(ErrorKind::out_of_range, reason::past_last_page,
                        who + ids_text(past) + ": the side has " + std::to_string(page_num_) + " host pages");
  if (!unallocated.empty())
    return make_refusal(ErrorKind::double_free, reason::not_allocated,
                        who + ids_text(unallocated) + ": not allocated (double free or never allocated); nothing was freed");
  for (std::int64_t l : ids) {
    const std::int64_t p = s.to_physical[static_cast<std::size_t>(l)];
    unmap_physical(side, p);
    s.holes.insert(p);    // SPEC 8: physical pages may have holes
    s.free_ids.insert(l); // SPEC 8: free merges logical extents (a set has nothing to merge)
  }
  s.live -= ids.size();
  // SPEC 8: the watermark moves back past adjacent holes.
  if (s.grows_up) {
    while (s.watermark > 0 && s.holes.erase(s.watermark - 1) == 1) --s.watermark;
  } else {
    while (s.watermark < page_num_ - 1 && s.holes.erase(s.watermark + 1) == 1) ++s.watermark;
  }
  return ok_status();
}

// ---------------------------------------------------------------- leases and events (SPEC 8)

void PinnedHostArena::acquire(HostThread thread) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++leases_[thread];  // per thread and reentrant: a nested acquire deepens
}

Status PinnedHostArena::release(HostThread thread) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = leases_.find(thread);
  if (it == leases_.end())
    return invalid("lease_release by thread " + std::to_string(thread) +
                   ", which holds no lease: every release pairs with an earlier acquire on the same thread");
  if (--it->second == 0) {
    leases_.erase(it);
    leases_released_.notify_all();
  }
  return ok_status();
}

std::uint64_t PinnedHostArena::lease_depth(HostThread thread) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = leases_.find(thread);
  return it == leases_.end() ? 0 : it->second;
}

Result<std::int64_t> PinnedHostArena::resolve(HostThread thread, std::size_t side, std::int64_t logical) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (leases_.count(thread) == 0)
    return invalid("host id " + std::to_string(logical) + " resolved by thread " + std::to_string(thread) +
                   " outside a lease: acquire the lease first and keep it until the copy has completed");
  if (side >= sides_.size() || logical < 0 || logical >= page_num_)
    return make_error(ErrorKind::out_of_range, "host id " + std::to_string(logical) + " is outside the arena");
  const std::int64_t p = sides_[side].to_physical[static_cast<std::size_t>(logical)];
  if (p < 0) return invalid("host id " + std::to_string(logical) + " is not allocated");
  return p;
}

bool PinnedHostArena::allocated(std::size_t side, std::int64_t logical) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return side < sides_.size() && logical >= 0 && logical < page_num_ &&
         sides_[side].to_physical[static_cast<std::size_t>(logical)] >= 0;
}

Status PinnedHostArena::hand_lease_to_event(HostThread thread, cudaEvent_t finish) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = leases_.find(thread);
  KVTWIN_CHECK(it != leases_.end(), "a transfer hands over a lease it took");
  ++event_leases_[finish];
  if (--it->second == 0) {
    leases_.erase(it);
    leases_released_.notify_all();
  }
  return ok_status();
}

Status PinnedHostArena::settle(cudaEvent_t finish) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Compaction may have synchronized and settled it already (HostWait::block).
  event_leases_.erase(finish);
  return ok_status();
}

std::size_t PinnedHostArena::events_in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return event_leases_.size();
}

Status PinnedHostArena::verify() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto broken = [](const std::string& what) { return make_error(ErrorKind::internal, "host arena invariant broken: " + what); };
  for (std::size_t si = 0; si < sides_.size(); ++si) {
    const Side& s = sides_[si];
    const std::int64_t begin = s.grows_up ? 0 : s.watermark + 1;
    const std::int64_t end = s.grows_up ? s.watermark : page_num_;
    std::uint64_t live = 0;
    for (std::int64_t l = 0; l < page_num_; ++l) {
      const std::int64_t p = s.to_physical[static_cast<std::size_t>(l)];
      const bool free = s.free_ids.count(l) != 0;
      if ((p < 0) != free) return broken("side '" + s.name + "' logical " + std::to_string(l) + " is both or neither free and mapped");
      if (maps_.get() != nullptr && maps_.get()[si * static_cast<std::size_t>(page_num_) + l] != p)
        return broken("side '" + s.name + "' logical " + std::to_string(l) + ": the device mirror disagrees");
      if (p < 0) continue;
      if (p < begin || p >= end || s.to_logical[static_cast<std::size_t>(p)] != l)
        return broken("side '" + s.name + "' logical " + std::to_string(l) + " -> physical " + std::to_string(p));
      ++live;
    }
    if (live != s.live) return broken("side '" + s.name + "' live count");
    for (std::int64_t p = begin; p < end; ++p)
      if ((s.to_logical[static_cast<std::size_t>(p)] < 0) != (s.holes.count(p) != 0))
        return broken("side '" + s.name + "' hole " + std::to_string(p));
    if (begin < end && s.to_logical[static_cast<std::size_t>(s.grows_up ? end - 1 : begin)] < 0)
      return broken("side '" + s.name + "': the page next to the watermark is a hole");
  }
  (void)gap_now();
  return ok_status();
}

}  // namespace kvtwin::gpu
