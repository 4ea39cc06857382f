// The byte law (SPEC.md section 2): where every row of every token lives in a unified pool.
//
// One token slot's ENTRY holds every layer's rows of every part of its sub-pool:
//   MHA  [K_0 | V_0 | K_1 | V_1 | ... | pad]      E = align_up(L * (k_row + v_row), 32)
//   MLA  [KV_0 | KV_1 | ... | pad]                E = align_up(L * row, 32)
// and   byte(pt, part, l) = pt * E + part.offset + l * part.layer_stride.
// The physical token id is the kernel id; views over the pool are strided with the whole entry
// as the slot stride. The page-major law that came before is kept (PageMajorLaw) for migration
// checks and format tags.
//
// Everything here is pure arithmetic on descriptions; no bytes are touched.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/ids.h"
#include "core/result.h"

namespace kvtwin {

inline constexpr std::uint64_t kEntryAlignBytes = 32;
inline constexpr std::uint64_t kRowAlignBytes = 16;
// The most layers one part (and one model) may have. Real models have a few hundred at most; the
// bound keeps validation linear in something small and turns absurd inputs into errors.
inline constexpr std::uint32_t kMaxLayers = 4096;

// One row family inside an entry: layer l sits at offset_bytes + l * layer_stride_bytes.
struct DensePart {
  std::string name;                      // "k", "v" (MHA) or "kv" (MLA)
  std::uint64_t offset_bytes = 0;
  std::uint64_t layer_stride_bytes = 0;
  std::uint32_t layer_num = 0;
  std::vector<std::uint32_t> row_shape;  // (heads, head_dim)
  DType dtype = DType::bf16;

  // Unchecked products, safe on a part that validate() accepted (it checks them for overflow).
  std::uint64_t row_elements() const;
  std::uint64_t row_bytes() const { return row_elements() * dtype_size_bytes(dtype); }
  // The same, checked: an overflow is an error naming the part.
  Result<std::uint64_t> checked_row_bytes() const;
  std::uint32_t heads() const { return row_shape.empty() ? 0 : row_shape.front(); }
  std::uint32_t head_dim() const { return row_shape.empty() ? 0 : row_shape.back(); }
};

// An entry's byte map: its parts and the entry size, which is the slot stride of every view.
struct DenseEntryLayout {
  std::string sub_pool;  // named in every error
  std::vector<DensePart> parts;
  std::uint64_t entry_bytes = 0;

  // SPEC.md section 2 validation: every row, offset and layer stride a multiple of 16; the entry
  // a multiple of 32; no part outside the entry; no two parts overlapping; at most kMaxLayers
  // layers a part; no byte count that overflows 64 bits. Errors name the sub-pool, the part, the
  // numbers and the way out.
  Status validate() const;

  // The part called `name`; an unknown name is an error listing the known ones.
  Result<const DensePart*> part(std::string_view name) const;
  // Index of the part called `name` in `parts`, or nullopt.
  std::optional<std::size_t> part_index(std::string_view name) const;

  // Bytes of the entry that belong to no row (tail padding and gaps).
  std::uint64_t padding_bytes() const;
};

// byte(pt, part, l) = pt * E + part.offset + l * part.layer_stride, checked.
Result<std::uint64_t> row_byte_address(const DenseEntryLayout& layout, PhysicalTokenId pt,
                                       const DensePart& part, std::uint32_t layer);

// A strided tensor view over the pool's raw buffer, in elements of the part's dtype.
struct ViewDescriptor {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // elements
  std::int64_t storage_offset = 0;    // elements

  bool operator==(const ViewDescriptor&) const = default;
};

// Per-layer view of one part: shape (num_slots, heads, head_dim), strides (E/is, head_dim, 1),
// storage offset (offset + l*stride)/is.
Result<ViewDescriptor> per_layer_view(const DenseEntryLayout& layout, const DensePart& part, std::uint32_t layer,
                                      std::uint64_t num_slots);

// Paged view: (num_pages, page_size, heads, head_dim) with strides (ps*E/is, E/is, head_dim, 1).
// The in-page token stride is the whole entry, never heads*head_dim.
Result<ViewDescriptor> paged_view(const DenseEntryLayout& layout, const DensePart& part, std::uint32_t layer,
                                  std::uint64_t num_pages, std::uint64_t page_size);

// Byte address of element `index` (one index per dimension) of a view, for a part of itemsize is.
Result<std::uint64_t> view_element_byte(const ViewDescriptor& view, const std::vector<std::int64_t>& index,
                                        std::uint32_t itemsize);

// The law before token-major: a page held blocks_per_page uniform blocks of page_size rows,
// block b = 2l + side (MHA) or b = l (MLA). It needs equal K and V rows.
struct PageMajorLaw {
  std::uint64_t page_size = 0;
  std::uint64_t blocks_per_page = 0;  // 2L (MHA) or L (MLA)
  std::uint64_t row_bytes = 0;        // every block's row size
  bool is_mla = false;

  // From a token-major layout; an error when K and V rows differ, when the layout is not an MHA
  // (k, v) or MLA (kv) entry, or when the page would overflow 64 bits.
  static Result<PageMajorLaw> from_layout(const DenseEntryLayout& layout, std::uint64_t page_size);

  // The old kernel id: (pt // ps) * (ps * blocks_per_page) + pt % ps.
  Result<std::uint64_t> kernel_id(PhysicalTokenId pt) const;
  // Block index of (part, layer): 2l + side for MHA (side 0 = k, 1 = v), l for MLA.
  std::uint64_t block_index(std::size_t part_index, std::uint32_t layer) const;
  // Byte address of (pt, part, layer) under this law.
  Result<std::uint64_t> row_byte_address(PhysicalTokenId pt, std::size_t part_index, std::uint32_t layer) const;
  // page_size * blocks_per_page * row_bytes; from_layout checked that it fits 64 bits.
  std::uint64_t page_bytes() const { return page_size * blocks_per_page * row_bytes; }
};

// One token-major page envelope (`page`, page_size entries) in PageMajorLaw's page-local byte
// order, as an older page-major build would have stored it: the storage tier's migration
// reproducers (SPEC 10.16). Bytes past the page-major page stay zero. An error when the layout has
// no page-major form.
Result<std::vector<std::uint8_t>> page_major_page(const DenseEntryLayout& layout, std::uint64_t page_size,
                                                 std::span<const std::uint8_t> page);

// Stored-page format tags (SPEC.md section 8): a page written under one law must miss under the other.
inline constexpr std::string_view kTokenMajorFormatTag = "tm1";
inline constexpr std::string_view kPageMajorFormatTag = "pm1";

}  // namespace kvtwin
