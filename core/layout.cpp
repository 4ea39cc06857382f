// The byte law's arithmetic and validation (SPEC.md section 2).
#include "core/layout.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/checked.h"
#include "core/planted_sizing.h"
#include "core/printable.h"

namespace kvtwin {
namespace {

std::string where(const DenseEntryLayout& layout, const DensePart& part) {
  return "sub-pool '" + layout.sub_pool + "', part '" + part.name + "'";
}

Error layout_error(std::string message) { return make_error(ErrorKind::layout, std::move(message)); }

}  // namespace

std::uint64_t DensePart::row_elements() const {
  if (row_shape.empty()) return 0;
  std::uint64_t n = 1;
  for (std::uint32_t d : row_shape) n *= d;  // validate() checks this product for overflow
  return n;
}

Result<std::uint64_t> DensePart::checked_row_bytes() const {
  if (row_shape.empty()) return std::uint64_t{0};
  std::uint64_t n = 1;
  for (std::uint32_t d : row_shape) {
    auto next = checked_mul(n, d, "row of part '" + name + "'");
    if (!next.ok()) return next.error();
    n = *next;
  }
  return checked_mul(n, dtype_size_bytes(dtype), "row of part '" + name + "'");
}

Result<const DensePart*> DenseEntryLayout::part(std::string_view name) const {
  for (const DensePart& p : parts)
    if (p.name == name) return &p;
  std::string known;
  for (const DensePart& p : parts) known += (known.empty() ? "" : ", ") + p.name;
  return make_error(ErrorKind::invalid_argument, "sub-pool '" + sub_pool + "' has no part '" + printable(name) +
                                                     "'; known parts: " + known);
}

std::optional<std::size_t> DenseEntryLayout::part_index(std::string_view name) const {
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (parts[i].name == name) return i;
  return std::nullopt;
}

std::uint64_t DenseEntryLayout::padding_bytes() const {
  std::uint64_t used = 0;
  for (const DensePart& p : parts) used += p.row_bytes() * p.layer_num;
  return entry_bytes >= used ? entry_bytes - used : 0;
}

Status DenseEntryLayout::validate() const {
  if (parts.empty()) return layout_error("sub-pool '" + sub_pool + "' has no parts; a sub-pool needs at least one row family");
  if (entry_bytes == 0) return layout_error("sub-pool '" + sub_pool + "' has an entry of 0 bytes; give it at least one layer");
  if (entry_bytes % kEntryAlignBytes != 0)
    return layout_error("sub-pool '" + sub_pool + "': entry of " + std::to_string(entry_bytes) +
                        " bytes is not a multiple of " + std::to_string(kEntryAlignBytes) +
                        "; pad the entry up to " + std::to_string(ceil_div(entry_bytes, kEntryAlignBytes) * kEntryAlignBytes));

  // Each part's byte extent inside the entry: [first, last) over its layers.
  struct Extent {
    std::uint64_t begin, end;
    std::size_t part;
    std::uint32_t layer;
  };
  std::vector<Extent> extents;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const DensePart& p = parts[i];
    if (p.layer_num == 0) return layout_error(where(*this, p) + " has 0 layers; a part needs at least one layer");
    if (p.layer_num > kMaxLayers)
      return layout_error(where(*this, p) + " has " + std::to_string(p.layer_num) + " layers, more than the " +
                          std::to_string(kMaxLayers) + " kvtwin supports; check the layer count");
    auto checked_row = p.checked_row_bytes();
    if (!checked_row.ok()) return checked_row.error().with_context(where(*this, p) + ": ");
    if (*checked_row == 0)
      return layout_error(where(*this, p) + " has an empty row shape; give it (heads, head_dim) > 0");
    const std::uint64_t row = *checked_row;
    if (row % kRowAlignBytes != 0)
      return layout_error(where(*this, p) + ": row of " + std::to_string(row) + " bytes (" +
                          std::to_string(p.row_elements()) + " x " + std::to_string(dtype_size_bytes(p.dtype)) +
                          " bytes) is not a multiple of " + std::to_string(kRowAlignBytes) +
                          "; this model cannot use the unified pool at this tensor-parallel size "
                          "(choose a TP size or dtype that makes the per-rank row a multiple of 16 bytes)");
    if (p.offset_bytes % kRowAlignBytes != 0)
      return layout_error(where(*this, p) + ": offset " + std::to_string(p.offset_bytes) +
                          " is not a multiple of " + std::to_string(kRowAlignBytes) + "; align the part's offset");
    if (p.layer_stride_bytes % kRowAlignBytes != 0)
      return layout_error(where(*this, p) + ": layer stride " + std::to_string(p.layer_stride_bytes) +
                          " is not a multiple of " + std::to_string(kRowAlignBytes) + "; align the layer stride");
    if (p.layer_num > 1 && p.layer_stride_bytes < row)
      return layout_error(where(*this, p) + ": layer stride " + std::to_string(p.layer_stride_bytes) +
                          " is smaller than its row of " + std::to_string(row) +
                          " bytes, so its own layers overlap; make the stride at least the row");
    std::uint64_t last_begin = 0, end = 0;
    auto last = checked_mul_add(p.layer_stride_bytes, p.layer_num - 1, p.offset_bytes, "part extent");
    if (!last.ok()) return last.error().with_context(where(*this, p) + ": ");
    last_begin = *last;
    auto e = checked_add(last_begin, row, "part extent");
    if (!e.ok()) return e.error().with_context(where(*this, p) + ": ");
    end = *e;
    if (end > entry_bytes)
      return layout_error(where(*this, p) + ": its last layer ends at byte " + std::to_string(end) +
                          ", outside the entry of " + std::to_string(entry_bytes) +
                          " bytes; grow the entry or shrink the part");
    for (std::uint32_t l = 0; l < p.layer_num; ++l)
      extents.push_back({p.offset_bytes + std::uint64_t{l} * p.layer_stride_bytes,
                         p.offset_bytes + std::uint64_t{l} * p.layer_stride_bytes + row, i, l});
    for (std::size_t j = 0; j < i; ++j)
      if (parts[j].name == p.name)
        return layout_error("sub-pool '" + sub_pool + "' has two parts named '" + p.name + "'; rename one");
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.part < b.part;
  });
  for (std::size_t i = 1; i < extents.size(); ++i) {
    const Extent& a = extents[i - 1];
    const Extent& b = extents[i];
    if (b.begin < a.end)
      return layout_error("sub-pool '" + sub_pool + "': part '" + parts[a.part].name + "' layer " +
                          std::to_string(a.layer) + " [" + std::to_string(a.begin) + ", " + std::to_string(a.end) +
                          ") overlaps part '" + parts[b.part].name + "' layer " + std::to_string(b.layer) + " [" +
                          std::to_string(b.begin) + ", " + std::to_string(b.end) +
                          "); move the parts' offsets or strides apart");
  }
  return ok_status();
}

Result<std::uint64_t> row_byte_address(const DenseEntryLayout& layout, PhysicalTokenId pt, const DensePart& part,
                                       std::uint32_t layer) {
  if (pt.value < 0)
    return make_error(ErrorKind::out_of_range, "physical token id " + std::to_string(pt.value) + " is negative");
  if (layer >= part.layer_num)
    return make_error(ErrorKind::out_of_range, "layer " + std::to_string(layer) + " is outside part '" + part.name +
                                                   "' of sub-pool '" + layout.sub_pool + "' (" +
                                                   std::to_string(part.layer_num) + " layers)");
  KVTWIN_TRY(std::uint64_t token_base,
             checked_mul(static_cast<std::uint64_t>(pt.value), layout.entry_bytes, "row byte address"));
  KVTWIN_TRY(std::uint64_t in_entry,
             checked_mul_add(std::uint64_t{layer}, part.layer_stride_bytes, part.offset_bytes, "row byte address"));
  KVTWIN_TRY(std::uint64_t address, checked_add(token_base, in_entry, "row byte address"));
  // A planted self-test bug (core/planted_sizing.h): the address kept in 32 bits wraps past 4 GiB.
  if (planted_sizing_bug() == PlantedSizingBug::row_address_32bit) return std::uint64_t{static_cast<std::uint32_t>(address)};
  return address;
}

namespace {
Result<std::int64_t> to_elements(std::uint64_t bytes, std::uint32_t itemsize, std::string_view what) {
  if (bytes % itemsize != 0)
    return make_error(ErrorKind::layout, std::string(what) + " of " + std::to_string(bytes) +
                                             " bytes is not a whole number of " + std::to_string(itemsize) +
                                             "-byte elements");
  const std::uint64_t elems = bytes / itemsize;
  if (elems > kMaxSignedId)
    return make_error(ErrorKind::overflow, std::string(what) + " of " + std::to_string(elems) +
                                               " elements does not fit a signed 64-bit stride");
  return static_cast<std::int64_t>(elems);
}

Result<std::int64_t> to_signed(std::uint64_t v, std::string_view what) {
  if (v > kMaxSignedId)
    return make_error(ErrorKind::overflow, std::string(what) + " " + std::to_string(v) + " does not fit int64");
  return static_cast<std::int64_t>(v);
}
}  // namespace

Result<ViewDescriptor> per_layer_view(const DenseEntryLayout& layout, const DensePart& part, std::uint32_t layer,
                                      std::uint64_t num_slots) {
  if (layer >= part.layer_num)
    return make_error(ErrorKind::out_of_range, "layer " + std::to_string(layer) + " is outside part '" + part.name +
                                                   "' (" + std::to_string(part.layer_num) + " layers)");
  const std::uint32_t is = dtype_size_bytes(part.dtype);
  KVTWIN_TRY(std::int64_t slot_stride, to_elements(layout.entry_bytes, is, "entry"));
  KVTWIN_TRY(std::uint64_t offset_bytes,
             checked_mul_add(std::uint64_t{layer}, part.layer_stride_bytes, part.offset_bytes, "view offset"));
  KVTWIN_TRY(std::int64_t offset, to_elements(offset_bytes, is, "view offset"));
  KVTWIN_TRY(std::int64_t slots, to_signed(num_slots, "slot count"));
  ViewDescriptor v;
  v.shape = {slots, static_cast<std::int64_t>(part.heads()), static_cast<std::int64_t>(part.head_dim())};
  v.strides = {slot_stride, static_cast<std::int64_t>(part.head_dim()), 1};
  v.storage_offset = offset;
  return v;
}

Result<ViewDescriptor> paged_view(const DenseEntryLayout& layout, const DensePart& part, std::uint32_t layer,
                                  std::uint64_t num_pages, std::uint64_t page_size) {
  if (page_size == 0) return make_error(ErrorKind::invalid_argument, "page size is 0; use a page size of at least 1");
  KVTWIN_TRY(ViewDescriptor flat, per_layer_view(layout, part, layer, 0));
  KVTWIN_TRY(std::uint64_t page_stride,
             checked_mul(page_size, static_cast<std::uint64_t>(flat.strides[0]), "paged view page stride"));
  KVTWIN_TRY(std::int64_t page_stride_signed, to_signed(page_stride, "paged view page stride"));
  KVTWIN_TRY(std::int64_t pages, to_signed(num_pages, "page count"));
  KVTWIN_TRY(std::int64_t ps, to_signed(page_size, "page size"));
  ViewDescriptor v;
  v.shape = {pages, ps, flat.shape[1], flat.shape[2]};
  v.strides = {page_stride_signed, flat.strides[0], flat.strides[1], flat.strides[2]};
  v.storage_offset = flat.storage_offset;
  return v;
}

Result<std::uint64_t> view_element_byte(const ViewDescriptor& view, const std::vector<std::int64_t>& index,
                                        std::uint32_t itemsize) {
  if (index.size() != view.shape.size())
    return make_error(ErrorKind::invalid_argument, "index has " + std::to_string(index.size()) +
                                                       " dimensions, the view " + std::to_string(view.shape.size()));
  std::uint64_t element = static_cast<std::uint64_t>(view.storage_offset);
  for (std::size_t d = 0; d < index.size(); ++d) {
    if (index[d] < 0 || index[d] >= view.shape[d])
      return make_error(ErrorKind::out_of_range, "index " + std::to_string(index[d]) + " outside dimension " +
                                                     std::to_string(d) + " of size " + std::to_string(view.shape[d]));
    KVTWIN_TRY(element, checked_mul_add(static_cast<std::uint64_t>(index[d]),
                                        static_cast<std::uint64_t>(view.strides[d]), element, "view element"));
  }
  return checked_mul(element, itemsize, "view element byte");
}

Result<PageMajorLaw> PageMajorLaw::from_layout(const DenseEntryLayout& layout, std::uint64_t page_size) {
  if (page_size == 0) return make_error(ErrorKind::invalid_argument, "page size is 0; use a page size of at least 1");
  KVTWIN_TRY_STATUS(layout.validate());
  // Block b = 2l + side (MHA: parts k, v in that order) or b = l (MLA: one part kv).
  const bool is_mha = layout.parts.size() == 2 && layout.parts[0].name == "k" && layout.parts[1].name == "v";
  const bool is_mla = layout.parts.size() == 1 && layout.parts[0].name == "kv";
  if (!is_mha && !is_mla)
    return make_error(ErrorKind::layout, "sub-pool '" + layout.sub_pool +
                                             "': the page-major law knows MHA entries (parts k, v) and MLA entries "
                                             "(part kv) only");
  PageMajorLaw law;
  law.page_size = page_size;
  law.is_mla = is_mla;
  const DensePart& first = layout.parts.front();
  law.row_bytes = first.row_bytes();
  for (const DensePart& p : layout.parts) {
    if (p.row_bytes() != law.row_bytes)
      return make_error(ErrorKind::layout, "sub-pool '" + layout.sub_pool + "': the page-major law needs equal rows, but part '" +
                                               first.name + "' has " + std::to_string(law.row_bytes) + " bytes and '" +
                                               p.name + "' " + std::to_string(p.row_bytes()) +
                                               "; only the token-major law can hold unequal K and V rows");
    if (p.layer_num != first.layer_num)
      return make_error(ErrorKind::layout, "sub-pool '" + layout.sub_pool + "': parts have different layer counts");
  }
  law.blocks_per_page = std::uint64_t{first.layer_num} * layout.parts.size();
  KVTWIN_TRY(std::uint64_t block_bytes, checked_mul(page_size, law.row_bytes, "page-major block of '" + layout.sub_pool + "'"));
  KVTWIN_TRY(std::uint64_t page_bytes,
             checked_mul(block_bytes, law.blocks_per_page, "page-major page of '" + layout.sub_pool + "'"));
  (void)page_bytes;  // page_bytes() recomputes it; checked here once so that it cannot wrap there
  return law;
}

Result<std::uint64_t> PageMajorLaw::kernel_id(PhysicalTokenId pt) const {
  if (pt.value < 0) return make_error(ErrorKind::out_of_range, "negative physical token id");
  const std::uint64_t t = static_cast<std::uint64_t>(pt.value);
  KVTWIN_TRY(std::uint64_t page_rows, checked_mul(page_size, blocks_per_page, "page-major kernel id"));
  return checked_mul_add(t / page_size, page_rows, t % page_size, "page-major kernel id");
}

std::uint64_t PageMajorLaw::block_index(std::size_t part_index, std::uint32_t layer) const {
  return is_mla ? std::uint64_t{layer} : 2 * std::uint64_t{layer} + part_index;
}

Result<std::uint64_t> PageMajorLaw::row_byte_address(PhysicalTokenId pt, std::size_t part_index,
                                                     std::uint32_t layer) const {
  // Layer l's view starts at byte b * ps * row and is indexed by the kernel id.
  KVTWIN_TRY(std::uint64_t kid, kernel_id(pt));
  if (part_index >= (is_mla ? 1u : 2u) || block_index(part_index, layer) >= blocks_per_page)
    return make_error(ErrorKind::out_of_range, "part " + std::to_string(part_index) + " layer " + std::to_string(layer) +
                                                   " is outside the page-major law's " +
                                                   std::to_string(blocks_per_page) + " blocks");
  KVTWIN_TRY(std::uint64_t block_bytes, checked_mul(page_size, row_bytes, "page-major block"));
  KVTWIN_TRY(std::uint64_t view_start, checked_mul(block_index(part_index, layer), block_bytes, "page-major view start"));
  return checked_mul_add(kid, row_bytes, view_start, "page-major row address");
}

Result<std::vector<std::uint8_t>> page_major_page(const DenseEntryLayout& layout, std::uint64_t page_size,
                                                 std::span<const std::uint8_t> page) {
  KVTWIN_TRY(const PageMajorLaw law, PageMajorLaw::from_layout(layout, page_size));
  std::vector<std::uint8_t> out(page.size(), 0);
  for (std::uint64_t t = 0; t < page_size; ++t)
    for (std::size_t p = 0; p < layout.parts.size(); ++p) {
      const DensePart& part = layout.parts[p];
      for (std::uint32_t l = 0; l < part.layer_num; ++l) {
        const std::uint64_t from = t * layout.entry_bytes + part.offset_bytes + std::uint64_t{l} * part.layer_stride_bytes;
        KVTWIN_TRY(const std::uint64_t to, law.row_byte_address(PhysicalTokenId{static_cast<std::int64_t>(t)}, p, l));
        if (to + part.row_bytes() > out.size() || from + part.row_bytes() > page.size())
          return make_error(ErrorKind::internal, "a page-major row falls outside the page envelope");
        std::memcpy(out.data() + to, page.data() + from, part.row_bytes());
      }
    }
  return out;
}

}  // namespace kvtwin
