// The CUDA backend seen from code that includes no CUDA header (the runner, the CLI, the
// property tests): is there a device, and a GpuPool behind the plain Backend interface.
//
// Link kvtwin_gpu to use it; that target exists only when the project is configured with
// KVTWIN_WITH_CUDA (it defines KVTWIN_HAVE_GPU=1 for its users), so code that must also build
// without CUDA guards on that definition or on `if(TARGET kvtwin_gpu)` in CMake.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/backend.h"
#include "gpu/faults.h"

namespace kvtwin::gpu {

// True when the CUDA runtime finds at least one device this process may use.
bool cuda_device_available();

// "NVIDIA H200, 132 SMs, 139.8 GiB, CUDA 13.0" or why there is none ("no CUDA device: ...").
std::string cuda_device_description();

// Whether this process can still use the device: ok, or the error every CUDA call now returns.
// A kernel that faults (an illegal address, say) leaves the process's context unusable until the
// process ends, so everything run after it fails at its first call for that reason alone; a
// caller running many independent jobs in one process (kvtwin selftest) asks after each and
// runs the rest elsewhere. It waits for the device's queued work.
Status cuda_context_health();

// A fresh CUDA backend (no pool yet: BuildPool first), with the given fault switches; its storage
// tier makes its folder under `storage_parent` (empty: the system's temporary folder).
std::unique_ptr<Backend> make_gpu_backend(const Faults& faults = {}, const std::string& storage_parent = "");

// The CUDA backend's own invariant check, for a runner Player's `verify`: every host counter
// against the device tables and the tables' invariants (GpuPool::verify). An error when `backend`
// is not one make_gpu_backend() made; ok before a pool is built.
Status verify_gpu_backend(const Backend& backend);
// The same check, leaving in `tables_read` the tables it downloaded (as backend.tables() would
// show them) when it passed over a working pool, else nullopt: a Player's verify_with_tables.
Status verify_gpu_backend(const Backend& backend, std::optional<PoolTables>& tables_read);

}  // namespace kvtwin::gpu
