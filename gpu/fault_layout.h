// Fault 17 (row_misaligned_accepted): derives a pool the way a careless builder would, with the
// byte law's 16-byte row checks skipped, so a row that is not a multiple of 16 bytes is accepted
// and stored misaligned. Everything else (shape checks, TP division, sizing) is as usual.
#pragma once

#include "core/pool_config.h"

namespace kvtwin::gpu {

Result<PoolDerived> derive_pool_unchecked_rows(const PoolConfig& config);

}  // namespace kvtwin::gpu
