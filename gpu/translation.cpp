// Translation on the device (translation.h). Comments cite the SPEC.md rule each branch implements.
#include "gpu/translation.h"

#include <algorithm>
#include <cstring>

#include "core/checked.h"
#include "gpu/device_io.h"
#include "gpu/kernels.cuh"

namespace kvtwin::gpu {
namespace {
Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
Error out_of_range(std::string message) { return make_error(ErrorKind::out_of_range, std::move(message)); }
}  // namespace

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

Result<std::vector<std::int64_t>> Translation::translate(const Translate& op, const DeviceAllocator& allocator,
                                                          const Faults& faults, cudaStream_t stream) {
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
  if (out.elements() == 0) return std::vector<std::int64_t>{};

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
  KVTWIN_TRY_STATUS(translate_input_.reserve(in_host.size()));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(translate_input_.get(), in_host.data(), in_host.size(), cudaMemcpyHostToDevice, stream));
  std::int64_t* out_ptr = reinterpret_cast<std::int64_t*>(translate_input_.get());
  const std::uint64_t out_storage = std::max<std::uint64_t>(out.storage(), 1);
  if (!alias) {
    KVTWIN_TRY(out_ptr, upload_ids(translate_output_, std::vector<std::int64_t>(out_storage, kPoison64), stream));
  }
  // ---- one launch: element i reads its id, translates it, writes it; lanes past N get the sink.
  TranslateParams p;
  p.in = translate_input_.get();
  p.in_int32 = in32;
  p.rows = two_dim ? static_cast<std::int64_t>(lanes) : 1;
  p.cols = two_dim ? static_cast<std::int64_t>(cols) : static_cast<std::int64_t>(lanes);
  p.in_row_stride = two_dim ? static_cast<std::int64_t>(in.stride) : 0;
  p.in_col_stride = two_dim ? 1 : static_cast<std::int64_t>(in.stride);
  p.out = out_ptr;
  p.out_row_stride = two_dim ? static_cast<std::int64_t>(out.stride) : 0;
  p.out_col_stride = two_dim ? 1 : static_cast<std::int64_t>(out.stride);
  p.out_cols = two_dim ? static_cast<std::int64_t>(cols) : static_cast<std::int64_t>(out_lanes);
  p.v2p = allocator.side(0).v2p();
  p.v2p_len = allocator.side(0).v2p_len();
  p.page_size = static_cast<std::int64_t>(config_->page_size);
  p.negative_wraps = faults.negative_wraps;
  p.tombstone_live = faults.tombstone_live;
  KVTWIN_CUDA_TRY(launch_translate(p, stream));
  KVTWIN_TRY(std::vector<std::int64_t> whole, download_ids(out_ptr, static_cast<std::int64_t>(out_storage), stream));
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
  return values;
}

Result<std::vector<std::int64_t>> Translation::swa_translate(const SwaTranslate& op, const DeviceAllocator& allocator,
                                                              const Faults& faults, cudaStream_t stream) {
  if (!allocator.is_composite())
    return invalid("swa_translate: this pool has no sliding-window side (model '" + config_->shape.name + "')");
  const std::int64_t n = static_cast<std::int64_t>(op.ids.size());
  if (n == 0) return std::vector<std::int64_t>{};
  KVTWIN_TRY(std::int64_t * in, upload_ids(swa_input_, op.ids, stream));
  KVTWIN_TRY_STATUS(swa_output_.reserve(static_cast<std::size_t>(n)));
  SwaTranslateParams p;
  p.in = in;
  p.out = swa_output_.get();
  p.n = n;
  p.full_p2v = allocator.side(0).p2v();
  p.full_p2v_len = allocator.side(0).p2v_len();
  p.swa_v2p = allocator.side(1).v2p();
  p.swa_v2p_len = allocator.side(1).v2p_len();
  p.page_size = static_cast<std::int64_t>(config_->page_size);
  p.tombstone_live = faults.tombstone_live;
  KVTWIN_CUDA_TRY(launch_swa_translate(p, stream));
  KVTWIN_TRY(std::vector<std::int64_t> values, download_ids(swa_output_.get(), n, stream));
  return values;
}

Result<Table> Translation::page_table(const PageTable& op, const DeviceAllocator& allocator, const Faults& faults,
                                       cudaStream_t stream) {
  const std::int64_t ps = static_cast<std::int64_t>(config_->page_size);
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
  if (bs == 0) return Table{};
  KVTWIN_TRY(std::int64_t * rt_dev, upload_ids(request_to_token_, rt, stream));
  KVTWIN_TRY(std::int64_t * req_dev, upload_ids(request_rows_, op.req, stream));
  KVTWIN_TRY(std::int64_t * len_dev, upload_ids(sequence_lengths_, op.seq_len, stream));
  KVTWIN_TRY(std::int64_t * table_dev, upload_ids(block_table_, table, stream));
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
  p.v2p = allocator.side(0).v2p();
  p.v2p_len = allocator.side(0).v2p_len();
  p.page_size = ps;
  p.tombstone_live = faults.page_table_tombstone_live;
  KVTWIN_CUDA_TRY(launch_page_table(p, stream));
  KVTWIN_TRY(std::vector<std::int64_t> whole, download_ids(table_dev, static_cast<std::int64_t>(table.size()), stream));
  Table out;
  for (std::size_t r = 0; r < bs; ++r) {
    const auto first = whole.begin() + static_cast<std::ptrdiff_t>(r) * table_cols;
    out.rows.emplace_back(first, first + static_cast<std::ptrdiff_t>(op.prior[r].size()));
  }
  return out;
}

Result<std::vector<std::int64_t>> Translation::remap_indices(const RemapIndices& op, const DeviceAllocator& allocator,
                                                              const Faults& faults, cudaStream_t stream) {
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
  if (capacity == 0) return std::vector<std::int64_t>{};
  KVTWIN_TRY(std::int64_t * indices, upload_ids(kv_indices_, op.kv_indices, stream));
  KVTWIN_TRY(std::int64_t * indptr, upload_ids(kv_indptr_, op.kv_indptr, stream));
  RemapParams p;
  p.in = indices;
  p.out = indices;  // SPEC 5: in place, in the capture-stable buffer the attention kernel reads
  if (faults.remap_fresh_buffer) {
    // Fault 7: the remap lands in a fresh buffer; the capture-stable one keeps its virtual ids.
    KVTWIN_TRY_STATUS(remap_fresh_output_.reserve(static_cast<std::size_t>(capacity)));
    p.out = remap_fresh_output_.get();
  }
  p.capacity = capacity;
  p.kv_indptr = indptr;
  p.kv_indptr_len = static_cast<std::int64_t>(op.kv_indptr.size());
  p.bs = static_cast<std::int64_t>(op.bs);
  p.stale_bound = faults.remap_stale_bound;
  p.v2p = allocator.side(0).v2p();
  p.v2p_len = allocator.side(0).v2p_len();
  p.page_size = static_cast<std::int64_t>(config_->page_size);
  KVTWIN_CUDA_TRY(launch_remap_indices(p, stream));
  KVTWIN_TRY(std::vector<std::int64_t> values, download_ids(indices, capacity, stream));
  return values;
}

}  // namespace kvtwin::gpu
