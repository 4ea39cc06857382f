// Running this same kvtwin binary again, as a fresh process, and waiting for it. kvtwin selftest
// uses it where a job must not share the process with what ran before it: a CUDA kernel that
// faults leaves its process's context unusable until the process ends, so every later job in it
// would fail for that reason alone.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace kvtwin::cli {

// Runs this executable (/proc/self/exe) with `args` (argv[1..]), its standard streams and
// environment inherited, and returns its exit status once it ends; an error when it cannot start
// or ends by a signal.
Result<int> run_this_binary(const std::vector<std::string>& args);

}  // namespace kvtwin::cli
