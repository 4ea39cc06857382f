// How a kvtwin subcommand plugs into the CLI: each command lives in its own file
// (cmd_layout.cpp, cmd_check.cpp, ...) and registers itself on the top-level CLI11 app.
//
// Exit codes, for every command: 0 success, 1 a check failed (a divergence, a broken invariant,
// a failing property), 2 bad usage or bad input (unknown flag, unknown model, malformed file).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace kvtwin::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitBadInput = 2;

// A registered command: the subcommand and what runs when it is chosen (returns the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_layout_command(CLI::App& root);
Command add_replay_command(CLI::App& root);
Command add_record_command(CLI::App& root);
Command add_fuzz_command(CLI::App& root);
Command add_check_command(CLI::App& root);
Command add_faults_command(CLI::App& root);
Command add_selftest_command(CLI::App& root);

}  // namespace kvtwin::cli
