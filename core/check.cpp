// Implementation of the always-on invariant check (check.h).
#include "core/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvtwin {
namespace {
std::string& failure_context() {
  static std::string context;
  return context;
}
}  // namespace

void set_failure_context(std::string context) { failure_context() = std::move(context); }

void invariant_failed(const char* condition, std::string_view message, const char* file, int line) {
  std::fprintf(stderr, "kvtwin: invariant broken at %s:%d: %s\n  %.*s\n", file, line, condition,
               static_cast<int>(message.size()), message.data());
  if (!failure_context().empty()) std::fprintf(stderr, "  %s\n", failure_context().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvtwin
