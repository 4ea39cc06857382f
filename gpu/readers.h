// The open readers of the pool (SPEC.md section 7): a reader holds the physical addresses of some
// pages of one sub-pool (an attention read in flight), and no move may touch those pages until it
// ends. Host state only: which reader holds which pages; begin_read and end_read change nothing
// on the device.
//
// check_moves() is the gate every compaction and raw move passes before it commits; the fault
// switch move_under_reader (faults.h) opens it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/result.h"
#include "gpu/faults.h"

namespace kvtwin::gpu {

class Readers {
 public:
  // An error when reader op.reader is already open (begin_read checks it before anything else).
  Status require_new(const BeginRead& op) const;
  // Opens reader op.reader over op.pages of side `side` (`num_pages`: that side's page count).
  Status begin(const BeginRead& op, std::size_t side, std::int64_t num_pages);
  Status end(const EndRead& op);
  void clear() { open_.clear(); }

  // The side reader `reader` reads, when it is open.
  std::optional<std::size_t> side_of(std::uint32_t reader) const;
  // Whether some open reader of `side` holds `page`.
  bool holds(std::size_t side, std::int64_t page) const;

  // SPEC 7 / docs/decisions.md: a move src[i] -> dst[i] of `side` whose source or destination a
  // reader holds is refused (ErrorKind::reader_conflict), the first such move and reader named.
  Status check_moves(std::size_t side, const std::string& sub_pool, const std::vector<std::int64_t>& src,
                     const std::vector<std::int64_t>& dst, const Faults& faults) const;

 private:
  struct Reader {
    std::size_t side = 0;
    std::set<std::int64_t> pages;
  };
  std::map<std::uint32_t, Reader> open_;  // by reader id
};

}  // namespace kvtwin::gpu
