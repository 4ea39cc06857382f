// The host arena of SPEC.md section 8 on the CUDA side: one pinned host allocation
// (cudaHostAlloc, mapped, so that a copy kernel reads and writes it through its device pointer)
// shared by the full and SWA sides of one device pool, carved by the arena into each side's page
// envelopes from opposite ends; the allocator tables on the host (where the caches that hold
// logical ids live); per-thread reentrant leases; and the finish events of the transfers that
// resolved physical host pages, each holding the lease its transfer handed it until the event
// completes. Compaction synchronizes with every recorded event before it moves a pinned page.
//
// The policy is docs/host_arena.md's (sim/host_arena.h defines it); this is an independent
// implementation sharing nothing with sim/: the free logical ids are an ordered set, not extents;
// the tables are plain vectors; the logical -> physical map of each side is mirrored in mapped
// pinned memory so that a transfer resolves ids on the device, on its copy stream, after it has
// waited for its producer (transfers.h).
//
// Threads are real here: every public method takes the arena's mutex. alloc_many refuses, as the
// model does, a compaction that would have to wait (HostWait::refuse, what the pool's operations
// use), or waits for it (HostWait::block: the stress test's allocating thread): it synchronizes
// every recorded event, which lets go of the leases they hold, and waits for the threads' own
// leases to be released.
//
// Fault switch compaction_ignores_transfers (20, faults.h) lives here (and in the pool's device
// moves): compaction runs without synchronizing the recorded events and without refusing for
// transfers still in flight.
//
// What it does not cover: the copies (transfers.h), which device pages a transfer takes (the
// pool's operations), stored pages and format tags.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/op.h"
#include "core/result.h"
#include "gpu/faults.h"
#include "gpu/pinned_buffer.h"

namespace kvtwin::gpu {

using HostThread = std::uint32_t;

struct HostArenaSide {
  std::string name;             // the device sub-pool's ("full", "swa", "mla")
  std::uint64_t page_bytes = 0; // its device page envelope, page_size * E
};

// Whether a compaction that must wait for leases or transfers refuses (as the model) or waits.
enum class HostWait { refuse, block };

// A fitting alloc_many (core/op.h's HostAllocated, with side indices).
struct HostGrant {
  std::vector<std::vector<std::int64_t>> logical;   // per side, ascending
  std::vector<std::vector<std::int64_t>> physical;  // physical[s][i] holds logical[s][i]
  std::vector<PageMove> moves;                      // the compaction's, in the order they ran
};

class PinnedHostArena {
 public:
  // `total_bytes` of pinned, mapped host memory (none when `with_bytes` is false: tables only),
  // and the tables of each side (SPEC 8: page_num = total // max(page_bytes) pages per side).
  Status init(std::uint64_t total_bytes, std::vector<HostArenaSide> sides, bool with_bytes);
  void reset();  // no arena
  bool built() const { return page_num_ > 0; }

  std::size_t side_count() const { return sides_.size(); }
  std::int64_t page_num() const { return page_num_; }
  std::uint64_t page_bytes(std::size_t side) const { return sides_[side].page_bytes; }
  const std::string& side_name(std::size_t side) const { return sides_[side].name; }
  // The pinned bytes (host and device addresses of the same memory); null when tables only.
  std::uint8_t* host_bytes() const { return bytes_.get(); }
  std::uint8_t* device_bytes() const { return device_bytes_; }
  // Side s's logical -> physical map, as the device reads it (mapped pinned, page_num rows, -1 free).
  // Null for a tables-only arena (no bytes, so no mirrored maps) or a side it does not have.
  const std::int64_t* device_logical_to_physical(std::size_t side) const {
    return side < device_maps_.size() ? device_maps_[side] : nullptr;
  }

  // SPEC 8 alloc_many; NoRoom as core's outcome. Errors as docs/host_arena.md's gates, with the
  // reason codes of the vocabulary (lease_held, transfer_in_flight).
  Result<Outcome> alloc_many(HostThread thread, const std::vector<std::uint64_t>& pages_per_side, HostWait wait,
                             const Faults& faults);
  Status free(std::size_t side, const std::vector<std::int64_t>& logical);

  void acquire(HostThread thread);
  Status release(HostThread thread);
  std::uint64_t lease_depth(HostThread thread) const;

  // logical -> physical inside a lease held by `thread` (host side; transfers resolve on the device).
  Result<std::int64_t> resolve(HostThread thread, std::size_t side, std::int64_t logical) const;
  bool allocated(std::size_t side, std::int64_t logical) const;

  // A transfer that resolved physical host pages hands one level of `thread`'s lease to its
  // finish event (recorded already): the lease is held until settle(event).
  Status hand_lease_to_event(HostThread thread, cudaEvent_t finish);
  // The event completed (its transfer was waited for): its lease is let go.
  Status settle(cudaEvent_t finish);
  std::size_t events_in_flight() const;

  // Every invariant of the tables, from scratch (internal errors name the first broken one).
  Status verify() const;

 private:
  struct Side {
    std::string name;
    bool grows_up = true;
    std::uint64_t page_bytes = 0;
    std::vector<std::int64_t> to_physical;  // logical -> physical, -1 free (the pinned mirror follows it)
    std::vector<std::int64_t> to_logical;   // physical -> logical, -1 unmapped
    std::set<std::int64_t> free_ids;        // free logical ids (taken lowest first)
    std::set<std::int64_t> holes;           // unmapped physical pages inside the band
    std::int64_t watermark = 0;             // up: band [0, wm); down: band (wm, page_num - 1]
    std::uint64_t live = 0;
  };
  bool fits_now(const std::vector<std::uint64_t>& k) const;
  bool fits_packed(const std::vector<std::uint64_t>& k) const;
  std::uint64_t gap_now() const;
  Status gate_compaction(HostThread thread, HostWait wait, const Faults& faults, std::unique_lock<std::mutex>& lock);
  void map(std::size_t side, std::int64_t logical, std::int64_t physical);
  void unmap_physical(std::size_t side, std::int64_t physical);

  mutable std::mutex mutex_;
  std::condition_variable leases_released_;
  std::uint64_t total_bytes_ = 0;
  std::int64_t page_num_ = 0;
  std::vector<Side> sides_;
  std::map<HostThread, std::uint64_t> leases_;     // depth > 0 only
  std::map<cudaEvent_t, std::uint64_t> event_leases_;  // finish event -> lease levels it holds
  PinnedBuffer<std::uint8_t> bytes_;
  std::uint8_t* device_bytes_ = nullptr;
  PinnedBuffer<std::int64_t> maps_;                // every side's logical -> physical mirror, page_num rows each
  std::vector<const std::int64_t*> device_maps_;
};

}  // namespace kvtwin::gpu
