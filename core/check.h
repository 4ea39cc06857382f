// Always-on invariant checks. A broken invariant is not bad input: it means kvtwin itself
// (or the implementation under test, when a checker calls this) is wrong. These stay on in every
// build type (NDEBUG does not touch them).
//
// What happens then depends on the thread:
//   - by default the run stops loudly: the condition, where it failed, and the thread's failure
//     context (set_failure_context: the seed and the command that reproduces the run) go to
//     stderr, then abort();
//   - inside an InvariantScope (the runner opens one around every operation it plays) the
//     failure is thrown as an InvariantFailure instead, so that a harness running many cases
//     (kvtwin check, fuzz, replay) reports it as a failure of that case, with its seed, its
//     operations and its reproducer, and goes on with the others. The backend that broke is
//     not used again.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kvtwin {

// Text printed after an invariant failure, such as "seed 42; reproduce with: kvtwin fuzz --seed 42".
// Per thread: each worker of a multi-threaded run sets the context of the case it is running.
void set_failure_context(std::string context);
const std::string& failure_context();

// Thrown by invariant_failed inside an InvariantScope.
class InvariantFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// While one is alive on a thread, invariant failures on that thread throw InvariantFailure.
class InvariantScope {
 public:
  InvariantScope();
  ~InvariantScope();
  InvariantScope(const InvariantScope&) = delete;
  InvariantScope& operator=(const InvariantScope&) = delete;
};

[[noreturn]] void invariant_failed(const char* condition, std::string_view message, const char* file,
                                   int line);

}  // namespace kvtwin

#define KVTWIN_CHECK(condition, message)                                                  \
  do {                                                                                    \
    if (!(condition)) ::kvtwin::invariant_failed(#condition, (message), __FILE__, __LINE__); \
  } while (false)
