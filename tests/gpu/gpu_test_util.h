// Shared helpers of the GPU tests: the named skip where no device exists, the run's seed (printed
// first, overridable with KVTWIN_SEED), and small device buffer helpers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "gpu/device_buffer.h"
#include "gpu/gpu_backend.h"

// Every GPU test starts with this: CI has no GPU, and says so by name.
#define KVTWIN_REQUIRE_CUDA()                                                  \
  do {                                                                         \
    if (!::kvtwin::gpu::cuda_device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (false)

namespace kvtwin::gpu::testing {

// The seed of a randomized test: KVTWIN_SEED if set, else `fallback`; printed with the way to
// reproduce the run.
inline std::uint64_t test_seed(std::uint64_t fallback) {
  std::uint64_t seed = fallback;
  if (const char* env = std::getenv("KVTWIN_SEED")) seed = std::strtoull(env, nullptr, 0);
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[ seed     ] %llu  (reproduce: KVTWIN_SEED=%llu %s --gtest_filter=%s.%s)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
              ::testing::internal::GetArgvs().empty() ? "kvtwin_gpu_tests" : ::testing::internal::GetArgvs()[0].c_str(),
              info->test_suite_name(), info->name());
  return seed;
}

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> d;
  KVTWIN_CHECK(d.allocate(std::max<std::size_t>(host.size(), 1)).ok(), "device allocation");
  if (!host.empty()) KVTWIN_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> to_host(const DeviceBuffer<T>& d, std::size_t n) {
  std::vector<T> host(n);
  KVTWIN_CUDA_CHECK(cudaDeviceSynchronize());
  if (n > 0) KVTWIN_CUDA_CHECK(cudaMemcpy(host.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// Random bytes, never all zero.
inline std::vector<std::uint8_t> random_bytes(Rng& rng, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(rng.next_u64() | 1);
  return out;
}

}  // namespace kvtwin::gpu::testing
