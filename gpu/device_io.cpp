// Device I/O helpers (device_io.h).
#include "gpu/device_io.h"

#include <algorithm>

#include "gpu/device_side.h"

namespace kvtwin::gpu {

Result<std::int64_t*> upload_ids(DeviceBuffer<std::int64_t>& buffer, const std::vector<std::int64_t>& values,
                                 cudaStream_t stream) {
  KVTWIN_TRY_STATUS(buffer.reserve(std::max<std::size_t>(values.size(), 1)));
  if (!values.empty())
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(buffer.get(), values.data(), values.size() * sizeof(std::int64_t),
                                    cudaMemcpyHostToDevice, stream));
  return buffer.get();
}

Result<DeviceBuffer<std::int64_t>> device_copy(const std::vector<std::int64_t>& values, cudaStream_t stream) {
  DeviceBuffer<std::int64_t> out;
  KVTWIN_TRY_STATUS(out.allocate(values.size()));
  if (!values.empty())
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.get(), values.data(), values.size() * sizeof(std::int64_t),
                                    cudaMemcpyHostToDevice, stream));
  return out;
}

Result<std::vector<std::int64_t>> download_ids(const std::int64_t* device, std::int64_t n, cudaStream_t stream) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  if (n > 0) {
    // Into pageable memory: the copy has landed when the call returns (device_io.h).
    KVTWIN_CUDA_COPY_TO_PAGEABLE(out.data(), device, out.size() * sizeof(std::int64_t), stream);
  } else {
    KVTWIN_CUDA_SYNC(stream);  // nothing to copy: still the synchronization a caller may count on
  }
  return out;
}

}  // namespace kvtwin::gpu
