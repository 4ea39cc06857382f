// Kept blocks by kind and size class, and the pools' held releases (kept_memory.h for why). One mutex: the calls are few per pool
// build, and a thread that takes a block another thread kept is as safe as the one that kept it
// (the block's streams were synchronized before it was kept).
#include "gpu/kept_memory.h"

#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"

namespace kvtwin::gpu {
namespace {

// Bounds: blocks larger than this are never kept (a 2 GiB regression pool is freed as before), and
// at most this much is kept per kind (the gate's pools are a few MiB each, one per thread).
constexpr std::size_t kKeptBlockBytesMax = std::size_t{1} << 30;
constexpr std::array<std::size_t, 3> kKeptBytesMax = {std::size_t{4} << 30, std::size_t{1} << 30, std::size_t{1} << 30};

struct Kept {
  std::mutex mutex;
  std::array<std::map<std::size_t, std::vector<void*>>, 3> blocks;  // by kind, then size class
  std::array<std::size_t, 3> bytes{};
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
      return cudaMalloc(block, bytes);
    case MemoryKind::pinned:
      return cudaHostAlloc(block, bytes, cudaHostAllocDefault);
    case MemoryKind::pinned_mapped:
      return cudaHostAlloc(block, bytes, cudaHostAllocMapped);
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
      // Kept blocks go back to the driver before the runtime unloads (a leak check then sees none).
      static std::once_flag at_exit;
      std::call_once(at_exit, [] { std::atexit(drop_kept_memory); });
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

void drop_kept_memory() {
  for (const auto& [kind, block] : take_all_kept()) driver_free(kind, block);
}

}  // namespace kvtwin::gpu
