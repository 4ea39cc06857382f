// Device and pinned allocations, events and streams kept for reuse across pools, so that a pool's
// teardown frees nothing through the driver and a pool's build creates nothing there.
//
// Why: a cudaFree (and a cudaFreeHost) waits for the whole device, every other thread's streams
// included, and other threads' CUDA calls wait behind it. The gate builds a pool per property
// case on one thread per core, all on one GPU: a pool's forty-odd buffers freed one by one made
// every thread wait for every other at each case's end, and the next case's cudaMallocs paid the
// driver again (13 ms a build, side by side on the H200).
//
// How it works: DeviceBuffer and PinnedBuffer take their memory here. A release made while the
// calling thread holds a QuietRelease (its owner has synchronized every stream that used the
// memory: no device work can still touch it) keeps the block, by its kind and size class, up to a
// bound. A release made while the thread holds a HoldReleases scope (a pool in the middle of an
// operation: a scratch buffer outgrown, a captured graph replaced) is held by the scope's owner,
// neither freed nor reused, until the owner has synchronized its streams and releases what it
// holds under a QuietRelease (a pool's rebuild and its end). Any other release frees at once, as
// before. A later allocation of the same kind and size class takes a kept block and passes the
// failure injector as a cudaMalloc would (cuda_check.h), so an armed injector counts and fails the
// same calls whether the block is kept or new. Size classes (a quarter of a power of two; blocks
// past kKeptBlockBytesMax exactly as asked) let a block serve the next pool's slightly different
// sizes: the gate's pools differ by configuration.
//
// What it does not cover: a kept block holds whatever its last owner wrote (as a new cudaMalloc
// holds whatever was there); every user initializes what it reads. Blocks still kept at exit are
// freed by an atexit handler (registered after the runtime's, so it runs first).
//
// Events and streams: creating and destroying them waits on the driver's context-wide lock, behind
// every other thread's calls (on the H200 with 16 threads, 1.5 to 2.3 ms a cudaEventCreate and
// 3 to 6 ms a cudaStreamCreate, almost none of it CPU). An event given back is kept at once: a
// later cudaEventRecord replaces what it recorded, and the waits already enqueued on it keep what
// they captured. A stream given back is kept only under a QuietRelease (its owner synchronized it),
// idle and not capturing; otherwise it is destroyed. Both pass the injector as the calls they
// replace do (counted as cudaEventCreate and cudaStreamCreate, kind "other"). Executable graphs
// likewise (cudaGraphInstantiate 2 ms, cudaGraphExecDestroy 1.4 ms there): a kept one is updated
// to the next graph of its topology.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/result.h"

namespace kvtwin::gpu {

enum class MemoryKind : std::uint8_t {
  device,         // cudaMalloc
  pinned,         // cudaHostAlloc(cudaHostAllocDefault)
  pinned_mapped,  // cudaHostAlloc(cudaHostAllocMapped)
};

// At least `bytes` (> 0) of `kind`: a kept block of that size class if one is kept, else a new
// one of the class's size.
Result<void*> take_memory(MemoryKind kind, std::size_t bytes);

// Gives back what take_memory returned (`bytes` as asked): kept while this thread holds a
// QuietRelease and the bound allows, held while it holds a HoldReleases scope and its holder's
// bound allows, else freed now (a failure reported, never raised: it may run after a sticky error).
void release_memory(MemoryKind kind, void* block, std::size_t bytes);

// The bytes an allocation of `bytes` takes: its size class.
std::size_t size_class_bytes(std::size_t bytes);

// While one lives on a thread, that thread's releases are kept: create one only where every stream
// that used the memory about to be released has been synchronized.
class QuietRelease {
 public:
  QuietRelease();
  ~QuietRelease();
  QuietRelease(const QuietRelease&) = delete;
  QuietRelease& operator=(const QuietRelease&) = delete;
};

// What one owner (a pool) holds of the releases made during its operations: blocks that device
// work enqueued before their release may still touch. Not thread-safe: its owner's thread only.
class HeldReleases {
 public:
  HeldReleases() = default;
  ~HeldReleases() { release_all(); }
  HeldReleases(const HeldReleases&) = delete;
  HeldReleases& operator=(const HeldReleases&) = delete;

  // Releases every held block now, as release_memory would outside a HoldReleases scope: kept if
  // this thread holds a QuietRelease (call it so once every stream that used them is synchronized),
  // else freed.
  void release_all();
  std::size_t bytes() const { return bytes_; }

 private:
  friend void release_memory(MemoryKind, void*, std::size_t);
  struct Block {
    MemoryKind kind;
    void* block;
    std::size_t bytes;
  };
  std::vector<Block> blocks_;
  std::size_t bytes_ = 0;
};

// While one lives on a thread, that thread's releases outside a QuietRelease go to `into` (the
// innermost scope's holder), up to a bound past which they are freed as before.
class HoldReleases {
 public:
  explicit HoldReleases(HeldReleases& into);
  ~HoldReleases();
  HoldReleases(const HoldReleases&) = delete;
  HoldReleases& operator=(const HoldReleases&) = delete;

 private:
  HeldReleases* previous_;
};

// A cudaEventDisableTiming event: a kept one, else a new one.
Result<cudaEvent_t> take_event();
// Gives back what take_event returned (nullptr: nothing): kept up to a bound, else destroyed.
void release_event(cudaEvent_t event);
// A cudaStreamNonBlocking stream: a kept one, else a new one.
Result<cudaStream_t> take_stream();
// Gives back what take_stream returned (nullptr: nothing): kept under a QuietRelease when idle and
// not capturing and the bound allows, else destroyed (its synchronization count forgotten).
void release_stream(cudaStream_t stream);

// The key of the executable graphs that one of `graph` can be updated from: its nodes by type, in
// order (an update is refused where the topology or a node's type differs; a kernel node may
// change its function and parameters, a 1-D copy or memset its addresses).
Result<std::uint64_t> graph_exec_key(cudaGraph_t graph);
// An executable graph of `graph`: a kept one of its key updated to it (cudaGraphExecUpdate: a
// launch then runs `graph` exactly), else a new instantiation (one whose update is refused anyway
// is destroyed).
Result<cudaGraphExec_t> take_graph_exec(cudaGraph_t graph, std::uint64_t key);
// Gives back what take_graph_exec returned: kept under a QuietRelease (every launch of it has
// completed) and the bound allows, else destroyed.
void release_graph_exec(cudaGraphExec_t exec, std::uint64_t key);

// What the process's allocations have done so far (KVTWIN_PROFILE=1 prints it).
struct KeptMemoryStats {
  std::uint64_t taken_new = 0;    // allocations the driver made
  std::uint64_t taken_kept = 0;   // allocations served by a kept block
  std::uint64_t freed_now = 0;    // releases freed through the driver
  std::uint64_t held = 0;         // releases held by a pool until its streams were synchronized
  std::uint64_t kept = 0;         // releases kept
  std::uint64_t bytes_kept = 0;   // bytes kept right now
  std::uint64_t events_new = 0;   // events and streams the driver made
  std::uint64_t events_kept = 0;  // events and streams served by kept ones
  std::uint64_t streams_new = 0;
  std::uint64_t streams_kept = 0;
  std::uint64_t graphs_new = 0;      // graph instantiations
  std::uint64_t graphs_updated = 0;  // kept executable graphs updated instead
};
KeptMemoryStats kept_memory_stats();

// Frees every kept block and destroys every kept event, stream and graph (tests; a caller that wants the
// memory back).
void drop_kept_memory();

}  // namespace kvtwin::gpu
