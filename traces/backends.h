// Choosing the backends a run plays against: the reference model, the CUDA implementation, or
// both side by side, each wrapped as a runner Player with the checks only it can run.
//
// The GPU backend is optional: a build without CUDA, or a machine without a device, has none,
// and asking for it is an ErrorKind::unsupported Error that says which (callers that may skip,
// like `kvtwin check --backend auto`, ask gpu_device_available() first).
//
// A planted fault (`--fault NAME`) is a self-test of the harness: the second backend gets a
// named bug, and a run must catch it. With the model alone, the second backend is a copy of the
// model with the bug planted (planted_faults() lists them); with the GPU, the names
// (comma-separated) go to the GPU backend's own fault switches (gpu/faults.h).
//
// Sets: model = [model] (+ [model with the fault]); gpu = [gpu]; both = [model, gpu].
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/result.h"
#include "traces/runner.h"

namespace kvtwin::traces {

enum class BackendChoice : std::uint8_t { model, gpu, both };

std::string_view backend_choice_name(BackendChoice c);
// "model", "gpu", "both"; an error lists them.
Result<BackendChoice> parse_backend_choice(std::string_view name);

// Whether this kvtwin was built with the GPU backend, and whether a CUDA device is present.
bool gpu_backend_built();
bool gpu_device_available();
// Why the GPU backend cannot run here ("" when it can).
std::string gpu_unavailable_reason();

// Faults the model's planted copy knows (for --fault with --backend model).
std::vector<std::string> planted_faults();

struct BackendSet {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Player> players;

  std::string names() const;  // "model", "model+gpu"
};

// Fresh backends, nothing built. `fault` empty: none planted.
Result<BackendSet> make_backend_set(BackendChoice choice, const std::string& fault = "");

}  // namespace kvtwin::traces
