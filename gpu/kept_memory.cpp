// Kept blocks by kind and size class, and the pools' held releases (kept_memory.h for why). One mutex: the calls are few per pool
// build, and a thread that takes a block another thread kept is as safe as the one that kept it
// (the block's streams were synchronized before it was kept).
#include "gpu/kept_memory.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/profile_switch.h"
#include "gpu/cuda_check.h"

namespace kvtwin::gpu {
namespace {

// Bounds: blocks larger than this are never kept (a 2 GiB regression pool is freed as before), and
// at most this much is kept per kind (the gate's pools are a few MiB each, one per thread).
constexpr std::size_t kKeptBlockBytesMax = std::size_t{1} << 30;
constexpr std::array<std::size_t, 3> kKeptBytesMax = {std::size_t{4} << 30, std::size_t{1} << 30, std::size_t{1} << 30};

// Bounds on kept events and streams (a gate thread's pool uses a few of each at a time).
constexpr std::size_t kKeptEventsMax = 4096;
constexpr std::size_t kKeptStreamsMax = 512;
constexpr std::size_t kKeptGraphsMax = 256;

struct Kept {
  std::mutex mutex;
  std::array<std::map<std::size_t, std::vector<void*>>, 3> blocks;  // by kind, then size class
  std::array<std::size_t, 3> bytes{};
  std::vector<cudaEvent_t> events;
  std::vector<cudaStream_t> streams;
  std::map<std::uint64_t, std::vector<cudaGraphExec_t>> graphs;  // by graph_exec_key
  std::size_t graph_count = 0;
  KeptMemoryStats stats;
};

// Never destroyed (a static's destructor could run after the runtime unloads); what it keeps is
// given back by drop_kept_memory at exit, registered once the runtime is up (at the first keep),
// so it runs before the runtime's own teardown.
Kept& kept() {
  static Kept* k = new Kept;
  return *k;
}

// A pool's held releases are bounded too (a long replay that outgrows its scratch buffers again
// and again frees the oldest sizes as before, rather than holding them all).
constexpr std::size_t kHeldBytesMax = std::size_t{512} << 20;

thread_local int t_quiet_depth = 0;
thread_local HeldReleases* t_holder = nullptr;

std::size_t index_of(MemoryKind kind) { return static_cast<std::size_t>(kind); }

cudaError_t driver_allocate(MemoryKind kind, void** block, std::size_t bytes) {
  switch (kind) {
    case MemoryKind::device:
      return KVTWIN_CUDA_TIMED(cudaMalloc(block, bytes));
    case MemoryKind::pinned:
      return KVTWIN_CUDA_TIMED(cudaHostAlloc(block, bytes, cudaHostAllocDefault));
    case MemoryKind::pinned_mapped:
      return KVTWIN_CUDA_TIMED(cudaHostAlloc(block, bytes, cudaHostAllocMapped));
  }
  return cudaErrorInvalidValue;
}

void driver_free(MemoryKind kind, void* block) {
  if (kind == MemoryKind::device)
    KVTWIN_CUDA_WARN(cudaFree(block));
  else
    KVTWIN_CUDA_WARN(cudaFreeHost(block));
}

// Takes every kept block out, to free without the lock held.
std::vector<std::pair<MemoryKind, void*>> take_all_kept() {
  Kept& k = kept();
  std::vector<std::pair<MemoryKind, void*>> out;
  const std::lock_guard<std::mutex> lock(k.mutex);
  for (std::size_t i = 0; i < k.blocks.size(); ++i) {
    for (auto& [size, list] : k.blocks[i])
      for (void* b : list) out.emplace_back(static_cast<MemoryKind>(i), b);
    k.blocks[i].clear();
    k.bytes[i] = 0;
  }
  k.stats.bytes_kept = 0;
  return out;
}

Result<void*> allocate_new(MemoryKind kind, std::size_t bytes) {
  void* block = nullptr;
  cudaError_t code = driver_allocate(kind, &block, bytes);
  if (code == cudaErrorMemoryAllocation) {
    // What is kept may be what is missing: give it all back and ask once more.
    (void)cudaGetLastError();
    for (const auto& [k, b] : take_all_kept()) driver_free(k, b);
    code = driver_allocate(kind, &block, bytes);
  }
  if (code != cudaSuccess)
    return cuda_error(code, kind == MemoryKind::device ? "cudaMalloc" : "cudaHostAlloc", __FILE__, __LINE__);
  return block;
}

// Kept blocks, events and streams go back to the driver before the runtime unloads (a leak check
// then sees none): registered at the first keep, once the runtime is up.
void drop_at_exit() {
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(drop_kept_memory); });
}

}  // namespace

std::size_t size_class_bytes(std::size_t bytes) {
  if (bytes > kKeptBlockBytesMax) return bytes;  // never kept: exactly as asked
  constexpr std::size_t kSmallest = 512;
  if (bytes <= kSmallest) return kSmallest;
  std::size_t top = kSmallest;
  while (top * 2 <= bytes) top *= 2;  // the largest power of two <= bytes
  const std::size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

Result<void*> take_memory(MemoryKind kind, std::size_t asked) {
  KVTWIN_CHECK(asked > 0, "take_memory of 0 bytes");
  const std::size_t bytes = size_class_bytes(asked);
  // The injector sees an allocation either way (cuda_check.h): the same calls count and fail.
  if (const cudaError_t injected = cuda_fault_point("cudaMalloc(kept or new)", __FILE__, __LINE__);
      injected != cudaSuccess)
    return cuda_error(injected, "cudaMalloc(kept or new)", __FILE__, __LINE__);
  Kept& k = kept();
  {
    const std::lock_guard<std::mutex> lock(k.mutex);
    auto& by_size = k.blocks[index_of(kind)];
    if (auto it = by_size.find(bytes); it != by_size.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) by_size.erase(it);
      k.bytes[index_of(kind)] -= bytes;
      k.stats.bytes_kept -= bytes;
      ++k.stats.taken_kept;
      return block;
    }
    ++k.stats.taken_new;
  }
  return allocate_new(kind, bytes);
}

void release_memory(MemoryKind kind, void* block, std::size_t asked) {
  if (block == nullptr) return;
  const std::size_t bytes = size_class_bytes(asked);
  Kept& k = kept();
  if (t_quiet_depth == 0 && t_holder != nullptr && bytes <= kKeptBlockBytesMax &&
      t_holder->bytes_ + bytes <= kHeldBytesMax) {
    t_holder->blocks_.push_back(HeldReleases::Block{kind, block, asked});
    t_holder->bytes_ += bytes;
    const std::lock_guard<std::mutex> lock(k.mutex);
    ++k.stats.held;
    return;
  }
  if (t_quiet_depth > 0 && bytes <= kKeptBlockBytesMax) {
    const std::lock_guard<std::mutex> lock(k.mutex);
    if (k.bytes[index_of(kind)] + bytes <= kKeptBytesMax[index_of(kind)]) {
      drop_at_exit();
      k.blocks[index_of(kind)][bytes].push_back(block);
      k.bytes[index_of(kind)] += bytes;
      k.stats.bytes_kept += bytes;
      ++k.stats.kept;
      return;
    }
  }
  {
    const std::lock_guard<std::mutex> lock(k.mutex);
    ++k.stats.freed_now;
  }
  driver_free(kind, block);
}

void HeldReleases::release_all() {
  std::vector<Block> blocks = std::move(blocks_);
  blocks_.clear();
  bytes_ = 0;
  // Not back into a holder (this one, or another scope's): kept under a QuietRelease, else freed.
  HeldReleases* const holder = std::exchange(t_holder, nullptr);
  for (const Block& b : blocks) release_memory(b.kind, b.block, b.bytes);
  t_holder = holder;
}

HoldReleases::HoldReleases(HeldReleases& into) : previous_(std::exchange(t_holder, &into)) {}
HoldReleases::~HoldReleases() { t_holder = previous_; }

QuietRelease::QuietRelease() { ++t_quiet_depth; }
QuietRelease::~QuietRelease() { --t_quiet_depth; }

KeptMemoryStats kept_memory_stats() {
  Kept& k = kept();
  const std::lock_guard<std::mutex> lock(k.mutex);
  return k.stats;
}

Result<cudaEvent_t> take_event() {
  if (const cudaError_t injected = cuda_fault_point("cudaEventCreateWithFlags(kept or new)", __FILE__, __LINE__);
      injected != cudaSuccess)
    return cuda_error(injected, "cudaEventCreateWithFlags(kept or new)", __FILE__, __LINE__);
  Kept& k = kept();
  {
    const std::lock_guard<std::mutex> lock(k.mutex);
    if (!k.events.empty()) {
      const cudaEvent_t e = k.events.back();
      k.events.pop_back();
      ++k.stats.events_kept;
      return e;
    }
    ++k.stats.events_new;
  }
  cudaEvent_t e = nullptr;
  if (const cudaError_t code = KVTWIN_CUDA_TIMED(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); code != cudaSuccess)
    return cuda_error(code, "cudaEventCreateWithFlags(&e, cudaEventDisableTiming)", __FILE__, __LINE__);
  return e;
}

void release_event(cudaEvent_t event) {
  if (event == nullptr) return;
  Kept& k = kept();
  {
    const std::lock_guard<std::mutex> lock(k.mutex);
    if (k.events.size() < kKeptEventsMax) {
      drop_at_exit();
      k.events.push_back(event);
      return;
    }
  }
  KVTWIN_CUDA_WARN(cudaEventDestroy(event));
}

Result<cudaStream_t> take_stream() {
  if (const cudaError_t injected = cuda_fault_point("cudaStreamCreateWithFlags(kept or new)", __FILE__, __LINE__);
      injected != cudaSuccess)
    return cuda_error(injected, "cudaStreamCreateWithFlags(kept or new)", __FILE__, __LINE__);
  Kept& k = kept();
  {
    const std::lock_guard<std::mutex> lock(k.mutex);
    if (!k.streams.empty()) {
      const cudaStream_t s = k.streams.back();
      k.streams.pop_back();
      ++k.stats.streams_kept;
      return s;
    }
    ++k.stats.streams_new;
  }
  cudaStream_t s = nullptr;
  if (const cudaError_t code = KVTWIN_CUDA_TIMED(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); code != cudaSuccess)
    return cuda_error(code, "cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)", __FILE__, __LINE__);
  return s;
}

void release_stream(cudaStream_t stream) {
  if (stream == nullptr) return;
  if (t_quiet_depth > 0) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const bool idle = cudaStreamQuery(stream) == cudaSuccess &&
                      cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone;
    if (idle) {
      Kept& k = kept();
      const std::lock_guard<std::mutex> lock(k.mutex);
      if (k.streams.size() < kKeptStreamsMax) {
        drop_at_exit();
        k.streams.push_back(stream);
        return;
      }
    } else {
      (void)cudaGetLastError();  // a query's answer, not an error of the next call
    }
  }
  KVTWIN_CUDA_WARN(cudaStreamDestroy(stream));
  forget_stream(stream);
}

Result<std::uint64_t> graph_exec_key(cudaGraph_t graph) {
  std::size_t count = 0;
  if (const cudaError_t code = cudaGraphGetNodes(graph, nullptr, &count); code != cudaSuccess)
    return cuda_error(code, "cudaGraphGetNodes(graph, nullptr, &count)", __FILE__, __LINE__);
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) {
    if (const cudaError_t code = cudaGraphGetNodes(graph, nodes.data(), &count); code != cudaSuccess)
      return cuda_error(code, "cudaGraphGetNodes(graph, nodes.data(), &count)", __FILE__, __LINE__);
  }
  std::uint64_t key = count;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    if (const cudaError_t code = cudaGraphNodeGetType(node, &type); code != cudaSuccess)
      return cuda_error(code, "cudaGraphNodeGetType(node, &type)", __FILE__, __LINE__);
    key = key * 31u + static_cast<std::uint64_t>(type) + 1;
  }
  return key;
}

Result<cudaGraphExec_t> take_graph_exec(cudaGraph_t graph, std::uint64_t key) {
  if (const cudaError_t injected = cuda_fault_point("cudaGraphInstantiate(kept or new)", __FILE__, __LINE__);
      injected != cudaSuccess)
    return cuda_error(injected, "cudaGraphInstantiate(kept or new)", __FILE__, __LINE__);
  Kept& k = kept();
  cudaGraphExec_t exec = nullptr;
  {
    const std::lock_guard<std::mutex> lock(k.mutex);
    if (auto it = k.graphs.find(key); it != k.graphs.end() && !it->second.empty()) {
      exec = it->second.back();
      it->second.pop_back();
      --k.graph_count;
    }
  }
  if (exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    if (KVTWIN_CUDA_TIMED(cudaGraphExecUpdate(exec, graph, &info)) == cudaSuccess) {
      const std::lock_guard<std::mutex> lock(k.mutex);
      ++k.stats.graphs_updated;
      return exec;
    }
    (void)cudaGetLastError();  // a refused update is an answer, not an error of the next call
    KVTWIN_CUDA_WARN(cudaGraphExecDestroy(exec));
  }
  {
    const std::lock_guard<std::mutex> lock(k.mutex);
    ++k.stats.graphs_new;
  }
  exec = nullptr;
  if (const cudaError_t code = KVTWIN_CUDA_TIMED(cudaGraphInstantiate(&exec, graph, 0)); code != cudaSuccess)
    return cuda_error(code, "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__);
  return exec;
}

void release_graph_exec(cudaGraphExec_t exec, std::uint64_t key) {
  if (exec == nullptr) return;
  if (t_quiet_depth > 0) {
    Kept& k = kept();
    const std::lock_guard<std::mutex> lock(k.mutex);
    if (k.graph_count < kKeptGraphsMax) {
      drop_at_exit();
      k.graphs[key].push_back(exec);
      ++k.graph_count;
      return;
    }
  }
  KVTWIN_CUDA_WARN(cudaGraphExecDestroy(exec));
}

void drop_kept_memory() {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::pair<MemoryKind, void*>> blocks = take_all_kept();
  for (const auto& [kind, block] : blocks) driver_free(kind, block);
  std::vector<cudaEvent_t> events;
  std::vector<cudaStream_t> streams;
  std::vector<cudaGraphExec_t> graphs;
  {
    Kept& k = kept();
    const std::lock_guard<std::mutex> lock(k.mutex);
    events.swap(k.events);
    streams.swap(k.streams);
    for (auto& [shape, list] : k.graphs) graphs.insert(graphs.end(), list.begin(), list.end());
    k.graphs.clear();
    k.graph_count = 0;
  }
  for (cudaGraphExec_t g : graphs) KVTWIN_CUDA_WARN(cudaGraphExecDestroy(g));
  for (cudaEvent_t e : events) KVTWIN_CUDA_WARN(cudaEventDestroy(e));
  for (cudaStream_t s : streams) {
    KVTWIN_CUDA_WARN(cudaStreamDestroy(s));
    forget_stream(s);
  }
  if (profile_requested())
    std::fprintf(stderr, "kvtwin profile: kept GPU memory given back at exit: %zu blocks, %zu graphs, %zu events, %zu streams in %.3f s\n",
                 blocks.size(), graphs.size(), events.size(), streams.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace kvtwin::gpu
