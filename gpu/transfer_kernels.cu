// Host transfer kernels (transfer_kernels.cuh).
#include "gpu/transfer_kernels.cuh"

#include <algorithm>
#include <type_traits>

namespace kvtwin::gpu {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxGridY = 65535;

__global__ void resolve_transfer_kernel(const ResolveTransferParams p) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.pages;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t v = p.virtual_pages[i];
    p.device_physical[i] = v >= 0 && v < p.v2p_len ? p.v2p[v] : -1;
    const std::int64_t l = p.host_logical[i];
    if (p.logical_as_physical) {
      p.host_physical[i] = l;  // fault 19: a cache's logical id handed to the pool as a physical page
    } else {
      p.host_physical[i] = l >= 0 && l < p.host_pages ? p.host_map[l] : -1;
    }
  }
}

template <bool kVector>
__global__ void __launch_bounds__(kThreads) copy_pages_kernel(const CopyPagesParams p) {
  using Unit = std::conditional_t<kVector, uint4, std::uint8_t>;
  const std::uint64_t units = p.page_bytes / sizeof(Unit);
  for (std::int64_t i = blockIdx.y; i < p.pages; i += gridDim.y) {
    const std::int64_t d = p.device_physical[i], h = p.host_physical[i];
    if (d < 0 || h < 0) continue;
    const std::uint64_t d_off = static_cast<std::uint64_t>(d) * p.page_bytes;
    const std::uint64_t h_off = static_cast<std::uint64_t>(h) * p.page_bytes;
    if (d_off + p.page_bytes > p.device_bytes || h_off + p.page_bytes > p.host_bytes) continue;
    const Unit* from = reinterpret_cast<const Unit*>(p.to_host ? p.device_base + d_off : p.host_base + h_off);
    Unit* to = reinterpret_cast<Unit*>(p.to_host ? p.host_base + h_off : p.device_base + d_off);
    for (std::uint64_t u = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
         u += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
      to[u] = from[u];
  }
}

}  // namespace

cudaError_t launch_resolve_transfer(const ResolveTransferParams& p, cudaStream_t stream) {
  if (p.pages <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((p.pages + kThreads - 1) / kThreads, 4096));
  resolve_transfer_kernel<<<blocks, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_copy_pages(const CopyPagesParams& p, cudaStream_t stream) {
  if (p.pages <= 0 || p.page_bytes == 0) return cudaSuccess;
  const bool vector =
      (reinterpret_cast<std::uintptr_t>(p.device_base) | reinterpret_cast<std::uintptr_t>(p.host_base) | p.page_bytes) %
          16 ==
      0;
  const std::uint64_t units = p.page_bytes / (vector ? 16 : 1);
  // Enough blocks per page to keep the copy engines' worth of bandwidth in flight over PCIe /
  // C2C: a 64 KiB page is 4096 words, 16 blocks of 256 threads.
  const unsigned x = static_cast<unsigned>(std::clamp<std::uint64_t>((units + kThreads - 1) / kThreads, 1, 64));
  const dim3 grid(x, static_cast<unsigned>(std::min<std::int64_t>(p.pages, kMaxGridY)));
  if (vector)
    copy_pages_kernel<true><<<grid, kThreads, 0, stream>>>(p);
  else
    copy_pages_kernel<false><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

__device__ unsigned long long global_timer_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(unsigned long long nanoseconds) {
  const unsigned long long start = global_timer_ns();
  while (global_timer_ns() - start < nanoseconds) __nanosleep(1000);
}

cudaError_t launch_spin(std::uint32_t microseconds, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(microseconds) * 1000);
  return cudaGetLastError();
}

cudaError_t preload_transfer_kernels() {
  // cudaFuncGetAttributes loads a lazily loaded function (CUDA programming guide, lazy loading).
  cudaFuncAttributes attributes{};
  const void* const kernels[] = {reinterpret_cast<const void*>(&resolve_transfer_kernel),
                                 reinterpret_cast<const void*>(&copy_pages_kernel<true>),
                                 reinterpret_cast<const void*>(&copy_pages_kernel<false>),
                                 reinterpret_cast<const void*>(&spin_kernel)};
  for (const void* f : kernels) {
    if (const cudaError_t e = cudaFuncGetAttributes(&attributes, f); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace kvtwin::gpu
