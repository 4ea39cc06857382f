// The CUDA backend under injected CUDA failures (gpu/cuda_check.h), every checked call in turn.
//
// Seeded swarm cases (props/ generators, pools with bytes) are played once on the GPU to count the
// checked CUDA calls each operation makes (allocations, copies, launches, synchronizations and the
// rest); then, for every call n, the model and a fresh GPU pool play the case side by side with
// call n failing. The contract (issue 13): before the failure every answer, table and pool equals
// the model's; the operation where it strikes either completes exactly as the model's, or is
// refused with ErrorKind::environment and poisons the backend, so that every later operation,
// tables() and raw_bytes() are refused with the reason. Never a wrong answer.
//
// Skips by name without a device; run it on the GPU machine (it prints the sites it walked).
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu/cuda_check.h"
#include "props/choices.h"
#include "props/config_gen.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "tests/gpu/differential.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvtwin::gpu {
namespace {

using ::testing::HasSubstr;
using testing::step;
using testing::Twin;

std::vector<Op> make_case(std::uint64_t seed, std::size_t count) {
  props::RngChoices choices(seed);
  PoolConfig config = props::generate_config(choices);
  config.tables_only = false;
  const props::SwarmWeights weights = props::draw_swarm(choices);
  props::PoolShadow shadow(config);
  std::vector<Op> ops = {BuildPool{config}};
  for (std::size_t i = 0; i < count; ++i) {
    ops.push_back(props::generate_op(choices, shadow, weights));
    (void)shadow.apply(ops.back());
  }
  ops.push_back(Checkpoint{});
  return ops;
}

struct Walk {
  std::uint64_t calls = 0, completed = 0, poisoned = 0;
  std::set<std::string> sites;                      // file:line (kind)
  std::map<std::string, std::uint64_t> by_kind;     // kind -> calls walked
};

void walk(const std::vector<Op>& ops, Walk& w) {
  // The checked calls each op makes, counted on a clean run.
  std::vector<std::uint64_t> calls_after;
  {
    GpuPool gpu;
    arm_cuda_faults(CudaFaultPlan{});
    for (const Op& op : ops) {
      (void)gpu.apply(op);
      calls_after.push_back(cuda_calls_counted());
    }
    disarm_cuda_faults();
  }
  const std::uint64_t total = calls_after.back();
  ASSERT_GT(total, ops.size()) << "every op makes CUDA calls";
  for (std::uint64_t n = 1; n <= total; ++n) {
    SCOPED_TRACE("checked CUDA call " + std::to_string(n) + " of " + std::to_string(total));
    std::size_t k = 0;
    while (calls_after[k] < n) ++k;
    Twin twin;
    CudaFaultPlan plan;
    plan.fail_at = n;
    arm_cuda_faults(plan);
    // Only apply() runs while armed, so the calls are counted exactly as in the clean run.
    for (std::size_t i = 0; i < k; ++i) {
      const OpResult g = twin.gpu.apply(ops[i]);
      const std::optional<std::string> d = testing::result_difference(twin.model.apply(ops[i]), g);
      ASSERT_FALSE(d.has_value()) << "before the fault: " << *d;
    }
    const OpResult gpu = twin.gpu.apply(ops[k]);
    const std::vector<CudaFaultSite> injected = cuda_faults_injected();
    disarm_cuda_faults();
    const OpResult model = twin.model.apply(ops[k]);
    ASSERT_EQ(injected.size(), 1u);
    ++w.calls;
    ++w.by_kind[std::string(cuda_call_kind_name(injected[0].kind))];
    w.sites.insert(injected[0].file + ":" + std::to_string(injected[0].line) + " (" +
                   std::string(cuda_call_kind_name(injected[0].kind)) + ")");
    if (gpu.ok() || gpu.error().kind != ErrorKind::environment) {
      // It completed (the failure was absorbed): exactly as the model did, tables and bytes too.
      ++w.completed;
      const std::optional<std::string> d = testing::result_difference(model, gpu);
      ASSERT_FALSE(d.has_value()) << "a wrong answer after an injected failure: " << *d;
      Result<PoolTables> model_tables = twin.model.tables(), gpu_tables = twin.gpu.tables();
      if (model_tables.ok() && gpu_tables.ok()) {
        const std::optional<std::string> t = testing::table_difference(*model_tables, *gpu_tables);
        ASSERT_FALSE(t.has_value()) << "tables after an absorbed failure: " << *t;
      }
      for (std::size_t i = k + 1; i < ops.size(); ++i) {
        const std::optional<std::string> after = step(twin, ops[i], /*compare_pools=*/i + 1 == ops.size());
        ASSERT_FALSE(after.has_value()) << "after an absorbed failure: " << *after;
      }
      continue;
    }
    // Refused and poisoned: the reason is the CUDA failure, and nothing is answered after it.
    ++w.poisoned;
    EXPECT_THAT(gpu.error().message, HasSubstr("injected"));
    for (std::size_t i = k + 1; i < ops.size(); ++i) {
      const OpResult r = twin.gpu.apply(ops[i]);
      ASSERT_FALSE(r.ok()) << "op " << i << " answered by a poisoned backend";
      EXPECT_EQ(r.error().kind, ErrorKind::environment);
      EXPECT_THAT(r.error().message, HasSubstr("refuses every operation since a CUDA failure"));
    }
    EXPECT_FALSE(twin.gpu.tables().ok());
    EXPECT_FALSE(twin.gpu.raw_bytes(0, 1).ok());
  }
}

TEST(GpuFaultInjection, EveryCheckedCudaCallInTurnCompletesOrPoisons) {
  KVTWIN_REQUIRE_CUDA();
  const std::uint64_t seed = testing::test_seed(31);
  Walk w;
  for (std::uint64_t s = seed; s < seed + 2; ++s) {
    SCOPED_TRACE("case seed " + std::to_string(s));
    walk(make_case(s, 60), w);
    if (HasFatalFailure()) return;
  }
  std::string kinds;
  for (const auto& [kind, n] : w.by_kind) kinds += " " + kind + ":" + std::to_string(n);
  std::printf("CUDA calls walked: %llu (completed %llu, poisoned %llu); by kind:%s; %zu distinct sites:\n",
              static_cast<unsigned long long>(w.calls), static_cast<unsigned long long>(w.completed),
              static_cast<unsigned long long>(w.poisoned), kinds.c_str(), w.sites.size());
  for (const std::string& site : w.sites) std::printf("  %s\n", site.c_str());
  EXPECT_GE(w.by_kind.size(), 4u) << "allocations, copies, launches and synchronizations were all walked";
}

TEST(GpuFaultInjection, FailuresDrawnByASeedPoisonAndAreReproducible) {
  KVTWIN_REQUIRE_CUDA();
  const std::uint64_t seed = testing::test_seed(41);
  const std::vector<Op> ops = make_case(seed, 60);
  std::vector<std::string> first_run;
  for (int run = 0; run < 2; ++run) {
    Twin twin;
    CudaFaultPlan plan;
    plan.seed = seed;
    plan.one_in = 64;
    arm_cuda_faults(plan);
    bool poisoned = false;
    for (const Op& op : ops) {
      const OpResult r = twin.gpu.apply(op);
      poisoned = poisoned || (!r.ok() && r.error().kind == ErrorKind::environment);
      if (poisoned) {
        EXPECT_FALSE(r.ok()) << "nothing is answered once poisoned";
      }
    }
    std::vector<std::string> sites;
    for (const CudaFaultSite& s : cuda_faults_injected()) sites.push_back(s.file + ":" + std::to_string(s.line));
    disarm_cuda_faults();
    if (run == 0) {
      first_run = sites;
    } else {
      EXPECT_EQ(sites, first_run) << "the same seed fails the same calls";
    }
  }
}

TEST(GpuFaultInjection, CallsAreClassifiedByKind) {
  // No device needed: the classification is text.
  EXPECT_EQ(classify_cuda_call("cudaMalloc(&p, count * sizeof(T))"), CudaCallKind::allocation);
  EXPECT_EQ(classify_cuda_call("cudaMemcpyAsync(out.data(), ...)"), CudaCallKind::copy);
  EXPECT_EQ(classify_cuda_call("cudaMemsetAsync(status_.get(), 0, 4, stream_)"), CudaCallKind::copy);
  EXPECT_EQ(classify_cuda_call("launch_translate(p, stream_)"), CudaCallKind::launch);
  EXPECT_EQ(classify_cuda_call("cudaGetLastError()"), CudaCallKind::launch);
  EXPECT_EQ(classify_cuda_call("cudaStreamSynchronize(stream_)"), CudaCallKind::synchronization);
  EXPECT_EQ(classify_cuda_call("cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)"), CudaCallKind::other);
}

}  // namespace
}  // namespace kvtwin::gpu
