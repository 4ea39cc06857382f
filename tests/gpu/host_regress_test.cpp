// The regression traces of SPEC 10.13, 19, 20 and 21, and those of SPEC 11's tri-pool
// (traces/regress/, written against the model), replayed side by side on the model and the GPU as
// `kvtwin check --backend both` replays them: clean they pass, and each fails with the GPU's fault
// switch for its class planted. This is those switches' reproducer through the one runner and the
// gate's observers.
//
// Skips by name without a device.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "props/observers.h"
#include "tests/gpu/gpu_test_util.h"
#include "traces/backends.h"
#include "traces/replay.h"

namespace kvtwin::gpu {
namespace {

std::string source_dir() {
  const char* dir = std::getenv("KVTWIN_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

struct Pinned {
  std::string trace;  // under traces/regress/
  std::string fault;  // the GPU switch of its class
};

void expect_pinned(const std::vector<Pinned>& pinned) {
  for (const Pinned& p : pinned) {
    SCOPED_TRACE(p.trace);
    const std::string path = source_dir() + "/traces/regress/" + p.trace;
    Result<traces::BackendSet> clean = traces::make_backend_set(traces::BackendChoice::both);
    ASSERT_TRUE(clean.ok()) << clean.error().message;
    Result<traces::ReplayReport> r =
        traces::replay_pool_trace_file(path, *clean, {}, {}, props::property_observer_factory());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->passed()) << r->failure->describe();
    EXPECT_GT(r->stats.expects_checked, 0u);
    if (p.fault.empty()) continue;
    Result<traces::BackendSet> faulty = traces::make_backend_set(traces::BackendChoice::both, p.fault);
    ASSERT_TRUE(faulty.ok()) << faulty.error().message;
    Result<traces::ReplayReport> bad =
        traces::replay_pool_trace_file(path, *faulty, {}, {}, props::property_observer_factory());
    ASSERT_TRUE(bad.ok()) << bad.error().message;
    EXPECT_FALSE(bad->passed()) << "passes with " << p.fault << " planted";
    if (!bad->passed()) std::printf("[ caught   ] %s: %s\n", p.fault.c_str(), bad->failure->describe().c_str());
  }
}

TEST(HostRegressTraces, PassSideBySideAndFailWithTheirGpuFaults) {
  KVTWIN_REQUIRE_CUDA();
  const std::vector<Pinned> pinned = {
      {"compaction_waits_for_transfers_in_flight.jsonl", "compaction_ignores_transfers"},
      {"host_transfers_resolve_logical_ids_through_the_arena.jsonl", "transfer_logical_as_physical"},
      {"swa_offload_selects_whole_bound_pages.jsonl", "swa_offload_token_filter"},
      // Fault 13 is a race on the device; with the switch on, the producer's copy is delayed on its
      // copy stream, so this short trace shows it every time.
      {"load_back_waits_for_the_offload_it_reads.jsonl", "transfer_before_producer_event"},
  };
  expect_pinned(pinned);
}

TEST(TriPoolRegressTraces, PassSideBySideAndFailWithTheirGpuFaults) {
  KVTWIN_REQUIRE_CUDA();
  // SPEC 11's tri-pool [state up | swa float | full down]: the float relocated up by one page
  // (state_alloc's make_room) copies its pages from the top down; in source order each copy
  // overwrites the next page before it has left.
  expect_pinned({{"float_relocation_copies_each_page_before_it_is_overwritten.jsonl", "float_relocation_source_order"},
                 {"state_sink_charged_once.jsonl", ""}});
}

}  // namespace
}  // namespace kvtwin::gpu
