// The body of the two request-trace fuzz targets (mooncake_fuzz.cpp, azure_fuzz.cpp): the input
// is a whole request trace in one format. It must read, or be refused with a placed message. What
// reads is then served by the serving simulator on a small tables-only pool, checked after every
// operation: the run must pass (a correct simulator and model never disagree on a real trace,
// whatever its numbers), and must end (no request may hang it).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "tools/fuzz/fuzz_support.h"
#include "traces/replay.h"
#include "traces/request_trace.h"
#include "traces/serving_sim.h"

namespace kvtwin::fuzz {

inline int fuzz_request_trace(const std::uint8_t* data, std::size_t size, traces::TraceFormat format,
                              const std::string& name) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  // At most 16 requests are served: enough for admission, the cache, retraction and re-admission.
  Result<traces::RequestTrace> trace = traces::parse_request_trace(in, name, format, {16, 0});
  if (!trace.ok()) {
    check_refusal(trace.error(), name);
    return 0;
  }
  traces::ServingParams p;
  p.model = format == traces::TraceFormat::azure ? "gpt-oss-20b" : "llama-3.1-8b";  // a composite, a plain pool
  p.tp = 8;
  p.page_size = 16;
  p.pool_bytes = std::uint64_t{2} << 20;
  p.token_scale = 32;  // 512-token blocks are 16 tokens: one page
  p.max_running = 8;
  p.tables_only = true;
  Result<traces::BackendSet> backends = traces::make_backend_set(traces::BackendChoice::model);
  if (!backends.ok()) finding("the model backend cannot be made", backends.error().message);
  Result<traces::ReplayReport> report = traces::simulate_request_trace(*trace, p, *backends, {});
  if (!report.ok()) {
    check_refusal(report.error(), "");
    return 0;
  }
  if (!report->passed()) finding("the serving simulator and the model disagree", report->failure->describe());
  return 0;
}

}  // namespace kvtwin::fuzz
