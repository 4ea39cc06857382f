// Every CUDA call's return code is checked, and an error says which call failed, where, and why.
//
//   KVTWIN_CUDA_TRY(call)    inside a function returning Status or Result<T>: a failure returns an
//                            ErrorKind::internal Error "CUDA error <name> (<text>) in <call> at file:line"
//   KVTWIN_CUDA_LAUNCHED()   after a kernel launch: checks the launch (cudaGetLastError)
//   KVTWIN_CUDA_CHECK(call)  where no error can be returned (destructors, tests' setup): a failure
//                            stops the run loudly, like any broken invariant (core/check.h)
//   KVTWIN_CUDA_WARN(call)   in destructors that may run after a sticky error: reports, goes on
#pragma once

#include <cuda_runtime_api.h>

#include "core/check.h"
#include "core/result.h"

namespace kvtwin::gpu {

// The Error for a failed CUDA call; `file` is shortened to its last two path components.
Error cuda_error(cudaError_t code, const char* call, const char* file, int line);

// Prints the same message to stderr and returns false (for KVTWIN_CUDA_WARN).
bool cuda_warn(cudaError_t code, const char* call, const char* file, int line);

// The same message as text, for KVTWIN_CUDA_CHECK.
std::string cuda_error_text(cudaError_t code, const char* call);

}  // namespace kvtwin::gpu

#define KVTWIN_CUDA_TRY(call)                                                            \
  do {                                                                                   \
    const cudaError_t kvtwin_cuda_code_ = (call);                                        \
    if (kvtwin_cuda_code_ != cudaSuccess)                                                \
      return ::kvtwin::gpu::cuda_error(kvtwin_cuda_code_, #call, __FILE__, __LINE__);    \
  } while (false)

#define KVTWIN_CUDA_LAUNCHED() KVTWIN_CUDA_TRY(cudaGetLastError())

#define KVTWIN_CUDA_CHECK(call)                                                                          \
  do {                                                                                                   \
    const cudaError_t kvtwin_cuda_code_ = (call);                                                        \
    if (kvtwin_cuda_code_ != cudaSuccess)                                                                \
      ::kvtwin::invariant_failed(#call, ::kvtwin::gpu::cuda_error_text(kvtwin_cuda_code_, #call), __FILE__, \
                                 __LINE__);                                                              \
  } while (false)

#define KVTWIN_CUDA_WARN(call)                                                           \
  do {                                                                                   \
    const cudaError_t kvtwin_cuda_code_ = (call);                                        \
    if (kvtwin_cuda_code_ != cudaSuccess)                                                \
      ::kvtwin::gpu::cuda_warn(kvtwin_cuda_code_, #call, __FILE__, __LINE__);            \
  } while (false)
