// Translation on the device (SPEC.md section 5): translate (virtual -> physical token ids through
// the owner side's v2p, int32 or int64 strided input, strided or aliasing int64 output, out_width
// zero-fill), swa_translate (full physical ids -> SWA ids, SPEC 4.3), the page table (block table
// with the v2p lookup fused in) and the in-place index remap. Each call uploads its input into a
// named device buffer, runs one kernel (kernels.cuh) and downloads the answer (a
// synchronization: the ids are the host's answer).
//
// translate poisons every storage cell of its buffers first and checks afterwards that the kernel
// wrote only its output elements. Fault switches reached here: negative_wraps (9), tombstone_live
// and page_table_tombstone_live (10), remap_stale_bound (6), remap_fresh_buffer (7).
//
// What it does not cover: rebind's translate (batches.h) and the decode step's refill
// (decode_step.h), which run the same kernels on their own buffers.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/op.h"
#include "core/pool_config.h"
#include "gpu/device_allocator.h"
#include "gpu/device_buffer.h"
#include "gpu/faults.h"

namespace kvtwin::gpu {

class Translation {
 public:
  // `config` must outlive the unit (the pool owns it).
  void init(const PoolConfig& config) { config_ = &config; }

  Result<std::vector<std::int64_t>> translate(const Translate& op, const DeviceAllocator& allocator,
                                              const Faults& faults, cudaStream_t stream);
  Result<std::vector<std::int64_t>> swa_translate(const SwaTranslate& op, const DeviceAllocator& allocator,
                                                  const Faults& faults, cudaStream_t stream);
  Result<Table> page_table(const PageTable& op, const DeviceAllocator& allocator, const Faults& faults,
                           cudaStream_t stream);
  Result<std::vector<std::int64_t>> remap_indices(const RemapIndices& op, const DeviceAllocator& allocator,
                                                  const Faults& faults, cudaStream_t stream);

 private:
  const PoolConfig* config_ = nullptr;
  DeviceBuffer<std::uint8_t> translate_input_;    // translate: the ids at their strided places, poison elsewhere
  DeviceBuffer<std::int64_t> translate_output_;   // translate, not aliasing: the output's storage, poisoned first
  DeviceBuffer<std::int64_t> swa_input_;          // swa_translate: full physical ids
  DeviceBuffer<std::int64_t> swa_output_;         // swa_translate: the SWA ids
  DeviceBuffer<std::int64_t> request_to_token_;   // page_table: the request-to-token table, rows padded
  DeviceBuffer<std::int64_t> request_rows_;       // page_table: the request row of each batch row
  DeviceBuffer<std::int64_t> sequence_lengths_;   // page_table: the tokens of each batch row
  DeviceBuffer<std::int64_t> block_table_;        // page_table: the prior table, rebuilt in place
  DeviceBuffer<std::int64_t> kv_indices_;         // remap_indices: the capture-stable indices, remapped in place
  DeviceBuffer<std::int64_t> kv_indptr_;          // remap_indices: the CSR row pointers
  DeviceBuffer<std::int64_t> remap_fresh_output_; // remap_indices under fault 7: the fresh buffer it writes instead
};

}  // namespace kvtwin::gpu
