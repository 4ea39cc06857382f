// Choosing the backends a run plays against: the reference model, the CUDA implementation, or
// both side by side, each wrapped as a runner Player with the checks only it can run.
//
// The GPU backend is optional: a build without CUDA, or a machine without a device, has none,
// and asking for it is an ErrorKind::unsupported Error that says which (callers that may skip,
// like `kvtwin check --backend auto`, ask gpu_device_available() first).
//
// One fault vocabulary (`kvtwin faults` lists it): every name is a real bug class of SPEC.md
// section 10, planted either in the reference model (names starting `model_`: a subclass of
// sim::Model with one decision changed) or in the CUDA implementation (gpu/faults.h switches).
// A planted fault (`--fault NAME[,NAME...]`) is a self-test of the harness: the run must catch it.
//   - a model fault replaces the model: it runs alone (--backend model), so only the checks that
//     do not trust the model can catch it (expectations, the shadow, invariants), or beside the
//     GPU (--backend both);
//   - GPU faults go to the GPU backend's switches (--backend gpu or both).
//
// Sets: model = [model]; gpu = [gpu]; both = [model, gpu]; a model fault swaps in the planted
// model for the model.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/result.h"
#include "traces/runner.h"

namespace kvtwin::sim {
class Model;
}

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
// Whether this process's CUDA context is still usable (gpu::cuda_context_health): ok without a
// GPU backend or device.
Status gpu_context_health();
// Whether runs with the GPU play SPEC 8's host operations: yes unless KVTWIN_GPU_HOST_OPS=0
// (BackendSet::host_ops).
bool gpu_host_ops_requested();

enum class FaultSite : std::uint8_t { model, gpu };

struct FaultInfo {
  std::string name;
  FaultSite site = FaultSite::model;
  std::string spec_class;  // the SPEC.md section 10 class it reproduces ("11", "13/19"), "" for a content bug
  std::string what;        // one line: the bug
};

std::string_view fault_site_name(FaultSite site);

// Every fault: the model's, then the GPU's (when the GPU backend is built), in a fixed order.
std::vector<FaultInfo> fault_catalogue();

// The faults planted in the model (names only).
std::vector<std::string> planted_faults();

// Splits "a,b" and checks every name; all must be of one site. An error names the unknown one
// and lists the known names.
struct FaultChoice {
  FaultSite site = FaultSite::model;
  std::vector<std::string> names;  // empty: none
  std::string joined() const;      // "a,b"
};
Result<FaultChoice> parse_fault_choice(std::string_view comma_separated);
// The same, but names of both sites may be mixed (a list of faults to try one by one).
Result<FaultChoice> parse_fault_choice_any_site(std::string_view comma_separated);

// The model's Player: verify(), byte descriptions, touched bytes and the state digest.
Player model_player(sim::Model& model);

// The reference model with one of planted_faults() planted (an error for another name). Tests
// pair it with a plain model to exercise the runner's two-backend checks without a GPU.
Result<std::unique_ptr<sim::Model>> make_planted_model(std::string_view fault);

struct BackendSet {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Player> players;
  // Whether every backend of the set plays SPEC 8's host arena and transfers: generators emit
  // host operations only then. The model and the GPU both do; KVTWIN_GPU_HOST_OPS=0 turns them
  // off in runs with the GPU.
  bool host_ops = true;

  std::string names() const;  // "model", "model+gpu"
};

// How the backends are set up, beyond their faults.
struct BackendOptions {
  // The folder under which the model's pools make their storage tier's folder (--storage-dir;
  // sim::Model::set_storage_parent); empty: the system's temporary folder.
  std::string storage_parent;
};

// Fresh backends, nothing built. `fault` empty: none planted.
Result<BackendSet> make_backend_set(BackendChoice choice, const std::string& fault = "",
                                    const BackendOptions& options = {});

}  // namespace kvtwin::traces
