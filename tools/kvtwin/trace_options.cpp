// Shared options and output of the trace commands (trace_options.h).
#include "tools/kvtwin/trace_options.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/catalogue.h"
#include "core/files.h"
#include "core/printable.h"
#include "core/rng.h"
#include "tools/kvtwin/command.h"

namespace kvtwin::cli {

void add_serving_options(CLI::App& app, ServingOptions& o) {
  add_model_source_options(app, o.source, kDefaultServingModel);
  add_tp_option(app, o.tp, "tensor-parallel ranks (the pool is one rank's)");
  add_count(app, "--page-size", o.page_size, "tokens per page", 1);
  app.add_option("--pool-bytes", o.pool_bytes, "bytes of the device pool, e.g. 8GiB")->capture_default_str();
  app.add_option("--host-bytes", o.host_bytes,
                 "bytes of the host arena below the device prefix cache (SPEC 8); 0: no host tier")
      ->capture_default_str();
  app.add_option("--write-policy", o.write_policy,
                 "when the host tier backs up a prefix block: write_through (as it is filled), "
                 "write_through_selective (once hit), write_back (only when evicted)")
      ->capture_default_str();
  app.add_option("--storage-dir", o.storage_dir,
                 "folder under which the storage tier below the host makes its own (removed at the end; default: "
                 "the system's temporary folder)");
  app.add_option("--storage-bytes", o.storage_bytes,
                 "capacity of the storage tier below the host in page-file bytes (needs --host-bytes); 0: none")
      ->capture_default_str();
  add_count(app, "--token-scale", o.token_scale, "divide token counts by this (recorded in the output)", 1);
  add_count(app, "--max-running", o.max_running, "most requests running at once", 1);
  app.add_option("--mode", o.mode, "compaction mode: eager or lazy")->capture_default_str();
  app.add_flag("--tables-only", o.tables_only, "keep tables only, no bytes (real-scale pools)");
  add_count(app, "--requests", o.requests, "simulate only the first N requests (0: all)");
  add_count(app, "--skip-requests", o.skip_requests, "skip the trace's first N requests (a slice from the middle)");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "simulated steps between checkpoints (whole-pool comparisons); 0: only at the end; auto: 64 with "
                 "bytes, 0 tables-only")
      ->capture_default_str();
  add_count(app, "--seed", o.seed, "the content oracle's seed");
  add_count(app, "--decode-step-us", o.decode_step_us, "simulated microseconds of one decode step (unscaled)");
  add_count(app, "--prefill-ns-per-token", o.prefill_ns_per_token, "simulated nanoseconds per prefilled token");
  add_count(app, "--reserve-permille", o.reserve_permille,
            "admission keeps this share (per mille) of running requests' remaining output free", 0, 1000);
  add_count(app, "--prefill-budget", o.prefill_budget_tokens, "scaled prompt tokens one step may prefill", 1);
  add_count(app, "--block-tokens", o.block_tokens,
            "tokens per hash_ids prefix block of the request trace (default: the format's, 512 for Mooncake)", 1,
            UINT64_MAX, /*show_default=*/false);
  app.add_option("--share-within-step", o.share_within_step,
                 "on: requests admitted in the same step share the prefix blocks being prefilled; off: only "
                 "blocks of earlier steps")
      ->capture_default_str();
  app.add_option("--entries", o.entries,
                 "full: every layer's rows in every entry; shrunk: the pool keeps its pages and slots but each entry "
                 "holds 2 layers of each kind and one KV head per rank, so a whole trace's bytes are written, moved "
                 "and checked in minutes; auto: shrunk with bytes")
      ->capture_default_str();
}

traces::RequestReadOptions request_read_options(const ServingOptions& o) {
  traces::RequestReadOptions r;
  r.limit = o.requests;
  r.skip = o.skip_requests;
  r.block_tokens = o.block_tokens;
  return r;
}

traces::BackendOptions backend_options(const ServingOptions& o) {
  traces::BackendOptions b;
  b.storage_parent = o.storage_dir;
  return b;
}

Result<traces::ServingParams> serving_params(const ServingOptions& o) {
  traces::ServingParams p;
  KVTWIN_TRY_STATUS(check_model_source(o.source));
  p.model = o.source.model.empty() ? kDefaultServingModel : o.source.model;
  if (!o.source.spec.empty()) {
    KVTWIN_TRY(ModelShape shape, load_shape_file(o.source.spec));
    p.shape = shape;
  }
  p.tp = o.tp;
  p.page_size = o.page_size;
  KVTWIN_TRY(p.pool_bytes, parse_byte_size(o.pool_bytes, "--pool-bytes"));
  KVTWIN_TRY(p.host_bytes, parse_byte_size(o.host_bytes, "--host-bytes"));
  if (!parse_write_policy(o.write_policy, p.write_policy))
    return make_error(ErrorKind::invalid_argument, "--write-policy '" + printable(o.write_policy) +
                                                       "' is not a write policy; use write_through, "
                                                       "write_through_selective or write_back");
  KVTWIN_TRY(p.storage_bytes, parse_byte_size(o.storage_bytes, "--storage-bytes"));
  if (!o.storage_dir.empty() && p.storage_bytes == 0)
    return make_error(ErrorKind::invalid_argument, "--storage-dir " + printable(o.storage_dir) +
                                                       " without --storage-bytes: give the storage tier a capacity "
                                                       "(e.g. --storage-bytes 64GiB)");
  p.token_scale = o.token_scale;
  p.max_running = o.max_running;
  if (o.mode != "eager" && o.mode != "lazy")
    return make_error(ErrorKind::invalid_argument,
                      "--mode '" + o.mode + "' is not a compaction mode; use eager or lazy");
  p.mode = o.mode == "lazy" ? CompactionMode::lazy : CompactionMode::eager;
  p.tables_only = o.tables_only;
  p.max_requests = o.requests;
  if (o.checkpoint_every == "auto") {
    p.checkpoint_every = o.tables_only ? 0 : 64;
  } else {
    KVTWIN_TRY(p.checkpoint_every, parse_count(o.checkpoint_every, "--checkpoint-every"));
  }
  p.seed = o.seed;
  p.decode_step_us = o.decode_step_us;
  p.prefill_ns_per_token = o.prefill_ns_per_token;
  p.reserve_permille = o.reserve_permille;
  p.prefill_budget_tokens = o.prefill_budget_tokens;
  if (o.share_within_step != "on" && o.share_within_step != "off")
    return make_error(ErrorKind::invalid_argument,
                      "--share-within-step '" + printable(o.share_within_step) + "' is neither on nor off; use on (the default) or off");
  p.share_within_step = o.share_within_step == "on";
  if (o.entries != "auto" && o.entries != "full" && o.entries != "shrunk")
    return make_error(ErrorKind::invalid_argument,
                      "--entries '" + printable(o.entries) + "' is not auto, full or shrunk; use full for real entries");
  p.shrink_entries = o.entries == "shrunk" || (o.entries == "auto" && !o.tables_only);
  return p;
}

void add_cadence_options(CLI::App& app, CadenceOptions& o) {
  app.add_option("--verify-every", o.verify_every,
                 "run the model's full verify() after every Nth op (0: at checkpoints and the end; auto: every op "
                 "on pools of at most 4 MiB, else 0)")
      ->capture_default_str();
  app.add_option("--verify-changed", o.verify_changed,
                 "on: between full verifies, check after every op what it changed (the same invariants, at a "
                 "cost that does not grow with the pool); off: nothing between full verifies")
      ->capture_default_str();
  app.add_flag("--paranoid", o.paranoid,
               "the full verify() and table check after every op, whatever the pool's size (slow on large pools)");
  add_count(app, "--tables-every", o.tables_every,
            "compare both backends' tables after every Nth op (0: at checkpoints and the end)");
  add_count(app, "--compare-window", o.compare_window,
            "beside the GPU: queue its digests (tables, bytes written) and compare them in windows of N "
            "ops (played ahead, a window when the next one fills), at checkpoints and before any failure, "
            "which still names the first op that differed (1: right after every op, naming the first "
            "difference as it was then)",
            1);
}

Result<traces::CheckCadence> cadence(const CadenceOptions& o) {
  traces::CheckCadence c;
  if (o.verify_every == "auto") {
    c.verify_every = traces::kVerifyAuto;
  } else {
    KVTWIN_TRY(c.verify_every, parse_count(o.verify_every, "--verify-every"));
  }
  c.tables_every = o.tables_every;
  c.compare_window = o.compare_window;
  if (o.verify_changed != "on" && o.verify_changed != "off")
    return make_error(ErrorKind::invalid_argument,
                      "--verify-changed '" + printable(o.verify_changed) + "' is neither on nor off; use on (the default) or off");
  c.verify_changed = o.verify_changed == "on";
  if (o.paranoid) {
    if (o.verify_every != "auto" && c.verify_every != 1)
      return make_error(ErrorKind::invalid_argument, "--paranoid verifies after every op; drop --verify-every " +
                                                         printable(o.verify_every) + " or --paranoid");
    c.verify_every = 1;
    c.tables_every = 1;
    c.compare_window = 1;
  }
  return c;
}

std::string command_line(const CLI::App& app) {
  const auto quoted = [](const std::string& v) {
    return v.find_first_of(" \t\"'") == std::string::npos && !v.empty() ? v : "'" + v + "'";
  };
  std::string line = "kvtwin " + app.get_name();
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_name() == "--help") continue;
    if (opt->get_positional()) {
      for (const std::string& v : opt->results()) line += " " + quoted(v);
    } else if (opt->get_expected_min() == 0) {
      line += " " + opt->get_name();
    } else {
      for (const std::string& v : opt->results()) line += " " + opt->get_name() + " " + quoted(v);
    }
  }
  return line;
}

void add_shard_options(CLI::App& app, ShardOptions& o) {
  add_optional_count(app, "--shard-index", o.index, "run only the work items of this shard (0-based; or GTEST_SHARD_INDEX)");
  add_optional_count(app, "--shard-count", o.count, "split the work into this many shards (or GTEST_TOTAL_SHARDS)");
}

Result<Shard> resolve_shard(const ShardOptions& o) {
  std::int64_t index = o.index, count = o.count;
  const auto from_env = [](const char* name, std::int64_t& out) -> Status {
    const char* v = std::getenv(name);
    if (v == nullptr) return ok_status();
    KVTWIN_TRY(std::uint64_t n, parse_count(v, name));
    out = static_cast<std::int64_t>(n);
    return ok_status();
  };
  if (index < 0 && count < 0) {
    KVTWIN_TRY_STATUS(from_env("GTEST_SHARD_INDEX", index));
    KVTWIN_TRY_STATUS(from_env("GTEST_TOTAL_SHARDS", count));
  }
  if (index < 0 && count < 0) return Shard{};
  if (index < 0 || count < 1 || index >= count)
    return make_error(ErrorKind::invalid_argument,
                      "shard index " + std::to_string(index) + " of " + std::to_string(count) +
                          " shards is not a shard; give --shard-index I --shard-count N with 0 <= I < N");
  return Shard{static_cast<std::uint64_t>(index), static_cast<std::uint64_t>(count)};
}

Status write_json_file(const std::string& path, const nlohmann::json& j) {
  return write_file_atomically(path, j.dump(2) + "\n");
}

namespace {
void drop_durations(nlohmann::json& j) {
  if (j.is_object()) {
    j.erase("seconds");
    for (auto& [key, value] : j.items()) {
      (void)key;
      drop_durations(value);
    }
  } else if (j.is_array()) {
    for (nlohmann::json& v : j) drop_durations(v);
  }
}
}  // namespace

std::string report_digest(const nlohmann::json& report, std::string_view extra) {
  nlohmann::json stable = report;
  drop_durations(stable);
  const std::string text = stable.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return hex_digest(mix_seed(fnv1a64(text), fnv1a64(extra)));
}

std::string hex_digest(std::uint64_t digest) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return hex;
}

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), active_(isatty(STDERR_FILENO) == 1) {}

void ProgressBar::update(std::uint64_t done, std::uint64_t total) {
  if (!active_ || total == 0) return;
  const int percent = static_cast<int>(std::min<std::uint64_t>(100, done * 100 / total));
  if (percent == last_percent_) return;
  last_percent_ = percent;
  constexpr int kWidth = 30;
  const int filled = percent * kWidth / 100;
  std::fprintf(stderr, "\r%s [%s%s] %3d%% (%llu/%llu)", label_.c_str(),
               std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(), percent,
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (active_ && last_percent_ >= 0) std::fprintf(stderr, "\n");
  last_percent_ = -1;
}

}  // namespace kvtwin::cli
