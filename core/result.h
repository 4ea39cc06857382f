// Error values and Result<T>: how every operating error in kvtwin travels.
//
// Bad input (a misaligned row, a double free, an unmarked write loc, a malformed trace) is
// not an exception and never an abort: it is an Error carrying a kind a program can switch
// on and a message a person can act on (what was wrong, the numbers, and the way out).
// Broken invariants are different: they stop the run loudly (see check.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtwin {

// Stable names: they appear in traces ("expect": {"error": "double_free"}) and JSON reports.
enum class ErrorKind : std::uint8_t {
  invalid_argument,  // a value outside what the call accepts
  layout,            // the byte law refused a layout (alignment, overlap, bounds)
  sizing,            // the pool cannot be built at this size
  overflow,          // 64-bit byte arithmetic would wrap
  out_of_range,      // an id or index outside its table
  double_free,       // freeing what is not allocated
  unmarked_loc,      // a unified pool's write door was handed an unmarked loc
  duplicate_loc,     // two lanes of one write name the same non-sink loc
  reader_conflict,   // a move under an open reader
  malformed,         // input that does not parse (spec file, trace line, operation)
  unsupported,       // a feature or format kvtwin does not implement
  io,                // a file that cannot be read or written
  internal,          // a state inconsistency that should be impossible
  environment,       // the machine failed, not the input: out of memory, a CUDA error (the backend
                     // that says so refuses every later operation: it is poisoned)
};

std::string_view error_kind_name(ErrorKind kind);
// Parses a name produced by error_kind_name; false when unknown.
bool parse_error_kind(std::string_view name, ErrorKind& kind);

struct Error {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
  // A stable code for why an operation was refused, where one kind has several causes (a free of
  // the sink and a free of a page never allocated are both refusals of a free, for different
  // reasons): core/reasons.h lists them. Empty where the kind says it all. Backends compare it.
  std::string reason;

  // Prepends context ("spec.json: ", "line 7: ") to the message.
  Error with_context(std::string_view context) const {
    return Error{kind, std::string(context) + message, reason};
  }
};

inline Error make_error(ErrorKind kind, std::string message) {
  return Error{kind, std::move(message), {}};
}

// A refusal with its reason code (core/reasons.h).
inline Error make_refusal(ErrorKind kind, std::string_view reason, std::string message) {
  return Error{kind, std::move(message), std::string(reason)};
}

struct Unit {
  bool operator==(const Unit&) const = default;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

using Status = Result<Unit>;

inline Status ok_status() { return Status(Unit{}); }

}  // namespace kvtwin

// Propagates an error from an expression yielding Result<...>; binds the value otherwise.
#define KVTWIN_CONCAT_INNER(a, b) a##b
#define KVTWIN_CONCAT(a, b) KVTWIN_CONCAT_INNER(a, b)
#define KVTWIN_TRY_BIND(decl, expr, tmp)   \
  auto tmp = (expr);                       \
  if (!tmp.ok()) return tmp.error();       \
  decl = std::move(tmp).value()
#define KVTWIN_TRY(decl, expr) KVTWIN_TRY_BIND(decl, expr, KVTWIN_CONCAT(kvtwin_try_, __LINE__))
#define KVTWIN_TRY_STATUS(expr)                                          \
  do {                                                                   \
    auto kvtwin_status_ = (expr);                                        \
    if (!kvtwin_status_.ok()) return kvtwin_status_.error();             \
  } while (false)
