// Translation (SPEC.md section 5). See translation.h.
#include "sim/translation.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/checked.h"

namespace kvtwin::sim {
namespace {

Error bad(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

std::string num(std::int64_t v) { return std::to_string(v); }
std::string num(std::uint64_t v) { return std::to_string(v); }

// Storage cells no element of a buffer uses hold these, and must still hold them afterwards.
constexpr std::int64_t kGapPoison64 = 0x5a5a5a5a5a5a5a5aLL;
constexpr std::int32_t kGapPoison32 = 0x5a5a5a5a;
// Lanes past N of an aliased capture-stable buffer hold ids of an earlier, larger batch.
constexpr std::int64_t kStaleLaneId = 0x7e57ab1e;

// Where element i of a buffer lives: 1-D lane i at i * stride; 2-D (r, c) at r * stride + c.
struct BufferShape {
  bool two_dim = false;
  std::uint64_t lanes = 0;  // 1-D: lanes; 2-D: rows
  std::uint64_t cols = 1;   // 2-D only
  std::uint64_t stride = 1;
  std::uint64_t elements() const { return lanes * cols; }
  std::uint64_t storage() const { return lanes == 0 || cols == 0 ? 0 : (lanes - 1) * stride + cols; }
  std::uint64_t at(std::uint64_t i) const { return two_dim ? (i / cols) * stride + i % cols : i * stride; }
};

// Resolves a stride field (0: contiguous) into a BufferShape, or an error naming the field.
Result<BufferShape> buffer_shape(bool two_dim, std::uint64_t lanes, std::uint64_t cols, std::int64_t stride,
                                 const char* field) {
  BufferShape b{two_dim, lanes, two_dim ? cols : 1, 1};
  const std::uint64_t contiguous = two_dim ? cols : 1;
  if (stride < 0) return bad(std::string(field) + " = " + num(stride) + " is negative; strides are 0 (contiguous) or more");
  b.stride = stride == 0 ? contiguous : static_cast<std::uint64_t>(stride);
  if (b.stride < contiguous)
    return bad(std::string(field) + " = " + num(stride) + " is smaller than a row of " + num(cols) +
               " elements, so rows would overlap; use at least " + num(cols));
  // The stride is bounded first, so the storage size below cannot wrap: lanes and cols are at
  // most the ids given, or a width already bounded by the same limit.
  if (b.stride > kMaxTranslateStorageElements || b.storage() > kMaxTranslateStorageElements)
    return bad(std::string(field) + " = " + num(stride) + " makes a buffer of more than " +
               num(kMaxTranslateStorageElements) + " elements; use a smaller stride");
  return b;
}

}  // namespace

std::int64_t translate_page_of_token(const std::vector<std::int64_t>& v2p, std::int64_t page_size, std::int64_t t) {
  if (t < 0) return 0;
  const std::int64_t page = t / page_size;
  if (page >= static_cast<std::int64_t>(v2p.size())) return 0;
  return std::max<std::int64_t>(v2p[page], 0);  // SPEC 5: max(v2p[t // ps], 0)
}

std::int64_t swa_token(const std::vector<std::int64_t>& full_p2v, const std::vector<std::int64_t>& swa_v2p,
                       std::int64_t page_size, std::int64_t k) {
  if (k < 0) return 0;  // docs/decisions.md: a negative full id goes to the sink
  const std::int64_t full_page = k / page_size;
  // A page outside p2v reads as the -1 sentinel (docs/decisions.md).
  const std::int64_t owner = full_page < static_cast<std::int64_t>(full_p2v.size()) ? full_p2v[full_page] : -1;
  const std::int64_t vpage = std::max<std::int64_t>(owner, 0);                         // SPEC 4.3
  return std::max<std::int64_t>(swa_v2p[vpage] * page_size + k % page_size, 0);  // a tombstone goes to the sink
}

Result<std::vector<std::int64_t>> run_translate(const Translate& op, const std::vector<std::int64_t>& v2p,
                                                std::int64_t page_size) {
  // ---- validate (SPEC 5: int32 or int64 input, 1-D or 2-D, strided; int64 output of the same shape)
  if (op.shape.size() != 1 && op.shape.size() != 2)
    return bad("translate shape has " + num(std::uint64_t{op.shape.size()}) +
               " dimensions; give [n] or [rows, cols]");
  for (std::int64_t d : op.shape)
    if (d < 0) return bad("translate shape has a negative dimension " + num(d));
  const bool two_dim = op.shape.size() == 2;
  const auto lanes = static_cast<std::uint64_t>(op.shape[0]);
  const auto cols = two_dim ? static_cast<std::uint64_t>(op.shape[1]) : std::uint64_t{1};
  std::uint64_t count = 0;
  if (__builtin_mul_overflow(lanes, cols, &count))
    return bad("translate shape [" + num(lanes) + ", " + num(cols) + "] holds more ids than 64 bits count; make the "
               "shape match the ids");
  if (count != op.ids.size())
    return bad("translate shape holds " + num(count) + " ids but " + num(std::uint64_t{op.ids.size()}) +
               " were given; make the shape match the ids");
  if (op.index_dtype == IndexDtype::int32)
    for (std::size_t i = 0; i < op.ids.size(); ++i)
      if (op.ids[i] < std::numeric_limits<std::int32_t>::min() || op.ids[i] > std::numeric_limits<std::int32_t>::max())
        return bad("id " + num(op.ids[i]) + " at position " + num(std::uint64_t{i}) +
                   " does not fit an int32 input; use index_dtype int64");
  if (op.out_dtype != IndexDtype::int64)
    return bad("translate writes int64 physical ids; give an int64 output (out_dtype int64)");
  if (op.out_width != 0 && two_dim)
    return bad("out_width applies to one-dimensional ids only; drop it or flatten the ids");
  if (op.out_width != 0 && op.out_width < lanes)
    return bad("out_width " + num(op.out_width) + " is smaller than the " + num(lanes) +
               " ids; give a width of at least " + num(lanes));
  if (op.out_width > kMaxTranslateStorageElements)
    return bad("out_width " + num(op.out_width) + " exceeds " + num(kMaxTranslateStorageElements) + " lanes");
  // SPEC 5: with out_width W >= N the output has W lanes, lanes N .. W-1 zero-filled.
  const std::uint64_t out_lanes = op.out_width != 0 ? op.out_width : lanes;
  const bool alias = op.out == OutPlacement::alias;
  if (alias && op.index_dtype != IndexDtype::int64)
    return bad("an int64 output cannot alias an int32 input; use out fresh or strided, or an int64 input");
  if (op.out == OutPlacement::fresh && op.out_stride != 0)
    return bad("out_stride applies to a strided output; use out \"strided\" or drop out_stride");
  // An aliasing output is the input buffer itself: out_width lanes of it, with the input's strides.
  KVTWIN_TRY(BufferShape in, buffer_shape(two_dim, alias ? out_lanes : lanes, cols, op.input_stride, "input_stride"));
  if (alias && op.out_stride != 0 && static_cast<std::uint64_t>(op.out_stride) != in.stride)
    return bad("an aliasing output has the input's stride " + num(in.stride) + ", not out_stride " +
               num(op.out_stride) + "; drop out_stride");
  KVTWIN_TRY(BufferShape out, buffer_shape(two_dim, out_lanes, cols, alias ? op.input_stride : op.out_stride,
                                           alias ? "input_stride" : "out_stride"));

  // ---- lay the input out in its storage, gaps poisoned
  std::vector<std::int64_t> storage64;
  std::vector<std::int32_t> storage32;
  if (op.index_dtype == IndexDtype::int64) {
    storage64.assign(in.storage(), kGapPoison64);
    for (std::uint64_t i = 0; i < in.elements(); ++i) storage64[in.at(i)] = i < count ? op.ids[i] : kStaleLaneId;
  } else {
    storage32.assign(in.storage(), kGapPoison32);
    for (std::uint64_t i = 0; i < count; ++i) storage32[in.at(i)] = static_cast<std::int32_t>(op.ids[i]);
  }
  const std::vector<std::int64_t> input64_before = storage64;
  const std::vector<std::int32_t> input32_before = storage32;
  std::vector<std::int64_t> fresh_out;
  if (!alias) fresh_out.assign(out.storage(), kGapPoison64);
  std::vector<std::int64_t>& out_storage = alias ? storage64 : fresh_out;

  // ---- the kernel: element i reads its id, translates it, writes it; lanes past N get the sink
  for (std::uint64_t i = 0; i < out.elements(); ++i) {
    std::int64_t value = 0;
    if (i < count) {
      const std::int64_t id = op.index_dtype == IndexDtype::int64 ? storage64[in.at(i)]
                                                                  : std::int64_t{storage32[in.at(i)]};
      value = translate_token(v2p, page_size, id);
    }
    out_storage[out.at(i)] = value;
  }

  // ---- every storage cell no output element owns is untouched
  std::vector<bool> owned(out.storage(), false);
  for (std::uint64_t i = 0; i < out.elements(); ++i) owned[out.at(i)] = true;
  for (std::uint64_t c = 0; c < out.storage(); ++c)
    if (!owned[c]) {
      const std::int64_t before = alias ? input64_before[c] : kGapPoison64;
      KVTWIN_CHECK(out_storage[c] == before, "translate wrote only its output elements");
    }
  if (!alias) KVTWIN_CHECK(storage64 == input64_before && storage32 == input32_before, "translate left its input as it was");

  std::vector<std::int64_t> values(out.elements());
  for (std::uint64_t i = 0; i < out.elements(); ++i) values[i] = out_storage[out.at(i)];
  return values;
}

Result<Table> run_page_table(const PageTable& op, const std::vector<std::int64_t>& v2p, std::int64_t page_size) {
  const std::size_t bs = op.req.size();
  if (op.seq_len.size() != bs || op.prior.size() != bs)
    return bad("page_table has " + num(std::uint64_t{bs}) + " request rows but " +
               num(std::uint64_t{op.seq_len.size()}) + " seq_len and " + num(std::uint64_t{op.prior.size()}) +
               " prior rows; give one of each per batch row");
  for (std::size_t b = 0; b < bs; ++b) {
    const std::string row = "page_table row " + num(std::uint64_t{b});
    if (op.req[b] < 0 || static_cast<std::uint64_t>(op.req[b]) >= op.req_to_token.size())
      return make_error(ErrorKind::out_of_range, row + ": request slot " + num(op.req[b]) + " is outside req_to_token (" +
                                                     num(std::uint64_t{op.req_to_token.size()}) + " slots)");
    if (op.seq_len[b] < 0) return bad(row + ": seq_len " + num(op.seq_len[b]) + " is negative");
    const std::uint64_t pages = ceil_div(static_cast<std::uint64_t>(op.seq_len[b]), static_cast<std::uint64_t>(page_size));
    if (pages > op.prior[b].size())
      return make_error(ErrorKind::out_of_range, row + ": " + num(op.seq_len[b]) + " tokens need " + num(pages) +
                                                     " columns but the table has " +
                                                     num(std::uint64_t{op.prior[b].size()}) + "; widen the table");
    const auto& tokens = op.req_to_token[static_cast<std::size_t>(op.req[b])];
    if (pages > 0 && (pages - 1) * static_cast<std::uint64_t>(page_size) >= tokens.size())
      return make_error(ErrorKind::out_of_range, row + ": request slot " + num(op.req[b]) + " holds " +
                                                     num(std::uint64_t{tokens.size()}) + " tokens, fewer than seq_len " +
                                                     num(op.seq_len[b]) + " needs");
  }
  Table table{op.prior};
  for (std::size_t b = 0; b < bs; ++b) {
    const auto& tokens = op.req_to_token[static_cast<std::size_t>(op.req[b])];
    const std::uint64_t pages = ceil_div(static_cast<std::uint64_t>(op.seq_len[b]), static_cast<std::uint64_t>(page_size));
    // SPEC 5: out[b, c] = max(v2p[rt[req[b], c * ps] // ps], 0) for c < ceil(seq_len[b] / ps);
    // entries past the live prefix are left as they were.
    for (std::uint64_t c = 0; c < pages; ++c)
      table.rows[b][c] = translate_page_of_token(v2p, page_size, tokens[c * static_cast<std::uint64_t>(page_size)]);
  }
  return table;
}

Result<std::vector<std::int64_t>> run_remap_indices(const RemapIndices& op, const std::vector<std::int64_t>& v2p,
                                                    std::int64_t page_size) {
  if (op.bs >= op.kv_indptr.size())
    return bad("remap_indices: bs " + num(op.bs) + " needs kv_indptr of at least " + num(op.bs + 1) +
               " entries, got " + num(std::uint64_t{op.kv_indptr.size()}));
  for (std::uint64_t b = 0; b <= op.bs; ++b) {
    if (op.kv_indptr[b] < 0 || (b > 0 && op.kv_indptr[b] < op.kv_indptr[b - 1]))
      return bad("remap_indices: kv_indptr must be non-negative and non-decreasing over [0, bs]; entry " + num(b) +
                 " is " + num(op.kv_indptr[b]));
  }
  const auto end = static_cast<std::uint64_t>(op.kv_indptr[op.bs]);
  if (end > op.kv_indices.size())
    return make_error(ErrorKind::out_of_range, "remap_indices: kv_indptr[bs] = " + num(end) +
                                                   " is past the kv_indices buffer of " +
                                                   num(std::uint64_t{op.kv_indices.size()}) + "; give a longer buffer");
  std::vector<std::int64_t> indices = op.kv_indices;
  // SPEC 5: remapped in place, bounded to [0, kv_indptr[bs]); the stale tail is never touched.
  for (std::uint64_t i = 0; i < end; ++i) indices[i] = translate_token(v2p, page_size, indices[i]);
  return indices;
}

}  // namespace kvtwin::sim
