// Always-on invariant checks. A broken invariant is not bad input: it means kvtwin itself
// (or the implementation under test, when a checker calls this) is wrong, so the run stops
// loudly, names the condition and where it failed, and prints the run's seed context when one
// was registered. These stay on in every build type (NDEBUG does not touch them).
#pragma once

#include <string>
#include <string_view>

namespace kvtwin {

// Text printed after an invariant failure, such as "seed 42; reproduce with: kvtwin fuzz --seed 42".
// The runner and the CLI set it once they know the seed.
void set_failure_context(std::string context);

[[noreturn]] void invariant_failed(const char* condition, std::string_view message, const char* file,
                                   int line);

}  // namespace kvtwin

#define KVTWIN_CHECK(condition, message)                                                  \
  do {                                                                                    \
    if (!(condition)) ::kvtwin::invariant_failed(#condition, (message), __FILE__, __LINE__); \
  } while (false)
