// GpuPool (gpu_pool.h): every operation of core/op.h, dispatched to the unit that owns it
// (translation and the decode graphs are still here).
//
// What stays here is what spans units: building the pool (every unit at once), the readers' gate
// between a free plan and its commit, and the poisoning after a CUDA failure. Comments cite the
// SPEC.md rule (or docs/decisions.md entry) each branch implements.
#include "gpu/gpu_pool.h"

#include <algorithm>
#include <cstring>
#include <variant>

#include "core/checked.h"
#include "gpu/device_io.h"
#include "gpu/fault_layout.h"

namespace kvtwin::gpu {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

constexpr int kIdSlots = 4;

// An outcome as an operation's result.
template <class T>
OpResult ok(T outcome) {
  return OpResult(Outcome(std::move(outcome)));
}

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
Error out_of_range(std::string message) { return make_error(ErrorKind::out_of_range, std::move(message)); }

}  // namespace

GpuPool::GpuPool(Faults faults) : faults_(faults) {}

GpuPool::~GpuPool() {
  graphs_.clear();
  batches_.clear();
  if (stream_ != nullptr) KVTWIN_CUDA_WARN(cudaStreamDestroy(stream_));
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

Result<std::int64_t*> GpuPool::upload_ids(const std::vector<std::int64_t>& values, int slot) {
  return ::kvtwin::gpu::upload_ids(ids_[static_cast<std::size_t>(slot)], values, stream_);
}

Result<std::vector<std::int64_t>> GpuPool::download_ids(const std::int64_t* device, std::int64_t n) const {
  return ::kvtwin::gpu::download_ids(device, n, stream_);
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
            KVTWIN_TRY_STATUS(readers_.end(o));
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
            KVTWIN_TRY_STATUS(doors_.write(o, batches_, allocator_, bytes_, f, stream_));
            return ok(Done{});
          },
          [&](const Read& o) -> OpResult {
            KVTWIN_TRY(std::vector<std::uint8_t> rows, doors_.read(o, allocator_, bytes_, f, stream_));
            return ok(Bytes::of(std::move(rows)));
          },
          [&](const Translate& o) { return translate(o); },
          [&](const SwaTranslate& o) { return swa_translate(o); },
          [&](const PageTable& o) { return page_table(o); },
          [&](const RemapIndices& o) { return remap_indices(o); },
          [&](const Capture& o) { return capture(o); },
          [&](const Replay& o) { return replay(o); },
          [&](const Checkpoint&) { return ok(Done{}); },
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
  allocator_.reset();
  bytes_.reset();
  built_ = false;
  if (stream_ == nullptr) KVTWIN_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  config_ = op.config;
  derived_ = std::move(derived).value();
  KVTWIN_TRY_STATUS(bytes_.init(config_, derived_, stream_));
  KVTWIN_TRY_STATUS(allocator_.init(config_, derived_, stream_));
  KVTWIN_TRY_STATUS(doors_.init(config_, derived_));
  ids_.resize(kIdSlots);
  KVTWIN_CUDA_TRY(cudaStreamSynchronize(stream_));
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
  if (k > static_cast<std::uint64_t>(allocator_.owner().queue_count()) || !allocator_.fits(static_cast<std::int64_t>(k)))
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
  if (faults_.alloc_many_partial) {
    // Fault 14: one request at a time, leaving earlier grants behind when a later one fails.
    for (std::uint64_t tokens : op.tokens) {
      const std::uint64_t k = tokens / ps;
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
  if (total > free_ids || !allocator_.fits(static_cast<std::int64_t>(total))) return ok(NoRoom{});
  for (std::uint64_t tokens : op.tokens) {
    std::vector<std::int64_t> pages;
    if (tokens / ps > 0) {
      KVTWIN_TRY(pages, allocator_.alloc(static_cast<std::int64_t>(tokens / ps), stream_));
    }
    out.pages.push_back(std::move(pages));
  }
  return ok(std::move(out));
}

OpResult GpuPool::commit_checked(const DeviceAllocator::FreePlan& plan) {
  // SPEC 7: no compaction moves a page a reader holds; checked before anything changes.
  for (const DeviceAllocator::SideCompaction& c : plan.compactions)
    KVTWIN_TRY_STATUS(readers_.check_moves(c.side, allocator_.side_name(c.side), c.sources, c.destinations, faults_));
  KVTWIN_TRY(Compaction out, allocator_.commit(plan, bytes_, faults_, stream_));
  return ok(std::move(out));
}

OpResult GpuPool::free_pages(const Free& op) {
  KVTWIN_TRY(std::vector<std::int64_t> vpages, allocator_.virtual_pages_of(op.unit, op.ids, "free"));
  KVTWIN_TRY(DeviceAllocator::FreePlan plan, allocator_.plan_free(vpages, faults_, stream_));
  return commit_checked(plan);
}

OpResult GpuPool::free_swa(const FreeSwa& op) {
  if (!allocator_.is_composite())
    return invalid("free_swa: this pool has no sliding-window side (model '" + config_.shape.name +
                   "'); free_swa needs a model with full and sliding-window layers");
  KVTWIN_TRY(std::vector<std::int64_t> vpages, allocator_.virtual_pages_of(op.unit, op.ids, "free_swa"));
  KVTWIN_TRY(DeviceAllocator::FreePlan plan, allocator_.plan_free_swa(vpages, faults_, stream_));
  return commit_checked(plan);
}

OpResult GpuPool::flush(const Flush&) {
  KVTWIN_TRY(DeviceAllocator::FreePlan plan, allocator_.plan_flush(faults_, stream_));
  return commit_checked(plan);
}

OpResult GpuPool::move_pages(const MovePages& op) {
  KVTWIN_TRY(std::size_t index, side_named(op.sub_pool, "move_pages"));
  KVTWIN_TRY(DeviceAllocator::RawMove move, allocator_.plan_raw_move(index, op, stream_));
  if (move.pages == 0) return ok(Done{});
  KVTWIN_TRY_STATUS(readers_.check_moves(index, allocator_.side_name(index), op.src, op.dst, faults_));
  // Raw copies, no table change.
  KVTWIN_TRY_STATUS(bytes_.move_pages(index, move.sources, move.destinations, move.pages, faults_, stream_));
  KVTWIN_CUDA_TRY(cudaStreamSynchronize(stream_));
  return ok(Done{});
}

OpResult GpuPool::begin_read(const BeginRead& op) {
  KVTWIN_TRY_STATUS(readers_.require_new(op));
  KVTWIN_TRY(std::size_t index, side_named(op.sub_pool, "begin_read"));
  KVTWIN_TRY_STATUS(readers_.begin(op, index, allocator_.side(index).num_pages()));
  return ok(Done{});
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
    KVTWIN_TRY(out_dev, ::kvtwin::gpu::device_copy(std::vector<std::int64_t>(out_storage, kPoison64), stream_));
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
  p.v2p = allocator_.side(0).v2p();
  p.v2p_len = allocator_.side(0).v2p_len();
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
  if (!allocator_.is_composite())
    return invalid("swa_translate: this pool has no sliding-window side (model '" + config_.shape.name + "')");
  const std::int64_t n = static_cast<std::int64_t>(op.ids.size());
  if (n == 0) return ok(Ids{});
  KVTWIN_TRY(std::int64_t * in, upload_ids(op.ids, 0));
  KVTWIN_TRY_STATUS(ids_[1].reserve(static_cast<std::size_t>(n)));
  SwaTranslateParams p;
  p.in = in;
  p.out = ids_[1].get();
  p.n = n;
  p.full_p2v = allocator_.side(0).p2v();
  p.full_p2v_len = allocator_.side(0).p2v_len();
  p.swa_v2p = allocator_.side(1).v2p();
  p.swa_v2p_len = allocator_.side(1).v2p_len();
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
  p.v2p = allocator_.side(0).v2p();
  p.v2p_len = allocator_.side(0).v2p_len();
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
  p.v2p = allocator_.side(0).v2p();
  p.v2p_len = allocator_.side(0).v2p_len();
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
  view.pool = bytes_.data();
  view.pool_bytes = bytes_.size_bytes();
  view.full = &allocator_.side(0);
  view.swa = allocator_.is_composite() ? &allocator_.side(1) : nullptr;
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
  return allocator_.tables(stream_);
}

Result<std::uint64_t> GpuPool::tables_digest() const {
  KVTWIN_TRY_STATUS(require_pool());
  return allocator_.tables_digest(stream_);
}

Status GpuPool::verify() const {
  if (!built_) return ok_status();  // nothing built, nothing to break (as the model's verify)
  if (!config_.tables_only && bytes_.size_bytes() != config_.total_bytes)
    return make_error(ErrorKind::internal, "gpu invariant broken: the pool buffer holds " +
                                               std::to_string(bytes_.size_bytes()) + " bytes, not total_bytes " +
                                               std::to_string(config_.total_bytes));
  return allocator_.verify(stream_);
}

Result<std::vector<std::uint8_t>> GpuPool::raw_bytes(std::uint64_t offset, std::uint64_t length) const {
  KVTWIN_TRY_STATUS(require_pool());
  if (config_.tables_only)
    return make_error(ErrorKind::unsupported, "raw_bytes: this pool is tables-only and holds no bytes");
  if (offset > config_.total_bytes || length > config_.total_bytes - offset)
    return out_of_range("raw_bytes: [" + std::to_string(offset) + ", +" + std::to_string(length) +
                        ") is outside the pool's " + std::to_string(config_.total_bytes) + " bytes");
  return bytes_.download(offset, length, stream_);
}

}  // namespace kvtwin::gpu
