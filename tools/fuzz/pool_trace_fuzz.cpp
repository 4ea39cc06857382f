// Fuzz target: a pool trace (docs/traces.md), as `kvtwin replay` reads one.
//
// The input is the whole file. It must read, or be refused with a placed message (fuzz_support.h).
// What reads must survive the writer: written in canonical form and read again, it gives the same
// header and operations. A trace whose pools are small is then replayed on the reference model
// with every check on; the replay may fail its checks (an input can expect anything) but must
// never crash, abort on a broken invariant, or allocate out of proportion.
//
// Not covered: pools past kMaxReplayBytes of bytes or kMaxReplayPages pages a side are read but
// not replayed (the model holds a pool's bytes, up to 4 GiB, as the trace asks: a resource the
// trace states, not a reading bug), and the GPU backend.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tools/fuzz/fuzz_support.h"
#include "traces/pool_trace.h"
#include "traces/replay.h"

namespace {

using namespace kvtwin;
using namespace kvtwin::traces;

constexpr std::uint64_t kMaxReplayBytes = std::uint64_t{16} << 20;
constexpr std::uint64_t kMaxReplayPages = 4096;

bool small_enough(const PoolConfig& c) {
  Result<PoolDerived> d = derive_pool(c);
  if (!d.ok()) return true;  // the model refuses it
  if (!c.tables_only && c.total_bytes > kMaxReplayBytes) return false;
  for (const SubPoolGeometry& g : d->geometry.sub_pools)
    if (g.num_pages > kMaxReplayPages) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string name = "fuzz.jsonl";
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  PoolTraceReader reader(in, name);
  Result<TraceHeader> header = reader.header();
  if (!header.ok()) {
    fuzz::check_refusal(header.error(), name);
    return 0;
  }
  PoolTrace trace;
  trace.header = *header;
  while (true) {
    Result<std::optional<TraceLine>> line = reader.next();
    if (!line.ok()) {
      fuzz::check_refusal(line.error(), name);
      return 0;
    }
    if (!*line) break;
    trace.lines.push_back(std::move(**line));
  }
  // The writer's canonical form reads back as the same trace.
  std::ostringstream written;
  write_pool_trace(written, trace);
  std::istringstream again(written.str());
  Result<PoolTrace> reread = parse_pool_trace(again, "rewritten.jsonl");
  if (!reread.ok()) fuzz::finding("a trace kvtwin wrote does not read back", reread.error().message);
  if (!(reread->header == trace.header)) fuzz::finding("the header changed in a write and read", written.str());
  if (!same_lines(reread->lines, trace.lines)) fuzz::finding("the operations changed in a write and read", written.str());

  // Replay on the model, when every pool the trace builds is small.
  if (!small_enough(trace.header.config)) return 0;
  for (const TraceLine& line : trace.lines)
    if (const auto* build = std::get_if<BuildPool>(&line.op); build != nullptr && !small_enough(build->config))
      return 0;
  Result<BackendSet> backends = make_backend_set(BackendChoice::model);
  if (!backends.ok()) fuzz::finding("the model backend cannot be made", backends.error().message);
  (void)replay_lines(trace.header, trace.lines, *backends, CheckCadence{}, name);
  return 0;
}
