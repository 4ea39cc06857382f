// Digests asked for now and answered later (core/backend.h queue_tables_digest, queue_bytes_digest,
// collect_digests): the runner's comparison window without a synchronization an op.
//
// Each queued digest is one slot of a device array that its reductions add into (the tables'
// kernels, the bytes' kernel), with the part known on the host (the tables' counters) kept beside
// it. collect() brings every slot back with one copy and one synchronization. Slots are not zeroed
// when a window opens (a memset a window was one CUDA call more for every window, under many
// threads one of the dearest): each slot's value at its last landing is kept on the host as its
// base, and a digest's device part is what its reductions added since, the landed value less the
// base (modulo 2^64, as the reductions add). The array is zeroed once, when it is allocated, and
// again only after a landing that failed (its values are then unknown). A full array is brought
// back into the host list first (one more synchronization every kSlots digests). A digest whose device part cannot have changed since an
// earlier one's (repeat: nothing ran on the stream between) takes that part at landing, with no
// launch of its own.
//
// What it does not cover: what a digest sums (core/tables_digest.h, core/bytes_digest.h) and
// which ranges are valid (GpuPool checks them before queuing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/result.h"
#include "gpu/device_buffer.h"
#include "gpu/pinned_buffer.h"

namespace kvtwin::gpu {

class DeferredDigests {
 public:
  // Which queued digest (for repeat): its window (the slots between two landings) and slot.
  struct Handle {
    std::uint64_t window = 0;
    std::size_t slot = 0;
  };
  // The zeroed device slot of the next digest; its host part is added with add_host_terms.
  // `handle`, when given, names it for a later repeat.
  Result<unsigned long long*> next_slot(cudaStream_t stream, Handle* handle = nullptr);
  // Queues a digest whose device part is that of `earlier` (what it sums has not changed since:
  // the caller knows nothing ran on the stream), without a slot or a launch; its host part is
  // added with add_host_terms. False, queuing nothing, when `earlier` is older than the last
  // landing's window (its device part is no longer kept).
  Result<bool> repeat(const Handle& earlier, cudaStream_t stream);
  // Whether next_slot() first lands the slots in use (the array is full): a digest still to be
  // launched into one of them must be launched before.
  bool next_slot_lands() const { return host_terms_.size() == kSlots; }
  // Adds terms computed on the host to the digest of the last slot handed out.
  void add_host_terms(std::uint64_t terms);
  // Every digest queued since the last collect, oldest first (synchronizes the stream once).
  Result<std::vector<std::uint64_t>> collect(cudaStream_t stream);

 private:
  // Brings the slots in use back into collected_ (one copy, one synchronization).
  Status land(cudaStream_t stream);
  // Before a digest is queued: the slots allocated, a full window landed, a new one zeroed.
  Status make_room(cudaStream_t stream);

  static constexpr std::size_t kSlots = 1024;
  DeviceBuffer<unsigned long long> slots_;
  PinnedBuffer<unsigned long long> landed_;
  std::vector<std::uint64_t> host_terms_;  // one per slot in use
  // Per slot in use: kOwnSlot, or the slot of this window whose device part it repeats, or
  // kFromLastWindow + slot: a slot of the window landed last.
  static constexpr std::size_t kOwnSlot = SIZE_MAX;
  static constexpr std::size_t kFromLastWindow = std::size_t{1} << 32;
  std::vector<std::size_t> device_part_of_;
  std::uint64_t window_ = 0;                     // this window's number (one more a landing)
  std::vector<std::uint64_t> last_device_parts_;  // the device parts of the window landed last
  std::vector<std::uint64_t> collected_;   // digests landed before the window's last slots
  // Each slot's value when the window opened (what its reductions add to); known after a zeroing
  // and after every landing that succeeded.
  std::vector<std::uint64_t> bases_;
  bool bases_known_ = false;
};

}  // namespace kvtwin::gpu
