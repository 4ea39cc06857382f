// The write door and the read door (SPEC.md sections 2 and 6): rows between the host and the
// token-major pool bytes at physical token ids.
//
// The write door takes the loc a write goes through (for_layer of a batch, batches.h, or an
// explicit loc with its own mark), checks the mark first (a host flag read, no device work), then
// that every id lies inside the loc's sub-pool and that no two lanes share a non-sink slot
// (always, whatever Write.checked says, docs/gpu.md), and scatters the content oracle's rows of
// each lane's token. A loc whose ids the host holds (a batch's, as its rebind read them back, or
// an explicit one) is judged on the host, once per batch loc and sub-pool for all its layers: such
// a write synchronizes nothing. An SWA layer derives its own loc on the device (SPEC 4.3), where it
// is judged (range, one launch of the pair check or a sort) and read back once, overlapped with
// the host filling the rows. The scatter is left running on the stream.
// The read door gathers one part's rows; a sink lane reads as zeros. Fault switches that live
// here: no_mark_check (2), tombstone_live (10, the SWA loc), int32_offsets (18, both doors).
//
// A write's rows are made on the device from the oracle (core/oracle.h): the host computes one
// key per lane and part, and uploads each (layer, part)'s pattern the first time the pool writes
// it; a part whose rows are not whole 8-byte words is made on the host and staged.
//
// State: named device scratch (below), and the patterns uploaded for this pool (dropped at init).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/op.h"
#include "core/oracle.h"
#include "core/pool_config.h"
#include "gpu/batches.h"
#include "gpu/device_allocator.h"
#include "gpu/device_buffer.h"
#include "gpu/device_io.h"
#include "gpu/faults.h"
#include "gpu/kernels.cuh"
#include "gpu/pinned_buffer.h"
#include "gpu/pool_bytes.h"
#include "gpu/transfers.h"

namespace kvtwin::gpu {

class Doors {
 public:
  // `config` and `derived` must outlive the doors (the pool owns them).
  Status init(const PoolConfig& config, const PoolDerived& derived);

  // `transfers`: a lane may not write a page a transfer in flight holds (SPEC 8).
  Status write(const Write& op, const Batches& batches, const DeviceAllocator& allocator,
               const DevicePoolBytes& bytes, const HostTransfers& transfers, const Faults& faults, cudaStream_t stream);
  // Any operation but a write may change the tables an SWA layer's loc is derived from
  // (GpuPool::apply calls this before every other op, and when the faults change).
  void forget_swa_loc() { swa_memo_.reset(); }
  // The rows, lane after lane (synchronizes: the bytes are the host's answer). A page a load-back
  // in flight is filling is not read.
  Result<std::vector<std::uint8_t>> read(const Read& op, const DeviceAllocator& allocator,
                                         const DevicePoolBytes& bytes, const HostTransfers& transfers,
                                         const Faults& faults, cudaStream_t stream);

 private:
  const PoolConfig* config_ = nullptr;
  const PoolDerived* derived_ = nullptr;
  // A loc judged on the host (Doors::write): outside its sub-pool, two lanes on one slot.
  struct LocVerdict {
    std::uint64_t version = 0;  // LayerLoc::version (0: an explicit loc, never kept)
    std::int64_t slots = 0;
    std::int64_t sink_end = 0;
    bool outside = false;
    bool duplicate = false;
  };
  LocVerdict judge_loc(const LayerLoc& target, std::int64_t slots, std::int64_t sink_end);
  // The oracle pattern of (sub-pool, layer, part) of `row_bytes`, on the device (uploaded at its
  // first use on `stream`).
  Result<const std::uint8_t*> device_pattern(const RowIdentity& of, DType dtype, std::uint64_t row_bytes,
                                             cudaStream_t stream);
  using PatternKey = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, DType, std::uint64_t>;
  std::map<PatternKey, DeviceBuffer<std::uint8_t>> patterns_;
  std::vector<LocVerdict> verdicts_;  // the last few batch locs judged, newest last
  // The SWA loc derived last (in swa_loc_) and its checks' verdict. The next SWA layer's write of
  // the same batch loc (LayerLoc::version), with only writes between (so the full p2v and the
  // SWA v2p it was derived from are as they were), takes both instead of deriving and checking
  // again: one translate, check and synchronization a batch, not one an SWA layer.
  struct SwaLocMemo {
    std::uint64_t version = 0;
    const std::int64_t* loc = nullptr;
    std::int64_t lanes = 0;
    std::size_t sub_pool = 0;  // (its slots and sink are the pool's: a build forgets the memo)
    std::uint32_t verdict[3] = {0, 0, 0};
  };
  std::optional<SwaLocMemo> swa_memo_;
  DeviceBuffer<std::uint32_t> check_flags_;       // write: [loc outside its sub-pool, negative SWA loc, duplicate lanes]
  PinnedBuffer<std::uint32_t> check_flags_host_;  // write: the same three words, read back asynchronously
  DeviceBuffer<std::uint8_t> sort_temp_;           // write: CUB's sort scratch of the duplicate check
  DeviceBuffer<std::int64_t> explicit_loc_;        // write, explicit form: the loc as given
  DeviceBuffer<std::int64_t> swa_loc_;             // write to an SWA layer: the SWA loc derived from the full loc
  DeviceBuffer<std::int64_t> duplicate_keys_;      // write: the final loc with sink lanes made 0
  DeviceBuffer<std::int64_t> duplicate_sorted_;    // write: those keys sorted
  DeviceBuffer<std::int64_t> read_ids_;            // read: the physical ids read
  DeviceBuffer<std::uint8_t> rows_staging_;        // both: the rows, lane-major (lane_bytes each)
  DeviceBuffer<std::uint64_t> row_keys_;           // write: each (lane, part)'s oracle key, lane-major
  DeviceBuffer<RowSegment> row_segments_;          // both: one (layer, part) segment each
};

}  // namespace kvtwin::gpu
