// The shadow's own sizing: SPEC.md sections 2 and 3 derived again, from a PoolConfig, with
// arithmetic written apart from core/ (128-bit, so that nothing can wrap), and compared with what
// core's derive_pool() and row_byte_address() say for the same configuration.
//
// Why it exists: the model, the GPU and the shadow all take the reserved floor, min_page_index,
// the entries and the row addresses from the same functions in core/. A bug there (a floor taken
// from one sub-pool only, a row address computed in 32 bits) is the same bug in all three, so no
// comparison between them can see it. This derivation shares none of that code: it divides the
// heads over the ranks, lays out the entries, sizes the chain and addresses rows by itself.
//
// How it works: shadow_sizing() transcribes the SPEC formulas (heads per rank, rows, entries with
// their padding, the reserved floor, slots, pages, min_page_index, bytes per page, the chain's
// shared bytes of SPEC 4.3) into unsigned __int128; compare_sizing() walks both derivations in a
// fixed order (entries and parts, then the floor, then every sub-pool's numbers, then the byte
// address of every layer and part of the first and last slot of page 0, the first usable page,
// the last page and the last slot) and names the first difference.
//
// What it does not cover: shapes core refuses before sizing (validation messages are core's
// business); it only says whether a pool builds, not why in core's words. It calls nothing in
// core/ but the ModelShape / PoolConfig types, the dtype sizes and the layouts it compares with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/pool_config.h"

namespace kvtwin::props {

using u128 = unsigned __int128;

std::string u128_text(u128 v);

struct ShadowPartSizing {
  std::string name;  // "k", "v", "kv"
  u128 offset_bytes = 0;
  u128 layer_stride_bytes = 0;
  u128 row_bytes = 0;
  std::uint32_t layers = 0;
};

struct ShadowSubPoolSizing {
  std::string name;  // "full", "swa", "mla"
  bool grows_up = true;
  std::uint32_t layers = 0;
  std::uint32_t heads_per_rank = 0;
  std::vector<ShadowPartSizing> parts;
  u128 entry_bytes = 0;    // E, padded to 32
  u128 padding_bytes = 0;  // E - L * (sum of rows)
  u128 max_slots = 0;      // total // E
  u128 min_slot_index = 0; // ceil(floor / E)
  u128 num_pages = 0;      // max_slots // ps
  u128 min_page_index = 0; // ceil(min_slot_index / ps)
  u128 page_bytes = 0;     // E * ps
};

struct ShadowSizing {
  u128 total_bytes = 0;
  u128 page_size = 0;
  u128 reserved_floor_bytes = 0;
  std::vector<ShadowSubPoolSizing> sub_pools;  // chain order: [up] or [up, down]
  // SPEC 11's hybrid chains: the state sub-pool (page size 1) at the low end, charged once in the
  // floor; the owner grows down, an SWA sub-pool floats.
  bool has_state = false;
  u128 state_entry_bytes = 0;  // L * sum(conv) + L * temporal, per rank, no padding
  u128 state_max_slots = 0;
  u128 state_min_slot_index = 0;
  u128 state_token_cost = 0;   // ceil(E_state / sum of token entries)
  // Whether SPEC 3 (and 4.3 for a chain) lets the pool be built; why not, when it does not.
  bool builds = true;
  std::string why_not;
};

// SPEC 2 and 3 for `config`. nullopt when the shape cannot be divided or laid out at all (heads
// that do not split over the ranks, a row that is not a multiple of 16 bytes, no layers).
std::optional<ShadowSizing> shadow_sizing(const PoolConfig& config, std::string* why = nullptr);

// byte(pt, part, l) = pt * E + part.offset + l * part.layer_stride, in 128 bits.
u128 shadow_row_address(const ShadowSubPoolSizing& sub_pool, u128 pt, std::size_t part, std::uint32_t layer);

// nullopt when core's derivation of `config` (as `core`, what derive_pool() gave) agrees with the
// shadow's, entry by entry, number by number and row address by row address (row_byte_address()
// on core's layouts); otherwise the first difference, named, with both values.
std::optional<std::string> compare_sizing(const PoolConfig& config, const PoolDerived& core);

}  // namespace kvtwin::props
