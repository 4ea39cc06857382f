// The decode step as a CUDA graph (SPEC.md section 7, docs/decisions.md "The decode step").
//
// Captured once at max_batch: the graph copies this replay's lengths into its own length buffer,
// derives the SWA loc (composites), scatters every layer's rows at the capture-stable loc buffer,
// and runs the reference attention through the capture-stable page table. Before every replay,
// out of graph and bounded only by the batch being replayed, the refill translates the new
// tokens into the loc buffer (every lane past the batch set to the sink) and rebuilds the live
// prefix of each row of the page table from this batch's lengths. Two seed bugs live in that
// refill behind fault switches: stale_loc_tail and stale_table_lengths. Inside the graph live
// graph_swa_tombstone_live, int32_offsets_attention, stride_from_shape and int32_offsets (the
// in-graph write door), fixed when the graph is captured.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/op.h"
#include "core/oracle.h"
#include "core/pool_config.h"
#include "gpu/device_buffer.h"
#include "gpu/device_side.h"
#include "gpu/faults.h"
#include "gpu/kernels.cuh"

namespace kvtwin::gpu {

// What the decode step reads from the pool; pointers stay valid until the pool is rebuilt.
struct PoolDeviceView {
  std::uint8_t* pool = nullptr;
  std::uint64_t pool_bytes = 0;
  const DeviceSide* full = nullptr;
  const DeviceSide* swa = nullptr;  // nullptr unless composite
  const PoolDerived* derived = nullptr;
  const PoolConfig* config = nullptr;
};

// Refusals a replay asks of its pool (each may be empty).
struct ReplayChecks {
  std::function<Status()> after_allocated;   // after every request's tokens are known allocated
  std::function<Status()> after_duplicates;  // after the duplicate-lane check
};

class DecodeStep {
 public:
  // Validates the capture and records the graph.
  static Result<std::unique_ptr<DecodeStep>> create(const Capture& op, const PoolDeviceView& pool,
                                                    const Faults& faults, cudaStream_t stream);
  ~DecodeStep();
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;

  // `checks`: the pool's own refusals, asked at their places in the replay's order (SPEC 8: a
  // load-back's pages after the allocated-token check, pages transfers hold after the duplicates).
  Result<Decode> replay(const Replay& op, const Faults& faults, cudaStream_t stream, const ReplayChecks& checks = {});

 private:
  DecodeStep() = default;
  // Records the graph; the faults that live inside it are fixed at capture.
  Status record(const Faults& faults);

  Capture shape_;
  PoolDeviceView pool_;
  std::int64_t max_batch_ = 0;
  std::int64_t max_pages_ = 0;
  std::int64_t max_tokens_ = 0;
  std::uint64_t lane_row_bytes_ = 0;
  std::vector<RowSegment> host_segments_;
  std::vector<RowIdentity> segment_rows_;  // identity of each segment's row, minus token and write
  std::vector<DType> segment_dtypes_;
  AttentionParams attention_;
  bool writes_full_layer = false;  // a non-SWA, non-cross layer takes decoder rows
  bool writes_swa_layer = false;   // an SWA layer takes decoder rows
  std::uint32_t k_dim_ = 0;
  std::uint32_t v_dim_ = 0;

  DeviceBuffer<std::int64_t> new_tokens_;    // [max_batch] virtual
  DeviceBuffer<std::int64_t> loc_;           // [max_batch] capture-stable loc
  DeviceBuffer<std::int64_t> swa_loc_;       // [max_batch]
  DeviceBuffer<std::int64_t> req_to_token_;  // [max_batch, max_tokens]
  DeviceBuffer<std::int64_t> next_lens_;     // [max_batch] this replay's lengths (refilled out of graph)
  DeviceBuffer<std::int64_t> graph_lens_;    // [max_batch] the lengths the graph itself keeps
  DeviceBuffer<std::int64_t> table_;         // [max_batch, max_pages] capture-stable page table
  DeviceBuffer<std::uint8_t> rows_;          // [max_batch, lane_row_bytes]
  DeviceBuffer<RowSegment> segments_;
  DeviceBuffer<float> q_;
  DeviceBuffer<float> scores_;
  DeviceBuffer<float> out_;
  DeviceBuffer<std::uint32_t> flags_;        // [max_batch] replay validation
  DeviceBuffer<std::int64_t> check_loc_;     // [max_batch] validation scratch: this batch's locs
  DeviceBuffer<std::int64_t> check_a_;       // [max_batch]
  DeviceBuffer<std::int64_t> check_b_;       // [max_batch]
  DeviceBuffer<std::uint8_t> sort_temp_;
  DeviceBuffer<std::uint32_t> status_;
  // Whether two lanes of this batch would write one non-sink slot (SPEC 6), on the device.
  Result<bool> duplicate_lanes(std::int64_t bs, cudaStream_t stream);
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::uint64_t exec_key_ = 0;  // graph_exec_key(graph_): whose kept executable graphs exec_ may go to
};

// The pool's captured decode steps, by graph id (capture and replay ops).
class DecodeGraphs {
 public:
  Status capture(const Capture& op, const PoolDeviceView& pool, const Faults& faults, cudaStream_t stream);
  Result<Decode> replay(const Replay& op, const Faults& faults, cudaStream_t stream, const ReplayChecks& checks = {});
  void clear() { steps_.clear(); }

 private:
  std::map<std::uint32_t, std::unique_ptr<DecodeStep>> steps_;
};

}  // namespace kvtwin::gpu
