// What every kvtwin fuzz target shares: the contract a reader of outside input must keep
// (issue 13), checked after each input. A reader either reads the input or refuses it with an
// Error whose kind is malformed, io or unsupported (or invalid_argument for a value the pool
// refuses), whose message names where the problem is, and which carries no raw byte of the
// input. A crash, a hang, an abort from a broken invariant (core/check.h) or an allocation out
// of proportion to the input is a finding; libFuzzer and the sanitizers report those themselves.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/result.h"

namespace kvtwin::fuzz {

// Stops the run (a finding) with the message and the rule it broke.
[[noreturn]] inline void finding(const std::string& rule, const std::string& message) {
  std::fprintf(stderr, "kvtwin fuzz finding: %s\n  message: %s\n", rule.c_str(), message.c_str());
  std::abort();
}

// A refusal as the contract wants it: a known kind, the place first, no raw bytes.
inline void check_refusal(const Error& e, std::string_view where) {
  if (e.message.empty()) finding("an error without a message", "");
  if (e.message.rfind(where, 0) != 0) finding("the message does not begin with '" + std::string(where) + "'", e.message);
  for (char c : e.message) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7f) finding("a raw control byte in the message", e.message);
  }
  if (e.message.size() > 4096) finding("a message longer than 4096 characters", e.message.substr(0, 300));
}

}  // namespace kvtwin::fuzz
