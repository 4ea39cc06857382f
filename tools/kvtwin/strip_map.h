// The strip map of the HTML reports: the pool's bytes as a horizontal strip, one row per
// sub-pool, at several points of a run, top to bottom. A page is a box at its true byte position
// (every side's views start at byte 0: the up side fills from the left, the down side from the
// right), coloured by who holds it (a request, or an allocation on pool traces; the prefix cache
// once its request has left), holes hatched red, the sink and reserved floor dark, the frontier
// of each side a black tick. Between two strips, a line from a page's old place to its new one
// for each compaction move made in between. Pages a failure involves are outlined and listed in
// their tooltips. Pools of more than kStripCellsMax pages a side draw cells of neighbouring
// pages (run_recorder.h).
#pragma once

#include <string>
#include <vector>

#include "tools/kvtwin/run_recorder.h"

namespace kvtwin::cli {

struct StripMapInput {
  std::string id;
  std::vector<SideInfo> sides;
  std::uint64_t total_bytes = 0;
  std::uint64_t reserved_floor_bytes = 0;
  bool serving = false;  // owners are requests (else allocations)
  std::vector<Strip> strips;
  std::vector<std::vector<PageMark>> marks;  // per strip; may be empty
  bool draw_moves = true;                    // lines between consecutive strips
};

std::string render_strip_map(const StripMapInput& input);

// The colour of a holder: requests and allocations get well-spread hues, lighter on the down side.
std::string owner_color(std::int64_t owner, std::size_t side);

}  // namespace kvtwin::cli
