// Random pool configurations for properties and fuzzing: catalogue shapes scaled down (and
// synthetic ones within the same bounds) so that a pool is a few hundred KiB at most and holds
// tens of pages: MHA full-only, full + SWA
// composites (sometimes with unequal SWA heads), MLA; occasionally a cross-attention layer;
// 1-8 layers, 1-4 heads, head dims 16-64, every dtype, page sizes 1-64, eager and lazy, with
// and without bytes. Every configuration it returns builds (derive_pool succeeds).
#pragma once

#include <cstdint>

#include "core/pool_config.h"
#include "props/choices.h"

namespace kvtwin::props {

struct ConfigLimits {
  std::uint64_t max_total_bytes = 256 * 1024;  // the page size is lowered until a small pool fits
  std::int64_t max_usable_pages = 40;          // usable pages of the owner side, at most
};

PoolConfig generate_config(Choices& choices, const ConfigLimits& limits = {});

}  // namespace kvtwin::props
