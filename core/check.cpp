// Implementation of the always-on invariant check (check.h).
#include "core/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvtwin {
namespace {
thread_local std::string context_text;
thread_local int scopes_open = 0;
}  // namespace

void set_failure_context(std::string context) { context_text = std::move(context); }
const std::string& failure_context() { return context_text; }

InvariantScope::InvariantScope() { ++scopes_open; }
InvariantScope::~InvariantScope() { --scopes_open; }

void invariant_failed(const char* condition, std::string_view message, const char* file, int line) {
  std::string text = "invariant broken at ";
  text += file;
  text += ":" + std::to_string(line) + ": " + condition + ": ";
  text += message;
  if (scopes_open > 0) throw InvariantFailure(text);
  std::fprintf(stderr, "kvtwin: %s\n", text.c_str());
  if (!context_text.empty()) std::fprintf(stderr, "  %s\n", context_text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvtwin
