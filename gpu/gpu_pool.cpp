// GpuPool (gpu_pool.h): every operation of core/op.h, dispatched to the unit that owns it.
//
// What stays here is what spans units: building the pool (every unit at once), the readers' gate
// between a free plan and its commit, and the poisoning after a CUDA failure. Comments cite the
// SPEC.md rule (or docs/decisions.md entry) each branch implements.
#include "gpu/gpu_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <variant>

#include "core/checked.h"
#include "core/profile_switch.h"
#include "core/reasons.h"
#include "gpu/fault_layout.h"

namespace kvtwin::gpu {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

// An outcome as an operation's result.
template <class T>
OpResult ok(T outcome) {
  return OpResult(Outcome(std::move(outcome)));
}

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

// ---- KVTWIN_PROFILE=1: where the GPU's applies spend their time, by operation kind

struct OpKindTotals {
  std::uint64_t ops = 0, syncs = 0;
  double wall = 0, cpu = 0, cuda_wall = 0, cuda_cpu = 0;
};
std::mutex g_op_profile_mutex;
std::map<std::string, OpKindTotals> g_op_profile;

void print_op_profile() {
  const KeptMemoryStats m = kept_memory_stats();
  std::fprintf(stderr,
               "kvtwin profile: gpu memory so far: %llu allocations new, %llu kept ones; %llu releases kept, %llu held "
               "by their pool, %llu freed; events %llu new, %llu kept ones; streams %llu new, %llu kept ones; graphs %llu new, %llu updated\n",
               static_cast<unsigned long long>(m.taken_new), static_cast<unsigned long long>(m.taken_kept),
               static_cast<unsigned long long>(m.kept), static_cast<unsigned long long>(m.held),
               static_cast<unsigned long long>(m.freed_now), static_cast<unsigned long long>(m.events_new),
               static_cast<unsigned long long>(m.events_kept), static_cast<unsigned long long>(m.streams_new),
               static_cast<unsigned long long>(m.streams_kept), static_cast<unsigned long long>(m.graphs_new),
               static_cast<unsigned long long>(m.graphs_updated));
  std::lock_guard<std::mutex> lock(g_op_profile_mutex);
  std::vector<std::pair<std::string, OpKindTotals>> rows(g_op_profile.begin(), g_op_profile.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.wall > b.second.wall; });
  std::fprintf(stderr,
               "kvtwin profile: gpu applies by operation, all pools (wall, thread CPU; of them in CUDA calls; "
               "host CPU outside CUDA calls)\n");
  for (const auto& [name, t] : rows)
    std::fprintf(stderr, "  %-20s %9llu ops %9llu syncs %8.3f s %8.3f s cpu | cuda %8.3f s %8.3f s cpu | host %8.3f s cpu %6.1f us/op\n",
                 name.c_str(), static_cast<unsigned long long>(t.ops), static_cast<unsigned long long>(t.syncs), t.wall,
                 t.cpu, t.cuda_wall, t.cuda_cpu, t.cpu - t.cuda_cpu, t.ops ? 1e6 * (t.cpu - t.cuda_cpu) / t.ops : 0.0);
}

Error out_of_range(std::string message) { return make_error(ErrorKind::out_of_range, std::move(message)); }

}  // namespace

// Adds one apply's times to its kind's totals when it goes out of scope.
class OpKindTimer {
 public:
  OpKindTimer(bool on, std::string_view name, cudaStream_t stream) : on_(on), name_(name), stream_(stream) {
    if (!on_) return;
    syncs_ = stream_syncs(stream_);
    wall_ = detail::profile_now_seconds();
    cpu_ = detail::profile_thread_cpu_seconds();
    cuda_ = detail::cuda_time_on_this_thread();
  }
  ~OpKindTimer() {
    if (!on_) return;
    const detail::CudaTimeOnThread cuda = detail::cuda_time_on_this_thread();
    const double wall = detail::profile_now_seconds() - wall_, cpu = detail::profile_thread_cpu_seconds() - cpu_;
    static std::once_flag at_exit;
    std::call_once(at_exit, [] { std::atexit(print_op_profile); });
    std::lock_guard<std::mutex> lock(g_op_profile_mutex);
    OpKindTotals& t = g_op_profile[std::string(name_)];
    ++t.ops;
    t.syncs += stream_syncs(stream_) - syncs_;
    t.wall += wall;
    t.cpu += cpu;
    t.cuda_wall += cuda.wall - cuda_.wall;
    t.cuda_cpu += cuda.cpu - cuda_.cpu;
  }
  OpKindTimer(const OpKindTimer&) = delete;
  OpKindTimer& operator=(const OpKindTimer&) = delete;

 private:
  bool on_;
  std::string_view name_;
  cudaStream_t stream_;
  std::uint64_t syncs_ = 0;
  double wall_ = 0, cpu_ = 0;
  detail::CudaTimeOnThread cuda_;
};

GpuPool::GpuPool(Faults faults) : faults_(faults) {
  const char* env = std::getenv("KVTWIN_GPU_SYNC_EACH_OP");
  sync_each_op_ = env != nullptr && std::string_view(env) == "1";
  profile_ops_ = profile_requested();
}

GpuPool::~GpuPool() {
  // With KVTWIN_PROFILE=1 the pool's teardown is timed as an operation kind of its own, until its
  // last member is gone.
  if (profile_ops_) teardown_timer_ = std::make_unique<OpKindTimer>(true, "teardown", nullptr);
  // Every stream of the pool synchronized (the compute stream, then the copy streams as the
  // transfers land): no device work can still touch the members' buffers, nor what the pool held
  // of its operations' releases, which are then kept for the next pool rather than freed
  // (kept_memory.h; a cudaFree waits for the whole device, every other thread's streams too).
  // After a CUDA failure nothing is kept.
  const bool quiet = stream_ == nullptr || cudaStreamSynchronize(stream_) == cudaSuccess;
  if (quiet && poisoned_.empty()) quiet_teardown_.emplace();
  transfers_.reset();
  graphs_.clear();
  batches_.clear();
  held_.release_all();
  release_stream(stream_);  // kept for the next pool when synchronized (kept_memory.h)
}

Status GpuPool::require_pool() const {
  if (!poisoned_.empty())
    return make_error(ErrorKind::environment,
                      "the GPU backend refuses every operation since a CUDA failure left its state unknown: " +
                          poisoned_);
  if (!built_) return invalid("no pool has been built yet; play a 'build' operation first");
  return ok_status();
}

Result<std::size_t> GpuPool::side_named(std::string_view sub_pool, std::string_view what) const {
  if (const auto index = derived_.sub_pool_index(sub_pool)) return *index;
  std::string known;
  for (const DenseEntryLayout& l : derived_.layouts) known += (known.empty() ? "" : ", ") + l.sub_pool;
  return invalid(std::string(what) + ": this pool has no sub-pool '" + std::string(sub_pool) + "'; its sub-pools: " + known);
}

OpResult GpuPool::apply(const Op& op) {
  // The first build on a thread apart from the rest: what it pays the driver once.
  thread_local bool built_on_this_thread = false;
  const bool first_build =
      profile_ops_ && std::holds_alternative<BuildPool>(op) && !std::exchange(built_on_this_thread, true);
  const OpKindTimer timer(profile_ops_, first_build ? "build (thread's first)" : op_name(op), stream_);
  const HoldReleases hold(held_);
  const std::uint64_t index = ops_applied_++;
  if (!std::holds_alternative<BuildPool>(op) || !poisoned_.empty()) {
    if (Status s = require_pool(); !s.ok()) return s.error();
  }
  // A repeat of the last tables digest counts this thread's CUDA calls since it was summed.
  if (summed_tables_ && (std::holds_alternative<BuildPool>(op) || summed_tables_->thread != std::this_thread::get_id()))
    summed_tables_.reset();
  // Only writes leave the tables an SWA layer's loc is derived from as they were (Doors).
  if (!std::holds_alternative<Write>(op)) doors_.forget_swa_loc();
  // A tables digest asked for after the last op reads the tables as they were then.
  if (Status s = poison_on_failure(launch_pending_tables_digest()); !s.ok()) return s.error();
  const std::uint64_t syncs_before = stream_syncs(stream_);
  OpResult result = dispatch(op);
  const bool failed_on_device = !result.ok() && result.error().kind == ErrorKind::environment;
  if (sync_each_op_ && !failed_on_device && stream_ != nullptr) {
    const Status synced = [&]() -> Status {
      KVTWIN_CUDA_SYNC(stream_);
      return ok_status();
    }();
    if (!synced.ok()) result = synced.error();
  }
  // Did a synchronization of the stream succeed during this operation? Then every earlier
  // operation's device work completed without error.
  const bool synchronized = stream_syncs(stream_) != syncs_before;
  if (!result.ok() && result.error().kind == ErrorKind::environment) {
    // A CUDA call failed, perhaps halfway through, perhaps reporting earlier work: what the device
    // holds is no longer known, so the backend is poisoned and refuses everything after, with
    // this reason.
    const Error error = attributed(result.error(), index, op, synchronized);
    poisoned_ = error.message;
    return error;
  }
  if (synchronized) unsynchronized_.clear();
  // This operation may have left work running after its last synchronization (unless it ended
  // with one on purpose).
  if (!(sync_each_op_ && synchronized)) {
    if (unsynchronized_.size() == kMaxUnsynchronized) unsynchronized_.erase(unsynchronized_.begin());
    unsynchronized_.push_back("#" + std::to_string(index) + " " + std::string(op_name(op)));
  }
  return result;
}

Error GpuPool::attributed(const Error& error, std::uint64_t index, const Op& op, bool synchronized) const {
  // Work of earlier operations was left running; a failure it causes surfaces at a later call.
  std::vector<std::string> candidates;
  if (!synchronized) candidates = unsynchronized_;
  if (candidates.empty()) return error;  // only this operation's own work was outstanding
  candidates.push_back("#" + std::to_string(index) + " " + std::string(op_name(op)));
  std::string list;
  for (const std::string& c : candidates) list += (list.empty() ? "" : ", ") + c;
  return Error{error.kind,
               error.message + " [surfaced in operation #" + std::to_string(index) +
                   "; the device work of operations " + list +
                   " had not been synchronized yet, so it may come from any of them; KVTWIN_GPU_SYNC_EACH_OP=1 "
                   "synchronizes after every operation and names the one]",
               error.reason};
}

OpResult GpuPool::dispatch(const Op& op) {
  const Faults& f = faults_;
  return std::visit(
      Overloaded{
          [&](const BuildPool& o) { return build(o); },
          [&](const Alloc& o) { return alloc(o); },
          [&](const AllocMany& o) { return alloc_many(o); },
          [&](const Free& o) { return free_pages(o); },
          [&](const FreeSwa& o) { return free_swa(o); },
          [&](const Flush& o) { return flush(o); },
          [&](const MovePages& o) { return move_pages(o); },
          [&](const BeginRead& o) { return begin_read(o); },
          [&](const EndRead& o) -> OpResult {
            const std::optional<std::size_t> side = readers_.side_of(o.reader);
            KVTWIN_TRY_STATUS(readers_.end(o));
            // SPEC 10.22: a quarantined slot no reader holds any more may be reused.
            if (state_.built() && side == state_index()) state_.release_quarantine(state_held());
            return ok(Done{});
          },
          [&](const MakeBatch& o) -> OpResult {
            KVTWIN_TRY_STATUS(batches_.make(o, stream_));
            return ok(Done{});
          },
          [&](const Rebind& o) -> OpResult {
            const std::int64_t ps = static_cast<std::int64_t>(config_.page_size);
            KVTWIN_TRY(std::vector<std::int64_t> loc, batches_.rebind(o, allocator_.owner(), ps, f, stream_));
            return ok(Ids{std::move(loc)});
          },
          [&](const Split& o) -> OpResult {
            KVTWIN_TRY(Marks marks, batches_.split(o, f, stream_));
            return ok(marks);
          },
          [&](const DropBatch& o) -> OpResult {
            KVTWIN_TRY_STATUS(batches_.drop(o));
            return ok(Done{});
          },
          [&](const Write& o) -> OpResult {
            KVTWIN_TRY_STATUS(doors_.write(o, batches_, allocator_, bytes_, transfers_, f, stream_));
            return ok(Done{});
          },
          [&](const Read& o) -> OpResult {
            KVTWIN_TRY(std::vector<std::uint8_t> rows, doors_.read(o, allocator_, bytes_, transfers_, f, stream_));
            return ok(Bytes::of(std::move(rows)));
          },
          [&](const Translate& o) -> OpResult {
            KVTWIN_TRY(std::vector<std::int64_t> ids, translation_.translate(o, allocator_, f, stream_));
            return ok(Ids{std::move(ids)});
          },
          [&](const SwaTranslate& o) -> OpResult {
            KVTWIN_TRY(std::vector<std::int64_t> ids, translation_.swa_translate(o, allocator_, f, stream_));
            return ok(Ids{std::move(ids)});
          },
          [&](const PageTable& o) -> OpResult {
            KVTWIN_TRY(Table table, translation_.page_table(o, allocator_, f, stream_));
            return ok(std::move(table));
          },
          [&](const RemapIndices& o) -> OpResult {
            KVTWIN_TRY(std::vector<std::int64_t> ids, translation_.remap_indices(o, allocator_, f, stream_));
            return ok(Ids{std::move(ids)});
          },
          [&](const Capture& o) { return capture(o); },
          [&](const Replay& o) -> OpResult {
            ReplayChecks checks;
            if (transfers_.any_in_flight()) {
              checks.after_allocated = [&] { return check_replay_reads(o); };
              checks.after_duplicates = [&] { return check_replay_writes(o); };
            }
            KVTWIN_TRY(Decode decode, graphs_.replay(o, f, stream_, checks));
            return ok(std::move(decode));
          },
          [&](const Checkpoint&) -> OpResult {
            // Every copy lands (the copy streams synchronized); the transfers stay in flight.
            KVTWIN_TRY_STATUS(transfers_.land_all());
            return ok(Done{});
          },
          // SPEC 8's host arena and transfers (host_op below).
          [&](const HostAlloc&) { return host_op(op); },
          [&](const HostFree&) { return host_op(op); },
          [&](const LeaseAcquire&) { return host_op(op); },
          [&](const LeaseRelease&) { return host_op(op); },
          [&](const RecordEvent&) { return host_op(op); },
          [&](const Offload&) { return host_op(op); },
          [&](const LoadBack&) { return host_op(op); },
          [&](const TransferWait&) { return host_op(op); },
          [&](const StorePages& o) { return store_pages(o); },
          [&](const LoadStored& o) { return load_stored(o); },
          // SPEC 11's state sub-pool (state_pool.h).
          [&](const StateAlloc& o) { return state_alloc(o); },
          [&](const StateFree& o) { return state_free(o); },
          [&](const StateWrite& o) { return state_write(o); },
          [&](const StateRead& o) { return state_read(o); },
          [&](const StateSlots& o) { return state_slots(o); },
      },
      op);
}

// ---------------------------------------------------------------- build (SPEC 3)

OpResult GpuPool::build(const BuildPool& op) {
  // A configuration that does not build changes nothing (an earlier pool stays).
  Result<PoolDerived> derived =
      faults_.row_misaligned_accepted ? derive_pool_unchecked_rows(op.config) : derive_pool(op.config);
  if (!derived.ok()) return derived.error();
  if (op.config.host_bytes != 0) {
    // SPEC 8: page_num = host_bytes // max(page bytes) host pages; none is no arena (the
    // configuration does not build, and an earlier pool stays).
    std::uint64_t largest = 0;
    for (const SubPoolGeometry& g : derived->geometry.sub_pools) largest = std::max(largest, g.page_bytes);
    if (op.config.host_bytes / largest == 0)
      return make_error(ErrorKind::sizing, "host_bytes: a host arena of " + std::to_string(op.config.host_bytes) +
                                               " bytes holds no page of " + std::to_string(largest) +
                                               " bytes (the largest side's page_size * E); give at least that");
  }
  // Building (or rebuilding) replaces the whole state: tables, bytes, batches, readers, graphs,
  // the host arena and its transfers (every copy in flight lands first).
  // The old pool's work lands first (the compute stream, then every copy in flight): what the
  // resets release is then kept for the new pool rather than freed (kept_memory.h). Not one of the
  // counted synchronizations of an operation's answer: a rebuild has always waited for the
  // device (its cudaFrees did), and the injector's synchronization walk stays as it was.
  if (stream_ != nullptr) {
    if (const cudaError_t landed = cudaStreamSynchronize(stream_); landed != cudaSuccess)
      return cuda_error(landed, "cudaStreamSynchronize(stream_)", __FILE__, __LINE__);
    note_stream_synchronized(stream_);
  }
  {
    std::optional<QuietRelease> quiet;
    if (poisoned_.empty()) quiet.emplace();
    transfers_.reset();
    store_.reset();
    graphs_.clear();
    batches_.clear();
    readers_.clear();
    state_.reset();
    allocator_.reset();
    bytes_.reset();
    held_.release_all();
  }
  built_ = false;
  if (stream_ == nullptr) {
    KVTWIN_TRY(stream_, take_stream());
  }
  config_ = op.config;
  derived_ = std::move(derived).value();
  KVTWIN_TRY_STATUS(bytes_.init(config_, derived_, stream_));
  KVTWIN_TRY_STATUS(allocator_.init(config_, derived_, stream_));
  if (derived_.has_state()) KVTWIN_TRY_STATUS(state_.init(config_, derived_, stream_));
  KVTWIN_TRY_STATUS(doors_.init(config_, derived_));
  translation_.init(config_);
  KVTWIN_TRY_STATUS(transfers_.init(config_, derived_));
  if (config_.host_bytes > 0) {
    // SPEC 8: one host page of a side is that side's device page envelope.
    std::vector<HostArenaSide> sides;
    for (const SubPoolGeometry& g : derived_.geometry.sub_pools) sides.push_back(HostArenaSide{g.name, g.page_bytes});
    KVTWIN_TRY_STATUS(host_arena_.init(config_.host_bytes, std::move(sides), !config_.tables_only));
  } else {
    host_arena_.reset();
  }
  built_ = true;
  return ok(Done{});
}

// ---------------------------------------------------------------- allocation (SPEC 4, 4.2, 4.3)

OpResult GpuPool::alloc(const Alloc& op) {
  const std::uint64_t ps = config_.page_size;
  if (op.tokens % ps != 0)
    return invalid("alloc of " + std::to_string(op.tokens) + " tokens is not a whole number of pages of " +
                   std::to_string(ps) + " tokens; allocate a multiple of the page size");
  const std::uint64_t k = op.tokens / ps;
  if (k == 0) return ok(Allocated{});
  if (allocator_.floats()) return alloc_on_tri_pool(static_cast<std::int64_t>(k), nullptr);
  if (k > static_cast<std::uint64_t>(allocator_.owner().queue_count()) ||
      !allocator_.fits(static_cast<std::int64_t>(k), owner_low_end()))
    return ok(NoRoom{});
  KVTWIN_TRY(std::vector<std::int64_t> pages, allocator_.alloc(static_cast<std::int64_t>(k), stream_));
  return ok(Allocated{std::move(pages)});
}

OpResult GpuPool::alloc_many(const AllocMany& op) {
  const std::uint64_t ps = config_.page_size;
  if (op.tokens.empty()) return invalid("alloc_many needs at least one request; use alloc for a single one");
  std::uint64_t total = 0;
  for (std::uint64_t tokens : op.tokens) {
    if (tokens % ps != 0)
      return invalid("alloc_many: " + std::to_string(tokens) + " tokens is not a whole number of pages of " +
                     std::to_string(ps) + " tokens; allocate multiples of the page size");
    KVTWIN_TRY(total, checked_add(total, tokens / ps, "alloc_many page count"));
  }
  const auto free_ids = static_cast<std::uint64_t>(allocator_.owner().queue_count());
  AllocatedMany out;
  if (allocator_.floats() && !faults_.alloc_many_partial) {
    // SPEC 11: the tri-pool binds the sum in one allocation (the float sized for the whole at once).
    if (total == 0) {
      out.pages.resize(op.tokens.size());
      return ok(std::move(out));
    }
    std::vector<std::uint64_t> split;
    for (std::uint64_t tokens : op.tokens) split.push_back(tokens / ps);
    return alloc_on_tri_pool(static_cast<std::int64_t>(total), &split);
  }
  if (faults_.alloc_many_partial) {
    // Fault 14: one request at a time, leaving earlier grants behind when a later one fails.
    for (std::uint64_t tokens : op.tokens) {
      const std::uint64_t k = tokens / ps;
      if (allocator_.floats()) {
        OpResult one = k == 0 ? ok(Allocated{}) : alloc_on_tri_pool(static_cast<std::int64_t>(k), nullptr);
        if (!one.ok()) return one;
        const auto* granted = std::get_if<Allocated>(&*one);
        if (granted == nullptr) return one;  // no room: the earlier grants stay (the fault)
        out.pages.push_back(granted->pages);
        continue;
      }
      if (k > static_cast<std::uint64_t>(allocator_.owner().queue_count()) ||
          !allocator_.fits(static_cast<std::int64_t>(k)))
        return ok(NoRoom{});
      std::vector<std::int64_t> pages;
      if (k > 0) {
        KVTWIN_TRY(pages, allocator_.alloc(static_cast<std::int64_t>(k), stream_));
      }
      out.pages.push_back(std::move(pages));
    }
    return ok(std::move(out));
  }
  // All or nothing (SPEC 4): the requests fit one after another exactly when their sum fits;
  // then each is bound in turn (on a grow-down side, one combined band would order pages
  // differently from consecutive allocations).
  if (total > free_ids || !allocator_.fits(static_cast<std::int64_t>(total), owner_low_end())) return ok(NoRoom{});
  if (state_.built()) {
    // SPEC 11: a hybrid chain binds the sum in one allocation and hands it out in order (the
    // model's rule for chains whose ends share the budget).
    std::vector<std::int64_t> pages;
    if (total > 0) {
      KVTWIN_TRY(pages, allocator_.alloc(static_cast<std::int64_t>(total), stream_));
    }
    std::size_t at = 0;
    for (std::uint64_t tokens : op.tokens) {
      const std::size_t n = static_cast<std::size_t>(tokens / ps);
      out.pages.emplace_back(pages.begin() + static_cast<std::ptrdiff_t>(at),
                             pages.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
    return ok(std::move(out));
  }
  for (std::uint64_t tokens : op.tokens) {
    std::vector<std::int64_t> pages;
    if (tokens / ps > 0) {
      KVTWIN_TRY(pages, allocator_.alloc(static_cast<std::int64_t>(tokens / ps), stream_));
    }
    out.pages.push_back(std::move(pages));
  }
  return ok(std::move(out));
}

OpResult GpuPool::alloc_on_tri_pool(std::int64_t k, const std::vector<std::uint64_t>* split) {
  // SPEC 11: the owner's band grows down; the float fits between the state and it, relocated
  // (make_room) when the owner's growth cuts into it; no room changes nothing.
  const DeviceAllocator::ChainAlloc plan = allocator_.plan_chain_alloc(k, state_.frontier_bytes());
  if (!plan.fits) return ok(NoRoom{});
  if (plan.relocation) KVTWIN_TRY_STATUS(check_relocation(*plan.relocation));
  KVTWIN_TRY(std::vector<std::int64_t> vpages, allocator_.commit_chain_alloc(plan, bytes_, faults_, stream_));
  if (split == nullptr) return ok(Allocated{std::move(vpages), relocation_moves(plan.relocation)});
  // alloc_many: the sum handed out in order.
  AllocatedMany out;
  std::size_t at = 0;
  for (std::uint64_t n : *split) {
    out.pages.emplace_back(vpages.begin() + static_cast<std::ptrdiff_t>(at),
                           vpages.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return ok(std::move(out));
}

Status GpuPool::check_relocation(const FloatRelocation& relocation) const {
  // SPEC 7: make_room moves pages, so no open reader may hold one it moves from or to; then, as
  // for every move, no transfer in flight may copy one (SPEC 8).
  KVTWIN_TRY_STATUS(readers_.check_moves(1, allocator_.side_name(1), relocation.sources, relocation.destinations, faults_));
  if (faults_.compaction_ignores_transfers) return ok_status();  // fault 20
  for (std::size_t i = 0; i < relocation.sources.size(); ++i)
    for (std::int64_t page : {relocation.sources[i], relocation.destinations[i]})
      if (const auto t = transfers_.holding_physical(1, page))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "make_room would move page " + std::to_string(relocation.sources[i]) + " -> " +
                                std::to_string(relocation.destinations[i]) + " of sub-pool '" + allocator_.side_name(1) +
                                "' while transfer " + std::to_string(*t) + " still copies page " + std::to_string(page) +
                                "; wait for it (transfer_wait) first");
  return ok_status();
}

std::vector<PageMove> GpuPool::relocation_moves(const std::optional<FloatRelocation>& relocation) const {
  std::vector<PageMove> moves;
  if (!relocation) return moves;
  for (std::size_t i = 0; i < relocation->sources.size(); ++i)
    moves.push_back(PageMove{allocator_.side_name(1), relocation->sources[i], relocation->destinations[i]});
  return moves;
}

Status GpuPool::check_moves(std::size_t side, const std::vector<std::int64_t>& src,
                            const std::vector<std::int64_t>& dst) const {
  // Move by move: the readers first (SPEC 7), then the transfers in flight (SPEC 8).
  for (std::size_t i = 0; i < src.size(); ++i) {
    KVTWIN_TRY_STATUS(readers_.check_moves(side, allocator_.side_name(side), {src[i]}, {dst[i]}, faults_));
    if (faults_.compaction_ignores_transfers) continue;  // fault 20: device moves not gated either
    for (std::int64_t page : {src[i], dst[i]})
      if (const auto t = transfers_.holding_physical(side, page))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "moving page " + std::to_string(src[i]) + " -> " + std::to_string(dst[i]) + " of sub-pool '" +
                                allocator_.side_name(side) + "' while transfer " + std::to_string(*t) +
                                " still copies page " + std::to_string(page) + "; wait for it (transfer_wait) first");
  }
  return ok_status();
}

Status GpuPool::check_not_in_transfer(const std::vector<std::int64_t>& vpages, std::size_t side,
                                      std::string_view what) const {
  // A page being loaded back, or one whose page on `side` an offload copies, is not freed.
  for (std::int64_t v : vpages) {
    std::optional<std::uint32_t> t = transfers_.loading_virtual(v);
    if (!t) t = transfers_.offloading_virtual_on(side, v);
    if (t)
      return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                          std::string(what) + ": virtual page " + std::to_string(v) + " is held by transfer " +
                              std::to_string(*t) + " in flight; wait for it (transfer_wait) first");
  }
  return ok_status();
}

Status GpuPool::check_replay_reads(const Replay& op) const {
  // SPEC 8: a load-back's pages are not visible until its transfer_wait.
  const std::int64_t ps = static_cast<std::int64_t>(config_.page_size);
  for (std::size_t b = 0; b < op.requests.size(); ++b)
    for (std::int64_t t : op.requests[b])
      if (const auto id = transfers_.loading_virtual(t / ps))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "replay: request " + std::to_string(b) + " reads virtual token " + std::to_string(t) +
                                ", whose page transfer " + std::to_string(*id) +
                                " is still loading back; wait for it first (transfer_wait)");
  return ok_status();
}

Status GpuPool::check_replay_writes(const Replay& op) const {
  // SPEC 8: no lane writes a page an in-flight transfer copies (every layer writes each request's
  // new token, on the full side and, on a composite, the SWA side).
  const std::int64_t ps = static_cast<std::int64_t>(config_.page_size);
  for (std::size_t b = 0; b < op.requests.size(); ++b) {
    const std::int64_t v = op.requests[b].back() / ps;
    for (std::size_t side = 0; side < allocator_.side_count(); ++side)
      if (const auto t = transfers_.holding_virtual_on(side, v))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "replay: request " + std::to_string(b) + " writes virtual page " + std::to_string(v) +
                                ", which transfer " + std::to_string(*t) +
                                " copies in flight; wait for it first (transfer_wait)");
  }
  return ok_status();
}

OpResult GpuPool::commit_checked(const DeviceAllocator::FreePlan& plan) {
  // SPEC 7, 8: no compaction moves a page a reader or a transfer holds; checked before anything
  // changes. A freed page no transfer may hold either.
  if (plan.kind == DeviceAllocator::FreePlan::Kind::free) {
    KVTWIN_TRY_STATUS(check_not_in_transfer(plan.virtual_pages, 0, "free"));
    if (allocator_.is_composite()) KVTWIN_TRY_STATUS(check_not_in_transfer(plan.virtual_pages, 1, "free"));
  } else if (plan.kind == DeviceAllocator::FreePlan::Kind::free_swa) {
    KVTWIN_TRY_STATUS(check_not_in_transfer(plan.virtual_pages, 1, "free_swa"));
  }
  for (const DeviceAllocator::SideCompaction& c : plan.compactions)
    KVTWIN_TRY_STATUS(check_moves(c.side, c.moves.sources, c.moves.destinations));
  KVTWIN_TRY(Compaction out, allocator_.commit(plan, bytes_, faults_, stream_));
  return ok(std::move(out));
}

OpResult GpuPool::free_pages(const Free& op) {
  KVTWIN_TRY(std::vector<std::int64_t> vpages, allocator_.virtual_pages_of(op.unit, op.ids, "free"));
  KVTWIN_TRY(DeviceAllocator::FreePlan plan, allocator_.plan_free(vpages, faults_));
  return commit_checked(plan);
}

OpResult GpuPool::free_swa(const FreeSwa& op) {
  if (!allocator_.is_composite())
    return invalid("free_swa: this pool has no sliding-window side (model '" + config_.shape.name +
                   "'); free_swa needs a model with full and sliding-window layers");
  KVTWIN_TRY(std::vector<std::int64_t> vpages, allocator_.virtual_pages_of(op.unit, op.ids, "free_swa"));
  KVTWIN_TRY(DeviceAllocator::FreePlan plan, allocator_.plan_free_swa(vpages, faults_));
  return commit_checked(plan);
}

OpResult GpuPool::flush(const Flush&) {
  const DeviceAllocator::FreePlan plan = allocator_.plan_flush(faults_);
  if (!state_.built()) return commit_checked(plan);
  // SPEC 11: the state sub-pool's holes too, after the token side; both checked before either commits.
  for (const DeviceAllocator::SideCompaction& c : plan.compactions)
    KVTWIN_TRY_STATUS(check_moves(c.side, c.moves.sources, c.moves.destinations));
  const DeviceStatePool::Moves state_moves = state_.plan_flush();
  KVTWIN_TRY_STATUS(check_state_moves(state_moves));
  KVTWIN_TRY(Compaction out, allocator_.commit(plan, bytes_, faults_, stream_));
  KVTWIN_TRY_STATUS(state_.commit_flush(state_moves, state_held(), bytes_, faults_, stream_));
  for (std::size_t i = 0; i < state_moves.sources.size(); ++i)
    out.moves.push_back(PageMove{state_.name(), state_moves.sources[i], state_moves.destinations[i]});
  return ok(std::move(out));
}

// ---------------------------------------------------------------- the state sub-pool (SPEC 11)

namespace {
Error no_state(const char* op) {
  return make_error(ErrorKind::invalid_argument, std::string(op) +
                                                     ": this pool has no state sub-pool; state operations apply to "
                                                     "hybrid chains (SPEC 11: [state up | full down], [state up | swa "
                                                     "float | full down])");
}
}  // namespace

DeviceStatePool::Held GpuPool::state_held() const {
  return [this](std::int64_t slot) { return readers_.holds(state_index(), slot); };
}

Status GpuPool::check_state_moves(const DeviceStatePool::Moves& moves) const {
  for (std::size_t i = 0; i < moves.sources.size(); ++i)
    if (readers_.holds(state_index(), moves.destinations[i]))
      return make_error(ErrorKind::reader_conflict, "state compaction would move slot " +
                                                        std::to_string(moves.sources[i]) + " onto slot " +
                                                        std::to_string(moves.destinations[i]) +
                                                        ", which an open reader holds; end the reader first");
  return ok_status();
}

OpResult GpuPool::state_alloc(const StateAlloc& op) {
  if (!state_.built()) return no_state("state_alloc");
  if (const std::int64_t v = state_.slot_of(op.request); v >= 0)
    return invalid("state_alloc: request " + std::to_string(op.request) + " already holds state slot " +
                   std::to_string(v) + "; free it first (state_free)");
  const std::int64_t slot = state_.next_physical();
  if (slot < 0) return ok(NoRoom{});
  // SPEC 10.22: a slot moved away from under a reader still holds what it reads: no room until the
  // reader is done (fault 22 takes it anyway).
  if (state_.quarantined(slot) && !faults_.state_reused_under_reader) return ok(NoRoom{});
  // A hole is inside the band already; a slot at the watermark must end below the owner's band
  // (SPEC 11: the ends share the bytes), and on the tri-pool below the float, which is relocated
  // away from the state end when the slot needs its bytes.
  std::optional<FloatRelocation> relocation;
  if (slot >= state_.slots().watermark()) {
    const std::uint64_t slot_end = static_cast<std::uint64_t>(slot + 1) * state_.entry_bytes();
    if (allocator_.floats()) {
      DeviceAllocator::StateRoom room = allocator_.plan_state_room(slot_end);
      if (!room.fits) return ok(NoRoom{});
      relocation = std::move(room.relocation);
    } else if (slot_end > allocator_.band_begin_byte(0)) {
      return ok(NoRoom{});
    }
  }
  if (relocation) {
    KVTWIN_TRY_STATUS(check_relocation(*relocation));
    KVTWIN_TRY_STATUS(allocator_.relocate_float(*relocation, bytes_, faults_, stream_));
  }
  KVTWIN_TRY(const std::int64_t v, state_.alloc(op.request, stream_));
  return ok(Allocated{{v}, relocation_moves(relocation)});
}

OpResult GpuPool::state_free(const StateFree& op) {
  if (!state_.built()) return no_state("state_free");
  if (state_.slot_of(op.request) < 0)
    return make_refusal(ErrorKind::double_free, reason::not_allocated,
                        "state_free: request " + std::to_string(op.request) +
                            " holds no state slot (double free or never allocated); free each state slot once");
  const DeviceStatePool::Moves moves = state_.plan_free(op.request);
  KVTWIN_TRY_STATUS(check_state_moves(moves));
  KVTWIN_TRY_STATUS(state_.commit_free(op.request, moves, state_held(), bytes_, faults_, stream_));
  Compaction out;
  for (std::size_t i = 0; i < moves.sources.size(); ++i)
    out.moves.push_back(PageMove{state_.name(), moves.sources[i], moves.destinations[i]});
  return ok(std::move(out));
}

OpResult GpuPool::state_write(const StateWrite& op) {
  if (!state_.built()) return no_state("state_write");
  const std::int64_t v = state_.slot_of(op.request);
  if (v < 0)
    return invalid("state_write: request " + std::to_string(op.request) +
                   " holds no state slot; state_alloc gives it one");
  KVTWIN_TRY_STATUS(state_.write(v, op.request, op.write_number, bytes_, faults_, stream_));
  return ok(Done{});
}

OpResult GpuPool::state_read(const StateRead& op) {
  if (!state_.built()) return no_state("state_read");
  if (config_.tables_only)
    return make_error(ErrorKind::unsupported, "state_read: a tables-only pool has no bytes; build with tables_only: false");
  const StateEntryLayout& layout = *derived_.state_layout;
  KVTWIN_TRY(const StateBlock* block, layout.block(op.block));
  if (op.layer >= block->layer_num)
    return out_of_range("state_read: layer " + std::to_string(op.layer) + " is outside block '" + block->name + "''s " +
                        std::to_string(block->layer_num) + " state layers");
  for (std::size_t i = 0; i < op.slots.size(); ++i)
    if (op.slots[i] < 0 || op.slots[i] >= state_.num_slots())
      return out_of_range("state_read: slot " + std::to_string(op.slots[i]) + " at position " + std::to_string(i) +
                          " is outside the state sub-pool's slots [0, " + std::to_string(state_.num_slots()) + ")");
  KVTWIN_TRY(std::vector<std::uint8_t> data, state_.read(op.slots, *block, op.layer, bytes_, faults_, stream_));
  return ok(Bytes::of(std::move(data)));
}

OpResult GpuPool::state_slots(const StateSlots& op) {
  if (!state_.built()) return no_state("state_slots");
  Ids out;
  for (std::uint64_t r : op.requests) {
    const std::int64_t v = state_.slot_of(r);
    if (v < 0) {
      out.values.push_back(0);
      continue;
    }
    out.values.push_back(std::max<std::int64_t>(state_.physical_of(v), 0));
  }
  return ok(std::move(out));
}

OpResult GpuPool::move_pages(const MovePages& op) {
  if (state_.built() && op.sub_pool == state_.name())
    return invalid("move_pages: the state sub-pool's slots move only by its own compaction (state_free, flush)");
  KVTWIN_TRY(std::size_t index, side_named(op.sub_pool, "move_pages"));
  KVTWIN_TRY(DeviceAllocator::RawMove move, allocator_.plan_raw_move(index, op, stream_));
  // SPEC 11: nor over the state sub-pool's slots in use (its band and its quarantined slots).
  if (state_.built())
    for (std::int64_t p : op.dst) {
      const std::uint64_t page_bytes = derived_.geometry.sub_pools[index].page_bytes;
      const std::uint64_t begin = static_cast<std::uint64_t>(p) * page_bytes, end = begin + page_bytes;
      const std::uint64_t state_begin = static_cast<std::uint64_t>(state_.slots().min_page()) * state_.entry_bytes();
      if (begin < state_.frontier_bytes() && state_begin < end)
        return invalid("move_pages: destination page " + std::to_string(p) + " of sub-pool '" + op.sub_pool +
                       "' overlaps the state sub-pool's slots in use; choose a destination in the gap");
    }
  if (move.pages == 0) return ok(Done{});
  // Every move past the readers first, then past the transfers in flight (the model's order).
  KVTWIN_TRY_STATUS(readers_.check_moves(index, allocator_.side_name(index), op.src, op.dst, faults_));
  for (std::size_t i = 0; i < op.src.size() && !faults_.compaction_ignores_transfers; ++i)
    for (std::int64_t page : {op.src[i], op.dst[i]})
      if (const auto t = transfers_.holding_physical(index, page))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "move_pages: page " + std::to_string(page) + " of sub-pool '" + op.sub_pool +
                                "' is copied by transfer " + std::to_string(*t) + " in flight; wait for it first");
  // Nor one whose bytes overlap a page a transfer copies, in the other side's pages: the source is
  // read (against a load-back filling it), the destination written (against any copy).
  for (std::size_t i = 0; i < op.src.size() && !faults_.compaction_ignores_transfers && transfers_.any_in_flight(); ++i)
    for (const auto& [page, reading] : {std::pair{op.src[i], true}, std::pair{op.dst[i], false}})
      if (const auto t = transfers_.covering_physical(index, page, reading))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "move_pages: page " + std::to_string(page) + " of sub-pool '" + op.sub_pool +
                                "' overlaps a page transfer " + std::to_string(*t) + " copies in flight; wait for it first");
  // Raw copies, no table change.
  KVTWIN_TRY_STATUS(bytes_.move_pages(index, move.sources, move.destinations, move.pages, faults_, stream_));
  return ok(Done{});
}

OpResult GpuPool::begin_read(const BeginRead& op) {
  KVTWIN_TRY_STATUS(readers_.require_new(op));
  if (state_.built() && op.sub_pool == state_.name()) {
    // A forward reading state slots (SPEC 10.22): its slots may move, but stay quarantined.
    KVTWIN_TRY_STATUS(readers_.begin(op, state_index(), state_.num_slots()));
    return ok(Done{});
  }
  KVTWIN_TRY(std::size_t index, side_named(op.sub_pool, "begin_read"));
  KVTWIN_TRY_STATUS(readers_.begin(op, index, allocator_.side(index).num_pages()));
  return ok(Done{});
}

// ---------------------------------------------------------------- decode step (SPEC 7)

OpResult GpuPool::capture(const Capture& op) {
  PoolDeviceView view;  // a tables-only pool has no bytes: the step keeps its tables, attends nothing
  view.pool = bytes_.data();
  view.pool_bytes = bytes_.size_bytes();
  view.full = &allocator_.side(0);
  view.swa = allocator_.is_composite() ? &allocator_.side(1) : nullptr;
  view.derived = &derived_;
  view.config = &config_;
  KVTWIN_TRY_STATUS(graphs_.capture(op, view, faults_, stream_));
  return ok(Done{});
}

// ---------------------------------------------------------------- the host arena and transfers (SPEC 8)

OpResult GpuPool::host_op(const Op& op) {
  if (config_.host_bytes == 0)
    return invalid("'" + std::string(op_name(op)) +
                   "': this pool has no host arena (host_bytes is 0); build it with host_bytes to use host operations");
  if (const auto* o = std::get_if<HostAlloc>(&op)) {
    return host_arena_.alloc_many(o->thread, o->pages, HostWait::refuse, faults_);
  }
  if (const auto* o = std::get_if<HostFree>(&op)) {
    KVTWIN_TRY(std::size_t side, side_named(o->side, "host_free"));
    // A host page an in-flight transfer uses is not freed (reader_conflict first).
    for (std::int64_t page : o->pages)
      if (const auto t = transfers_.holding_host(side, page))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "host_free: host page " + std::to_string(page) + " of side '" + o->side +
                                "' is used by transfer " + std::to_string(*t) + " in flight; wait for it first");
    KVTWIN_TRY_STATUS(host_arena_.free(side, o->pages));
    return ok(Done{});
  }
  if (const auto* o = std::get_if<LeaseAcquire>(&op)) {
    host_arena_.acquire(o->thread);
    return ok(Done{});
  }
  if (const auto* o = std::get_if<LeaseRelease>(&op)) {
    KVTWIN_TRY_STATUS(host_arena_.release(o->thread));
    return ok(Done{});
  }
  if (const auto* o = std::get_if<RecordEvent>(&op)) {
    KVTWIN_TRY_STATUS(transfers_.record_event(*o, stream_));
    return ok(Done{});
  }
  if (const auto* o = std::get_if<Offload>(&op)) return transfers_.offload(*o, allocator_, bytes_, host_arena_, faults_, stream_);
  if (const auto* o = std::get_if<LoadBack>(&op))
    return transfers_.load_back(*o, allocator_, bytes_, host_arena_, faults_, stream_);
  if (const auto* o = std::get_if<TransferWait>(&op)) {
    KVTWIN_TRY_STATUS(transfers_.wait(*o, host_arena_));
    return ok(Done{});
  }
  return make_error(ErrorKind::internal, "host_op: not a host operation");
}

// ---------------------------------------------------------------- what a checker compares

Result<PoolTables> GpuPool::tables() const {
  const HoldReleases hold(held_);
  KVTWIN_TRY_STATUS(require_pool());
  KVTWIN_TRY(PoolTables out, allocator_.tables(stream_));
  if (state_.built()) KVTWIN_TRY_STATUS(state_.add_tables(out, stream_));
  return out;
}

Result<std::uint64_t> GpuPool::tables_digest() const {
  const HoldReleases hold(held_);
  KVTWIN_TRY_STATUS(require_pool());
  return allocator_.tables_digest(stream_, state_.built() ? &state_ : nullptr);
}

Status GpuPool::verify(std::optional<PoolTables>* tables_read) const {
  const HoldReleases hold(held_);
  if (tables_read != nullptr) tables_read->reset();
  if (!built_) return ok_status();  // nothing built, nothing to break (as the model's verify)
  if (!config_.tables_only && bytes_.size_bytes() != config_.total_bytes)
    return make_error(ErrorKind::internal, "gpu invariant broken: the pool buffer holds " +
                                               std::to_string(bytes_.size_bytes()) + " bytes, not total_bytes " +
                                               std::to_string(config_.total_bytes));
  // The tables read for the check are tables()'s only where tables() would answer at all.
  PoolTables read;
  PoolTables* const keep = tables_read != nullptr && require_pool().ok() ? &read : nullptr;
  KVTWIN_TRY_STATUS(allocator_.verify(stream_, keep));
  if (state_.built()) {
    // SPEC 11: the state's frontier stays below the next band up: the float's span when it holds
    // a live page (an empty float is transparent), else the owner's band.
    const bool float_live = allocator_.floats() && allocator_.float_span().live();
    KVTWIN_TRY_STATUS(state_.verify(state_held(), allocator_.band_begin_byte(float_live ? 1 : 0), stream_, keep));
  }
  // The host arena's tables against each other and against their device mirror (SPEC 8).
  if (host_arena_.built()) KVTWIN_TRY_STATUS(host_arena_.verify());
  if (keep != nullptr) *tables_read = std::move(read);
  return ok_status();
}

Result<std::vector<std::uint8_t>> GpuPool::raw_bytes(std::uint64_t offset, std::uint64_t length) const {
  const HoldReleases hold(held_);
  KVTWIN_TRY_STATUS(require_pool());
  if (config_.tables_only)
    return make_error(ErrorKind::unsupported, "raw_bytes: this pool is tables-only and holds no bytes");
  if (offset > config_.total_bytes || length > config_.total_bytes - offset)
    return out_of_range("raw_bytes: [" + std::to_string(offset) + ", +" + std::to_string(length) +
                        ") is outside the pool's " + std::to_string(config_.total_bytes) + " bytes");
  return bytes_.download(offset, length, stream_);
}

Status GpuPool::check_digest_ranges(std::span<const ByteRange> ranges) const {
  KVTWIN_TRY_STATUS(require_pool());
  if (config_.tables_only)
    return make_error(ErrorKind::unsupported, "bytes_digest: this pool is tables-only and holds no bytes");
  for (const ByteRange& r : ranges)
    if (r.offset > config_.total_bytes || r.length > config_.total_bytes - r.offset)
      return out_of_range("bytes_digest: [" + std::to_string(r.offset) + ", +" + std::to_string(r.length) +
                          ") is outside the pool's " + std::to_string(config_.total_bytes) + " bytes");
  return ok_status();
}

Result<std::uint64_t> GpuPool::bytes_digest(std::span<const ByteRange> ranges) const {
  const HoldReleases hold(held_);
  KVTWIN_TRY_STATUS(check_digest_ranges(ranges));
  return bytes_.digest(ranges, stream_);
}

// A CUDA failure of a deferred digest poisons the pool as one of an operation does.
Status GpuPool::poison_on_failure(Status status) {
  if (!status.ok() && status.error().kind == ErrorKind::environment && poisoned_.empty())
    poisoned_ = status.error().message;
  return status;
}

void GpuPool::note_tables_summed(DeferredDigests::Handle handle, std::vector<DigestRanges> sides) {
  summed_tables_ = SummedTables{handle, std::move(sides), std::this_thread::get_id(), checked_calls_on_this_thread()};
}

Status GpuPool::launch_pending_tables_digest() {
  if (!pending_tables_digest_) return ok_status();
  TablesDigestRequest pending = std::move(*pending_tables_digest_);
  pending_tables_digest_.reset();
  summed_tables_.reset();
  KVTWIN_TRY_STATUS(launch_tables_digest(pending.sides, pending.sum, stream_));
  note_tables_summed(pending_tables_handle_, std::move(pending.sides));
  return ok_status();
}

Status GpuPool::queue_tables_digest() {
  const HoldReleases hold(held_);
  KVTWIN_TRY_STATUS(require_pool());
  return poison_on_failure([&]() -> Status {
    KVTWIN_TRY_STATUS(launch_pending_tables_digest());
    TablesDigestRequest request;
    const std::uint64_t host_terms = allocator_.tables_digest_rows(request.sides, state_.built() ? &state_ : nullptr);
    // Nothing reached the device since the last tables digest was summed, over the same rows: its
    // device part is this one's (SummedTables).
    if (summed_tables_ && summed_tables_->thread == std::this_thread::get_id() &&
        summed_tables_->calls_after == checked_calls_on_this_thread() && summed_tables_->sides == request.sides) {
      KVTWIN_TRY(const bool repeated, deferred_digests_.repeat(summed_tables_->handle, stream_));
      if (repeated) {
        deferred_digests_.add_host_terms(host_terms);
        return ok_status();
      }
    }
    KVTWIN_TRY(unsigned long long* slot, deferred_digests_.next_slot(stream_, &pending_tables_handle_));
    // Not launched yet: the op's bytes digest, which the runner asks for next when the op wrote
    // any, takes it into its own launch (digest_kernels.h); anything else launches it first.
    request.sum = slot;
    deferred_digests_.add_host_terms(host_terms);
    pending_tables_digest_ = std::move(request);
    return ok_status();
  }());
}

Status GpuPool::queue_bytes_digest(std::span<const ByteRange> ranges) {
  const HoldReleases hold(held_);
  KVTWIN_TRY_STATUS(check_digest_ranges(ranges));
  return poison_on_failure([&]() -> Status {
    // A full window lands its slots on the next one: the pending digest's slot must be summed first.
    if (deferred_digests_.next_slot_lands()) KVTWIN_TRY_STATUS(launch_pending_tables_digest());
    KVTWIN_TRY(unsigned long long* slot, deferred_digests_.next_slot(stream_));
    std::optional<TablesDigestRequest> tables = std::move(pending_tables_digest_);
    pending_tables_digest_.reset();
    if (tables) summed_tables_.reset();
    KVTWIN_TRY_STATUS(bytes_.add_digest(ranges, slot, stream_, tables ? &*tables : nullptr));
    if (tables) note_tables_summed(pending_tables_handle_, std::move(tables->sides));
    return ok_status();
  }());
}

Result<std::vector<std::uint64_t>> GpuPool::collect_digests() {
  const HoldReleases hold(held_);
  KVTWIN_TRY_STATUS(require_pool());
  if (Status s = poison_on_failure(launch_pending_tables_digest()); !s.ok()) return s.error();
  Result<std::vector<std::uint64_t>> out = deferred_digests_.collect(stream_);
  if (!out.ok()) (void)poison_on_failure(out.error());
  return out;
}

}  // namespace kvtwin::gpu
