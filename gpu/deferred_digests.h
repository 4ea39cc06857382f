// Digests asked for now and answered later (core/backend.h queue_tables_digest, queue_bytes_digest,
// collect_digests): the runner's comparison window without a synchronization an op.
//
// Each queued digest is one slot of a device array that its reductions add into (the tables'
// kernels, the bytes' kernel), with the part known on the host (the tables' counters) kept beside
// it. collect() brings every slot back with one copy and one synchronization. Slots are zeroed in
// one memset when a window opens; a full array is brought back into the host list first (one more
// synchronization every kSlots digests).
//
// What it does not cover: what a digest sums (core/tables_digest.h, core/bytes_digest.h) and
// which ranges are valid (GpuPool checks them before queuing).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/result.h"
#include "gpu/device_buffer.h"
#include "gpu/pinned_buffer.h"

namespace kvtwin::gpu {

class DeferredDigests {
 public:
  // The zeroed device slot of the next digest; its host part is added with add_host_terms.
  Result<unsigned long long*> next_slot(cudaStream_t stream);
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

  static constexpr std::size_t kSlots = 1024;
  DeviceBuffer<unsigned long long> slots_;
  PinnedBuffer<unsigned long long> landed_;
  std::vector<std::uint64_t> host_terms_;  // one per slot in use
  std::vector<std::uint64_t> collected_;   // digests landed before the window's last slots
};

}  // namespace kvtwin::gpu
