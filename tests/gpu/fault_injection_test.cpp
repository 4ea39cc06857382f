// The CUDA backend under injected CUDA failures (gpu/cuda_check.h), every checked call in turn.
//
// Seeded swarm cases (props/ generators, pools with bytes) are played once on the GPU to count the
// checked CUDA calls each operation makes (allocations, copies, launches, synchronizations and the
// rest); then, for every call n of every op, the model and a fresh GPU pool play the case side by
// side through the one runner (traces/runner.h, the gate's checks) with that call failing. The contract (issue 13): before the failure every answer, table and pool equals
// the model's; the operation where it strikes either completes exactly as the model's, or is
// refused with ErrorKind::environment and poisons the backend, so that every later operation,
// tables() and raw_bytes() are refused with the reason. Never a wrong answer.
//
// Skips by name without a device; run it on the GPU machine (it prints the sites it walked).
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu/cuda_check.h"
#include "gpu/gpu_pool.h"
#include "props/choices.h"
#include "props/config_gen.h"
#include "props/op_gen.h"
#include "props/shadow.h"
#include "props/swarm.h"
#include "tests/gpu/gpu_test_util.h"
#include "traces/backends.h"
#include "traces/runner.h"

namespace kvtwin::gpu {
namespace {

using ::testing::HasSubstr;

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

// The GPU as the runner's second player, with the injector armed only inside the apply() of one
// operation: the runner's own reads (tables, bytes) between operations are never counted, so the
// n-th checked call of that operation is the same call as in the clean count.
class ArmedGpu final : public Backend {
 public:
  explicit ArmedGpu(Backend& inner) : inner_(inner) {}
  // Arms the plan around the apply() of operation `op_index` (0-based), and around no other.
  void arm_at(std::size_t op_index, CudaFaultPlan plan) {
    armed_op_ = op_index;
    plan_ = plan;
  }
  std::string_view name() const override { return inner_.name(); }
  OpResult apply(const Op& op) override {
    const bool armed = applied_ == armed_op_;
    if (armed) arm_cuda_faults(plan_);
    OpResult r = inner_.apply(op);
    if (armed) {
      calls_in_armed_op_ = cuda_calls_counted();
      injected_ = cuda_faults_injected();
      disarm_cuda_faults();
    }
    ++applied_;
    return r;
  }
  Result<PoolTables> tables() const override { return inner_.tables(); }
  Result<std::vector<std::uint8_t>> raw_bytes(std::uint64_t offset, std::uint64_t length) const override {
    return inner_.raw_bytes(offset, length);
  }
  std::uint64_t calls_in_armed_op() const { return calls_in_armed_op_; }
  const std::vector<CudaFaultSite>& injected() const { return injected_; }

 private:
  Backend& inner_;
  std::size_t applied_ = 0;
  std::size_t armed_op_ = SIZE_MAX;
  CudaFaultPlan plan_;
  std::uint64_t calls_in_armed_op_ = 0;
  std::vector<CudaFaultSite> injected_;
};

// The model and the GPU side by side through the one runner, the GPU behind ArmedGpu.
struct ArmedPair {
  traces::BackendSet set;
  std::unique_ptr<ArmedGpu> gpu;
  std::unique_ptr<traces::Runner> runner;
};

ArmedPair armed_pair() {
  ArmedPair p;
  Result<traces::BackendSet> set = traces::make_backend_set(traces::BackendChoice::both);
  KVTWIN_CHECK(set.ok(), "the model and the GPU can be made where a device exists");
  p.set = std::move(*set);
  p.gpu = std::make_unique<ArmedGpu>(*p.set.players.at(1).backend);
  std::vector<traces::Player> players = p.set.players;
  players.at(1).backend = p.gpu.get();
  p.runner = std::make_unique<traces::Runner>(std::move(players));
  return p;
}

struct Walk {
  std::uint64_t calls = 0, completed = 0, poisoned = 0;
  std::set<std::string> sites;                   // file:line (kind)
  std::map<std::string, std::uint64_t> by_kind;  // kind -> calls walked
};

void walk(const std::vector<Op>& ops, Walk& w) {
  // The checked calls each op makes, counted on a clean run (every kind counted, none failing).
  std::vector<std::uint64_t> calls_in_op(ops.size(), 0);
  {
    GpuPool gpu;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      arm_cuda_faults(CudaFaultPlan{});
      (void)gpu.apply(ops[i]);
      calls_in_op[i] = cuda_calls_counted();
      disarm_cuda_faults();
    }
  }
  std::uint64_t total = 0;
  for (std::uint64_t c : calls_in_op) total += c;
  ASSERT_GT(total, ops.size()) << "every op makes CUDA calls";
  for (std::size_t k = 0; k < ops.size(); ++k) {
    for (std::uint64_t n = 1; n <= calls_in_op[k]; ++n) {
      SCOPED_TRACE("op " + std::to_string(k) + ", its checked CUDA call " + std::to_string(n) + " of " +
                   std::to_string(calls_in_op[k]));
      ArmedPair pair = armed_pair();
      CudaFaultPlan plan;
      plan.fail_at = n;
      pair.gpu->arm_at(k, plan);
      // Before the fault, the runner checks every answer, table and touched byte as the gate does.
      for (std::size_t i = 0; i < k; ++i)
        ASSERT_TRUE(pair.runner->play(ops[i]).has_value()) << "before the fault: " << pair.runner->failure()->describe();
      const bool answered = pair.runner->play(ops[k]).has_value();
      // The op made the calls it made when counted, up to the failing one (it may stop there).
      ASSERT_GE(pair.gpu->calls_in_armed_op(), n);
      ASSERT_EQ(pair.gpu->injected().size(), 1u);
      const CudaFaultSite& site = pair.gpu->injected()[0];
      ++w.calls;
      ++w.by_kind[std::string(cuda_call_kind_name(site.kind))];
      w.sites.insert(site.file + ":" + std::to_string(site.line) + " (" + std::string(cuda_call_kind_name(site.kind)) +
                     ")");
      if (answered) {
        // It completed (the failure was absorbed): exactly as the model did, every later op and
        // the end-of-run checks (whole pools) included.
        ++w.completed;
        for (std::size_t i = k + 1; i < ops.size(); ++i)
          ASSERT_TRUE(pair.runner->play(ops[i]).has_value())
              << "after an absorbed failure: " << pair.runner->failure()->describe();
        ASSERT_TRUE(pair.runner->finish()) << "after an absorbed failure: " << pair.runner->failure()->describe();
        continue;
      }
      // Refused: never a divergence, only the environment check, naming the injected failure.
      const traces::Failure& f = *pair.runner->failure();
      ASSERT_EQ(f.check, "environment") << "a wrong answer after an injected failure: " << f.describe();
      EXPECT_THAT(f.message, HasSubstr("injected"));
      // Poisoned: nothing is answered after it, with the reason.
      ++w.poisoned;
      Backend& gpu = *pair.gpu;
      for (std::size_t i = k + 1; i < ops.size(); ++i) {
        const OpResult r = gpu.apply(ops[i]);
        ASSERT_FALSE(r.ok()) << "op " << i << " answered by a poisoned backend";
        EXPECT_EQ(r.error().kind, ErrorKind::environment);
        EXPECT_THAT(r.error().message, HasSubstr("refuses every operation since a CUDA failure"));
      }
      EXPECT_FALSE(gpu.tables().ok());
      EXPECT_FALSE(gpu.raw_bytes(0, 1).ok());
    }
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
    GpuPool gpu;
    CudaFaultPlan plan;
    plan.seed = seed;
    plan.one_in = 64;
    arm_cuda_faults(plan);
    bool poisoned = false;
    for (const Op& op : ops) {
      const OpResult r = gpu.apply(op);
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
  // A download into pageable memory is the stream's synchronization (KVTWIN_CUDA_COPY_TO_PAGEABLE).
  EXPECT_EQ(classify_cuda_call("::kvtwin::gpu::synchronizing_copy_to_pageable(&count, d, sizeof count, stream)"),
            CudaCallKind::synchronization);
  EXPECT_EQ(classify_cuda_call("cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)"), CudaCallKind::other);
}

}  // namespace
}  // namespace kvtwin::gpu
