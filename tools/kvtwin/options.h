// One parser per kind of option, shared by every command, so that `--tp`, `--page-size`, byte
// sizes and the model's source mean the same thing (and are refused with the same words) in
// layout, replay, record, fuzz and check.
//
// CLI11's own conversion of "-5" into an unsigned option wraps it to 2^64-5; these parsers take
// decimal digits only, within a stated range, and refuse anything else with a message that names
// the option ("--requests '-5' is not a whole number: negative values are refused"). They throw
// CLI::ValidationError from the option's callback, so CLI11 stops at the first bad option, and
// main() prints every CLI11 error as "kvtwin COMMAND: error: ..." with exit code 2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/model.h"
#include "core/result.h"

namespace kvtwin::cli {

// Tensor-parallel ranks: 1 .. kMaxTensorParallel (core/pool_config.h), everywhere.
// Operations a fuzz or property case may ask for (each is kept for shrinking).
inline constexpr std::uint64_t kMaxOpsPerCase = 100000;
// Threads a command may start.
inline constexpr std::uint64_t kMaxJobs = 1024;

// A whole number in decimal digits within [min_value, max_value]; errors name `option`.
Result<std::uint64_t> parse_whole_number(std::string_view text, std::string_view option, std::uint64_t min_value = 0,
                                         std::uint64_t max_value = UINT64_MAX);

// A whole number (for options that also take "auto"): parse_whole_number without bounds.
Result<std::uint64_t> parse_count(const std::string& text, std::string_view option);

// Bytes: digits with an optional unit, B, KiB, MiB, GiB, TiB (powers of 1024) or KB (kB), MB, GB,
// TB (powers of 1000): "4096", "64MiB", "8GiB", "2TB". "1.5GB", "-1", "0x10" are refused.
Result<std::uint64_t> parse_byte_size(const std::string& text, std::string_view option);

// Registers `name` as a whole-number option writing `target` (its current value is the shown
// default unless `show_default` is false).
CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint64_t& target, const std::string& description,
                       std::uint64_t min_value = 0, std::uint64_t max_value = UINT64_MAX, bool show_default = true);
CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint32_t& target, const std::string& description,
                       std::uint32_t min_value = 0, std::uint32_t max_value = UINT32_MAX, bool show_default = true);
// A whole-number option whose absence is -1 (e.g. --case, --shard-index).
CLI::Option* add_optional_count(CLI::App& app, const std::string& name, std::int64_t& target,
                                const std::string& description);

// --tp: 1 .. kMaxTensorParallel.
CLI::Option* add_tp_option(CLI::App& app, std::uint32_t& target, const std::string& description);

// Where a model's shape comes from: a catalogue name (--model) or a spec file (--spec), never both.
struct ModelSource {
  std::string model;  // empty: not given
  std::string spec;   // empty: not given
};
// Registers --model and --spec. `default_model` (may be empty) is what --model means when
// neither is given; it is only shown in the help.
void add_model_source_options(CLI::App& app, ModelSource& source, const std::string& default_model);
// "give only one of --model and --spec" when both are given; otherwise ok.
Status check_model_source(const ModelSource& source);
// The shape: the spec file's, the catalogue's, or the default model's.
Result<ModelShape> resolve_model_source(const ModelSource& source, const std::string& default_model);

// Prints "kvtwin COMMAND: error: MESSAGE" to stderr (control bytes and invalid UTF-8 escaped)
// and returns the exit code for bad input (2).
int bad_input(std::string_view command, const Error& error);

// The subcommand a command line names (argv[1..] scanned for a registered subcommand's name),
// or "" when none: for prefixing CLI11's messages.
std::string subcommand_of(const CLI::App& root, int argc, const char* const* argv);

// Prints a CLI11 parse error the way bad_input does and returns 2.
int cli_parse_error(const CLI::App& root, int argc, const char* const* argv, const CLI::ParseError& e);

}  // namespace kvtwin::cli
