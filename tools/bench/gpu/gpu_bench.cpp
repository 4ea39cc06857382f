// gpu_bench: how fast the CUDA pool's data paths run on this device, as bytes moved per second
// against the device-to-device copy ceiling measured in the same run.
//
// Geometry: Llama-3.1-8B's token-major pool (32 layers, 8 KV heads, head dim 128, bf16: rows of
// 2 KiB, entries of 128 KiB), page size 16 (2 MiB page envelopes). Timed with CUDA events around
// R back-to-back calls (launch gaps included, as a caller sees them), median of 7 trials, after
// warm-up; "@graph" rows replay the same back-to-back calls from a captured graph (without the
// host's launch gaps). Bytes moved count every byte read plus every byte written once.
//
//   write   the write door: N tokens' K and V rows of every layer (one launch) from per-(layer,
//           part) contiguous row buffers into the pool at N consecutive slots (a prefill's pages)
//   read    the read door: the same rows gathered back
//   write_scattered, read_scattered: the same at N distinct random slots (a decode step's lanes)
//   write_layer, write_layer_scattered: the write door for one layer (K and V rows of one model
//           layer, N = 1 to 256 tokens), the call an engine makes once per layer per forward
//   move    page moves: M whole 2 MiB envelopes to distinct unbound pages (one launch)
//   translate  N virtual ids -> physical through v2p (one launch)
//   decode  the captured bookkeeping of a decode step at batch B: translate B new tokens, write
//           their rows into every layer, rebuild B page-table rows (one graph replay)
//   memcpy  the size-matched copy reference: one cudaMemcpyAsync D2D of half the bytes a door or
//           move row moves (so the same bytes read plus written), timed the same two ways
//   @cold   the doors and the move at 64 and 128 MiB and their memcpy reference, replayed from a
//           graph rotating over four disjoint buffer sets, so that no call finds its bytes in L2
//           (the doors' rows are random bytes, checked byte for byte once first)
//   offload_*, load_back_*  host transfers (SPEC 8, gpu/transfers.h) of M pages of P bytes
//           (2 MiB and 64 KiB pages) between scattered device pages and scattered pages of one
//           pinned, mapped host arena, on a copy stream: _kernel resolves the ids on the device
//           and copies with one kernel over the mapped memory, _batch coalesces contiguous runs
//           into one cudaMemcpyBatchAsync, _pages is one cudaMemcpyAsync per page (today's
//           engines); @contiguous rows take consecutive pages on both sides. host_memcpy_* is the
//           reference: one pinned cudaMemcpyAsync of a contiguous buffer of the same bytes, same
//           direction, same kind of stream. These rows count the bytes once (one direction); the
//           summary after the table gives each as a fraction of host_memcpy of its size and way
//
// Usage: gpu_bench OUT.json [--quick]. Prints a table; writes one JSON object per measurement.
// tools/bench/gpu/torch_peer.py measures the PyTorch formulation of the same operations; report.py
// joins both into the results table. What this does not cover: the pool's allocator paths.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/rng.h"
#include "gpu/cuda_check.h"
#include "gpu/device_buffer.h"
#include "core/catalogue.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_pool.h"
#include "gpu/kernels.cuh"
#include "gpu/pinned_buffer.h"
#include "gpu/transfer_kernels.cuh"

namespace {

using kvtwin::Rng;
using kvtwin::gpu::DeviceBuffer;

constexpr std::uint64_t kLayers = 32, kHeads = 8, kHeadDim = 128, kItem = 2;
constexpr std::uint64_t kRow = kHeads * kHeadDim * kItem;  // 2 KiB
constexpr std::uint64_t kEntry = kLayers * 2 * kRow;       // 128 KiB
constexpr std::uint64_t kPageSize = 16;
constexpr std::uint64_t kPageBytes = kPageSize * kEntry;   // 2 MiB
constexpr std::uint64_t kSegments = kLayers * 2;

template <class T>
DeviceBuffer<T> device(std::size_t n) {
  DeviceBuffer<T> d;
  const kvtwin::Status s = d.allocate(n);
  KVTWIN_CHECK(s.ok(), s.ok() ? "" : s.error().message);
  return d;
}

template <class T>
void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
  KVTWIN_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Median microseconds per call over 7 trials of `reps` back-to-back calls.
double time_us(const std::function<void()>& call, int reps) {
  cudaEvent_t start, stop;
  KVTWIN_CUDA_CHECK(cudaEventCreate(&start));
  KVTWIN_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) call();
  KVTWIN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> trials;
  for (int t = 0; t < 7; ++t) {
    KVTWIN_CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < reps; ++r) call();
    KVTWIN_CUDA_CHECK(cudaEventRecord(stop));
    KVTWIN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    KVTWIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    trials.push_back(1000.0 * ms / reps);
  }
  KVTWIN_CUDA_CHECK(cudaGetLastError());
  KVTWIN_CUDA_CHECK(cudaEventDestroy(start));
  KVTWIN_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

// The same, but the `reps` calls are captured once as a CUDA graph and the graph is replayed:
// what the kernels take without the host's launch gaps (METHOD.md's recipe for small calls).
// `call` gets the call's index too (the cold rows rotate buffer sets by it).
double time_graph_us(const std::function<void(cudaStream_t, int)>& call, int reps) {
  cudaStream_t stream;
  KVTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  KVTWIN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < reps; ++r) call(stream, r);
  KVTWIN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  KVTWIN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = time_us([&] { KVTWIN_CUDA_CHECK(cudaGraphLaunch(exec, nullptr)); }, 1) / reps;
  KVTWIN_CUDA_CHECK(cudaGraphExecDestroy(exec));
  KVTWIN_CUDA_CHECK(cudaGraphDestroy(graph));
  KVTWIN_CUDA_CHECK(cudaStreamDestroy(stream));
  return us;
}
double time_graph_us(const std::function<void(cudaStream_t)>& call, int reps) {
  return time_graph_us([&](cudaStream_t st, int) { call(st); }, reps);
}

// Median microseconds per call over 7 trials of `reps` back-to-back calls on `stream`.
double time_on_stream_us(const std::function<void()>& call, int reps, cudaStream_t stream) {
  cudaEvent_t start, stop;
  KVTWIN_CUDA_CHECK(cudaEventCreate(&start));
  KVTWIN_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) call();
  KVTWIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> trials;
  for (int t = 0; t < 7; ++t) {
    KVTWIN_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < reps; ++r) call();
    KVTWIN_CUDA_CHECK(cudaEventRecord(stop, stream));
    KVTWIN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    KVTWIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    trials.push_back(1000.0 * ms / reps);
  }
  KVTWIN_CUDA_CHECK(cudaGetLastError());
  KVTWIN_CUDA_CHECK(cudaEventDestroy(start));
  KVTWIN_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

int reps_for(std::uint64_t bytes) { return bytes < (64u << 20) ? 200 : bytes < (1u << 30) ? 20 : 5; }

struct Row {
  std::string op;
  std::uint64_t n = 0;  // tokens, pages or ids
  std::uint64_t bytes = 0;
  double us = 0;
};

std::vector<std::int64_t> distinct_random(Rng& rng, std::uint64_t n, std::uint64_t first, std::uint64_t end) {
  std::vector<std::int64_t> all(end - first);
  std::iota(all.begin(), all.end(), static_cast<std::int64_t>(first));
  for (std::size_t i = 0; i < n && i + 1 < all.size(); ++i)
    std::swap(all[i], all[i + static_cast<std::size_t>(rng.below(all.size() - i))]);
  all.resize(n);
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_bench OUT.json [--quick]\n");
    return 2;
  }
  const bool quick = argc > 2 && std::strcmp(argv[2], "--quick") == 0;
  if (!kvtwin::gpu::cuda_device_available()) {
    std::fprintf(stderr, "gpu_bench: %s\n", kvtwin::gpu::cuda_device_description().c_str());
    return 2;
  }
  std::printf("device: %s\n", kvtwin::gpu::cuda_device_description().c_str());
  const std::uint64_t seed = 20261129;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  std::vector<Row> rows;

  // ---- the copy ceiling: a 4 GiB device-to-device copy, bytes read plus written.
  const std::uint64_t copy_bytes = std::uint64_t{4} << 30;
  {
    DeviceBuffer<std::uint8_t> a = device<std::uint8_t>(copy_bytes), b = device<std::uint8_t>(copy_bytes);
    KVTWIN_CUDA_CHECK(cudaMemset(a.get(), 0x5a, copy_bytes));
    const double us = time_us([&] { KVTWIN_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), copy_bytes, cudaMemcpyDeviceToDevice)); }, 5);
    rows.push_back({"copy", 1, 2 * copy_bytes, us});
  }
  const double ceiling = static_cast<double>(rows[0].bytes) / (rows[0].us * 1e-6);

  // ---- the pool: 16 GiB (131072 slots, 8192 pages of 2 MiB), non-zero contents.
  const std::uint64_t slots = quick ? 16384 : 131072;
  const std::uint64_t pool_bytes = slots * kEntry;
  DeviceBuffer<std::uint8_t> pool = device<std::uint8_t>(pool_bytes);
  KVTWIN_CUDA_CHECK(cudaMemset(pool.get(), 0x3c, pool_bytes));
  const std::uint64_t max_tokens = quick ? 4096 : 65536;
  DeviceBuffer<std::uint8_t> staging = device<std::uint8_t>(max_tokens * kEntry);
  KVTWIN_CUDA_CHECK(cudaMemset(staging.get(), 0x42, max_tokens * kEntry));
  DeviceBuffer<kvtwin::gpu::RowSegment> segments = device<kvtwin::gpu::RowSegment>(kSegments);
  DeviceBuffer<std::int64_t> loc = device<std::int64_t>(max_tokens);

  // Where N tokens go: "prefill" - consecutive slots of consecutive pages, as one allocation
  // binds them (a prefill's rows, a sequence read back); "scattered" - N distinct random slots
  // (one token of each of N requests, as a decode step writes them).
  auto locs_for = [&](std::uint64_t n, bool scattered) {
    if (scattered) return distinct_random(rng, n, 1, slots);
    const std::uint64_t pages_needed = (n + kPageSize - 1) / kPageSize;
    const std::uint64_t first_page = 1 + rng.below(slots / kPageSize - pages_needed - 1);
    std::vector<std::int64_t> l(n);
    std::iota(l.begin(), l.end(), static_cast<std::int64_t>(first_page * kPageSize));
    return l;
  };
  auto door = [&](std::uint64_t n, bool scattered) {
    // Per (layer, part) contiguous rows [n, 2 KiB], as the PyTorch formulation holds them.
    std::vector<kvtwin::gpu::RowSegment> segs;
    for (std::uint64_t s = 0; s < kSegments; ++s) {
      kvtwin::gpu::RowSegment seg;
      seg.pool_offset_bytes = (s / 2) * 2 * kRow + (s % 2) * kRow;  // K_l at l*4 KiB, V_l after it
      seg.entry_bytes = kEntry;
      seg.staging_offset_bytes = s * n * kRow;
      seg.row_bytes = kRow;
      seg.first_slot = 1;
      segs.push_back(seg);
    }
    upload(segments, segs);
    upload(loc, locs_for(n, scattered));
    kvtwin::gpu::RowCopyParams p;
    p.pool = pool.get();
    p.pool_bytes = pool_bytes;
    p.staging = staging.get();
    p.staging_lane_stride_bytes = kRow;
    p.segments = segments.get();
    p.num_segments = kSegments;
    p.max_row_bytes = kRow;
    p.locs[0] = loc.get();
    p.lanes = static_cast<std::int64_t>(n);
    p.vector16 = kvtwin::gpu::rows_vector16(p.pool, p.staging, kRow, segs.data(), kSegments);
    return p;
  };
  // ---- the write door for one layer: the call an engine makes once per layer in every forward.
  // K and V of one model layer (2 segments, 2 KiB rows each) at N lanes of a marked, device-resident
  // loc. The door's per-call work is its mark check (a host flag, as GpuPool's door reads it) and
  // one launch; the layer's segment table is built once (an engine holds one per layer).
  {
    const std::uint64_t layer = kLayers / 2;
    DeviceBuffer<kvtwin::gpu::RowSegment> layer_segments = device<kvtwin::gpu::RowSegment>(2);
    cudaStream_t engine_stream;
    KVTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&engine_stream, cudaStreamNonBlocking));
    for (bool scattered : {false, true}) {
      const std::string name = scattered ? "write_layer_scattered" : "write_layer";
      for (std::uint64_t n : std::vector<std::uint64_t>{1, 16, 64, 256}) {
        std::vector<kvtwin::gpu::RowSegment> segs;
        for (std::uint64_t part = 0; part < 2; ++part) {
          kvtwin::gpu::RowSegment seg;
          seg.pool_offset_bytes = layer * 2 * kRow + part * kRow;
          seg.entry_bytes = kEntry;
          seg.staging_offset_bytes = part * n * kRow;  // K rows [n, 2 KiB], then V rows
          seg.row_bytes = kRow;
          seg.first_slot = 1;
          segs.push_back(seg);
        }
        upload(layer_segments, segs);
        upload(loc, locs_for(n, scattered));
        kvtwin::gpu::RowCopyParams p;
        p.pool = pool.get();
        p.pool_bytes = pool_bytes;
        p.staging = staging.get();
        p.staging_lane_stride_bytes = kRow;
        p.segments = layer_segments.get();
        p.num_segments = 2;
        p.max_row_bytes = kRow;
        p.locs[0] = loc.get();
        p.lanes = static_cast<std::int64_t>(n);
        p.vector16 = kvtwin::gpu::rows_vector16(p.pool, p.staging, kRow, segs.data(), 2);
        volatile bool loc_marked_physical = true;  // the batch's mark, read on every call
        auto layer_door = [&](cudaStream_t st) {
          KVTWIN_CHECK(loc_marked_physical, "the write door refuses an unmarked loc");
          KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_scatter_rows(p, st));
        };
        const std::uint64_t bytes = 2 * n * 2 * kRow;
        rows.push_back({name, n, bytes, time_us([&] { layer_door(nullptr); }, 1000)});
        // The same eager calls on a stream of the engine's own (non-blocking, as an engine's
        // forward stream is): the legacy default stream adds its implicit ordering to a launch.
        rows.push_back({name + "@stream", n, bytes, time_on_stream_us([&] { layer_door(engine_stream); }, 1000, engine_stream)});
        rows.push_back({name + "@graph", n, bytes, time_graph_us(layer_door, 1000)});
      }
    }
    KVTWIN_CUDA_CHECK(cudaStreamDestroy(engine_stream));
  }

  const std::vector<std::uint64_t> move_sizes =
      quick ? std::vector<std::uint64_t>{1, 8, 16, 64} : std::vector<std::uint64_t>{1, 8, 16, 32, 128, 512, 2048};
  const std::vector<std::uint64_t> token_sizes =
      quick ? std::vector<std::uint64_t>{1, 64, 512, 4096} : std::vector<std::uint64_t>{1, 16, 64, 256, 512, 4096, 16384, 65536};
  for (bool scattered : {false, true}) {
    const std::string suffix = scattered ? "_scattered" : "";
    for (std::uint64_t n : token_sizes) {
      const kvtwin::gpu::RowCopyParams p = door(n, scattered);
      const std::uint64_t bytes = 2 * n * kEntry;
      rows.push_back({"write" + suffix, n, bytes, time_us([&] { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_scatter_rows(p, nullptr)); }, reps_for(bytes))});
      rows.push_back({"read" + suffix, n, bytes, time_us([&] { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_gather_rows(p, nullptr)); }, reps_for(bytes))});
      // The same calls replayed from a captured graph (launch gaps out; no peer).
      rows.push_back({"write" + suffix + "@graph", n, bytes, time_graph_us([&](cudaStream_t st) { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_scatter_rows(p, st)); }, reps_for(bytes))});
      rows.push_back({"read" + suffix + "@graph", n, bytes, time_graph_us([&](cudaStream_t st) { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_gather_rows(p, st)); }, reps_for(bytes))});
    }
  }

  // ---- the size-matched copy reference: for every size a door or a move row moves, one
  // cudaMemcpyAsync D2D of half those bytes (staging -> pool), timed the same two ways.
  {
    std::vector<std::uint64_t> moved;
    for (std::uint64_t n : token_sizes) moved.push_back(2 * n * kEntry);
    for (std::uint64_t m : move_sizes) moved.push_back(2 * m * kPageBytes);
    std::sort(moved.begin(), moved.end());
    moved.erase(std::unique(moved.begin(), moved.end()), moved.end());
    for (std::uint64_t bytes : moved) {
      const std::uint64_t copied = bytes / 2;
      KVTWIN_CHECK(copied <= staging.bytes() && copied <= pool_bytes, "memcpy reference larger than its buffers");
      auto copy = [&](cudaStream_t st) {
        KVTWIN_CUDA_CHECK(cudaMemcpyAsync(pool.get(), staging.get(), copied, cudaMemcpyDeviceToDevice, st));
      };
      rows.push_back({"memcpy", copied, bytes, time_us([&] { copy(nullptr); }, reps_for(bytes))});
      rows.push_back({"memcpy@graph", copied, bytes, time_graph_us(copy, reps_for(bytes))});
    }
  }

  // ---- page moves: M envelopes to M other pages, all distinct.
  const std::uint64_t pages = pool_bytes / kPageBytes;
  DeviceBuffer<std::int64_t> src = device<std::int64_t>(pages), dst = device<std::int64_t>(pages);
  for (std::uint64_t m : move_sizes) {
    const std::vector<std::int64_t> picked = distinct_random(rng, 2 * m, 1, pages);
    upload(src, std::vector<std::int64_t>(picked.begin(), picked.begin() + static_cast<std::ptrdiff_t>(m)));
    upload(dst, std::vector<std::int64_t>(picked.begin() + static_cast<std::ptrdiff_t>(m), picked.end()));
    kvtwin::gpu::PageMoveParams p;
    p.pool = pool.get();
    p.pool_bytes = pool_bytes;
    p.page_bytes = kPageBytes;
    p.src = src.get();
    p.dst = dst.get();
    p.pages = static_cast<std::int64_t>(m);
    const std::uint64_t bytes = 2 * m * kPageBytes;
    rows.push_back({"move", m, bytes, time_us([&] { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_move_pages(p, nullptr)); }, reps_for(bytes))});
    rows.push_back({"move@graph", m, bytes, time_graph_us([&](cudaStream_t st) { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_move_pages(p, st)); }, reps_for(bytes))});
  }

  // ---- translate: N ids through a v2p of `pages` rows (a random permutation, some tombstones).
  std::vector<std::int64_t> v2p_host(pages + 1, -1);
  {
    const std::vector<std::int64_t> perm = distinct_random(rng, pages - 1, 1, pages);
    for (std::uint64_t v = 1; v < pages; ++v) v2p_host[v] = rng.chance(1, 10) ? -1 : perm[v - 1];
    v2p_host[0] = 0;
  }
  DeviceBuffer<std::int64_t> v2p = device<std::int64_t>(pages + 1);
  upload(v2p, v2p_host);
  const std::uint64_t max_ids = 1 << 20;
  DeviceBuffer<std::int64_t> ids = device<std::int64_t>(max_ids), out = device<std::int64_t>(max_ids);
  {
    std::vector<std::int64_t> h(max_ids);
    for (std::int64_t& t : h) t = static_cast<std::int64_t>(rng.below(pages * kPageSize));
    upload(ids, h);
  }
  for (std::uint64_t n : std::vector<std::uint64_t>{64, 4096, 65536, 1u << 20}) {
    kvtwin::gpu::TranslateParams p;
    p.in = ids.get();
    p.cols = static_cast<std::int64_t>(n);
    p.out = out.get();
    p.out_cols = p.cols;
    p.v2p = v2p.get();
    p.v2p_len = static_cast<std::int64_t>(pages + 1);
    p.page_size = kPageSize;
    const std::uint64_t bytes = n * 8 * 3;  // ids in, v2p rows read, ids out
    rows.push_back({"translate", n, bytes, time_us([&] { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_translate(p, nullptr)); }, reps_for(bytes))});
  }

  // ---- the decode step's bookkeeping, captured once, replayed: translate, write, page table.
  for (std::uint64_t batch : {1u, 16u, 64u, 256u}) {
    const std::int64_t max_pages = 256;  // 4096 tokens of history per request
    DeviceBuffer<std::int64_t> new_tokens = device<std::int64_t>(batch), step_loc = device<std::int64_t>(batch);
    DeviceBuffer<std::int64_t> rt = device<std::int64_t>(batch * max_pages * kPageSize), lens = device<std::int64_t>(batch);
    DeviceBuffer<std::int64_t> table = device<std::int64_t>(batch * max_pages);
    {
      std::vector<std::int64_t> h(batch * max_pages * kPageSize), l(batch), nt(batch);
      for (std::int64_t& t : h) t = static_cast<std::int64_t>(rng.below(pages * kPageSize));
      for (std::uint64_t b = 0; b < batch; ++b) {
        l[b] = static_cast<std::int64_t>(1 + rng.below(max_pages * kPageSize));
        nt[b] = h[b * max_pages * kPageSize + static_cast<std::uint64_t>(l[b]) - 1];
      }
      upload(rt, h);
      upload(lens, l);
      upload(new_tokens, nt);
    }
    kvtwin::gpu::RowCopyParams w = door(batch, true);
    w.locs[0] = step_loc.get();
    kvtwin::gpu::TranslateParams t;
    t.in = new_tokens.get();
    t.cols = static_cast<std::int64_t>(batch);
    t.out = step_loc.get();
    t.out_cols = t.cols;
    t.v2p = v2p.get();
    t.v2p_len = static_cast<std::int64_t>(pages + 1);
    t.page_size = kPageSize;
    kvtwin::gpu::PageTableParams pt;
    pt.req_to_token = rt.get();
    pt.rt_rows = static_cast<std::int64_t>(batch);
    pt.rt_cols = max_pages * kPageSize;
    pt.rt_row_stride = pt.rt_cols;
    pt.seq_lens = lens.get();
    pt.bs = static_cast<std::int64_t>(batch);
    pt.table = table.get();
    pt.table_cols = max_pages;
    pt.table_row_stride = max_pages;
    pt.v2p = v2p.get();
    pt.v2p_len = static_cast<std::int64_t>(pages + 1);
    pt.page_size = kPageSize;
    cudaStream_t stream;
    KVTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    KVTWIN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_translate(t, stream));
    KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_scatter_rows(w, stream));
    KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_page_table(pt, stream));
    KVTWIN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    KVTWIN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const std::uint64_t bytes = 2 * batch * kEntry + batch * max_pages * 8 * 2;
    const double us = time_us([&] { KVTWIN_CUDA_CHECK(cudaGraphLaunch(exec, nullptr)); }, 200);
    rows.push_back({"decode_graph", batch, bytes, us});
    // The same three launches without a graph, for comparison.
    const double eager = time_us(
        [&] {
          KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_translate(t, nullptr));
          KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_scatter_rows(w, nullptr));
          KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_page_table(pt, nullptr));
        },
        200);
    rows.push_back({"decode_eager", batch, bytes, eager});
    KVTWIN_CUDA_CHECK(cudaGraphExecDestroy(exec));
    KVTWIN_CUDA_CHECK(cudaGraphDestroy(graph));
    KVTWIN_CUDA_CHECK(cudaStreamDestroy(stream));
  }

  // ---- cold rows at 64 and 128 MiB: the doors (256 and 512 tokens), the move (16 and 32 pages)
  // and the memcpy reference, replayed from a graph rotating over four disjoint buffer sets
  // (4 x 64 MiB and more), so that no call finds its bytes in L2 (about 50 MiB). The doors first
  // move random rows once into poisoned memory, checked byte for byte against the door's law.
  if (!quick) {
    constexpr int kSets = 4;
    constexpr std::uint64_t kSetBytes = 64u << 20;  // staging per set: 512 tokens' rows
    const std::uint64_t check_tokens = 256;
    // Door parameters of set k at n tokens: staging at k * 64 MiB, consecutive slots from page
    // 1 + 64 k.
    std::vector<DeviceBuffer<kvtwin::gpu::RowSegment>> seg_bufs;
    std::vector<DeviceBuffer<std::int64_t>> loc_bufs;
    auto door_set = [&](std::uint64_t n, int k) {
      std::vector<kvtwin::gpu::RowSegment> segs;
      for (std::uint64_t sg = 0; sg < kSegments; ++sg) {
        kvtwin::gpu::RowSegment seg;
        seg.pool_offset_bytes = sg * kRow;  // K_l at l*4 KiB, V_l after it
        seg.entry_bytes = kEntry;
        seg.staging_offset_bytes = sg * n * kRow;
        seg.row_bytes = kRow;
        seg.first_slot = 1;
        segs.push_back(seg);
      }
      seg_bufs.push_back(device<kvtwin::gpu::RowSegment>(kSegments));
      upload(seg_bufs.back(), segs);
      std::vector<std::int64_t> l(n);
      std::iota(l.begin(), l.end(), static_cast<std::int64_t>((1 + 64 * static_cast<std::uint64_t>(k)) * kPageSize));
      loc_bufs.push_back(device<std::int64_t>(n));
      upload(loc_bufs.back(), l);
      kvtwin::gpu::RowCopyParams p;
      p.pool = pool.get();
      p.pool_bytes = pool_bytes;
      p.staging = staging.get() + static_cast<std::uint64_t>(k) * kSetBytes;
      p.staging_lane_stride_bytes = kRow;
      p.segments = seg_bufs.back().get();
      p.num_segments = kSegments;
      p.max_row_bytes = kRow;
      p.locs[0] = loc_bufs.back().get();
      p.lanes = static_cast<std::int64_t>(n);
      p.vector16 = kvtwin::gpu::rows_vector16(p.pool, p.staging, kRow, segs.data(), kSegments);
      KVTWIN_CHECK(p.vector16, "the cold doors take the 16-byte path");
      return p;
    };
    std::vector<kvtwin::gpu::RowCopyParams> sets256, sets512;
    for (int k = 0; k < kSets; ++k) {
      sets256.push_back(door_set(256, k));
      sets512.push_back(door_set(512, k));
    }

    // The check: random rows into set 0's staging, the write door into poisoned pool pages, the
    // read door back into a poisoned staging region.
    const std::uint64_t check_bytes = check_tokens * kEntry;  // 32 MiB
    std::vector<std::uint8_t> random_rows(check_bytes);
    for (std::size_t i = 0; i < random_rows.size(); i += 8) {
      const std::uint64_t word = rng.next_u64();
      std::memcpy(random_rows.data() + i, &word, 8);
    }
    KVTWIN_CUDA_CHECK(cudaMemcpy(sets256[0].staging, random_rows.data(), check_bytes, cudaMemcpyHostToDevice));
    std::uint8_t* const check_pool = pool.get() + kPageSize * kEntry;  // page 1: set 0's slots
    std::uint8_t* const check_out = staging.get() + kSets * kSetBytes;
    // The write door's law: slot (first + i), segment s holds staging row s * n + i.
    std::vector<std::uint8_t> want_pool(check_bytes);
    for (std::uint64_t i = 0; i < check_tokens; ++i)
      for (std::uint64_t sg = 0; sg < kSegments; ++sg)
        std::memcpy(want_pool.data() + i * kEntry + sg * kRow, random_rows.data() + (sg * check_tokens + i) * kRow, kRow);
    auto check = [&](const std::uint8_t* device_bytes, const std::vector<std::uint8_t>& want, const char* what) {
      std::vector<std::uint8_t> got(want.size());
      KVTWIN_CUDA_CHECK(cudaDeviceSynchronize());
      KVTWIN_CUDA_CHECK(cudaMemcpy(got.data(), device_bytes, want.size(), cudaMemcpyDeviceToHost));
      if (got != want) {
        std::fprintf(stderr, "gpu_bench: the %s moved different bytes (seed %llu; rerun: gpu_bench OUT.json)\n", what,
                     static_cast<unsigned long long>(seed));
        std::exit(1);
      }
    };
    KVTWIN_CUDA_CHECK(cudaMemset(check_pool, 0xee, check_bytes));
    KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_scatter_rows(sets256[0], nullptr));
    check(check_pool, want_pool, "write door");
    kvtwin::gpu::RowCopyParams back = sets256[0];
    back.staging = check_out;
    KVTWIN_CUDA_CHECK(cudaMemset(check_out, 0xee, check_bytes));
    KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_gather_rows(back, nullptr));
    check(check_out, random_rows, "read door");

    for (const auto* sets : {&sets256, &sets512}) {
      const std::uint64_t n = static_cast<std::uint64_t>((*sets)[0].lanes), bytes = 2 * n * kEntry;
      auto at = [&](int r) -> const kvtwin::gpu::RowCopyParams& { return (*sets)[static_cast<std::size_t>(r % kSets)]; };
      rows.push_back({"write@cold", n, bytes,
                      time_graph_us([&](cudaStream_t st, int r) { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_scatter_rows(at(r), st)); }, reps_for(bytes))});
      rows.push_back({"read@cold", n, bytes,
                      time_graph_us([&](cudaStream_t st, int r) { KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_gather_rows(at(r), st)); }, reps_for(bytes))});
    }

    // Page moves: set k moves pages 1000 + 64 k + i to 3000 + 64 k + i.
    KVTWIN_CHECK(pages > 3000 + 64 * kSets, "the cold page moves need 3256 pages");
    std::vector<DeviceBuffer<std::int64_t>> page_bufs;
    auto move_set = [&](std::uint64_t m, int k) {
      std::vector<std::int64_t> from(m), to(m);
      std::iota(from.begin(), from.end(), static_cast<std::int64_t>(1000 + 64 * k));
      std::iota(to.begin(), to.end(), static_cast<std::int64_t>(3000 + 64 * k));
      page_bufs.push_back(device<std::int64_t>(m));
      upload(page_bufs.back(), from);
      page_bufs.push_back(device<std::int64_t>(m));
      upload(page_bufs.back(), to);
      kvtwin::gpu::PageMoveParams p;
      p.pool = pool.get();
      p.pool_bytes = pool_bytes;
      p.page_bytes = kPageBytes;
      p.src = page_bufs[page_bufs.size() - 2].get();
      p.dst = page_bufs.back().get();
      p.pages = static_cast<std::int64_t>(m);
      return p;
    };
    for (std::uint64_t m : {16u, 32u}) {
      std::vector<kvtwin::gpu::PageMoveParams> sets;
      for (int k = 0; k < kSets; ++k) sets.push_back(move_set(m, k));
      const std::uint64_t bytes = 2 * m * kPageBytes;
      rows.push_back({"move@cold", m, bytes,
                      time_graph_us(
                          [&](cudaStream_t st, int r) {
                            KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_move_pages(sets[static_cast<std::size_t>(r % kSets)], st));
                          },
                          reps_for(bytes))});
    }

    // The copy reference rotated the same way: set k copies its staging to its pool pages.
    for (std::uint64_t n : {256u, 512u}) {
      const std::uint64_t copied = n * kEntry;
      rows.push_back({"memcpy@cold", copied, 2 * copied,
                      time_graph_us(
                          [&](cudaStream_t st, int r) {
                            const std::uint64_t k = static_cast<std::uint64_t>(r % kSets);
                            KVTWIN_CUDA_CHECK(cudaMemcpyAsync(pool.get() + (1 + 64 * k) * kPageBytes, staging.get() + k * kSetBytes,
                                                              copied, cudaMemcpyDeviceToDevice, st));
                          },
                          reps_for(2 * copied))});
    }
  }


  // ---- host transfers (SPEC 8): M pages of P bytes between the device and one pinned, mapped
  // host arena, on a copy stream, against one pinned cudaMemcpyAsync of the same bytes.
  std::vector<Row> host_rows;
  {
    cudaStream_t st;
    KVTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    struct Size {
      std::uint64_t page_bytes;
      std::vector<std::uint64_t> counts;
    };
    const std::vector<Size> sizes = {{kPageBytes, quick ? std::vector<std::uint64_t>{64} : std::vector<std::uint64_t>{64, 128}},
                                     {std::uint64_t{64} << 10, quick ? std::vector<std::uint64_t>{64} : std::vector<std::uint64_t>{64, 256, 1024}}};
    for (const Size& size : sizes) {
      const std::uint64_t pb = size.page_bytes;
      const std::uint64_t most = *std::max_element(size.counts.begin(), size.counts.end());
      const std::uint64_t span = 2 * most;  // pages on each side to scatter over
      DeviceBuffer<std::uint8_t> dev = device<std::uint8_t>(span * pb);
      KVTWIN_CUDA_CHECK(cudaMemset(dev.get(), 0x3c, dev.bytes()));
      kvtwin::gpu::PinnedBuffer<std::uint8_t> host;
      KVTWIN_CHECK(host.allocate(span * pb, cudaHostAllocMapped).ok(), "pinned host arena");
      std::memset(host.get(), 0x5a, host.bytes());
      void* host_device = nullptr;
      KVTWIN_CUDA_CHECK(cudaHostGetDevicePointer(&host_device, host.get(), 0));
      // Identity tables: v2p[v] = v, the host map[l] = l (the resolve kernel still reads them).
      std::vector<std::int64_t> identity(span);
      std::iota(identity.begin(), identity.end(), 0);
      DeviceBuffer<std::int64_t> v2p = device<std::int64_t>(span), host_map = device<std::int64_t>(span);
      upload(v2p, identity);
      upload(host_map, identity);
      for (std::uint64_t m : size.counts) {
        for (const bool contiguous : {false, true}) {
          std::vector<std::int64_t> dpages(m), hpages(m);
          if (contiguous) {
            std::iota(dpages.begin(), dpages.end(), 0);
            std::iota(hpages.begin(), hpages.end(), 0);
          } else {
            dpages = distinct_random(rng, m, 0, span);
            hpages = distinct_random(rng, m, 0, span);
          }
          DeviceBuffer<std::int64_t> lists = device<std::int64_t>(4 * m);
          std::vector<std::int64_t> both(dpages);
          both.insert(both.end(), hpages.begin(), hpages.end());
          KVTWIN_CUDA_CHECK(cudaMemcpy(lists.get(), both.data(), both.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice));
          const std::uint64_t bytes = m * pb;
          const std::string suffix = contiguous ? "@contiguous" : "";
          for (const bool to_host : {true, false}) {
            const std::string way = to_host ? "offload" : "load_back";
            kvtwin::gpu::ResolveTransferParams r;
            r.virtual_pages = lists.get();
            r.host_logical = lists.get() + m;
            r.pages = static_cast<std::int64_t>(m);
            r.v2p = v2p.get();
            r.v2p_len = static_cast<std::int64_t>(span);
            r.host_map = host_map.get();
            r.host_pages = static_cast<std::int64_t>(span);
            r.device_physical = lists.get() + 2 * m;
            r.host_physical = lists.get() + 3 * m;
            kvtwin::gpu::CopyPagesParams c;
            c.device_base = dev.get();
            c.device_bytes = dev.bytes();
            c.host_base = static_cast<std::uint8_t*>(host_device);
            c.host_bytes = host.bytes();
            c.page_bytes = pb;
            c.device_physical = r.device_physical;
            c.host_physical = r.host_physical;
            c.pages = r.pages;
            c.to_host = to_host;
            const int reps = pb >= kPageBytes ? 5 : 20;
            host_rows.push_back({way + "_kernel" + suffix, m, bytes, time_on_stream_us([&] {
                                   KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_resolve_transfer(r, st));
                                   KVTWIN_CUDA_CHECK(kvtwin::gpu::launch_copy_pages(c, st));
                                 }, reps, st)});
            // Coalesced runs (resolved on the host here: the ids are the identity).
            std::vector<void*> dsts;
            std::vector<const void*> srcs;
            std::vector<std::size_t> lens;
            for (std::uint64_t i = 0; i < m;) {
              std::uint64_t j = i + 1;
              while (j < m && dpages[j] == dpages[j - 1] + 1 && hpages[j] == hpages[j - 1] + 1) ++j;
              std::uint8_t* d = dev.get() + static_cast<std::uint64_t>(dpages[i]) * pb;
              std::uint8_t* h = host.get() + static_cast<std::uint64_t>(hpages[i]) * pb;
              dsts.push_back(to_host ? static_cast<void*>(h) : static_cast<void*>(d));
              srcs.push_back(to_host ? static_cast<const void*>(d) : static_cast<const void*>(h));
              lens.push_back(static_cast<std::size_t>(j - i) * pb);
              i = j;
            }
            cudaMemcpyAttributes attributes{};
            attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
            std::size_t attribute_index = 0;
            host_rows.push_back({way + "_batch" + suffix, m, bytes, time_on_stream_us([&] {
                                   KVTWIN_CUDA_CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), lens.data(), dsts.size(),
                                                                          &attributes, &attribute_index, 1, st));
                                 }, reps, st)});
            host_rows.push_back({way + "_pages" + suffix, m, bytes, time_on_stream_us([&] {
                                   for (std::uint64_t i = 0; i < m; ++i)
                                     KVTWIN_CUDA_CHECK(cudaMemcpyAsync(
                                         to_host ? static_cast<void*>(host.get() + hpages[i] * pb) : static_cast<void*>(dev.get() + dpages[i] * pb),
                                         to_host ? static_cast<const void*>(dev.get() + dpages[i] * pb) : static_cast<const void*>(host.get() + hpages[i] * pb),
                                         pb, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, st));
                                 }, reps, st)});
            if (!contiguous)
              host_rows.push_back({"host_memcpy_" + way, m, bytes, time_on_stream_us([&] {
                                     KVTWIN_CUDA_CHECK(cudaMemcpyAsync(to_host ? static_cast<void*>(host.get()) : static_cast<void*>(dev.get()),
                                                                       to_host ? static_cast<const void*>(dev.get()) : static_cast<const void*>(host.get()),
                                                                       bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, st));
                                   }, reps, st)});
          }
        }
      }
    }
    KVTWIN_CUDA_CHECK(cudaStreamDestroy(st));
  }
  rows.insert(rows.end(), host_rows.begin(), host_rows.end());

  // ---- a state slot move (SPEC 11): Qwen3.5-9B's state entry (51,511,296 bytes) moved by the
  // state sub-pool's eager compaction, through the pool (state_alloc of a new request at the
  // watermark, then state_free of slot 1's request: the band's last slot moves into slot 1), and
  // the envelope copy alone as the pool issues it, against the ceiling above.
  {
    kvtwin::PoolConfig c;
    c.shape = kvtwin::find_model("qwen3.5-9b").value();
    c.page_size = 64;
    c.mode = kvtwin::CompactionMode::eager;
    c.seed = seed;
    c.total_bytes = std::uint64_t{2} << 30;
    kvtwin::gpu::GpuPool pool;
    KVTWIN_CHECK(pool.apply(kvtwin::BuildPool{c}).ok(), "the qwen3.5-9b pool builds");
    const std::uint64_t e = pool.derived()->state_layout->entry_bytes;
    // Requests 1..4 in slots 1..4; each round frees the request in slot 1 and allocates a new one.
    for (std::uint64_t r = 1; r <= 4; ++r)
      KVTWIN_CHECK(pool.apply(kvtwin::StateAlloc{r}).ok(), "a state slot");
    std::uint64_t next = 5, in_slot_one = 1;
    const double op_us = time_on_stream_us([&] {
      KVTWIN_CHECK(pool.apply(kvtwin::StateAlloc{next}).ok(), "a state slot");
      const kvtwin::OpResult freed = pool.apply(kvtwin::StateFree{in_slot_one});
      KVTWIN_CHECK(freed.ok(), "a state free");
      in_slot_one = next++;  // the moved slot's request now sits in slot 1
    }, 10, pool.stream());
    rows.push_back({"state_slot_move_op", 1, 2 * e, op_us});
    std::uint8_t* base = pool.device_pool();
    const double copy_us = time_on_stream_us([&] {
      KVTWIN_CUDA_CHECK(cudaMemcpyAsync(base + e, base + 4 * e, e, cudaMemcpyDeviceToDevice, pool.stream()));
    }, 50, pool.stream());
    rows.push_back({"state_envelope_copy", 1, 2 * e, copy_us});
    // The ceiling at this size: one copy of E_state bytes between two buffers of their own.
    DeviceBuffer<std::uint8_t> a = device<std::uint8_t>(e), b = device<std::uint8_t>(e);
    const double same_size_us = time_on_stream_us([&] {
      KVTWIN_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), e, cudaMemcpyDeviceToDevice, pool.stream()));
    }, 50, pool.stream());
    rows.push_back({"copy@state_bytes", 1, 2 * e, same_size_us});
  }

  std::FILE* f = std::fopen(argv[1], "w");
  if (f == nullptr) {
    std::fprintf(stderr, "gpu_bench: cannot write %s\n", argv[1]);
    return 2;
  }
  std::printf("%-22s %9s %14s %12s %10s %8s\n", "op", "n", "bytes", "us", "GB/s", "ceiling");
  for (const Row& r : rows) {
    const double gbps = static_cast<double>(r.bytes) / (r.us * 1e-6) / 1e9;
    std::printf("%-22s %9llu %14llu %12.2f %10.1f %7.1f%%\n", r.op.c_str(), static_cast<unsigned long long>(r.n),
                static_cast<unsigned long long>(r.bytes), r.us, gbps, 100.0 * gbps * 1e9 / ceiling);
    std::fprintf(f, "{\"impl\":\"kvtwin\",\"op\":\"%s\",\"n\":%llu,\"bytes\":%llu,\"us\":%.3f,\"ceiling_bytes_per_s\":%.6e}\n",
                 r.op.c_str(), static_cast<unsigned long long>(r.n), static_cast<unsigned long long>(r.bytes), r.us, ceiling);
  }
  std::fclose(f);
  // Host transfers against one pinned cudaMemcpyAsync of the same bytes and direction.
  std::printf("\n%-32s %9s %12s %10s %s\n", "host transfer", "pages", "bytes", "GB/s", "of host_memcpy");
  for (const Row& r : host_rows) {
    if (r.op.rfind("host_memcpy_", 0) == 0) continue;
    const std::string way = r.op.rfind("offload", 0) == 0 ? "offload" : "load_back";
    const auto ref = std::find_if(host_rows.begin(), host_rows.end(),
                                  [&](const Row& x) { return x.op == "host_memcpy_" + way && x.bytes == r.bytes; });
    const double gbps = static_cast<double>(r.bytes) / (r.us * 1e-6) / 1e9;
    const double ratio = ref == host_rows.end() ? 0 : ref->us / r.us;
    std::printf("%-32s %9llu %12llu %10.1f %6.1f%%\n", r.op.c_str(), static_cast<unsigned long long>(r.n),
                static_cast<unsigned long long>(r.bytes), gbps, 100.0 * ratio);
  }
  return 0;
}
