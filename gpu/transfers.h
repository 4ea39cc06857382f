// Host transfers on the GPU (SPEC.md section 8; the vocabulary of core/op.h): offload (device
// pages -> pinned host pages) and load-back (host pages -> newly allocated device pages), each
// started by one operation and completed by transfer_wait, and the events that order them.
//
// How a transfer runs, in SPEC 8's order: (1) its producers: an event recorded on the compute
// stream now (the model's compute stream is synchronous, so a transfer sees every earlier
// operation), the event it names (wait_event) and the last transfer of its own stream (streams are
// FIFO); (2) it takes the arena's lease on its thread; (3) on its copy stream, it waits for the
// producers and only then resolves its ids on the device (device virtual -> physical through v2p,
// host logical -> physical through the arena's mapped map); (4) it copies; (5) it records its
// finish event and hands the lease to it (PinnedHostArena::hand_lease_to_event). transfer_wait
// synchronizes that event and lets the lease go.
//
// Every trace stream >= 1 has two CUDA copy streams, one per direction (a D2H and an H2D copy
// run on different copy engines), chained by the stream's last finish event so that its
// transfers stay in submission order; past eight trace streams they share the pairs.
//
// The copy: CopyMechanism::copy_kernel (default) runs one kernel over the resolved lists that
// reads and writes the pinned arena through its device pointer (mapped memory), so nothing waits
// on the host; CopyMechanism::memcpy_batch resolves on the device too, then waits for that
// (one copy-stream synchronization), coalesces runs of pages contiguous on both sides and issues
// them as one cudaMemcpyBatchAsync. KVTWIN_GPU_COPY=kernel|batch selects; gpu_bench measures
// both against one pinned cudaMemcpyAsync of the same bytes. Measured on the H200 (one run,
// 64 scattered pages, fraction of that cudaMemcpyAsync): 2 MiB pages, offload kernel 0.96 / batch
// 1.00, load-back kernel 0.91 / batch 0.99; 64 KiB pages, offload kernel 0.91 / batch 0.96,
// load-back kernel 0.89 / batch 0.96; one cudaMemcpyAsync per page (today's engines) 0.36 and
// 0.31 at 64 KiB. The batch is a few points faster, but it must bring the resolved ids back to
// the host first (a copy-stream synchronization per transfer, so the submitting thread waits for
// the producers); the kernel meets the targets (0.90 at 2 MiB, 0.85 at 64 KiB) without the host
// ever waiting, which is what lets transfers overlap the doors: it stays the default.
//
// While a transfer is in flight (started, not waited), the rules of the vocabulary hold (the
// pool's operations ask this unit): its device pages do not move and are not freed or written,
// a load-back's pages are not read or offloaded, its host pages are not freed, no host
// compaction runs, and a transfer that touches a host page an in-flight offload writes (or an
// offload writing a page another transfer uses) must be ordered after it (same stream, or a
// wait_event that captured it); otherwise reader_conflict with reason transfer_in_flight.
//
// Fault switches that live here: transfer_before_producer_event (13: the copy is enqueued before
// the waits for its producers), transfer_logical_as_physical (19: host logical ids taken as
// physical pages, transfer_kernels.cuh), swa_offload_token_filter (21: the SWA offload selects
// single bound tokens instead of whole pages).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/op.h"
#include "core/pool_config.h"
#include "gpu/device_allocator.h"
#include "gpu/device_buffer.h"
#include "gpu/faults.h"
#include "gpu/host_arena.h"
#include "gpu/pinned_buffer.h"
#include "gpu/pool_bytes.h"

namespace kvtwin::gpu {

enum class CopyMechanism { copy_kernel, memcpy_batch };
// KVTWIN_GPU_COPY=batch -> memcpy_batch; anything else (or unset) -> copy_kernel.
CopyMechanism copy_mechanism_from_environment();

class HostTransfers {
 public:
  HostTransfers() = default;
  ~HostTransfers();
  HostTransfers(const HostTransfers&) = delete;
  HostTransfers& operator=(const HostTransfers&) = delete;

  // Forgets every transfer, stream and event (waiting for every copy first). `config` and
  // `derived` must outlive the unit.
  Status init(const PoolConfig& config, const PoolDerived& derived);
  void reset();
  void set_mechanism(CopyMechanism mechanism) { mechanism_ = mechanism; }
  CopyMechanism mechanism() const { return mechanism_; }

  Status record_event(const RecordEvent& op, cudaStream_t compute);
  Result<Outcome> offload(const Offload& op, const DeviceAllocator& allocator, const DevicePoolBytes& bytes,
                          PinnedHostArena& arena, const Faults& faults, cudaStream_t compute);
  // Allocates the device pages through `alloc` (as the alloc operation does), then copies.
  Result<Outcome> load_back(const LoadBack& op, DeviceAllocator& allocator, const DevicePoolBytes& bytes,
                            PinnedHostArena& arena, const Faults& faults, cudaStream_t compute);
  Status wait(const TransferWait& op, PinnedHostArena& arena);
  // A checkpoint: every copy lands (the copy streams synchronized); the transfers stay in flight.
  Status land_all();

  // What the pool's operations ask (rule 8): the first in-flight transfer holding it, if any.
  bool any_in_flight() const { return !in_flight_.empty(); }
  std::optional<std::uint32_t> holding_virtual(std::int64_t vpage) const;
  // The transfer copying virtual page `vpage`'s page on device side `side` (any direction), or an
  // offload of it.
  std::optional<std::uint32_t> holding_virtual_on(std::size_t side, std::int64_t vpage) const;
  std::optional<std::uint32_t> offloading_virtual_on(std::size_t side, std::int64_t vpage) const;
  std::optional<std::uint32_t> loading_virtual(std::int64_t vpage) const;
  // The transfer whose copy covers a byte of physical page `ppage` of device side `side`, seen in
  // any side's pages (the pool is one buffer: an unbound page of one side overlaps pages of the
  // other); reads ask for load-backs only. The model's transfer_covering_page (sim/model.h).
  std::optional<std::uint32_t> covering_physical(std::size_t side, std::int64_t ppage, bool load_backs_only) const;  // a load-back's: not readable yet
  std::optional<std::uint32_t> holding_physical(std::size_t side, std::int64_t ppage) const;
  std::optional<std::uint32_t> holding_host(std::size_t side, std::int64_t logical) const;
  bool is_load_back(std::uint32_t transfer) const;

 private:
  struct Lane {  // one trace stream; its CUDA streams are one of copy_streams_' pairs (not owned)
    cudaStream_t to_host = nullptr;
    cudaStream_t to_device = nullptr;
    cudaEvent_t last = nullptr;  // the finish event of its last transfer (not owned)
  };
  struct Transfer {
    std::uint32_t id = 0;
    bool offload = true;
    std::uint32_t stream = 0;
    std::uint64_t sequence = 0;                        // submission order, unique for the pool's life
    std::vector<std::int64_t> virtual_pages;           // ascending (offload) or in binding order (load-back)
    std::vector<std::vector<std::int64_t>> physical;   // per device side: the pages copied (-1: none)
    std::vector<std::vector<std::int64_t>> host;       // per host side: the logical pages (-1: none)
    std::set<std::uint64_t> after;                     // sequences it is ordered after, closed at its start
    cudaEvent_t finish = nullptr;
    std::vector<DeviceBuffer<std::int64_t>> lists;     // per side: [virtual | host logical | device | host]
  };
  struct Recorded {
    std::vector<cudaEvent_t> events;   // what a waiter waits on (owned: recorded for this id)
    std::set<std::uint64_t> captured;  // sequences of the transfers it captured, transitively
  };
  Result<Lane*> lane(std::uint32_t stream);
  Status check_start(std::uint32_t transfer, std::uint32_t stream, const std::optional<std::uint32_t>& wait_event) const;
  // Rule 7: every in-flight transfer this one races with on a host page is ordered before it.
  Status check_races(bool offload, const std::vector<std::vector<std::int64_t>>& host, std::uint32_t stream,
                     const std::set<std::uint64_t>& after) const;
  // By sequence, never by id: an id used again after its transfer_wait is another transfer (the
  // model's rule, sim/transfers.h).
  std::set<std::uint64_t> ordered_after(std::uint32_t stream, const std::optional<std::uint32_t>& wait_event) const;
  // Steps (1) to (5) for side `side` of a transfer whose lists are set (the lease is taken here).
  Status submit(Transfer& t, const std::optional<std::uint32_t>& wait_event, std::uint32_t thread,
                const DeviceAllocator& allocator, const DevicePoolBytes& bytes, PinnedHostArena& arena,
                const Faults& faults, cudaStream_t compute);
  Status copy_side(Transfer& t, std::size_t side, cudaStream_t copy, const DeviceAllocator& allocator,
                   const DevicePoolBytes& bytes, PinnedHostArena& arena, const Faults& faults,
                   bool slow_producer);  // fault 13's delay, right before the copy

  const PoolConfig* config_ = nullptr;
  const PoolDerived* derived_ = nullptr;
  CopyMechanism mechanism_ = copy_mechanism_from_environment();
  std::map<std::uint32_t, Lane> lanes_;
  // The CUDA copy streams, one pair per trace stream up to kCopyStreamPairs; trace streams past
  // that share a pair (more order than a trace asks for, which changes no result).
  static constexpr std::size_t kCopyStreamPairs = 8;
  std::vector<std::pair<cudaStream_t, cudaStream_t>> copy_streams_;
  std::map<std::uint32_t, Transfer> in_flight_;
  std::uint64_t next_sequence_ = 1;
  std::map<std::uint32_t, Recorded> recorded_;
  PinnedBuffer<std::int64_t> batch_lists_;  // memcpy_batch: the resolved lists, read back on the host
  DeviceBuffer<std::int64_t> selection_pages_;  // offload, load_back: the virtual pages looked up
  DeviceBuffer<std::int64_t> selection_rows_;   // offload, load_back: their v2p rows, per side
  // Transfers' lists, kept for the next transfer when one completes (freeing device memory waits
  // for the whole device, copies in flight included).
  std::vector<DeviceBuffer<std::int64_t>> spare_lists_;
  Result<DeviceBuffer<std::int64_t>> take_lists(std::size_t count);
};

// Host ids of one side checked as the model checks them: inside the arena (out_of_range), named
// once and allocated (invalid_argument); -1 allowed where `allow_absent`.
Status check_host_ids(const PinnedHostArena& arena, std::size_t side, const std::vector<std::int64_t>& ids,
                      bool allow_absent, std::string_view what);

}  // namespace kvtwin::gpu
