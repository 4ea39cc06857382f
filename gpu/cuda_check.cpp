// CUDA error values with file and line (cuda_check.h).
#include "gpu/cuda_check.h"

#include <cstdio>
#include <string>
#include <string_view>

namespace kvtwin::gpu {
namespace {

// "a/b/c/gpu/pool.cu" -> "gpu/pool.cu": messages name the file, not the build machine's paths.
std::string_view short_file(const char* file) {
  std::string_view f(file);
  const std::size_t last = f.rfind('/');
  if (last == std::string_view::npos || last == 0) return f;
  const std::size_t before = f.rfind('/', last - 1);
  return before == std::string_view::npos ? f : f.substr(before + 1);
}

}  // namespace

std::string cuda_error_text(cudaError_t code, const char* call) {
  return std::string("CUDA error ") + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ") in " + call;
}

Error cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  return make_error(ErrorKind::internal,
                    cuda_error_text(code, call) + " at " + std::string(short_file(file)) + ":" + std::to_string(line));
}

bool cuda_warn(cudaError_t code, const char* call, const char* file, int line) {
  const Error e = cuda_error(code, call, file, line);
  std::fprintf(stderr, "kvtwin: %s\n", e.message.c_str());
  return false;
}

}  // namespace kvtwin::gpu
