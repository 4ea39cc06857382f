// Option parsers shared by every command (options.h).
#include "tools/kvtwin/options.h"

#include <cstdio>

#include "core/catalogue.h"
#include "core/pool_config.h"
#include "core/printable.h"

namespace kvtwin::cli {
namespace {

Error bad_option(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

// CLI11 stops at the first option whose callback throws; main() prints the message.
[[noreturn]] void refuse(const Error& e) { throw CLI::ValidationError(e.message); }

bool is_digits(std::string_view text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

Result<std::uint64_t> parse_whole_number(std::string_view text, std::string_view option, std::uint64_t min_value,
                                         std::uint64_t max_value) {
  const std::string name(option);
  const std::string shown = "'" + printable(text) + "'";
  if (text.empty()) return bad_option(name + " is empty; give a whole number");
  if (text[0] == '-' && is_digits(text.substr(1)))
    return bad_option(name + " " + shown + " is negative: negative values are refused; give a whole number" +
                      (min_value == 0 ? std::string() : " of at least " + std::to_string(min_value)));
  if (!is_digits(text))
    return bad_option(name + " " + shown + " is not a whole number; give decimal digits (no sign, no 0x, no exponent)");
  std::uint64_t v = 0;
  for (char c : text) {
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10)
      return bad_option(name + " " + shown + " does not fit in 64 bits (at most " + std::to_string(UINT64_MAX) + ")");
    v = v * 10 + digit;
  }
  if (v < min_value) return bad_option(name + " " + std::string(text) + " is too small; at least " + std::to_string(min_value));
  if (v > max_value) return bad_option(name + " " + std::string(text) + " is too large; at most " + std::to_string(max_value));
  return v;
}

Result<std::uint64_t> parse_count(const std::string& text, std::string_view option) {
  return parse_whole_number(text, option);
}

Result<std::uint64_t> parse_byte_size(const std::string& text, std::string_view option) {
  const std::string name(option);
  const auto bad = [&](const std::string& why) {
    return bad_option(name + " '" + printable(text) + "' " + why +
                      "; give bytes as a whole number with an optional unit, e.g. 4096, 64MiB, 8GiB, 2TB");
  };
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return bad(!text.empty() && text[0] == '-' ? "is negative" : "is not a byte size");
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const auto d = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - d) / 10) return bad("does not fit in 64 bits");
    value = value * 10 + d;
  }
  const std::string unit = text.substr(digits);
  static const std::pair<const char*, std::uint64_t> kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KiB", std::uint64_t{1} << 10},
      {"MiB", std::uint64_t{1} << 20},
      {"GiB", std::uint64_t{1} << 30},
      {"TiB", std::uint64_t{1} << 40},
      {"KB", 1000},
      {"kB", 1000},
      {"MB", 1000ULL * 1000},
      {"GB", 1000ULL * 1000 * 1000},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
  };
  for (const auto& [suffix, scale] : kUnits) {
    if (unit != suffix) continue;
    if (value > UINT64_MAX / scale) return bad("does not fit in 64 bits");
    return value * scale;
  }
  return bad("has an unknown unit '" + printable(unit) + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
}

CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint64_t& target, const std::string& description,
                       std::uint64_t min_value, std::uint64_t max_value, bool show_default) {
  CLI::Option* o = app.add_option_function<std::string>(
      name,
      [&target, name, min_value, max_value](const std::string& text) {
        Result<std::uint64_t> v = parse_whole_number(text, name, min_value, max_value);
        if (!v.ok()) refuse(v.error());
        target = *v;
      },
      description);
  o->type_name("N");
  if (show_default) o->default_str(std::to_string(target));
  return o;
}

CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint32_t& target, const std::string& description,
                       std::uint32_t min_value, std::uint32_t max_value, bool show_default) {
  CLI::Option* o = app.add_option_function<std::string>(
      name,
      [&target, name, min_value, max_value](const std::string& text) {
        Result<std::uint64_t> v = parse_whole_number(text, name, min_value, max_value);
        if (!v.ok()) refuse(v.error());
        target = static_cast<std::uint32_t>(*v);
      },
      description);
  o->type_name("N");
  if (show_default) o->default_str(std::to_string(target));
  return o;
}

CLI::Option* add_optional_count(CLI::App& app, const std::string& name, std::int64_t& target,
                                const std::string& description) {
  CLI::Option* o = app.add_option_function<std::string>(
      name,
      [&target, name](const std::string& text) {
        Result<std::uint64_t> v = parse_whole_number(text, name, 0, static_cast<std::uint64_t>(INT64_MAX));
        if (!v.ok()) refuse(v.error());
        target = static_cast<std::int64_t>(*v);
      },
      description);
  o->type_name("N");
  return o;
}

CLI::Option* add_tp_option(CLI::App& app, std::uint32_t& target, const std::string& description) {
  return add_count(app, "--tp", target, description, 1, static_cast<std::uint32_t>(kMaxTensorParallel));
}

void add_model_source_options(CLI::App& app, ModelSource& source, const std::string& default_model) {
  CLI::Option* model = app.add_option("--model", source.model, "a catalogue model (kvtwin layout --list)");
  if (!default_model.empty()) model->default_str(default_model);
  app.add_option("--spec", source.spec, "a model shape from a JSON spec file (docs/spec-files.md), instead of --model");
}

Status check_model_source(const ModelSource& source) {
  if (!source.model.empty() && !source.spec.empty())
    return bad_option("give only one of --model and --spec (got --model " + printable(source.model) + " and --spec " +
                      printable(source.spec) + ")");
  return ok_status();
}

Result<ModelShape> resolve_model_source(const ModelSource& source, const std::string& default_model) {
  KVTWIN_TRY_STATUS(check_model_source(source));
  if (!source.spec.empty()) return load_shape_file(source.spec);
  return find_model(source.model.empty() ? default_model : source.model);
}

int bad_input(std::string_view command, const Error& error) {
  std::fprintf(stderr, "kvtwin %.*s: error: %s\n", static_cast<int>(command.size()), command.data(),
               printable_message(error.message).c_str());
  return 2;
}

std::string subcommand_of(const CLI::App& root, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    for (const CLI::App* sub : root.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == argv[i]) return sub->get_name();
  }
  return "";
}

int cli_parse_error(const CLI::App& root, int argc, const char* const* argv, const CLI::ParseError& e) {
  const std::string command = subcommand_of(root, argc, argv);
  const std::string prefix = command.empty() ? "kvtwin" : "kvtwin " + command;
  // Our own parsers' messages are complete; CLI11's get a pointer to the help.
  const bool ours = dynamic_cast<const CLI::ValidationError*>(&e) != nullptr;
  std::fprintf(stderr, "%s: error: %s%s\n", prefix.c_str(), printable_message(e.what()).c_str(),
               ours ? "" : ("; see " + prefix + " --help").c_str());
  return 2;
}

}  // namespace kvtwin::cli
