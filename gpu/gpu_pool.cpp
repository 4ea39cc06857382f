// GpuPool (gpu_pool.h): every operation of core/op.h on the device.
//
// Each operation validates first (host checks on the operation's own numbers, device checks on
// the tables), plans what it will change, and only then commits, so that a failed operation
// leaves the pool as it was. Comments cite the SPEC.md rule (or docs/decisions.md entry) each
// branch implements.
#include "gpu/gpu_pool.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>
#include <variant>

#include "core/checked.h"
#include "core/oracle.h"
#include "core/reasons.h"
#include "gpu/decode_step.h"
#include "gpu/fault_layout.h"
#include "gpu/kernels.cuh"

namespace kvtwin::gpu {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

constexpr int kIdSlots = 5;
// The most lanes one batch, loc or replay may have (a bound against runaway widths in traces).
constexpr std::uint64_t kMaxLanes = std::uint64_t{1} << 20;

// An outcome as an operation's result.
template <class T>
OpResult ok(T outcome) {
  return OpResult(Outcome(std::move(outcome)));
}

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
Error out_of_range(std::string message) { return make_error(ErrorKind::out_of_range, std::move(message)); }

std::string list_ids(const std::vector<std::int64_t>& ids, std::size_t at_most = 8) {
  std::string out;
  for (std::size_t i = 0; i < ids.size() && i < at_most; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > at_most) out += ", ... (" + std::to_string(ids.size()) + " in all)";
  return out;
}

}  // namespace

GpuPool::GpuPool(Faults faults) : faults_(faults) {}

GpuPool::~GpuPool() {
  graphs_.clear();
  batches_.clear();
  if (stream_ != nullptr) KVTWIN_CUDA_WARN(cudaStreamDestroy(stream_));
}

Status GpuPool::sync() const {
  KVTWIN_CUDA_TRY(cudaStreamSynchronize(stream_));
  return ok_status();
}

Status GpuPool::require_pool() const {
  if (!poisoned_.empty())
    return make_error(ErrorKind::environment,
                      "the GPU backend refuses every operation since a CUDA failure left its state unknown: " +
                          poisoned_);
  if (!built_) return invalid("no pool has been built yet; play a 'build' operation first");
  return ok_status();
}

Result<std::int64_t*> GpuPool::upload_ids(const std::vector<std::int64_t>& values, int slot) {
  DeviceBuffer<std::int64_t>& buffer = ids_[static_cast<std::size_t>(slot)];
  KVTWIN_TRY_STATUS(buffer.reserve(std::max<std::size_t>(values.size(), 1)));
  if (!values.empty())
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(buffer.get(), values.data(), values.size() * sizeof(std::int64_t),
                                    cudaMemcpyHostToDevice, stream_));
  return buffer.get();
}

Result<std::vector<std::int64_t>> GpuPool::download_ids(const std::int64_t* device, std::int64_t n) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  if (n > 0)
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.data(), device, out.size() * sizeof(std::int64_t), cudaMemcpyDeviceToHost,
                                    stream_));
  KVTWIN_TRY_STATUS(sync());
  return out;
}

Result<bool> GpuPool::any_outside(const std::int64_t* values, std::int64_t n, std::int64_t lower, std::int64_t upper) {
  KVTWIN_CUDA_TRY(cudaMemsetAsync(status_.get(), 0, sizeof(std::uint32_t), stream_));
  KVTWIN_TRY_STATUS(flag_outside(values, n, lower, upper, status_.get(), stream_));
  std::uint32_t flag = 0;
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(&flag, status_.get(), sizeof flag, cudaMemcpyDeviceToHost, stream_));
  KVTWIN_TRY_STATUS(sync());
  return flag != 0;
}

Result<GpuPool::Batch*> GpuPool::find_batch(std::uint32_t id, std::string_view what) {
  auto it = batches_.find(id);
  if (it == batches_.end())
    return invalid(std::string(what) + ": no batch " + std::to_string(id) + "; declare it with a batch op");
  return &it->second;
}

Result<std::size_t> GpuPool::side_named(std::string_view sub_pool, std::string_view what) const {
  if (const auto index = derived_.sub_pool_index(sub_pool)) return *index;
  std::string known;
  for (const DenseEntryLayout& l : derived_.layouts) known += (known.empty() ? "" : ", ") + l.sub_pool;
  return invalid(std::string(what) + ": this pool has no sub-pool '" + std::string(sub_pool) + "'; its sub-pools: " + known);
}

std::int64_t GpuPool::sink_end(std::size_t side) const {
  return sides_[side]->min_page() * static_cast<std::int64_t>(config_.page_size);
}

std::int64_t GpuPool::slot_count(std::size_t side) const {
  return static_cast<std::int64_t>(derived_.geometry.sub_pools[side].max_slots);
}

std::uint64_t GpuPool::band_begin_byte(std::size_t side) const {
  const DeviceSide& s = *sides_[side];
  const std::int64_t page = s.grows_up() ? s.min_page() : s.watermark() + 1;
  return static_cast<std::uint64_t>(page) * s.geometry().page_bytes;
}

std::uint64_t GpuPool::band_end_byte(std::size_t side) const {
  const DeviceSide& s = *sides_[side];
  const std::int64_t page = s.grows_up() ? s.watermark() : s.num_pages();
  return static_cast<std::uint64_t>(page) * s.geometry().page_bytes;
}

Result<DeviceBuffer<std::int64_t>> GpuPool::device_copy(const std::vector<std::int64_t>& values, cudaStream_t stream) {
  DeviceBuffer<std::int64_t> out;
  KVTWIN_TRY_STATUS(out.allocate(values.size()));
  if (!values.empty())
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.get(), values.data(), values.size() * sizeof(std::int64_t),
                                    cudaMemcpyHostToDevice, stream));
  return out;
}

OpResult GpuPool::apply(const Op& op) {
  if (!std::holds_alternative<BuildPool>(op) || !poisoned_.empty()) {
    if (Status s = require_pool(); !s.ok()) return s.error();
  }
  OpResult result = dispatch(op);
  // A CUDA call failed (ErrorKind::environment), perhaps halfway through: what the device holds is
  // no longer known, so the backend is poisoned and refuses everything after, with this reason.
  if (!result.ok() && result.error().kind == ErrorKind::environment) poisoned_ = result.error().message;
  return result;
}

namespace {
OpResult host_op_unsupported(const Op& op) {
  return make_error(ErrorKind::unsupported, "'" + std::string(op_name(op)) +
                                                "': the GPU backend has no host arena or transfers yet (SPEC 8); "
                                                "replay host operations with --backend model");
}
}  // namespace

OpResult GpuPool::dispatch(const Op& op) {
  return std::visit(Overloaded{
                        [&](const BuildPool& o) { return build(o); },
                        [&](const Alloc& o) { return alloc(o); },
                        [&](const AllocMany& o) { return alloc_many(o); },
                        [&](const Free& o) { return free_pages(o); },
                        [&](const FreeSwa& o) { return free_swa(o); },
                        [&](const Flush& o) { return flush(o); },
                        [&](const MovePages& o) { return move_pages(o); },
                        [&](const BeginRead& o) { return begin_read(o); },
                        [&](const EndRead& o) { return end_read(o); },
                        [&](const MakeBatch& o) { return make_batch(o); },
                        [&](const Rebind& o) { return rebind(o); },
                        [&](const Split& o) { return split(o); },
                        [&](const DropBatch& o) { return drop_batch(o); },
                        [&](const Write& o) { return write(o); },
                        [&](const Read& o) { return read(o); },
                        [&](const Translate& o) { return translate(o); },
                        [&](const SwaTranslate& o) { return swa_translate(o); },
                        [&](const PageTable& o) { return page_table(o); },
                        [&](const RemapIndices& o) { return remap_indices(o); },
                        [&](const Capture& o) { return capture(o); },
                        [&](const Replay& o) { return replay(o); },
                        [&](const Checkpoint&) { return ok(Done{}); },
                        // SPEC 8's host arena and transfers are the model's so far (docs/host_arena.md).
                        [&](const HostAlloc&) { return host_op_unsupported(op); },
                        [&](const HostFree&) { return host_op_unsupported(op); },
                        [&](const LeaseAcquire&) { return host_op_unsupported(op); },
                        [&](const LeaseRelease&) { return host_op_unsupported(op); },
                        [&](const RecordEvent&) { return host_op_unsupported(op); },
                        [&](const Offload&) { return host_op_unsupported(op); },
                        [&](const LoadBack&) { return host_op_unsupported(op); },
                        [&](const TransferWait&) { return host_op_unsupported(op); },
                    },
                    op);
}

// ---------------------------------------------------------------- build (SPEC 3)

OpResult GpuPool::build(const BuildPool& op) {
  // A configuration that does not build changes nothing (an earlier pool stays).
  Result<PoolDerived> derived =
      faults_.row_misaligned_accepted ? derive_pool_unchecked_rows(op.config) : derive_pool(op.config);
  if (!derived.ok()) return derived.error();
  // Building (or rebuilding) replaces the whole state: tables, bytes, batches, readers, graphs.
  graphs_.clear();
  batches_.clear();
  readers_.clear();
  sides_.clear();
  pool_.reset();
  built_ = false;
  if (stream_ == nullptr) KVTWIN_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  config_ = op.config;
  derived_ = std::move(derived).value();

  // One raw byte buffer of exactly total_bytes, zero-filled.
  if (!config_.tables_only) {
    KVTWIN_TRY_STATUS(pool_.allocate(config_.total_bytes));
    KVTWIN_CUDA_TRY(cudaMemsetAsync(pool_.get(), 0, pool_.bytes(), stream_));
  }
  // The full (or MLA) side owns the virtual ids; the SWA side's v2p has the same length.
  const std::int64_t num_virtual = static_cast<std::int64_t>(derived_.geometry.sub_pools[0].num_pages);
  std::int64_t max_pages = 0;
  for (std::size_t i = 0; i < derived_.geometry.sub_pools.size(); ++i) {
    auto side = std::make_unique<DeviceSide>();
    KVTWIN_TRY_STATUS(side->init(derived_.geometry.sub_pools[i], num_virtual, i == 0, stream_));
    max_pages = std::max(max_pages, side->num_pages() + 1);
    sides_.push_back(std::move(side));
  }
  max_pages = std::max(max_pages, num_virtual + 1);
  KVTWIN_TRY_STATUS(select_.reserve(max_pages, stream_));
  KVTWIN_TRY_STATUS(status_.reserve(4));
  ids_.resize(kIdSlots);
  plan_src_.resize(sides_.size());
  plan_dst_.resize(sides_.size());
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    KVTWIN_TRY_STATUS(plan_src_[i].reserve(static_cast<std::size_t>(sides_[i]->num_pages() + 1)));
    KVTWIN_TRY_STATUS(plan_dst_[i].reserve(static_cast<std::size_t>(sides_[i]->num_pages() + 1)));
  }
  KVTWIN_TRY_STATUS(sync());
  built_ = true;
  return ok(Done{});
}

// ---------------------------------------------------------------- allocation (SPEC 4, 4.2, 4.3)

bool GpuPool::fits(std::int64_t k) const {
  const DeviceSide& full = *sides_[0];
  if (k > full.queue_count()) return false;  // free virtual ids
  const std::int64_t need_full = std::max<std::int64_t>(k - full.holes(), 0);  // lazy: holes first
  if (sides_.size() == 1) return need_full <= full.band_room_single();
  // Composite: joint pre-check (SPEC 4.3; lazy mode per docs/decisions.md).
  const DeviceSide& swa = *sides_[1];
  if (k > swa.remaining()) return false;
  const std::int64_t need_swa = std::max<std::int64_t>(k - swa.holes(), 0);
  const std::int64_t epp_full = static_cast<std::int64_t>(full.geometry().page_bytes);
  const std::int64_t epp_swa = static_cast<std::int64_t>(swa.geometry().page_bytes);
  const std::int64_t gap = (swa.watermark() + 1) * epp_swa - full.watermark() * epp_full;
  return need_full * epp_full + need_swa * epp_swa <= gap;
}

Result<std::vector<std::int64_t>> GpuPool::bind_pages(std::int64_t k) {
  KVTWIN_TRY(std::int64_t * vpages, upload_ids(std::vector<std::int64_t>(static_cast<std::size_t>(k)), 0));
  // The hole list of a side (selected whole, then its first k used) fits in num_pages + 1.
  std::int64_t most_pages = k;
  for (const auto& side : sides_) most_pages = std::max(most_pages, side->p2v_len());
  KVTWIN_TRY_STATUS(ids_[1].reserve(static_cast<std::size_t>(most_pages)));
  // The k virtual pages from the queue front, bound in order to the side's pages (SPEC 4).
  KVTWIN_TRY_STATUS(sides_[0]->take_virtual(k, vpages, stream_));
  KVTWIN_TRY_STATUS(sides_[0]->bind(vpages, k, select_, ids_[1].get(), stream_));
  if (sides_.size() == 2) KVTWIN_TRY_STATUS(sides_[1]->bind(vpages, k, select_, ids_[1].get(), stream_));
  return download_ids(vpages, k);
}

OpResult GpuPool::alloc(const Alloc& op) {
  const std::uint64_t ps = config_.page_size;
  if (op.tokens % ps != 0)
    return invalid("alloc of " + std::to_string(op.tokens) + " tokens is not a whole number of pages of " +
                   std::to_string(ps) + " tokens; allocate a multiple of the page size");
  const std::uint64_t k = op.tokens / ps;
  if (k == 0) return ok(Allocated{});
  if (k > static_cast<std::uint64_t>(sides_[0]->queue_count()) || !fits(static_cast<std::int64_t>(k))) return ok(NoRoom{});
  KVTWIN_TRY(std::vector<std::int64_t> pages, bind_pages(static_cast<std::int64_t>(k)));
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
  AllocatedMany out;
  if (faults_.alloc_many_partial) {
    // Fault 14: one request at a time, leaving earlier grants behind when a later one fails.
    for (std::uint64_t tokens : op.tokens) {
      const std::uint64_t k = tokens / ps;
      if (k > static_cast<std::uint64_t>(sides_[0]->queue_count()) || !fits(static_cast<std::int64_t>(k))) return ok(NoRoom{});
      std::vector<std::int64_t> pages;
      if (k > 0) {
        KVTWIN_TRY(pages, bind_pages(static_cast<std::int64_t>(k)));
      }
      out.pages.push_back(std::move(pages));
    }
    return ok(std::move(out));
  }
  // All or nothing (SPEC 4): the requests fit one after another exactly when their sum fits;
  // then each is bound in turn (on a grow-down side, one combined band would order pages
  // differently from consecutive allocations).
  if (total > static_cast<std::uint64_t>(sides_[0]->queue_count()) || !fits(static_cast<std::int64_t>(total)))
    return ok(NoRoom{});
  for (std::uint64_t tokens : op.tokens) {
    std::vector<std::int64_t> pages;
    if (tokens / ps > 0) {
      KVTWIN_TRY(pages, bind_pages(static_cast<std::int64_t>(tokens / ps)));
    }
    out.pages.push_back(std::move(pages));
  }
  return ok(std::move(out));
}

Result<std::vector<std::int64_t>> GpuPool::virtual_pages(IdUnit unit, const std::vector<std::int64_t>& ids,
                                                         std::string_view what) const {
  const std::int64_t ps = static_cast<std::int64_t>(config_.page_size);
  const DeviceSide& full = *sides_[0];
  std::vector<std::int64_t> pages;
  pages.reserve(ids.size());
  for (std::int64_t id : ids) {
    if (id < 0)
      return make_refusal(ErrorKind::out_of_range, reason::negative_id,
                          std::string(what) + ": id " + std::to_string(id) + " is negative; give virtual " +
                              (unit == IdUnit::tokens ? "token" : "page") + " ids");
    pages.push_back(unit == IdUnit::tokens ? id / ps : id);  // SPEC 4 free: v = t // page_size
  }
  // docs/decisions.md: duplicates are allowed (made sorted-unique); the sink and pages below the
  // first usable page are out of range.
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  std::vector<std::int64_t> outside;
  for (std::int64_t v : pages)
    if (v < full.min_page() || v >= full.num_pages()) outside.push_back(v);
  // The smallest page outside names the reason (core/reasons.h).
  if (!outside.empty())
    return make_refusal(ErrorKind::out_of_range,
                        outside.front() < full.min_page() ? reason::reserved_page : reason::past_last_page,
                        std::string(what) + ": virtual pages " + list_ids(outside) + " are outside the usable range [" +
                            std::to_string(full.min_page()) + ", " + std::to_string(full.num_pages()) +
                            ") (page 0 is the sink and is never allocated); free only ids that alloc returned");
  return pages;
}

Result<GpuPool::SidePlan> GpuPool::plan_compaction(std::size_t index, const std::int64_t* freed, std::int64_t count) {
  DeviceSide& side = *sides_[index];
  SidePlan plan;
  plan.side = index;
  plan.freed = freed != nullptr ? count : side.holes();
  const std::int64_t k = plan.freed;
  const std::uint8_t* flags = side.hole_flags();
  if (freed != nullptr) {
    KVTWIN_TRY_STATUS(set_flags(side.marks(), freed, count, 1, stream_));
    flags = side.marks();
  }
  // SPEC 4.1: grow-up new_wm = wm - K, survivors in [new_wm, wm), holes below new_wm; grow-down
  // new_wm = wm + K, survivors in (wm, new_wm], holes above new_wm; both ascending, paired in order.
  std::int64_t survivors_lo = 0, survivors_hi = 0, holes_lo = 0, holes_hi = 0;
  if (side.grows_up()) {
    plan.new_watermark = side.watermark() - k;
    survivors_lo = plan.new_watermark, survivors_hi = side.watermark();
    holes_lo = side.min_page(), holes_hi = plan.new_watermark;
  } else {
    plan.new_watermark = side.watermark() + k;
    survivors_lo = side.watermark() + 1, survivors_hi = plan.new_watermark + 1;
    holes_lo = plan.new_watermark + 1, holes_hi = side.num_pages();
  }
  std::int64_t* src = plan_src_[index].get();
  std::int64_t* dst = plan_dst_[index].get();
  KVTWIN_TRY(std::int64_t survivors,
             select_pages({side.p2v(), flags, true}, survivors_lo, survivors_hi, src, select_, stream_));
  KVTWIN_TRY(std::int64_t holes, select_pages({nullptr, flags, false}, holes_lo, holes_hi, dst, select_, stream_));
  KVTWIN_CHECK(survivors == holes, "compaction: survivors and holes differ in number");
  if (faults_.pairing_out_of_order) KVTWIN_TRY_STATUS(reverse_in_place(dst, holes, stream_));  // fault 11
  if (freed != nullptr) KVTWIN_TRY_STATUS(set_flags(side.marks(), freed, count, 0, stream_));
  KVTWIN_TRY(plan.src, download_ids(src, survivors));
  KVTWIN_TRY(plan.dst, download_ids(dst, holes));
  return plan;
}

Status GpuPool::check_readers(const std::vector<SidePlan>& plans) const {
  if (faults_.move_under_reader) return ok_status();  // fault 12
  // SPEC 7 / docs/decisions.md: a move whose source or destination a reader holds is refused.
  for (const SidePlan& plan : plans) {
    for (std::size_t i = 0; i < plan.src.size(); ++i) {
      for (const auto& [id, reader] : readers_) {
        if (reader.side != plan.side) continue;
        for (std::int64_t page : {plan.src[i], plan.dst[i]})
          if (reader.pages.count(page) != 0)
            return make_error(ErrorKind::reader_conflict,
                              "moving page " + std::to_string(plan.src[i]) + " -> " + std::to_string(plan.dst[i]) +
                                  " of sub-pool '" + derived_.layouts[plan.side].sub_pool + "' while reader " +
                                  std::to_string(id) + " holds page " + std::to_string(page) +
                                  "; end the read (end_read) before anything moves its pages");
      }
    }
  }
  return ok_status();
}

Status GpuPool::move_bytes(std::size_t side, const std::int64_t* src, const std::int64_t* dst, std::int64_t n) {
  if (config_.tables_only || n == 0) return ok_status();
  PageMoveParams p;
  p.pool = pool_.get();
  p.pool_bytes = pool_.bytes();
  p.page_bytes = sides_[side]->geometry().page_bytes;  // SPEC 4.1: the whole page envelope
  if (faults_.move_stride_from_shape)  // the token stride taken from the first part's row shape
    p.page_bytes = config_.page_size * derived_.layouts[side].parts.front().row_bytes();
  p.src = src;
  p.dst = dst;
  p.pages = n;
  p.int32_offsets = faults_.int32_offsets_move;
  KVTWIN_CUDA_TRY(launch_move_pages(p, stream_));
  return ok_status();
}

Status GpuPool::commit_compaction(const SidePlan& plan, bool clears_holes) {
  DeviceSide& side = *sides_[plan.side];
  const std::int64_t n = static_cast<std::int64_t>(plan.src.size());
  // Each move copies the whole page envelope, then v2p[p2v[src]] = dst, p2v[dst] = v, p2v[src] = -1.
  KVTWIN_TRY_STATUS(move_bytes(plan.side, plan_src_[plan.side].get(), plan_dst_[plan.side].get(), n));
  return side.apply_compaction(plan_src_[plan.side].get(), plan_dst_[plan.side].get(), n, plan.new_watermark,
                               clears_holes, stream_);
}

namespace {
void append_moves(Compaction& out, const std::string& sub_pool, const std::vector<std::int64_t>& src,
                  const std::vector<std::int64_t>& dst) {
  for (std::size_t i = 0; i < src.size(); ++i) out.moves.push_back(PageMove{sub_pool, src[i], dst[i]});
}
}  // namespace

OpResult GpuPool::free_pages(const Free& op) {
  KVTWIN_TRY(std::vector<std::int64_t> vpages, virtual_pages(op.unit, op.ids, "free"));
  const std::int64_t n = static_cast<std::int64_t>(vpages.size());
  if (n == 0) return ok(Compaction{});
  DeviceSide& full = *sides_[0];
  KVTWIN_TRY(std::int64_t * dv, upload_ids(vpages, 0));
  KVTWIN_TRY_STATUS(ids_[1].reserve(static_cast<std::size_t>(n)));
  std::int64_t* full_pages = ids_[1].get();
  KVTWIN_TRY_STATUS(gather_values(full.v2p(), dv, n, full_pages, stream_));
  // SPEC 4: any v2p[v] < 0 is "double free or never allocated", and nothing changes.
  KVTWIN_TRY(bool unbound, any_outside(full_pages, n, 0, INT64_MAX));
  if (unbound) {
    KVTWIN_TRY(std::vector<std::int64_t> pages, download_ids(full_pages, n));
    std::vector<std::int64_t> bad;
    for (std::size_t i = 0; i < pages.size(); ++i)
      if (pages[i] < 0) bad.push_back(vpages[i]);
    return make_refusal(ErrorKind::double_free, reason::not_allocated, "free: virtual pages " + list_ids(bad) +
                                                  " are not allocated (double free or never allocated); nothing was freed");
  }
  const bool eager = config_.mode == CompactionMode::eager;
  std::vector<SidePlan> plans;
  std::int64_t swa_freed = 0;
  std::int64_t* swa_pages = nullptr;
  if (sides_.size() == 2) {
    // SPEC 4.3: free SWA only where swa_v2p[v] > 0, first.
    KVTWIN_TRY_STATUS(ids_[2].reserve(static_cast<std::size_t>(n)));
    KVTWIN_TRY_STATUS(ids_[3].reserve(static_cast<std::size_t>(n)));
    KVTWIN_TRY_STATUS(gather_values(sides_[1]->v2p(), dv, n, ids_[2].get(), stream_));
    swa_pages = ids_[3].get();
    KVTWIN_TRY(swa_freed, select_positive(ids_[2].get(), n, swa_pages, select_, stream_));
    if (eager) {
      KVTWIN_TRY(SidePlan plan, plan_compaction(1, swa_pages, swa_freed));
      plans.push_back(std::move(plan));
    }
  }
  if (eager) {
    KVTWIN_TRY(SidePlan plan, plan_compaction(0, full_pages, n));
    plans.push_back(std::move(plan));
  }
  KVTWIN_TRY_STATUS(check_readers(plans));

  // Commit: SWA side first, then the full side (docs/decisions.md).
  Compaction out;
  if (sides_.size() == 2) {
    DeviceSide& swa = *sides_[1];
    KVTWIN_TRY_STATUS(swa.unbind(dv, n, true, swa_freed, stream_));
    if (eager) {
      KVTWIN_TRY_STATUS(commit_compaction(plans.front(), false));
      append_moves(out, derived_.layouts[1].sub_pool, plans.front().src, plans.front().dst);
    } else {
      KVTWIN_TRY_STATUS(swa.add_holes(swa_pages, swa_freed, stream_));  // SPEC 4.2
    }
  }
  KVTWIN_TRY_STATUS(full.unbind(dv, n, false, n, stream_));
  if (eager) {
    KVTWIN_TRY_STATUS(commit_compaction(plans.back(), false));
    append_moves(out, derived_.layouts[0].sub_pool, plans.back().src, plans.back().dst);
  } else {
    KVTWIN_TRY_STATUS(full.add_holes(full_pages, n, stream_));
  }
  // Freed virtual ids go to the back of the queue, ascending.
  KVTWIN_TRY_STATUS(full.put_virtual(dv, n, stream_));
  KVTWIN_TRY_STATUS(sync());
  return ok(std::move(out));
}

OpResult GpuPool::free_swa(const FreeSwa& op) {
  if (sides_.size() != 2)
    return invalid("free_swa: this pool has no sliding-window side (model '" + config_.shape.name +
                   "'); free_swa needs a model with full and sliding-window layers");
  KVTWIN_TRY(std::vector<std::int64_t> vpages, virtual_pages(op.unit, op.ids, "free_swa"));
  const std::int64_t n = static_cast<std::int64_t>(vpages.size());
  if (n == 0) return ok(Compaction{});
  DeviceSide& swa = *sides_[1];
  KVTWIN_TRY(std::int64_t * dv, upload_ids(vpages, 0));
  KVTWIN_TRY_STATUS(ids_[1].reserve(static_cast<std::size_t>(n)));
  KVTWIN_TRY_STATUS(ids_[2].reserve(static_cast<std::size_t>(n)));
  KVTWIN_TRY_STATUS(gather_values(sides_[0]->v2p(), dv, n, ids_[1].get(), stream_));
  KVTWIN_TRY_STATUS(gather_values(swa.v2p(), dv, n, ids_[2].get(), stream_));
  // docs/decisions.md: a virtual page not allocated, or an SWA page already a tombstone, is a
  // double free.
  KVTWIN_TRY(bool full_unbound, any_outside(ids_[1].get(), n, 0, INT64_MAX));
  KVTWIN_TRY(bool swa_unbound, any_outside(ids_[2].get(), n, 1, INT64_MAX));
  // A page not allocated at all comes first; then an SWA tombstone (core/reasons.h).
  if (full_unbound)
    return make_refusal(ErrorKind::double_free, reason::not_allocated,
                        "free_swa: some of virtual pages " + list_ids(vpages) + " are not allocated; nothing was freed");
  if (swa_unbound)
    return make_refusal(ErrorKind::double_free, reason::left_window,
                        "free_swa: some of virtual pages " + list_ids(vpages) +
                            " already left the window (their SWA pages are tombstones); nothing was freed");
  std::int64_t* swa_pages = ids_[2].get();
  const bool eager = config_.mode == CompactionMode::eager;
  std::vector<SidePlan> plans;
  if (eager) {
    KVTWIN_TRY(SidePlan plan, plan_compaction(1, swa_pages, n));
    plans.push_back(std::move(plan));
  }
  KVTWIN_TRY_STATUS(check_readers(plans));
  Compaction out;
  KVTWIN_TRY_STATUS(swa.unbind(dv, n, false, n, stream_));  // swa_v2p[v] = -1: a tombstone
  if (eager) {
    KVTWIN_TRY_STATUS(commit_compaction(plans.front(), false));
    append_moves(out, derived_.layouts[1].sub_pool, plans.front().src, plans.front().dst);
  } else {
    KVTWIN_TRY_STATUS(swa.add_holes(swa_pages, n, stream_));
  }
  KVTWIN_TRY_STATUS(sync());
  return ok(std::move(out));
}

OpResult GpuPool::flush(const Flush&) {
  // SPEC 4.2: compacts every side exactly as 4.1, with the holes as the freed pages. SWA side
  // first, as in free.
  std::vector<std::size_t> order;
  for (std::size_t i = sides_.size(); i-- > 0;)
    if (sides_[i]->holes() > 0) order.push_back(i);
  std::vector<SidePlan> plans;
  for (std::size_t i : order) {
    KVTWIN_TRY(SidePlan plan, plan_compaction(i, nullptr, 0));
    plans.push_back(std::move(plan));
  }
  KVTWIN_TRY_STATUS(check_readers(plans));
  Compaction out;
  for (const SidePlan& plan : plans) {
    KVTWIN_TRY_STATUS(commit_compaction(plan, true));  // a flushed side has no holes left
    append_moves(out, derived_.layouts[plan.side].sub_pool, plan.src, plan.dst);
  }
  KVTWIN_TRY_STATUS(sync());
  return ok(std::move(out));
}

OpResult GpuPool::move_pages(const MovePages& op) {
  KVTWIN_TRY(std::size_t index, side_named(op.sub_pool, "move_pages"));
  const DeviceSide& side = *sides_[index];
  if (op.dst.size() != op.src.size())
    return invalid("move_pages: " + std::to_string(op.dst.size()) + " destinations for " +
                   std::to_string(op.src.size()) + " sources; give one destination per source");
  for (const std::vector<std::int64_t>* list : {&op.src, &op.dst})
    for (std::int64_t page : *list)
      if (page < side.min_page() || page >= side.num_pages())
        return out_of_range("move_pages: page " + std::to_string(page) + " is outside sub-pool '" + op.sub_pool +
                            "''s usable pages [" + std::to_string(side.min_page()) + ", " +
                            std::to_string(side.num_pages()) + "); the sink pages never move");
  std::set<std::int64_t> seen;
  for (const std::vector<std::int64_t>* list : {&op.src, &op.dst})
    for (std::int64_t page : *list)
      if (!seen.insert(page).second)
        return invalid("move_pages: page " + std::to_string(page) +
                       " appears twice; sources and destinations must be disjoint and without repeats");
  const std::int64_t n = static_cast<std::int64_t>(op.dst.size());
  if (n == 0) return ok(Done{});
  KVTWIN_TRY(std::int64_t * dst, upload_ids(op.dst, 0));
  KVTWIN_TRY(std::int64_t * src, upload_ids(op.src, 1));
  KVTWIN_TRY_STATUS(ids_[2].reserve(static_cast<std::size_t>(n)));
  KVTWIN_TRY_STATUS(gather_values(side.p2v(), dst, n, ids_[2].get(), stream_));
  KVTWIN_TRY(std::vector<std::int64_t> owners, download_ids(ids_[2].get(), n));
  const std::uint64_t page_bytes = side.geometry().page_bytes;
  for (std::size_t i = 0; i < owners.size(); ++i) {
    // docs/decisions.md: every dst is an unbound page, and its bytes lie outside the other side's band.
    if (owners[i] >= 0)
      return invalid("move_pages: destination page " + std::to_string(op.dst[i]) + " of sub-pool '" + op.sub_pool +
                     "' is bound to virtual page " + std::to_string(owners[i]) +
                     "; a raw move may only overwrite an unbound page");
    if (sides_.size() == 2) {
      const std::size_t other = 1 - index;
      const std::uint64_t begin = static_cast<std::uint64_t>(op.dst[i]) * page_bytes, end = begin + page_bytes;
      if (begin < band_end_byte(other) && band_begin_byte(other) < end)
        return invalid("move_pages: destination page " + std::to_string(op.dst[i]) + " of sub-pool '" + op.sub_pool +
                       "' overlaps the occupied band of sub-pool '" + derived_.layouts[other].sub_pool +
                       "'; choose a destination in the gap");
    }
  }
  SidePlan plan;
  plan.side = index;
  plan.src = op.src;
  plan.dst = op.dst;
  KVTWIN_TRY_STATUS(check_readers({plan}));
  KVTWIN_TRY_STATUS(move_bytes(index, src, dst, n));  // raw copies, no table change
  KVTWIN_TRY_STATUS(sync());
  return ok(Done{});
}

OpResult GpuPool::begin_read(const BeginRead& op) {
  if (readers_.count(op.reader) != 0)
    return invalid("begin_read: reader " + std::to_string(op.reader) + " is already open; end it first or use another id");
  KVTWIN_TRY(std::size_t index, side_named(op.sub_pool, "begin_read"));
  Reader reader;
  reader.side = index;
  for (std::int64_t page : op.pages) {
    if (page < 0 || page >= sides_[index]->num_pages())
      return out_of_range("begin_read: page " + std::to_string(page) + " is outside sub-pool '" + op.sub_pool +
                          "''s pages [0, " + std::to_string(sides_[index]->num_pages()) + ")");
    reader.pages.insert(page);
  }
  readers_[op.reader] = std::move(reader);
  return ok(Done{});
}

OpResult GpuPool::end_read(const EndRead& op) {
  if (readers_.erase(op.reader) == 0)
    return invalid("end_read: reader " + std::to_string(op.reader) + " is not open");
  return ok(Done{});
}

// ---------------------------------------------------------------- write locs (SPEC 6)

OpResult GpuPool::make_batch(const MakeBatch& op) {
  if (batches_.count(op.batch) != 0)
    return invalid("batch " + std::to_string(op.batch) + " already exists; drop it first (drop_batch) or use another id");
  if (op.tokens.size() > kMaxLanes)
    return invalid("batch " + std::to_string(op.batch) + " has " + std::to_string(op.tokens.size()) +
                   " lanes; at most " + std::to_string(kMaxLanes) + " are allowed");
  if (!op.encoder_tokens.empty() && op.encoder_tokens.size() != op.tokens.size())
    return invalid("batch " + std::to_string(op.batch) + " has " + std::to_string(op.tokens.size()) + " tokens but " +
                   std::to_string(op.encoder_tokens.size()) + " encoder tokens; give one encoder token per lane, or none");
  Batch b;
  b.width = static_cast<std::int64_t>(op.tokens.size());
  b.tokens = op.tokens;
  b.encoder_host = op.encoder_tokens;
  // out_cache_loc starts as the virtual tokens, unmarked; the encoder loc is never translated.
  KVTWIN_TRY(b.loc, device_copy(op.tokens, stream_));
  KVTWIN_TRY(b.encoder_loc, device_copy(op.encoder_tokens, stream_));
  KVTWIN_TRY_STATUS(sync());
  batches_[op.batch] = std::move(b);
  return ok(Done{});
}

OpResult GpuPool::rebind(const Rebind& op) {
  KVTWIN_TRY(Batch * b, find_batch(op.batch, "rebind"));
  const std::int64_t n = static_cast<std::int64_t>(b->tokens.size());
  const std::uint64_t width = op.out_width == 0 ? static_cast<std::uint64_t>(n) : op.out_width;
  if (width < static_cast<std::uint64_t>(n))
    return invalid("rebind out_width " + std::to_string(op.out_width) + " is smaller than the batch's " +
                   std::to_string(n) + " lanes; give a width of at least " + std::to_string(n));
  if (width > kMaxLanes)
    return invalid("rebind out_width " + std::to_string(width) + " exceeds " + std::to_string(kMaxLanes) + " lanes");
  // SPEC 6: loc[i] = translate(tokens[i]) of the batch's lanes; lanes past them hold the sink.
  KVTWIN_TRY(DeviceBuffer<std::int64_t> tokens, device_copy(b->tokens, stream_));
  DeviceBuffer<std::int64_t> loc;
  KVTWIN_TRY_STATUS(loc.allocate(static_cast<std::size_t>(width)));
  if (width > 0) {
    if (faults_.skip_rebind) {
      // Fault 1: the loc keeps the virtual ids (the tail still gets the sink), yet is marked.
      KVTWIN_CUDA_TRY(cudaMemsetAsync(loc.get(), 0, loc.bytes(), stream_));
      if (n > 0)
        KVTWIN_CUDA_TRY(cudaMemcpyAsync(loc.get(), tokens.get(), static_cast<std::size_t>(n) * sizeof(std::int64_t),
                                        cudaMemcpyDeviceToDevice, stream_));
    } else {
      TranslateParams p;
      p.in = tokens.get();
      p.cols = n;
      p.out = loc.get();
      p.out_cols = static_cast<std::int64_t>(width);
      p.v2p = sides_[0]->v2p();
      p.v2p_len = sides_[0]->v2p_len();
      p.page_size = static_cast<std::int64_t>(config_.page_size);
      p.negative_wraps = faults_.negative_wraps;
      p.tombstone_live = faults_.tombstone_live;
      KVTWIN_CUDA_TRY(launch_translate(p, stream_));
    }
  }
  std::vector<std::int64_t> encoder = b->encoder_host;
  if (!encoder.empty()) encoder.resize(static_cast<std::size_t>(width), 0);
  KVTWIN_TRY(DeviceBuffer<std::int64_t> encoder_loc, device_copy(encoder, stream_));
  KVTWIN_TRY(std::vector<std::int64_t> values, download_ids(loc.get(), static_cast<std::int64_t>(width)));
  b->loc = std::move(loc);
  b->width = static_cast<std::int64_t>(width);
  b->tokens.resize(static_cast<std::size_t>(width), -1);  // lanes past the batch are padding
  b->encoder_loc = std::move(encoder_loc);
  b->encoder_host = std::move(encoder);
  b->physical = true;  // SPEC 6: rebind sets the mark
  return ok(Ids{std::move(values)});
}

OpResult GpuPool::split(const Split& op) {
  KVTWIN_TRY(Batch * parent, find_batch(op.batch, "split"));
  if (op.left == op.right)
    return invalid("split: both children are batch " + std::to_string(op.left) + "; give two different ids");
  for (std::uint32_t child : {op.left, op.right})
    if (batches_.count(child) != 0)
      return invalid("split: batch " + std::to_string(child) + " already exists; children need new ids (the parent stays)");
  if (op.at > static_cast<std::uint64_t>(parent->width))
    return out_of_range("split at lane " + std::to_string(op.at) + " is past the batch's " +
                        std::to_string(parent->width) + " lanes; split at 0 .. " + std::to_string(parent->width));
  const std::int64_t at = static_cast<std::int64_t>(op.at);
  auto child = [&](std::int64_t begin, std::int64_t end) -> Result<Batch> {
    Batch c;
    c.width = end - begin;
    c.tokens.assign(parent->tokens.begin() + begin, parent->tokens.begin() + end);
    KVTWIN_TRY_STATUS(c.loc.allocate(static_cast<std::size_t>(c.width)));
    if (c.width > 0)
      KVTWIN_CUDA_TRY(cudaMemcpyAsync(c.loc.get(), parent->loc.get() + begin,
                                      static_cast<std::size_t>(c.width) * sizeof(std::int64_t),
                                      cudaMemcpyDeviceToDevice, stream_));
    if (!parent->encoder_host.empty()) {
      c.encoder_host.assign(parent->encoder_host.begin() + begin, parent->encoder_host.begin() + end);
      KVTWIN_TRY(c.encoder_loc, device_copy(c.encoder_host, stream_));
    }
    // SPEC 6: a child copies the parent's mark, never the default (fault 3 drops it).
    c.physical = faults_.split_drops_mark ? false : parent->physical;
    return c;
  };
  KVTWIN_TRY(Batch left, child(0, at));
  KVTWIN_TRY(Batch right, child(at, parent->width));
  KVTWIN_TRY_STATUS(sync());
  const Marks marks{left.physical, right.physical};
  batches_[op.left] = std::move(left);
  batches_[op.right] = std::move(right);
  return ok(marks);
}

OpResult GpuPool::drop_batch(const DropBatch& op) {
  if (batches_.erase(op.batch) == 0)
    return invalid("drop_batch: no batch " + std::to_string(op.batch) + "; nothing to drop");
  return ok(Done{});
}

OpResult GpuPool::write(const Write& op) {
  const std::size_t layers = derived_.plan.layer_map.size();
  if (op.layer >= layers)
    return out_of_range("write: layer " + std::to_string(op.layer) + " is outside the model's " +
                        std::to_string(layers) + " layers");
  const LayerPlacement placement = derived_.plan.layer_map[op.layer];
  const DenseEntryLayout& layout = derived_.layouts[placement.sub_pool];

  // The loc, its mark and the tokens whose rows the lanes carry.
  const std::int64_t* loc = nullptr;
  std::int64_t lanes = 0;
  bool physical = false;
  const std::vector<std::int64_t>* tokens = nullptr;
  if (op.batch.has_value()) {
    if (!op.loc.empty() || !op.tokens.empty() || op.physical)
      return invalid("write: give either a batch or an explicit loc with its tokens, not both");
    KVTWIN_TRY(Batch * b, find_batch(*op.batch, "write"));
    if (placement.kind == LayerKind::cross && !faults_.cross_gets_batch_loc) {
      // for_layer (SPEC 6): a cross-attention layer writes through the encoder loc, which nothing
      // translates and so is never marked; its rows are the encoder tokens'. (Fault 4 hands it
      // the batch's marked loc.)
      if (b->encoder_host.empty())
        return invalid("layer " + std::to_string(op.layer) +
                       " is a cross-attention layer, which writes through the batch's encoder loc, but the batch has "
                       "none; declare the batch with encoder_tokens");
      loc = b->encoder_loc.get();
      lanes = static_cast<std::int64_t>(b->encoder_host.size());
      physical = false;
      tokens = &b->encoder_host;
    } else {
      loc = b->loc.get();
      lanes = b->width;
      physical = b->physical;
      tokens = &b->tokens;
    }
  } else {
    if (op.loc.size() != op.tokens.size())
      return invalid("write: " + std::to_string(op.loc.size()) + " locs but " + std::to_string(op.tokens.size()) +
                     " tokens; give the virtual token of every lane");
    if (op.loc.size() > kMaxLanes) return invalid("write: more than " + std::to_string(kMaxLanes) + " lanes");
    KVTWIN_TRY(std::int64_t * uploaded, upload_ids(op.loc, 0));
    loc = uploaded;
    lanes = static_cast<std::int64_t>(op.loc.size());
    physical = op.physical;  // a loc translated elsewhere states its own mark
    tokens = &op.tokens;
  }
  // SPEC 6: the unified pool's door checks the mark first, on every call: a host flag read, no
  // device sync (fault 2 skips it).
  if (!physical && !faults_.no_mark_check)
    return make_error(ErrorKind::unmarked_loc,
                      "write to layer " + std::to_string(op.layer) +
                          ": the unified pool refuses an unmarked loc (its ids may be virtual); rebind the batch first "
                          "(a rebind op translates it and marks it physical), or, for ids already translated "
                          "elsewhere, give the explicit loc with physical: true");
  // The loc is in the owner's physical id space; an SWA layer derives its own (SPEC 4.3).
  const bool swa_layer = placement.kind == LayerKind::swa;
  const std::size_t loc_side = swa_layer ? 0 : placement.sub_pool;
  if (lanes > 0) {
    KVTWIN_TRY(bool outside, any_outside(loc, lanes, 0, slot_count(loc_side)));
    if (outside)
      return out_of_range("write to layer " + std::to_string(op.layer) + ": a loc is negative or past sub-pool '" +
                          derived_.layouts[loc_side].sub_pool + "''s " + std::to_string(slot_count(loc_side)) +
                          " slots; give physical token ids of the pool (0 is the sink)");
  }
  const std::int64_t* final_loc = loc;
  if (swa_layer && lanes > 0) {
    KVTWIN_TRY_STATUS(ids_[1].reserve(static_cast<std::size_t>(lanes)));
    SwaTranslateParams p;
    p.in = loc;
    p.out = ids_[1].get();
    p.n = lanes;
    p.full_p2v = sides_[0]->p2v();
    p.full_p2v_len = sides_[0]->p2v_len();
    p.swa_v2p = sides_[1]->v2p();
    p.swa_v2p_len = sides_[1]->v2p_len();
    p.page_size = static_cast<std::int64_t>(config_.page_size);
    p.tombstone_live = faults_.tombstone_live;
    KVTWIN_CUDA_TRY(launch_swa_translate(p, stream_));
    final_loc = ids_[1].get();
    if (faults_.tombstone_live) {
      // With fault 10 a tombstone yields a negative id; the door refuses it instead of writing outside.
      KVTWIN_TRY(bool negative, any_outside(final_loc, lanes, 0, slot_count(placement.sub_pool)));
      if (negative) return out_of_range("write: an SWA loc is negative (a tombstone taken as live)");
    }
  }
  if (lanes > 1) {
    // SPEC 6: two lanes with one non-sink loc would race, and are refused. The door detects them
    // itself, on the device (sort, then compare neighbours), on the layer's final loc ignoring
    // sink lanes (docs/decisions.md). This is the `checked` mode of the door; GpuPool runs it on
    // every write, whatever op.checked says, because the contract refuses duplicates always (the
    // model does) and a run must not depend on a caller remembering to ask.
    const std::int64_t sink = sink_end(placement.sub_pool);
    KVTWIN_TRY_STATUS(ids_[2].reserve(static_cast<std::size_t>(lanes)));
    KVTWIN_TRY_STATUS(ids_[3].reserve(static_cast<std::size_t>(lanes)));
    KVTWIN_TRY_STATUS(sink_to_zero(final_loc, lanes, sink, ids_[3].get(), stream_));
    KVTWIN_TRY(bool duplicate, has_nonzero_duplicate(ids_[3].get(), lanes, ids_[2].get(), sort_temp_, status_.get(), stream_));
    if (duplicate)
      return make_error(ErrorKind::duplicate_loc, "write to layer " + std::to_string(op.layer) +
                                                      ": two lanes write the same token of sub-pool '" + layout.sub_pool +
                                                      "' (last writer wins would race on a GPU); give each lane its "
                                                      "own loc or route padding lanes to the sink (0)");
  }
  if (config_.tables_only || lanes == 0) return ok(Done{});

  // The rows: the oracle row of each part for each lane's token (docs/decisions.md).
  std::uint64_t lane_bytes = 0;
  for (const DensePart& part : layout.parts) lane_bytes += part.row_bytes();
  std::vector<std::uint8_t> rows(static_cast<std::size_t>(lane_bytes * static_cast<std::uint64_t>(lanes)));
  std::vector<RowSegment> segments;
  std::uint64_t part_offset = 0;
  for (std::size_t pi = 0; pi < layout.parts.size(); ++pi) {
    const DensePart& part = layout.parts[pi];
    for (std::int64_t lane = 0; lane < lanes; ++lane) {
      const std::size_t at = static_cast<std::size_t>(lane);
      const RowIdentity id{at < tokens->size() ? (*tokens)[at] : -1, static_cast<std::uint32_t>(placement.sub_pool),
                           placement.local_layer, static_cast<std::uint32_t>(pi), op.write_number};
      fill_oracle_row(config_.seed, id, part.dtype,
                      std::span<std::uint8_t>(rows.data() + at * lane_bytes + part_offset, part.row_bytes()));
    }
    RowSegment seg;
    seg.pool_offset_bytes = part.offset_bytes + std::uint64_t{placement.local_layer} * part.layer_stride_bytes;
    seg.entry_bytes = layout.entry_bytes;
    seg.staging_offset_bytes = part_offset;
    seg.row_bytes = static_cast<std::uint32_t>(part.row_bytes());
    seg.loc_set = 0;
    seg.first_slot = sink_end(placement.sub_pool);  // SPEC 6: a lane at the sink is discarded
    segments.push_back(seg);
    part_offset += part.row_bytes();
  }
  KVTWIN_TRY_STATUS(staging_.reserve(rows.size()));
  KVTWIN_TRY_STATUS(segments_.reserve(segments.size()));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(staging_.get(), rows.data(), rows.size(), cudaMemcpyHostToDevice, stream_));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(segments_.get(), segments.data(), segments.size() * sizeof(RowSegment),
                                  cudaMemcpyHostToDevice, stream_));
  RowCopyParams p;
  p.pool = pool_.get();
  p.pool_bytes = pool_.bytes();
  p.staging = staging_.get();
  p.staging_lane_stride_bytes = lane_bytes;
  p.segments = segments_.get();
  p.num_segments = static_cast<std::uint32_t>(segments.size());
  for (const RowSegment& s : segments) p.max_row_bytes = std::max(p.max_row_bytes, s.row_bytes);
  p.locs[0] = final_loc;
  p.lanes = lanes;
  p.vector16 = rows_vector16(p.pool, p.staging, lane_bytes, segments.data(), p.num_segments);
  p.int32_offsets = faults_.int32_offsets;
  KVTWIN_CUDA_TRY(launch_scatter_rows(p, stream_));
  KVTWIN_TRY_STATUS(sync());
  return ok(Done{});
}

OpResult GpuPool::read(const Read& op) {
  if (config_.tables_only)
    return make_error(ErrorKind::unsupported, "read: a tables-only pool has no bytes; build with tables_only: false to read rows");
  const std::size_t layers = derived_.plan.layer_map.size();
  if (op.layer >= layers)
    return out_of_range("read: layer " + std::to_string(op.layer) + " is outside the model's " +
                        std::to_string(layers) + " layers");
  const LayerPlacement placement = derived_.plan.layer_map[op.layer];
  const DenseEntryLayout& layout = derived_.layouts[placement.sub_pool];
  KVTWIN_TRY(const DensePart* part, layout.part(op.part));
  const std::int64_t slots = slot_count(placement.sub_pool);
  for (std::size_t i = 0; i < op.ids.size(); ++i)
    if (op.ids[i] < 0 || op.ids[i] >= slots)
      return out_of_range("read: id " + std::to_string(op.ids[i]) + " at position " + std::to_string(i) +
                          " is outside sub-pool '" + layout.sub_pool + "''s slots [0, " + std::to_string(slots) + ")");
  const std::int64_t lanes = static_cast<std::int64_t>(op.ids.size());
  const std::uint64_t row = part->row_bytes();
  std::vector<std::uint8_t> out(static_cast<std::size_t>(row * static_cast<std::uint64_t>(lanes)));
  if (lanes > 0) {
    KVTWIN_TRY(std::int64_t * ids, upload_ids(op.ids, 0));
    KVTWIN_TRY_STATUS(staging_.reserve(out.size()));
    RowSegment seg;
    seg.pool_offset_bytes = part->offset_bytes + std::uint64_t{placement.local_layer} * part->layer_stride_bytes;
    seg.entry_bytes = layout.entry_bytes;
    seg.row_bytes = static_cast<std::uint32_t>(row);
    seg.first_slot = sink_end(placement.sub_pool);  // docs/decisions.md: a sink lane reads as zeros
    KVTWIN_TRY_STATUS(segments_.reserve(1));
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(segments_.get(), &seg, sizeof seg, cudaMemcpyHostToDevice, stream_));
    RowCopyParams p;
    p.pool = pool_.get();
    p.pool_bytes = pool_.bytes();
    p.staging = staging_.get();
    p.staging_lane_stride_bytes = row;
    p.segments = segments_.get();
    p.num_segments = 1;
    p.max_row_bytes = seg.row_bytes;
    p.locs[0] = ids;
    p.lanes = lanes;
    p.vector16 = rows_vector16(p.pool, p.staging, row, &seg, 1);
    p.int32_offsets = faults_.int32_offsets;
    KVTWIN_CUDA_TRY(launch_gather_rows(p, stream_));
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.data(), staging_.get(), out.size(), cudaMemcpyDeviceToHost, stream_));
    KVTWIN_TRY_STATUS(sync());
  }
  return ok(Bytes::of(std::move(out)));
}

// ---------------------------------------------------------------- translation (SPEC 5)

namespace {

// Where element i of a translate buffer lives: 1-D lane i at i * stride; 2-D (r, c) at r * stride + c.
struct BufferShape {
  bool two_dim = false;
  std::uint64_t lanes = 0;  // 1-D: lanes; 2-D: rows
  std::uint64_t cols = 1;   // 2-D only
  std::uint64_t stride = 1;
  std::uint64_t elements() const { return lanes * cols; }
  std::uint64_t storage() const { return lanes == 0 || cols == 0 ? 0 : (lanes - 1) * stride + cols; }
  std::uint64_t at(std::uint64_t i) const { return two_dim ? (i / cols) * stride + i % cols : i * stride; }
};

// The most storage elements one translate buffer may span (a bound against runaway strides).
constexpr std::uint64_t kMaxTranslateStorageElements = std::uint64_t{1} << 24;

// A stride field (0: contiguous) as a buffer shape, or an error naming the field.
Result<BufferShape> buffer_shape(bool two_dim, std::uint64_t lanes, std::uint64_t cols, std::int64_t stride,
                                 const char* field) {
  BufferShape b{two_dim, lanes, two_dim ? cols : 1, 1};
  const std::uint64_t contiguous = two_dim ? cols : 1;
  if (stride < 0)
    return invalid(std::string(field) + " = " + std::to_string(stride) + " is negative; strides are 0 (contiguous) or more");
  b.stride = stride == 0 ? contiguous : static_cast<std::uint64_t>(stride);
  if (b.stride < contiguous)
    return invalid(std::string(field) + " = " + std::to_string(stride) + " is smaller than a row of " +
                   std::to_string(cols) + " elements, so rows would overlap; use at least " + std::to_string(cols));
  // The stride is bounded first, so the storage size below cannot wrap (docs/decisions.md: every
  // refusal of translate is invalid_argument).
  if (b.stride > kMaxTranslateStorageElements || b.storage() > kMaxTranslateStorageElements)
    return invalid(std::string(field) + " = " + std::to_string(stride) + " makes a buffer of more than " +
                   std::to_string(kMaxTranslateStorageElements) + " elements; use a smaller stride");
  return b;
}

}  // namespace

OpResult GpuPool::translate(const Translate& op) {
  // ---- validate (SPEC 5: int32 or int64 input, 1-D or 2-D, strided; int64 output of the same shape)
  if (op.shape.size() != 1 && op.shape.size() != 2)
    return invalid("translate shape has " + std::to_string(op.shape.size()) + " dimensions; give [n] or [rows, cols]");
  for (std::int64_t d : op.shape)
    if (d < 0) return invalid("translate shape has a negative dimension " + std::to_string(d));
  const bool two_dim = op.shape.size() == 2;
  const std::uint64_t lanes = static_cast<std::uint64_t>(op.shape[0]);
  const std::uint64_t cols = two_dim ? static_cast<std::uint64_t>(op.shape[1]) : 1;
  std::uint64_t count = 0;
  if (__builtin_mul_overflow(lanes, cols, &count))
    return invalid("translate shape [" + std::to_string(lanes) + ", " + std::to_string(cols) +
                   "] holds more ids than 64 bits count; make the shape match the ids");
  if (count != op.ids.size())
    return invalid("translate shape holds " + std::to_string(count) + " ids but " + std::to_string(op.ids.size()) +
                   " were given; make the shape match the ids");
  const bool in32 = op.index_dtype == IndexDtype::int32;
  if (in32)
    for (std::size_t i = 0; i < op.ids.size(); ++i)
      if (op.ids[i] < INT32_MIN || op.ids[i] > INT32_MAX)
        return invalid("id " + std::to_string(op.ids[i]) + " at position " + std::to_string(i) +
                       " does not fit an int32 input; use index_dtype int64");
  if (op.out_dtype != IndexDtype::int64)
    return invalid("translate writes int64 physical ids; give an int64 output (out_dtype int64)");
  if (op.out_width != 0 && two_dim) return invalid("out_width applies to one-dimensional ids only; drop it or flatten the ids");
  if (op.out_width != 0 && op.out_width < lanes)
    return invalid("out_width " + std::to_string(op.out_width) + " is smaller than the " + std::to_string(lanes) +
                   " ids; give a width of at least " + std::to_string(lanes));
  if (op.out_width > kMaxTranslateStorageElements)
    return invalid("out_width " + std::to_string(op.out_width) + " exceeds " +
                   std::to_string(kMaxTranslateStorageElements) + " lanes");
  const std::uint64_t out_lanes = op.out_width != 0 ? op.out_width : lanes;
  const bool alias = op.out == OutPlacement::alias;
  if (alias && in32) return invalid("an int64 output cannot alias an int32 input; use out fresh or strided, or an int64 input");
  if (op.out == OutPlacement::fresh && op.out_stride != 0)
    return invalid("out_stride applies to a strided output; use out \"strided\" or drop out_stride");
  // An aliasing output is the input buffer itself: out_width lanes of it, with the input's strides.
  KVTWIN_TRY(BufferShape in, buffer_shape(two_dim, alias ? out_lanes : lanes, cols, op.input_stride, "input_stride"));
  if (alias && op.out_stride != 0 && static_cast<std::uint64_t>(op.out_stride) != in.stride)
    return invalid("an aliasing output has the input's stride " + std::to_string(in.stride) + ", not out_stride " +
                   std::to_string(op.out_stride) + "; drop out_stride");
  KVTWIN_TRY(BufferShape out, buffer_shape(two_dim, out_lanes, cols, alias ? op.input_stride : op.out_stride,
                                           alias ? "input_stride" : "out_stride"));
  if (out.elements() == 0) return ok(Ids{});

  // ---- the buffers: every storage cell poisoned, the ids at their strided places; an aliasing
  // buffer's lanes past N hold stale ids of an earlier, larger batch.
  constexpr std::int64_t kPoison64 = 0x5a5a5a5a5a5a5a5aLL;
  constexpr std::int32_t kPoison32 = 0x5a5a5a5a;
  constexpr std::int64_t kStaleLaneId = 0x7e57ab1e;
  std::vector<std::uint8_t> in_host;
  if (in32) {
    std::vector<std::int32_t> v(std::max<std::uint64_t>(in.storage(), 1), kPoison32);
    for (std::uint64_t i = 0; i < count; ++i) v[in.at(i)] = static_cast<std::int32_t>(op.ids[i]);
    in_host.resize(v.size() * sizeof(std::int32_t));
    std::memcpy(in_host.data(), v.data(), in_host.size());
  } else {
    std::vector<std::int64_t> v(std::max<std::uint64_t>(in.storage(), 1), kPoison64);
    for (std::uint64_t i = 0; i < in.elements(); ++i) v[in.at(i)] = i < count ? op.ids[i] : kStaleLaneId;
    in_host.resize(v.size() * sizeof(std::int64_t));
    std::memcpy(in_host.data(), v.data(), in_host.size());
  }
  DeviceBuffer<std::uint8_t> in_dev;
  KVTWIN_TRY_STATUS(in_dev.allocate(in_host.size()));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(in_dev.get(), in_host.data(), in_host.size(), cudaMemcpyHostToDevice, stream_));
  DeviceBuffer<std::int64_t> out_dev;
  std::int64_t* out_ptr = reinterpret_cast<std::int64_t*>(in_dev.get());
  const std::uint64_t out_storage = std::max<std::uint64_t>(out.storage(), 1);
  if (!alias) {
    KVTWIN_TRY(out_dev, device_copy(std::vector<std::int64_t>(out_storage, kPoison64), stream_));
    out_ptr = out_dev.get();
  }
  // ---- one launch: element i reads its id, translates it, writes it; lanes past N get the sink.
  TranslateParams p;
  p.in = in_dev.get();
  p.in_int32 = in32;
  p.rows = two_dim ? static_cast<std::int64_t>(lanes) : 1;
  p.cols = two_dim ? static_cast<std::int64_t>(cols) : static_cast<std::int64_t>(lanes);
  p.in_row_stride = two_dim ? static_cast<std::int64_t>(in.stride) : 0;
  p.in_col_stride = two_dim ? 1 : static_cast<std::int64_t>(in.stride);
  p.out = out_ptr;
  p.out_row_stride = two_dim ? static_cast<std::int64_t>(out.stride) : 0;
  p.out_col_stride = two_dim ? 1 : static_cast<std::int64_t>(out.stride);
  p.out_cols = two_dim ? static_cast<std::int64_t>(cols) : static_cast<std::int64_t>(out_lanes);
  p.v2p = sides_[0]->v2p();
  p.v2p_len = sides_[0]->v2p_len();
  p.page_size = static_cast<std::int64_t>(config_.page_size);
  p.negative_wraps = faults_.negative_wraps;
  p.tombstone_live = faults_.tombstone_live;
  KVTWIN_CUDA_TRY(launch_translate(p, stream_));
  KVTWIN_TRY(std::vector<std::int64_t> whole, download_ids(out_ptr, static_cast<std::int64_t>(out_storage)));
  // Every storage cell no output element owns is untouched (a kernel writing outside its
  // elements is a broken invariant, not a result).
  std::vector<bool> owned(out_storage, false);
  for (std::uint64_t i = 0; i < out.elements(); ++i) owned[out.at(i)] = true;
  for (std::uint64_t c = 0; c < out.storage(); ++c)
    if (!owned[c]) {
      std::int64_t before = kPoison64;
      if (alias) std::memcpy(&before, in_host.data() + c * sizeof(std::int64_t), sizeof before);
      KVTWIN_CHECK(whole[c] == before, "translate wrote only its output elements");
    }
  std::vector<std::int64_t> values(out.elements());
  for (std::uint64_t i = 0; i < out.elements(); ++i) values[i] = whole[out.at(i)];
  return ok(Ids{std::move(values)});
}

OpResult GpuPool::swa_translate(const SwaTranslate& op) {
  if (sides_.size() != 2)
    return invalid("swa_translate: this pool has no sliding-window side (model '" + config_.shape.name + "')");
  const std::int64_t n = static_cast<std::int64_t>(op.ids.size());
  if (n == 0) return ok(Ids{});
  KVTWIN_TRY(std::int64_t * in, upload_ids(op.ids, 0));
  KVTWIN_TRY_STATUS(ids_[1].reserve(static_cast<std::size_t>(n)));
  SwaTranslateParams p;
  p.in = in;
  p.out = ids_[1].get();
  p.n = n;
  p.full_p2v = sides_[0]->p2v();
  p.full_p2v_len = sides_[0]->p2v_len();
  p.swa_v2p = sides_[1]->v2p();
  p.swa_v2p_len = sides_[1]->v2p_len();
  p.page_size = static_cast<std::int64_t>(config_.page_size);
  p.tombstone_live = faults_.tombstone_live;
  KVTWIN_CUDA_TRY(launch_swa_translate(p, stream_));
  KVTWIN_TRY(std::vector<std::int64_t> values, download_ids(ids_[1].get(), n));
  return ok(Ids{std::move(values)});
}

OpResult GpuPool::page_table(const PageTable& op) {
  const std::int64_t ps = static_cast<std::int64_t>(config_.page_size);
  const std::size_t bs = op.req.size();
  if (op.seq_len.size() != bs || op.prior.size() != bs)
    return invalid("page_table has " + std::to_string(bs) + " request rows but " + std::to_string(op.seq_len.size()) +
                   " seq_len and " + std::to_string(op.prior.size()) + " prior rows; give one of each per batch row");
  for (std::size_t b = 0; b < bs; ++b) {
    const std::string row = "page_table row " + std::to_string(b);
    if (op.req[b] < 0 || static_cast<std::uint64_t>(op.req[b]) >= op.req_to_token.size())
      return out_of_range(row + ": request slot " + std::to_string(op.req[b]) + " is outside req_to_token (" +
                          std::to_string(op.req_to_token.size()) + " slots)");
    if (op.seq_len[b] < 0) return invalid(row + ": seq_len " + std::to_string(op.seq_len[b]) + " is negative");
    const std::uint64_t pages = ceil_div(static_cast<std::uint64_t>(op.seq_len[b]), static_cast<std::uint64_t>(ps));
    if (pages > op.prior[b].size())
      return out_of_range(row + ": " + std::to_string(op.seq_len[b]) + " tokens need " + std::to_string(pages) +
                          " columns but the table has " + std::to_string(op.prior[b].size()) + "; widen the table");
    const auto& tokens = op.req_to_token[static_cast<std::size_t>(op.req[b])];
    if (pages > 0 && (pages - 1) * static_cast<std::uint64_t>(ps) >= tokens.size())
      return out_of_range(row + ": request slot " + std::to_string(op.req[b]) + " holds " +
                          std::to_string(tokens.size()) + " tokens, fewer than seq_len " +
                          std::to_string(op.seq_len[b]) + " needs");
  }
  // Dense device copies of the request-to-token table and the prior table (rows padded; padding
  // is never read: the bounds above).
  std::int64_t rt_cols = 1, table_cols = 1;
  for (const auto& r : op.req_to_token) rt_cols = std::max<std::int64_t>(rt_cols, static_cast<std::int64_t>(r.size()));
  for (const auto& r : op.prior) table_cols = std::max<std::int64_t>(table_cols, static_cast<std::int64_t>(r.size()));
  std::vector<std::int64_t> rt(op.req_to_token.size() * static_cast<std::size_t>(rt_cols), 0);
  for (std::size_t r = 0; r < op.req_to_token.size(); ++r)
    std::copy(op.req_to_token[r].begin(), op.req_to_token[r].end(), rt.begin() + static_cast<std::ptrdiff_t>(r) * rt_cols);
  std::vector<std::int64_t> table(bs * static_cast<std::size_t>(table_cols), 0);
  for (std::size_t r = 0; r < bs; ++r)
    std::copy(op.prior[r].begin(), op.prior[r].end(), table.begin() + static_cast<std::ptrdiff_t>(r) * table_cols);
  if (bs == 0) return ok(Table{});
  KVTWIN_TRY(std::int64_t * rt_dev, upload_ids(rt, 0));
  KVTWIN_TRY(std::int64_t * req_dev, upload_ids(op.req, 1));
  KVTWIN_TRY(std::int64_t * len_dev, upload_ids(op.seq_len, 2));
  KVTWIN_TRY(std::int64_t * table_dev, upload_ids(table, 3));
  PageTableParams p;  // the v2p lookup fused into the table build
  p.req_to_token = rt_dev;
  p.rt_rows = static_cast<std::int64_t>(op.req_to_token.size());
  p.rt_cols = rt_cols;
  p.rt_row_stride = rt_cols;
  p.req = req_dev;
  p.seq_lens = len_dev;
  p.bs = static_cast<std::int64_t>(bs);
  p.table = table_dev;
  p.table_cols = table_cols;
  p.table_row_stride = table_cols;
  p.v2p = sides_[0]->v2p();
  p.v2p_len = sides_[0]->v2p_len();
  p.page_size = ps;
  p.tombstone_live = faults_.page_table_tombstone_live;
  KVTWIN_CUDA_TRY(launch_page_table(p, stream_));
  KVTWIN_TRY(std::vector<std::int64_t> whole, download_ids(table_dev, static_cast<std::int64_t>(table.size())));
  Table out;
  for (std::size_t r = 0; r < bs; ++r) {
    const auto first = whole.begin() + static_cast<std::ptrdiff_t>(r) * table_cols;
    out.rows.emplace_back(first, first + static_cast<std::ptrdiff_t>(op.prior[r].size()));
  }
  return ok(std::move(out));
}

OpResult GpuPool::remap_indices(const RemapIndices& op) {
  if (op.bs >= op.kv_indptr.size())
    return invalid("remap_indices: bs " + std::to_string(op.bs) + " needs kv_indptr of at least " +
                   std::to_string(op.bs + 1) + " entries, got " + std::to_string(op.kv_indptr.size()));
  for (std::uint64_t b = 0; b <= op.bs; ++b)
    if (op.kv_indptr[b] < 0 || (b > 0 && op.kv_indptr[b] < op.kv_indptr[b - 1]))
      return invalid("remap_indices: kv_indptr must be non-negative and non-decreasing over [0, bs]; entry " +
                     std::to_string(b) + " is " + std::to_string(op.kv_indptr[b]));
  const std::int64_t capacity = static_cast<std::int64_t>(op.kv_indices.size());
  if (op.kv_indptr[op.bs] > capacity)
    return out_of_range("remap_indices: kv_indptr[bs] = " + std::to_string(op.kv_indptr[op.bs]) +
                        " is past the kv_indices buffer of " + std::to_string(capacity) + "; give a longer buffer");
  if (capacity == 0) return ok(Ids{});
  KVTWIN_TRY(std::int64_t * indices, upload_ids(op.kv_indices, 0));
  KVTWIN_TRY(std::int64_t * indptr, upload_ids(op.kv_indptr, 1));
  RemapParams p;
  p.in = indices;
  p.out = indices;  // SPEC 5: in place, in the capture-stable buffer the attention kernel reads
  if (faults_.remap_fresh_buffer) {
    // Fault 7: the remap lands in a fresh buffer; the capture-stable one keeps its virtual ids.
    KVTWIN_TRY_STATUS(ids_[2].reserve(static_cast<std::size_t>(capacity)));
    p.out = ids_[2].get();
  }
  p.capacity = capacity;
  p.kv_indptr = indptr;
  p.kv_indptr_len = static_cast<std::int64_t>(op.kv_indptr.size());
  p.bs = static_cast<std::int64_t>(op.bs);
  p.stale_bound = faults_.remap_stale_bound;
  p.v2p = sides_[0]->v2p();
  p.v2p_len = sides_[0]->v2p_len();
  p.page_size = static_cast<std::int64_t>(config_.page_size);
  KVTWIN_CUDA_TRY(launch_remap_indices(p, stream_));
  KVTWIN_TRY(std::vector<std::int64_t> values, download_ids(indices, capacity));
  return ok(Ids{std::move(values)});
}

// ---------------------------------------------------------------- decode step (SPEC 7)

OpResult GpuPool::capture(const Capture& op) {
  if (graphs_.count(op.graph) != 0)
    return invalid("capture: graph " + std::to_string(op.graph) + " is already captured; use another id");
  PoolDeviceView view;  // a tables-only pool has no bytes: the step keeps its tables, attends nothing
  view.pool = pool_.get();
  view.pool_bytes = pool_.bytes();
  view.full = sides_[0].get();
  view.swa = sides_.size() == 2 ? sides_[1].get() : nullptr;
  view.derived = &derived_;
  view.config = &config_;
  KVTWIN_TRY(std::unique_ptr<DecodeStep> step, DecodeStep::create(op, view, faults_, stream_));
  graphs_[op.graph] = std::move(step);
  return ok(Done{});
}

OpResult GpuPool::replay(const Replay& op) {
  auto it = graphs_.find(op.graph);
  if (it == graphs_.end())
    return invalid("replay: graph " + std::to_string(op.graph) + " was never captured; capture it first");
  KVTWIN_TRY(Decode decode, it->second->replay(op, faults_, stream_));
  return ok(std::move(decode));
}

// ---------------------------------------------------------------- what a checker compares

Result<PoolTables> GpuPool::tables() const {
  KVTWIN_TRY_STATUS(require_pool());
  PoolTables out;
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    const DeviceSide& side = *sides_[i];
    SideTables t;
    t.name = derived_.layouts[i].sub_pool;
    KVTWIN_TRY(t.v2p, download_ids(side.v2p(), side.v2p_len()));
    KVTWIN_TRY(t.p2v, download_ids(side.p2v(), side.p2v_len()));
    KVTWIN_TRY(t.free_queue, side.queue_contents(stream_));
    t.watermark = side.watermark();
    KVTWIN_TRY_STATUS(ids_[4].reserve(static_cast<std::size_t>(side.p2v_len())));
    KVTWIN_TRY(t.holes, side.hole_list(select_, ids_[4].get(), stream_));
    t.allocated_pages = static_cast<std::uint64_t>(side.allocated());
    out.sides.push_back(std::move(t));
  }
  return out;
}

Result<std::uint64_t> GpuPool::tables_digest() const {
  KVTWIN_TRY_STATUS(require_pool());
  KVTWIN_TRY_STATUS(digest_sum_.reserve(1));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(digest_sum_.get(), 0, sizeof(unsigned long long), stream_));
  std::uint64_t host_terms = 0;
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    KVTWIN_TRY_STATUS(sides_[i]->add_digest_terms(i, digest_sum_.get(), stream_));
    host_terms += sides_[i]->digest_counter_terms(i);
  }
  unsigned long long device_terms = 0;
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(&device_terms, digest_sum_.get(), sizeof device_terms, cudaMemcpyDeviceToHost, stream_));
  KVTWIN_TRY_STATUS(sync());
  return static_cast<std::uint64_t>(device_terms) + host_terms;
}

Status GpuPool::verify() const {
  if (!built_) return ok_status();  // nothing built, nothing to break (as the model's verify)
  if (!config_.tables_only && pool_.bytes() != config_.total_bytes)
    return make_error(ErrorKind::internal, "gpu invariant broken: the pool buffer holds " + std::to_string(pool_.bytes()) +
                                               " bytes, not total_bytes " + std::to_string(config_.total_bytes));
  std::vector<SideSnapshot> snapshots;
  for (const auto& side : sides_) {
    KVTWIN_TRY(SideSnapshot s, side->snapshot(sides_[0]->min_page(), stream_));
    snapshots.push_back(std::move(s));
  }
  return check_device_sides(snapshots, config_.mode == CompactionMode::lazy);
}

Result<std::vector<std::uint8_t>> GpuPool::raw_bytes(std::uint64_t offset, std::uint64_t length) const {
  KVTWIN_TRY_STATUS(require_pool());
  if (config_.tables_only)
    return make_error(ErrorKind::unsupported, "raw_bytes: this pool is tables-only and holds no bytes");
  if (offset > config_.total_bytes || length > config_.total_bytes - offset)
    return out_of_range("raw_bytes: [" + std::to_string(offset) + ", +" + std::to_string(length) +
                        ") is outside the pool's " + std::to_string(config_.total_bytes) + " bytes");
  std::vector<std::uint8_t> out(static_cast<std::size_t>(length));
  if (length > 0) {
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.data(), pool_.get() + offset, out.size(), cudaMemcpyDeviceToHost, stream_));
    KVTWIN_TRY_STATUS(sync());
  }
  return out;
}

}  // namespace kvtwin::gpu
