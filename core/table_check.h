// The allocator tables' invariants (SPEC.md section 4), checked from the tables alone.
//
// Every backend exposes its tables through core/backend.h; this check needs nothing else, so the
// runner runs it on every player after every operation: a GPU run alone is checked as strictly
// as the model, and the model's own verify() uses it for its table half. It costs O(pages) per
// call; a caller that only changed a few pages may check just those (check_table_invariants with
// a page list, see below) and leave the full check for checkpoints.
//
// Checked per side: table sizes (num_virtual + 1, num_pages + 1), the sink row (0/0) and the -1
// sentinels; v2p and p2v mutual inverses over bound pages; nothing bound below min_page_index;
// the watermark inside its range; every page inside the band [begin, end) bound or a hole and
// nothing outside it; eager sides without holes; holes ascending and unique; the allocated
// counter equal to a recount. Across sides: the owner's free queue and its bound virtual pages
// partition [min_page_index, num_virtual) with no repeats; an SWA side binds only virtual pages
// the owner binds; the two bands do not overlap in bytes.
//
// What it does not cover: readers, batches, graphs and bytes (backend-specific; the model's
// verify() checks those).
#pragma once

#include "core/backend.h"
#include "core/pool_config.h"
#include "core/result.h"

namespace kvtwin {

// Ok, or an ErrorKind::internal error naming the first broken invariant ("invariant broken: ...").
Status check_table_invariants(const PoolTables& tables, const PoolDerived& derived, CompactionMode mode);

}  // namespace kvtwin
