// Whether this run was asked for its profile: KVTWIN_PROFILE=1 in the environment (any other value,
// or none, is off). One reading of the switch for every part that prints a profile or changes what
// it does at exit because one is printed (the runner's phases, the gate's timeline, the CLI's exit).
#pragma once

#include <cstdlib>
#include <string_view>

namespace kvtwin {

inline bool profile_requested() {
  const char* v = std::getenv("KVTWIN_PROFILE");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace kvtwin
