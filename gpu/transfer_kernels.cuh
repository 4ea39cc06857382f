// The kernels of host transfers (SPEC.md section 8; transfers.h runs them on a copy stream):
//
//   resolve_transfer  device virtual pages -> physical through the side's v2p, and host logical
//                     pages -> physical through the arena's logical -> physical map (mapped pinned
//                     memory), on the device, after the copy stream has waited for the producer
//   copy_pages        whole page envelopes between the device pool and the pinned host arena
//                     (its device pointer: mapped memory), one page per blockIdx.y, 16-byte words;
//                     a page whose resolved id is negative copies nothing (a last guard)
//
// Fault transfer_logical_as_physical (19) lives in resolve_transfer: the host logical id is taken
// as the physical page.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kvtwin::gpu {

struct ResolveTransferParams {
  const std::int64_t* virtual_pages = nullptr;  // [pages]
  const std::int64_t* host_logical = nullptr;   // [pages]
  std::int64_t pages = 0;
  const std::int64_t* v2p = nullptr;            // the device side's
  std::int64_t v2p_len = 0;
  const std::int64_t* host_map = nullptr;       // the host side's logical -> physical (device address)
  std::int64_t host_pages = 0;
  std::int64_t* device_physical = nullptr;      // out [pages], -1 where unbound
  std::int64_t* host_physical = nullptr;        // out [pages], -1 where free
  bool logical_as_physical = false;             // fault 19
};
cudaError_t launch_resolve_transfer(const ResolveTransferParams& p, cudaStream_t stream);

struct CopyPagesParams {
  std::uint8_t* device_base = nullptr;   // the pool
  std::uint64_t device_bytes = 0;
  std::uint8_t* host_base = nullptr;     // the arena's device pointer
  std::uint64_t host_bytes = 0;
  std::uint64_t page_bytes = 0;          // the device page envelope = the host page
  const std::int64_t* device_physical = nullptr;
  const std::int64_t* host_physical = nullptr;
  std::int64_t pages = 0;
  bool to_host = true;                   // offload; false: load-back
};
cudaError_t launch_copy_pages(const CopyPagesParams& p, cudaStream_t stream);

// One thread that spins for about `microseconds` on the stream: the slow producer under which
// fault 13's missing wait shows every time (transfers.cpp), never run otherwise.
cudaError_t launch_spin(std::uint32_t microseconds, cudaStream_t stream);

// Loads every kernel of this file now. Under lazy module loading (CUDA's default) a kernel's first
// launch loads it, and that load waits for the device to go idle: a first copy kernel enqueued
// behind a busy stream would hold the host until the stream drained, serializing transfers that
// are meant to overlap (and hiding fault 13's race). Called when a pool's transfers are set up.
cudaError_t preload_transfer_kernels();

}  // namespace kvtwin::gpu
