// The state entry law's arithmetic and validation (SPEC.md section 11). See state_layout.h.
#include "core/state_layout.h"

#include <algorithm>
#include <string>

#include "core/checked.h"
#include "core/planted_sizing.h"
#include "core/printable.h"

namespace kvtwin {
namespace {

// The most dimensions one state tensor may have ((channels, kernel - 1) or (heads, dk, dv) in
// real models); a bound that turns absurd input into an error.
constexpr std::size_t kMaxStateTensorDims = 4;

Error layout_error(std::string message) { return make_error(ErrorKind::layout, std::move(message)); }

std::string where(const StateEntryLayout& layout, const StateBlock& block) {
  return "sub-pool '" + layout.sub_pool + "', block '" + block.name + "'";
}

std::string shape_text(const std::vector<std::uint32_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + ")";
}

Result<std::uint64_t> checked_tensor_bytes(const StateTensor& t, const std::string& what) {
  std::uint64_t n = 1;
  for (std::uint32_t d : t.shape) {
    KVTWIN_TRY(n, checked_mul(n, d, what));
  }
  return checked_mul(n, dtype_size_bytes(t.dtype), what);
}

Status validate_tensor(const StateTensor& t, const std::string& what) {
  if (t.shape.empty() || t.shape.size() > kMaxStateTensorDims)
    return make_error(ErrorKind::invalid_argument, what + " has " + std::to_string(t.shape.size()) +
                                                       " dimensions; give 1 to " + std::to_string(kMaxStateTensorDims));
  for (std::uint32_t d : t.shape)
    if (d == 0) return make_error(ErrorKind::invalid_argument, what + " has shape " + shape_text(t.shape) +
                                                                   "; every dimension must be at least 1");
  auto bytes = checked_tensor_bytes(t, what);
  if (!bytes.ok()) return bytes.error();
  return ok_status();
}

Status validate_state_shape_as(const StateShape& s, const std::string& m);

}  // namespace

std::uint64_t StateTensor::elements() const {
  std::uint64_t n = 1;
  for (std::uint32_t d : shape) n *= d;  // state_entry_layout() checks this product for overflow
  return shape.empty() ? 0 : n;
}

Status validate_state_shape(const StateShape& s, std::string_view model) {
  return validate_state_shape_as(s, "model '" + std::string(model) + "' state");
}

namespace {
Status validate_state_shape_as(const StateShape& s, const std::string& m) {
  if (s.layers == 0) return make_error(ErrorKind::invalid_argument, m + " has 0 layers; give it at least one state layer");
  if (s.layers > kMaxLayers)
    return make_error(ErrorKind::invalid_argument, m + " has " + std::to_string(s.layers) + " layers, more than the " +
                                                       std::to_string(kMaxLayers) + " kvtwin supports");
  if (s.conv.size() > 8)
    return make_error(ErrorKind::invalid_argument, m + " has " + std::to_string(s.conv.size()) +
                                                       " conv states; kvtwin supports at most 8 per layer");
  for (std::size_t i = 0; i < s.conv.size(); ++i) {
    KVTWIN_TRY_STATUS(validate_tensor(s.conv[i], m + " conv_" + std::to_string(i)));
  }
  KVTWIN_TRY_STATUS(validate_tensor(s.temporal, m + " temporal"));
  return ok_status();
}
}  // namespace

Result<StateShape> state_shape_per_rank(const StateShape& shape, std::uint32_t tp, std::string_view model) {
  if (tp == 0) return make_error(ErrorKind::invalid_argument, "tensor-parallel size is 0; use --tp 1 or more");
  KVTWIN_TRY_STATUS(validate_state_shape(shape, model));
  StateShape out = shape;
  auto split = [&](StateTensor& t, const std::string& name) -> Status {
    if (t.shape.front() % tp != 0)
      return make_error(ErrorKind::invalid_argument,
                        "model '" + std::string(model) + "': state " + name + " of shape " + shape_text(t.shape) +
                            " does not split evenly over " + std::to_string(tp) +
                            " tensor-parallel ranks (its first dimension is split); use a TP size that divides " +
                            std::to_string(t.shape.front()));
    t.shape.front() /= tp;
    return ok_status();
  };
  for (std::size_t i = 0; i < out.conv.size(); ++i) KVTWIN_TRY_STATUS(split(out.conv[i], "conv_" + std::to_string(i)));
  KVTWIN_TRY_STATUS(split(out.temporal, "temporal"));
  return out;
}

Result<StateEntryLayout> state_entry_layout(const StateShape& shape, std::string sub_pool) {
  KVTWIN_TRY_STATUS(validate_state_shape_as(shape, "sub-pool '" + sub_pool + "'"));
  StateEntryLayout layout;
  layout.sub_pool = std::move(sub_pool);
  const std::string what = "state entry of sub-pool '" + layout.sub_pool + "'";
  // SPEC 11: [conv_0 of layers 0..L-1 | conv_1 of layers 0..L-1 | ... | temporal of layers 0..L-1].
  std::uint64_t offset = 0;
  auto add_block = [&](std::string name, const StateTensor& t) -> Status {
    KVTWIN_TRY(std::uint64_t bytes, checked_tensor_bytes(t, what));
    layout.blocks.push_back(StateBlock{std::move(name), offset, bytes, shape.layers, t.shape, t.dtype});
    KVTWIN_TRY(offset, checked_mul_add(bytes, shape.layers, offset, what));
    return ok_status();
  };
  for (std::size_t i = 0; i < shape.conv.size(); ++i) KVTWIN_TRY_STATUS(add_block("conv_" + std::to_string(i), shape.conv[i]));
  KVTWIN_TRY_STATUS(add_block("temporal", shape.temporal));
  // No 32-byte padding: the entry is exactly the blocks. A planted self-test bug
  // (core/planted_sizing.h, SPEC 10.23) pads it as a token entry.
  layout.entry_bytes = offset;
  if (planted_sizing_bug() == PlantedSizingBug::state_entry_padded) {
    KVTWIN_TRY(layout.entry_bytes, checked_align_up(offset, kEntryAlignBytes, what));
  }
  KVTWIN_TRY_STATUS(layout.validate());
  return layout;
}

Status StateEntryLayout::validate() const {
  if (blocks.empty()) return layout_error("sub-pool '" + sub_pool + "' has no state blocks; it needs a temporal block");
  if (entry_bytes == 0) return layout_error("sub-pool '" + sub_pool + "' has a state entry of 0 bytes");
  std::uint64_t expected_offset = 0;
  for (const StateBlock& b : blocks) {
    const std::uint64_t is = dtype_size_bytes(b.dtype);
    if (b.layer_num == 0) return layout_error(where(*this, b) + " has 0 layers");
    // The blocks tile the entry in order, with no gap: SPEC 11 adds no padding.
    if (b.offset_bytes != expected_offset)
      return layout_error(where(*this, b) + " starts at byte " + std::to_string(b.offset_bytes) + ", but the blocks " +
                          "before it end at byte " + std::to_string(expected_offset) +
                          "; state blocks follow each other with no gap or padding");
    // SPEC 11: each block's offset (the temporal block's above all) a multiple of its itemsize.
    if (b.offset_bytes % is != 0)
      return layout_error(where(*this, b) + ": offset " + std::to_string(b.offset_bytes) + " bytes is not a multiple of its " +
                          std::to_string(is) + "-byte " + std::string(dtype_name(b.dtype)) +
                          " elements, so its view cannot start there; change the conv shapes so that the blocks before "
                          "it end on a multiple of " + std::to_string(is) + " bytes");
    if (b.layer_stride_bytes % is != 0 || b.layer_stride_bytes == 0)
      return layout_error(where(*this, b) + ": a layer of " + std::to_string(b.layer_stride_bytes) +
                          " bytes is not a whole number of " + std::to_string(is) + "-byte elements");
    KVTWIN_TRY(expected_offset, checked_mul_add(b.layer_stride_bytes, b.layer_num, b.offset_bytes, "state entry"));
  }
  const bool padded = planted_sizing_bug() == PlantedSizingBug::state_entry_padded && entry_bytes > expected_offset;
  if (expected_offset != entry_bytes && !padded)
    return layout_error("sub-pool '" + sub_pool + "': its blocks end at byte " + std::to_string(expected_offset) +
                        " but the entry is " + std::to_string(entry_bytes) + " bytes; a state entry is exactly its blocks");
  // SPEC 11: the entry a multiple of every itemsize used, so that the slot stride is whole elements.
  for (const StateBlock& b : blocks) {
    const std::uint64_t is = dtype_size_bytes(b.dtype);
    if (entry_bytes % is != 0)
      return layout_error("sub-pool '" + sub_pool + "': state entry of " + std::to_string(entry_bytes) +
                          " bytes is not a multiple of block '" + b.name + "''s " + std::to_string(is) + "-byte " +
                          std::string(dtype_name(b.dtype)) + " elements, so its slot stride is not whole elements; "
                          "change the state shapes so that E_state is a multiple of " + std::to_string(is));
  }
  return ok_status();
}

Result<const StateBlock*> StateEntryLayout::block(std::string_view name) const {
  for (const StateBlock& b : blocks)
    if (b.name == name) return &b;
  std::string known;
  for (const StateBlock& b : blocks) known += (known.empty() ? "" : ", ") + b.name;
  return make_error(ErrorKind::invalid_argument,
                    "sub-pool '" + sub_pool + "' has no state block '" + printable(name) + "'; known blocks: " + known);
}

std::optional<std::size_t> StateEntryLayout::block_index(std::string_view name) const {
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].name == name) return i;
  return std::nullopt;
}

Result<std::uint64_t> state_byte_address(const StateEntryLayout& layout, std::int64_t slot, const StateBlock& block,
                                         std::uint32_t layer) {
  if (slot < 0)
    return make_error(ErrorKind::out_of_range, "physical state slot " + std::to_string(slot) + " is negative");
  if (layer >= block.layer_num)
    return make_error(ErrorKind::out_of_range, "layer " + std::to_string(layer) + " is outside state block '" +
                                                   block.name + "' of sub-pool '" + layout.sub_pool + "' (" +
                                                   std::to_string(block.layer_num) + " layers)");
  KVTWIN_TRY(std::uint64_t base, checked_mul(static_cast<std::uint64_t>(slot), layout.entry_bytes, "state byte address"));
  KVTWIN_TRY(std::uint64_t in_entry,
             checked_mul_add(std::uint64_t{layer}, block.layer_stride_bytes, block.offset_bytes, "state byte address"));
  return checked_add(base, in_entry, "state byte address");
}

Result<ViewDescriptor> state_view(const StateEntryLayout& layout, const StateBlock& block, std::uint32_t layer,
                                  std::uint64_t max_slots) {
  if (layer >= block.layer_num)
    return make_error(ErrorKind::out_of_range, "layer " + std::to_string(layer) + " is outside state block '" +
                                                   block.name + "' (" + std::to_string(block.layer_num) + " layers)");
  const std::uint64_t is = dtype_size_bytes(block.dtype);
  if (layout.entry_bytes % is != 0)
    return make_error(ErrorKind::layout, "state entry of " + std::to_string(layout.entry_bytes) +
                                             " bytes is not whole elements of block '" + block.name + "'");
  KVTWIN_TRY(std::uint64_t offset_bytes,
             checked_mul_add(std::uint64_t{layer}, block.layer_stride_bytes, block.offset_bytes, "state view offset"));
  if (offset_bytes % is != 0 || max_slots > kMaxSignedId || layout.entry_bytes / is > kMaxSignedId)
    return make_error(ErrorKind::layout, "state view of block '" + block.name + "' at layer " + std::to_string(layer) +
                                             " does not start on a whole element");
  ViewDescriptor v;
  // The slot stride is the whole entry (SPEC 11), never the product of the shape.
  v.shape.push_back(static_cast<std::int64_t>(max_slots));
  v.strides.push_back(static_cast<std::int64_t>(layout.entry_bytes / is));
  std::vector<std::int64_t> inner(block.shape.size(), 1);
  for (std::size_t d = block.shape.size(); d-- > 1;) inner[d - 1] = inner[d] * block.shape[d];
  for (std::size_t d = 0; d < block.shape.size(); ++d) {
    v.shape.push_back(block.shape[d]);
    v.strides.push_back(inner[d]);
  }
  v.storage_offset = static_cast<std::int64_t>(offset_bytes / is);
  return v;
}

}  // namespace kvtwin
