// CUDA error values with file and line (cuda_check.h).
#include "gpu/cuda_check.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "core/profile_switch.h"
#include "core/rng.h"

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

// The injector's state (cuda_check.h), behind one mutex: only armed runs take it.
std::mutex g_injector_mutex;
CudaFaultPlan g_plan;
std::uint64_t g_counted = 0;
std::vector<CudaFaultSite> g_injected;
// The count of the failure just injected on this thread, for cuda_error() to name it.
thread_local std::uint64_t t_injected_count = 0;

// Successful synchronizations per stream (stream_syncs); looked up by key only.
std::mutex g_syncs_mutex;
std::map<cudaStream_t, std::uint64_t> g_syncs;

}  // namespace

std::string cuda_error_text(cudaError_t code, const char* call) {
  return std::string("CUDA error ") + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ") in " + call;
}

Error cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  std::string text = cuda_error_text(code, call) + " at " + std::string(short_file(file)) + ":" + std::to_string(line);
  if (t_injected_count != 0) {
    text += " (injected: counted call " + std::to_string(t_injected_count) + ")";
    t_injected_count = 0;
  }
  return make_error(ErrorKind::environment, std::move(text));
}

// ---------------------------------------------------------------- the failure injector

namespace detail {
std::atomic<bool> cuda_faults_armed{false};
thread_local std::uint64_t t_checked_calls = 0;
}  // namespace detail

std::string_view cuda_call_kind_name(CudaCallKind kind) {
  switch (kind) {
    case CudaCallKind::allocation:
      return "allocation";
    case CudaCallKind::copy:
      return "copy";
    case CudaCallKind::launch:
      return "launch";
    case CudaCallKind::synchronization:
      return "synchronization";
    case CudaCallKind::other:
      return "other";
  }
  return "other";
}

CudaCallKind classify_cuda_call(std::string_view call) {
  const auto has = [&](std::string_view word) { return call.find(word) != std::string_view::npos; };
  if (has("synchronizing_copy")) return CudaCallKind::synchronization;  // KVTWIN_CUDA_COPY_TO_PAGEABLE
  if (has("Malloc") || has("HostAlloc")) return CudaCallKind::allocation;
  if (has("Memcpy") || has("Memset")) return CudaCallKind::copy;
  if (has("Synchronize") || has("EventQuery") || has("StreamWaitEvent")) return CudaCallKind::synchronization;
  if (has("launch_") || has("GetLastError") || has("GraphLaunch") || has("cub::")) return CudaCallKind::launch;
  return CudaCallKind::other;
}

cudaError_t detail::cuda_fault_point_slow(const char* call, const char* file, int line) {
  std::lock_guard<std::mutex> lock(g_injector_mutex);
  if (!cuda_faults_armed.load()) return cudaSuccess;
  const CudaCallKind kind = classify_cuda_call(call);
  if ((g_plan.kinds & (1u << static_cast<unsigned>(kind))) == 0) return cudaSuccess;
  const std::uint64_t count = ++g_counted;
  bool fail = count == g_plan.fail_at;
  if (!fail && g_plan.one_in != 0) fail = mix_seed(g_plan.seed, count) % g_plan.one_in == 0;
  if (!fail) return cudaSuccess;
  g_injected.push_back(CudaFaultSite{count, kind, call, std::string(short_file(file)), line});
  t_injected_count = count;
  // The error a real failure of this kind gives.
  switch (kind) {
    case CudaCallKind::allocation:
      return cudaErrorMemoryAllocation;
    case CudaCallKind::launch:
      return cudaErrorLaunchFailure;
    case CudaCallKind::synchronization:
      return cudaErrorLaunchTimeout;
    case CudaCallKind::copy:
    case CudaCallKind::other:
      return cudaErrorUnknown;
  }
  return cudaErrorUnknown;
}

void arm_cuda_faults(const CudaFaultPlan& plan) {
  std::lock_guard<std::mutex> lock(g_injector_mutex);
  g_plan = plan;
  g_counted = 0;
  g_injected.clear();
  detail::cuda_faults_armed.store(true);
}

void disarm_cuda_faults() {
  std::lock_guard<std::mutex> lock(g_injector_mutex);
  detail::cuda_faults_armed.store(false);
}

std::uint64_t cuda_calls_counted() {
  std::lock_guard<std::mutex> lock(g_injector_mutex);
  return g_counted;
}

std::vector<CudaFaultSite> cuda_faults_injected() {
  std::lock_guard<std::mutex> lock(g_injector_mutex);
  return g_injected;
}

std::uint64_t stream_syncs(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_syncs_mutex);
  const auto it = g_syncs.find(stream);
  return it == g_syncs.end() ? 0 : it->second;
}

void note_stream_synchronized(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_syncs_mutex);
  ++g_syncs[stream];
}

void forget_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_syncs_mutex);
  g_syncs.erase(stream);
}

bool cuda_warn(cudaError_t code, const char* call, const char* file, int line) {
  const Error e = cuda_error(code, call, file, line);
  std::fprintf(stderr, "kvtwin: %s\n", e.message.c_str());
  return false;
}

// ---------------------------------------------------------------- where CUDA calls wait

namespace {

struct SiteTotals {
  std::string call;
  std::uint64_t calls = 0;
  double wall = 0;
  double cpu = 0;
};

std::mutex g_profile_mutex;
std::map<std::pair<const char*, int>, SiteTotals> g_sites;  // printed by total, not by key order
thread_local detail::CudaTimeOnThread t_cuda_time;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void print_cuda_profile() {
  std::map<std::string, SiteTotals> by_name;  // one site's file literal may differ between units
  {
    std::lock_guard<std::mutex> lock(g_profile_mutex);
    for (const auto& [site, t] : g_sites) {
      SiteTotals& n = by_name[std::string(short_file(site.first)) + ":" + std::to_string(site.second)];
      n.call = t.call;
      n.calls += t.calls;
      n.wall += t.wall;
      n.cpu += t.cpu;
    }
  }
  std::vector<std::pair<std::string, SiteTotals>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.wall > b.second.wall; });
  std::fprintf(stderr, "kvtwin profile: CUDA calls by site (wall, thread CPU), all threads\n");
  for (std::size_t i = 0; i < rows.size() && i < 40; ++i) {
    const auto& [site, t] = rows[i];
    std::fprintf(stderr, "  %9.3f s %9.3f s cpu %10llu calls %8.1f us/call  %s  %.70s\n", t.wall, t.cpu,
                 static_cast<unsigned long long>(t.calls), t.calls ? 1e6 * t.wall / t.calls : 0.0, site.c_str(),
                 t.call.c_str());
  }
}

}  // namespace

namespace detail {
std::atomic<bool> cuda_profile_on{profile_requested()};

void CudaCallTimer::start(const char* call, const char* file, int line) {
  call_ = call;
  file_ = file;
  line_ = line;
  wall_ = now_seconds();
  cpu_ = thread_cpu_seconds();
}

CudaTimeOnThread cuda_time_on_this_thread() { return t_cuda_time; }
double profile_now_seconds() { return now_seconds(); }
double profile_thread_cpu_seconds() { return thread_cpu_seconds(); }

void CudaCallTimer::stop() {
  const double wall = now_seconds() - wall_;
  const double cpu = thread_cpu_seconds() - cpu_;
  t_cuda_time.wall += wall;
  t_cuda_time.cpu += cpu;
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(print_cuda_profile); });
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  SiteTotals& t = g_sites[{file_, line_}];
  if (t.calls == 0) t.call = call_;
  ++t.calls;
  t.wall += wall;
  t.cpu += cpu;
}
}  // namespace detail

}  // namespace kvtwin::gpu
