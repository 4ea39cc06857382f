// Random pool configurations for properties and fuzzing: catalogue shapes scaled down (and
// synthetic ones within the same bounds) so that a pool is a few hundred KiB at most and holds
// tens of pages: MHA full-only, full + SWA
// composites (sometimes with unequal SWA heads), MLA; occasionally a cross-attention layer;
// 1-8 layers, 1-4 heads, head dims 16-64, every dtype, page sizes 1-64, eager and lazy, with
// and without bytes; optionally, now and then, a larger pool of thousands of pages (up to
// 64 MiB) or a real-scale tables-only pool past 4 GiB (see ConfigLimits). Every configuration it returns builds (derive_pool succeeds).
#pragma once

#include <cstdint>

#include "core/pool_config.h"
#include "props/choices.h"

namespace kvtwin::props {

struct ConfigLimits {
  std::uint64_t max_total_bytes = 256 * 1024;  // the page size is lowered until a small pool fits
  std::int64_t max_usable_pages = 40;          // usable pages of the owner side, at most
  // One configuration in this many (0: none) is instead a tables-only pool of 4 to 8 GiB: a
  // catalogue model at TP 1 with pages of 16 to 256 tokens or more (at most 4096 pages a side),
  // so that row addresses past 2^32 are derived and compared (props/shadow_sizing.h). No bytes.
  std::uint32_t past_4gib_one_in = 0;
  // One configuration in this many (0: none) is a larger pool, with bytes when drawn so: up to
  // kLargeTotalBytes and 256 to kLargeUsablePages usable pages, so that operations drawn at real
  // sizes (props/op_gen.h) find thousands of live tokens.
  std::uint32_t large_one_in = 0;
};

inline constexpr std::uint64_t kLargeTotalBytes = std::uint64_t{64} << 20;
inline constexpr std::int64_t kLargeUsablePages = 4096;

PoolConfig generate_config(Choices& choices, const ConfigLimits& limits = {});

// A host arena for a configuration (SPEC 8): host_bytes of 1 to 24 of its largest pages, plus a
// few stray bytes; one draw in eight gives none (0). At most the model's byte buffer limit, so
// that a configuration that builds still builds with it. Drawn apart from generate_config, so
// that runs without host operations draw exactly the configurations they drew before.
std::uint64_t generate_host_bytes(Choices& choices, const PoolConfig& config);
// A small hybrid pool (SPEC 11): 1-4 attention layers (full, or full and sliding-window: the
// tri-pool), a state of 1-3 layers with 1-2 conv tensors (bf16) and a temporal tensor (fp32),
// page sizes 1-8, eager and lazy, sometimes tables-only; room for a few states and tens of pages.
PoolConfig generate_hybrid_config(Choices& choices);

}  // namespace kvtwin::props
