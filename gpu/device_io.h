// Small device I/O shared by the pool's units (gpu_pool.h): host ids up into a unit's named
// scratch buffer, device ids back to the host, and a device flag that says whether any value of a
// list lies outside a range. Every call is on the caller's stream and every CUDA return code is
// checked (cuda_check.h).
//
// A download synchronizes the stream: the host needs the values it returns. A copy from the
// device into pageable host memory returns only once it has landed (CUDA's API synchronization
// behavior), and it lands after everything queued before it on the stream, so it is that
// synchronization itself (KVTWIN_CUDA_COPY_TO_PAGEABLE counts it as one): no cudaStreamSynchronize
// follows it (one driver call fewer; under many threads each waits on the driver's lock). An upload does not synchronize (a cudaMemcpyAsync
// from pageable host memory has copied the source before it returns, so the host vector may go
// away at once).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/result.h"
#include "gpu/device_buffer.h"

namespace kvtwin::gpu {

// Copies `values` into `buffer` (grown to at least one element, kept when large enough) on
// `stream` and returns the buffer's device pointer.
Result<std::int64_t*> upload_ids(DeviceBuffer<std::int64_t>& buffer, const std::vector<std::int64_t>& values,
                                 cudaStream_t stream);

// A fresh device buffer of exactly `values.size()` elements holding them (for state a unit keeps,
// such as a batch's loc).
Result<DeviceBuffer<std::int64_t>> device_copy(const std::vector<std::int64_t>& values, cudaStream_t stream);

// n ids from the device once the stream has reached them (synchronizes the stream).
Result<std::vector<std::int64_t>> download_ids(const std::int64_t* device, std::int64_t n, cudaStream_t stream);

}  // namespace kvtwin::gpu
