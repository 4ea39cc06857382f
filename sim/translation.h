// Translation (SPEC.md section 5, and 4.3 for the SWA loc): virtual token ids to physical token
// ids through a side's v2p, the block table for attention, the in-place index remap, and the
// `translate` operation over int32/int64, one- or two-dimensional, strided input buffers with a
// fresh, aliasing or strided int64 output.
//
// How it works: plain functions over the tables (no state). The `translate` operation is
// simulated on real storage: the input buffer is laid out with its dtype and strides, the gaps
// between elements hold a poison value, the output is written element by element into its own
// buffer (or the input's, when it aliases), and the gaps are checked untouched afterwards. That
// is the shape of the kernel the GPU side must match; the model's answer is the logical values.
//
// What it does not cover: argument errors are values returned here (invalid_argument,
// out_of_range); tables are trusted (the allocator keeps them consistent).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/op.h"
#include "core/result.h"

namespace kvtwin::sim {

// SPEC 5: t < 0 -> 0; t // ps >= len(v2p) -> 0; else max(v2p[t // ps] * ps + t % ps, 0). A
// tombstone (-1) gives a negative value, which goes to the sink. Inline: a rebind translates
// every lane of a batch with it.
inline std::int64_t translate_token(const std::vector<std::int64_t>& v2p, std::int64_t page_size, std::int64_t t) {
  if (t < 0) return 0;                                                      // SPEC 5: t < 0 -> 0
  const std::int64_t page = t / page_size;
  if (page >= static_cast<std::int64_t>(v2p.size())) return 0;             // t // ps >= len(v2p) -> 0
  return std::max<std::int64_t>(v2p[static_cast<std::size_t>(page)] * page_size + t % page_size, 0);  // a tombstone goes to the sink
}

// SPEC 5 page-table entry of a virtual token: max(v2p[t // ps], 0), with the same bounds as
// translate_token (a negative or out-of-table token gives the sink page).
std::int64_t translate_page_of_token(const std::vector<std::int64_t>& v2p, std::int64_t page_size, std::int64_t t);

// SPEC 4.3 SWA loc from a full physical id k: vpage = max(p2v_full[k // ps], 0),
// swa = max(swa_v2p[vpage] * ps + k % ps, 0). docs/decisions.md: k < 0 gives the sink (0); a
// full page outside p2v reads as the -1 sentinel, so vpage 0.
std::int64_t swa_token(const std::vector<std::int64_t>& full_p2v, const std::vector<std::int64_t>& swa_v2p,
                       std::int64_t page_size, std::int64_t k);

// The `translate` operation (SPEC 5). Errors: shapes, strides, dtypes, widths.
Result<std::vector<std::int64_t>> run_translate(const Translate& op, const std::vector<std::int64_t>& v2p,
                                                std::int64_t page_size);

// The `page_table` operation: out[b, c] = max(v2p[rt[req[b]][c * ps] // ps], 0) for
// c < ceil(seq_len[b] / ps); every other entry keeps `prior` (SPEC 5).
Result<Table> run_page_table(const PageTable& op, const std::vector<std::int64_t>& v2p, std::int64_t page_size);

// The `remap_indices` operation: kv_indices[i] = translate(kv_indices[i]) for
// i in [0, kv_indptr[bs]), the tail unchanged (SPEC 5).
Result<std::vector<std::int64_t>> run_remap_indices(const RemapIndices& op, const std::vector<std::int64_t>& v2p,
                                                    std::int64_t page_size);

// The most elements one translate buffer (input or output storage) may span.
inline constexpr std::uint64_t kMaxTranslateStorageElements = std::uint64_t{1} << 24;

}  // namespace kvtwin::sim
