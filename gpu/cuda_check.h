// Every CUDA call's return code is checked, and an error says which call failed, where, and why.
//
//   KVTWIN_CUDA_TRY(call)    inside a function returning Status or Result<T>: a failure returns an
//                            ErrorKind::environment Error "CUDA error <name> (<text>) in <call> at file:line"
//   KVTWIN_CUDA_LAUNCHED()   after a kernel launch: checks the launch (cudaGetLastError)
//   KVTWIN_CUDA_CHECK(call)  where no error can be returned (destructors, tests' setup): a failure
//                            stops the run loudly, like any broken invariant (core/check.h)
//   KVTWIN_CUDA_WARN(call)   in destructors that may run after a sticky error: reports, goes on
//   KVTWIN_CUDA_SYNC(stream) cudaStreamSynchronize(stream), checked as KVTWIN_CUDA_TRY, and counted
//                            per stream (stream_syncs): every host synchronization of gpu/ is one,
//                            or a KVTWIN_CUDA_COPY_TO_PAGEABLE (a download that is one)
//   KVTWIN_CUDA_TIMED(call)  the call's code, unchecked, its time in the KVTWIN_PROFILE=1 profile:
//                            where the caller handles the failure itself (kept_memory.cpp)
//
// A failed CUDA call is an ErrorKind::environment Error: the device, not the input, failed. The
// GPU backend then poisons itself (gpu_pool.h): it refuses every later operation with the reason.
//
// The failure injector (BUGGIFY for the environment) lives here, because every CUDA call of the
// product passes through KVTWIN_CUDA_TRY: armed by a test, it counts the checked calls of the
// kinds it is armed for (allocation, copy, launch, synchronization, other) and makes the n-th one,
// or calls drawn by a seed, fail as a real failure of that kind would, without running them.
// Disarmed (always, outside tests), it costs one relaxed atomic load per call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/check.h"
#include "core/result.h"

namespace kvtwin::gpu {

// The Error for a failed CUDA call; `file` is shortened to its last two path components.
Error cuda_error(cudaError_t code, const char* call, const char* file, int line);

// ---------------------------------------------------------------- the failure injector

enum class CudaCallKind : std::uint8_t { allocation, copy, launch, synchronization, other };
std::string_view cuda_call_kind_name(CudaCallKind kind);
// The kind of a checked call, from its text ("cudaMalloc(...)" is an allocation).
CudaCallKind classify_cuda_call(std::string_view call);

struct CudaFaultPlan {
  std::uint32_t kinds = 0x1f;    // bit (1 << kind): the kinds counted
  std::uint64_t fail_at = 0;     // the counted call that fails (1-based); 0: none by count
  std::uint64_t seed = 0;        // with one_in > 0: each counted call fails with probability 1/one_in,
  std::uint64_t one_in = 0;      //   drawn from (seed, its count): the same calls fail every run
};

// Where an injected failure struck.
struct CudaFaultSite {
  std::uint64_t count = 0;  // the counted call's number
  CudaCallKind kind = CudaCallKind::other;
  std::string call;         // the call's text
  std::string file;         // "gpu/gpu_pool.cpp"
  int line = 0;
};

// Arms the injector (counters reset); disarming stops counting.
void arm_cuda_faults(const CudaFaultPlan& plan);
void disarm_cuda_faults();
// Calls counted since arming, and every failure injected since (in order).
std::uint64_t cuda_calls_counted();
std::vector<CudaFaultSite> cuda_faults_injected();

namespace detail {
extern std::atomic<bool> cuda_faults_armed;
cudaError_t cuda_fault_point_slow(const char* call, const char* file, int line);
}  // namespace detail

// cudaSuccess, or the error to return instead of making `call` (the injector chose it).
// Checked CUDA calls this thread has made (KVTWIN_CUDA_TRY, _CHECK, _WARN): between two readings
// of an unchanged count, this thread queued no device work. GpuPool repeats a tables digest's
// device part by it (gpu_pool.h).
namespace detail {
extern thread_local std::uint64_t t_checked_calls;
}
inline std::uint64_t checked_calls_on_this_thread() { return detail::t_checked_calls; }

inline cudaError_t cuda_fault_point(const char* call, const char* file, int line) {
  ++detail::t_checked_calls;
  if (!detail::cuda_faults_armed.load(std::memory_order_relaxed)) return cudaSuccess;
  return detail::cuda_fault_point_slow(call, file, line);
}

// ---------------------------------------------------------------- synchronization points

// Successful KVTWIN_CUDA_SYNCs of `stream` so far. The pool compares the count before and after
// an operation to know whether the device work of earlier operations is known to have completed
// (docs/gpu.md "Synchronization"): a failure of earlier, unsynchronized work surfaces at the next
// synchronization, and the pool names the operations it may have come from.
std::uint64_t stream_syncs(cudaStream_t stream);
void note_stream_synchronized(cudaStream_t stream);
// Drops a destroyed stream's count.
void forget_stream(cudaStream_t stream);

// ---------------------------------------------------------------- where CUDA calls wait

// With KVTWIN_PROFILE=1 in the environment, every checked call's wall and thread-CPU time is
// added to its call site's totals, printed to stderr (largest wall time first) when the process
// ends: which call blocks, and whether it computes or waits (a developer's view; no result
// depends on it). Off, a call costs one relaxed atomic load more.
namespace detail {
extern std::atomic<bool> cuda_profile_on;
// This thread's checked CUDA calls so far, wall and thread CPU (zero unless the profile is on):
// what an operation's own time minus its calls' is the host work around them.
struct CudaTimeOnThread {
  double wall = 0;
  double cpu = 0;
};
CudaTimeOnThread cuda_time_on_this_thread();
double profile_now_seconds();
double profile_thread_cpu_seconds();
class CudaCallTimer {
 public:
  CudaCallTimer(const char* call, const char* file, int line) {
    if (cuda_profile_on.load(std::memory_order_relaxed)) start(call, file, line);
  }
  ~CudaCallTimer() {
    if (call_ != nullptr) stop();
  }
  CudaCallTimer(const CudaCallTimer&) = delete;
  CudaCallTimer& operator=(const CudaCallTimer&) = delete;

 private:
  void start(const char* call, const char* file, int line);
  void stop();
  const char* call_ = nullptr;
  const char* file_ = nullptr;
  int line_ = 0;
  double wall_ = 0;
  double cpu_ = 0;
};
}  // namespace detail

// The copy of KVTWIN_CUDA_COPY_TO_PAGEABLE (its name tells the failure injector its kind).
inline cudaError_t synchronizing_copy_to_pageable(void* host, const void* device, std::size_t bytes,
                                                  cudaStream_t stream) {
  return cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
}

// Prints the same message to stderr and returns false (for KVTWIN_CUDA_WARN).
bool cuda_warn(cudaError_t code, const char* call, const char* file, int line);

// The same message as text, for KVTWIN_CUDA_CHECK.
std::string cuda_error_text(cudaError_t code, const char* call);

}  // namespace kvtwin::gpu

#define KVTWIN_CUDA_TRY(call)                                                                         \
  do {                                                                                                \
    const ::kvtwin::gpu::detail::CudaCallTimer kvtwin_cuda_timer_(#call, __FILE__, __LINE__);         \
    cudaError_t kvtwin_cuda_code_ = ::kvtwin::gpu::cuda_fault_point(#call, __FILE__, __LINE__);       \
    if (kvtwin_cuda_code_ == cudaSuccess) kvtwin_cuda_code_ = (call);                                 \
    if (kvtwin_cuda_code_ != cudaSuccess)                                                             \
      return ::kvtwin::gpu::cuda_error(kvtwin_cuda_code_, #call, __FILE__, __LINE__);                 \
  } while (false)

#define KVTWIN_CUDA_LAUNCHED() KVTWIN_CUDA_TRY(cudaGetLastError())

// A driver call timed in the CUDA profile as a checked call is, its code returned as it came (for a
// caller that handles the failure itself: a kept block, event, stream or graph made anew).
#define KVTWIN_CUDA_TIMED(call)                                                                  \
  ([&]() -> cudaError_t {                                                                        \
    const ::kvtwin::gpu::detail::CudaCallTimer kvtwin_cuda_timer_(#call, __FILE__, __LINE__);    \
    return (call);                                                                               \
  }())

#define KVTWIN_CUDA_SYNC(stream)                                   \
  do {                                                             \
    KVTWIN_CUDA_TRY(cudaStreamSynchronize(stream));                \
    ::kvtwin::gpu::note_stream_synchronized(stream);               \
  } while (false)

// A copy from the device into pageable host memory: cudaMemcpyAsync returns only once such a copy
// has landed, after all the stream's earlier work (CUDA's API synchronization behavior), so it is a
// synchronization of the stream, with no cudaStreamSynchronize after it: counted as one
// (stream_syncs), and of the synchronization kind to the failure injector (a failure of earlier
// work surfaces there).
#define KVTWIN_CUDA_COPY_TO_PAGEABLE(host, device, bytes, stream)                          \
  do {                                                                                   \
    KVTWIN_CUDA_TRY(::kvtwin::gpu::synchronizing_copy_to_pageable(host, device, bytes, stream)); \
    ::kvtwin::gpu::note_stream_synchronized(stream);                                     \
  } while (false)

#define KVTWIN_CUDA_CHECK(call)                                                                          \
  do {                                                                                                   \
    ++::kvtwin::gpu::detail::t_checked_calls;                                                            \
    const cudaError_t kvtwin_cuda_code_ = (call);                                                        \
    if (kvtwin_cuda_code_ != cudaSuccess)                                                                \
      ::kvtwin::invariant_failed(#call, ::kvtwin::gpu::cuda_error_text(kvtwin_cuda_code_, #call), __FILE__, \
                                 __LINE__);                                                              \
  } while (false)

#define KVTWIN_CUDA_WARN(call)                                                           \
  do {                                                                                   \
    const ::kvtwin::gpu::detail::CudaCallTimer kvtwin_cuda_timer_(#call, __FILE__, __LINE__); \
    ++::kvtwin::gpu::detail::t_checked_calls;                                            \
    const cudaError_t kvtwin_cuda_code_ = (call);                                        \
    if (kvtwin_cuda_code_ != cudaSuccess)                                                \
      ::kvtwin::gpu::cuda_warn(kvtwin_cuda_code_, #call, __FILE__, __LINE__);            \
  } while (false)
