// The CUDA backend's factory (gpu_backend.h).
#include "gpu/gpu_backend.h"

#include <cstdio>

#include <cuda_runtime_api.h>

#include "gpu/gpu_pool.h"

namespace kvtwin::gpu {

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string cuda_device_description() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(err);
  if (count == 0) return "no CUDA device: the runtime found none";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "a CUDA device whose properties cannot be read";
  int runtime = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " + gib + " GiB, compute " +
         std::to_string(prop.major) + "." + std::to_string(prop.minor) + ", CUDA runtime " +
         std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
}

Status cuda_context_health() {
  if (!cuda_device_available()) return ok_status();  // no device, no context to lose
  // An error that is not sticky (a bad launch's configuration, say) is the last call's alone and
  // is cleared here; a sticky one comes back from the synchronization (and every call after).
  (void)cudaGetLastError();
  const cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) return ok_status();
  return make_error(ErrorKind::environment, std::string("the CUDA context of this process is unusable (") +
                                                cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")");
}

std::unique_ptr<Backend> make_gpu_backend(const Faults& faults, const std::string& storage_parent) {
  auto pool = std::make_unique<GpuPool>(faults);
  pool->set_storage_parent(storage_parent);
  return pool;
}

Status verify_gpu_backend(const Backend& backend) {
  const auto* gpu = dynamic_cast<const GpuPool*>(&backend);
  if (gpu == nullptr)
    return make_error(ErrorKind::invalid_argument, "verify_gpu_backend: backend '" + std::string(backend.name()) +
                                                       "' is not the CUDA backend; it has no device tables to check");
  return gpu->verify();
}

Status verify_gpu_backend(const Backend& backend, std::optional<PoolTables>& tables_read) {
  tables_read.reset();
  const auto* gpu = dynamic_cast<const GpuPool*>(&backend);
  if (gpu == nullptr) return verify_gpu_backend(backend);  // (its error)
  return gpu->verify(&tables_read);
}

}  // namespace kvtwin::gpu
