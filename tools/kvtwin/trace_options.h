// Options and output shared by the trace commands (replay, record, fuzz, check): the serving
// simulator's parameters, the check cadence, byte sizes with units, the backend choice, JSON
// report files, and a progress bar that is drawn only when stderr is a terminal.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include "core/result.h"
#include "tools/kvtwin/options.h"
#include "traces/backends.h"
#include "traces/runner.h"
#include "traces/serving_sim.h"

namespace kvtwin::cli {

// The serving simulator's options, as strings where units or names need checking.
inline constexpr const char* kDefaultServingModel = "llama-3.1-8b";
struct ServingOptions {
  ModelSource source;  // --model or --spec; neither: kDefaultServingModel
  std::uint32_t tp = 1;
  std::uint64_t page_size = 16;
  std::string pool_bytes = "1GiB";
  std::string host_bytes = "0";
  std::string write_policy = "write_through";
  std::string storage_dir;            // the storage tier's parent folder (BackendOptions); "": the temporary folder
  std::string storage_bytes = "0";
  std::uint64_t token_scale = 16;
  std::uint32_t max_running = 64;
  std::string mode = "eager";
  bool tables_only = false;
  std::uint64_t requests = 0;
  std::uint64_t skip_requests = 0;
  std::string checkpoint_every = "auto";  // auto: every 64 steps with bytes, none tables-only
  std::uint64_t seed = 1;
  std::uint64_t decode_step_us = 20000;
  std::uint64_t prefill_ns_per_token = 10000;
  std::uint64_t reserve_permille = 300;
  std::uint64_t prefill_budget_tokens = 16384;
  std::uint64_t block_tokens = 0;  // tokens per hash_ids block; 0: the format's (Mooncake: 512)
  std::string share_within_step = "on";
  std::string entries = "auto";  // auto: shrunk with bytes (ServingParams::shrink_entries), full tables-only
};
void add_serving_options(CLI::App& app, ServingOptions& options);
Result<traces::ServingParams> serving_params(const ServingOptions& options);
// How to read a request trace for the serving simulator: --requests, --skip-requests, --block-tokens.
traces::RequestReadOptions request_read_options(const ServingOptions& options);
// The backends' options of these options (--storage-dir).
traces::BackendOptions backend_options(const ServingOptions& options);

// --verify-every auto: the full verify() after every op on pools of at most 4 MiB; on larger
// pools at checkpoints and at the end, with the incremental verify (what each op changed, the same
// rules) after every other op (--verify-changed off drops it). --paranoid: the full verify and
// table check after every op, whatever the pool.
struct CadenceOptions {
  std::string verify_every = "auto";
  std::uint64_t tables_every = 1;
  std::string verify_changed = "on";
  bool paranoid = false;
  std::uint64_t compare_window = traces::kDefaultCompareWindow;
};
void add_cadence_options(CLI::App& app, CadenceOptions& options);
Result<traces::CheckCadence> cadence(const CadenceOptions& options);

// The command line that reproduces a parsed subcommand: "kvtwin NAME" and every argument given,
// positionals and options in the order they were defined.
std::string command_line(const CLI::App& app);

// Sharding (kvtwin check, kvtwin fuzz): work item i runs on shard i % count. The options win;
// without them GoogleTest's GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS are honoured.
struct ShardOptions {
  std::int64_t index = -1;  // -1: not given
  std::int64_t count = -1;
};
struct Shard {
  std::uint64_t index = 0;
  std::uint64_t count = 1;
  bool mine(std::uint64_t item) const { return item % count == index; }
};
void add_shard_options(CLI::App& app, ShardOptions& options);
Result<Shard> resolve_shard(const ShardOptions& options);

// Writes a JSON document to a file ("-" is stdout), whole or not at all (core/files.h); an io
// Error when it cannot.
Status write_json_file(const std::string& path, const nlohmann::json& j);

// 16 hex digits over a report's deterministic content: its canonical JSON with every "seconds"
// field removed, and `extra` (e.g. the bytes of the traces written). The same seed and options
// give the same digest whatever the thread count, the run or the machine, so two runs compare
// by one printed line.
std::string report_digest(const nlohmann::json& report, std::string_view extra = "");
// A 64-bit digest as 16 hex digits.
std::string hex_digest(std::uint64_t digest);

// A one-line progress bar on stderr, drawn only when stderr is a terminal; it redraws when the
// whole percentage changes (never by time), and finish() ends the line.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  void update(std::uint64_t done, std::uint64_t total);
  void finish();
  bool active() const { return active_; }

 private:
  std::string label_;
  bool active_ = false;
  int last_percent_ = -1;
};

}  // namespace kvtwin::cli
