// The state entry law (SPEC.md section 11): where every byte of one request's recurrent state
// lives in the `state` sub-pool of a unified pool.
//
// Hybrid models (Mamba2, gated-delta-net, KDA layers beside attention layers) keep one fixed-size
// state per request, not per token. One slot of the state sub-pool holds one request's state for
// every state layer: with L state layers, conv states conv_0 .. conv_{c-1} and one temporal
// (SSM) state per layer,
//   E_state = L * sum_i bytes(conv_i) + L * bytes(temporal)
//   [conv_0 of layers 0..L-1 | conv_1 of layers 0..L-1 | ... | temporal of layers 0..L-1]
// each block layer-major, no padding. byte(slot, block, l) = slot * E_state + block.offset +
// l * block.layer_stride. Views are (max_slots, *shape) with the whole entry as the slot stride.
//
// What it does not cover: token entries (core/layout.h), where the slots sit in the buffer
// (core/sizing.h), how slots are allocated (sim/state_allocator.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/layout.h"
#include "core/result.h"

namespace kvtwin {

// One state tensor of one layer: its shape (elements) and dtype.
struct StateTensor {
  std::vector<std::uint32_t> shape;
  DType dtype = DType::bf16;

  // Unchecked products, safe on a tensor that state_entry_layout() accepted.
  std::uint64_t elements() const;
  std::uint64_t bytes() const { return elements() * dtype_size_bytes(dtype); }
  bool operator==(const StateTensor&) const = default;
};

// What a model's config says about its recurrent state, per tensor-parallel rank at TP 1.
struct StateShape {
  std::uint32_t layers = 0;          // state layers (Mamba2 / GDN / KDA)
  std::vector<StateTensor> conv;     // conv_0 .. conv_{c-1}, per layer (bf16 unless the model says otherwise)
  StateTensor temporal;              // the SSM / recurrent state, per layer (fp32 unless the model says otherwise)
  bool operator==(const StateShape&) const = default;
};

// One block of a state entry: layer l of it sits at offset_bytes + l * layer_stride_bytes.
struct StateBlock {
  std::string name;                  // "conv_0", "conv_1", ..., "temporal"
  std::uint64_t offset_bytes = 0;
  std::uint64_t layer_stride_bytes = 0;  // bytes of one layer's tensor
  std::uint32_t layer_num = 0;
  std::vector<std::uint32_t> shape;
  DType dtype = DType::bf16;

  std::uint64_t tensor_bytes() const { return layer_stride_bytes; }
  bool operator==(const StateBlock&) const = default;
};

struct StateEntryLayout {
  std::string sub_pool = "state";    // named in every error
  std::vector<StateBlock> blocks;    // conv blocks in order, the temporal block last
  std::uint64_t entry_bytes = 0;     // E_state: the slot stride of every view

  // SPEC 11: the blocks tile the entry with no gap and no padding; the entry is a multiple of
  // every itemsize used; each block's offset a multiple of its itemsize. Errors name the sub-pool,
  // the block and the numbers.
  Status validate() const;
  // The block called `name`; an unknown name is an error listing the known ones.
  Result<const StateBlock*> block(std::string_view name) const;
  std::optional<std::size_t> block_index(std::string_view name) const;
  bool operator==(const StateEntryLayout&) const = default;
};

// The state entry of `shape` (one rank's share), validated: an overflow, an empty tensor or a
// misaligned block is an error naming the sub-pool and the numbers.
Result<StateEntryLayout> state_entry_layout(const StateShape& shape, std::string sub_pool = "state");

// byte(slot, block, l) = slot * E_state + block.offset + l * block.layer_stride, checked.
Result<std::uint64_t> state_byte_address(const StateEntryLayout& layout, std::int64_t slot, const StateBlock& block,
                                         std::uint32_t layer);

// The view of one block at layer l: shape (max_slots, *block.shape), strides (E_state / is,
// row-major strides of the shape), storage offset (offset + l * stride) / is. The slot stride is
// the whole entry, never the product of the shape.
Result<ViewDescriptor> state_view(const StateEntryLayout& layout, const StateBlock& block, std::uint32_t layer,
                                  std::uint64_t max_slots);

// One rank's share of a state shape: the first dimension of every tensor divided by `tp` (the
// channels or heads engines split); an uneven split is an error naming the tensor.
Result<StateShape> state_shape_per_rank(const StateShape& shape, std::uint32_t tp, std::string_view model);

// The structural checks of a state shape (a layer, a temporal tensor, no zero dimension, bounded).
Status validate_state_shape(const StateShape& shape, std::string_view model);

}  // namespace kvtwin
