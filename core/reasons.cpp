// The reason codes' catalogue: see reasons.h.
#include "core/reasons.h"

namespace kvtwin::reason {

const std::vector<Info>& catalogue() {
  static const std::vector<Info> kAll = {
      {ErrorKind::out_of_range, negative_id, "an id below 0"},
      {ErrorKind::out_of_range, reserved_page, "the sink page or a page below the first usable page"},
      {ErrorKind::out_of_range, past_last_page, "a page at or past the end of the page table"},
      {ErrorKind::double_free, not_allocated, "a virtual page that is not allocated (v2p < 0)"},
      {ErrorKind::double_free, left_window, "free_swa of a page whose SWA page is already a tombstone"},
      {ErrorKind::reader_conflict, transfer_in_flight,
       "the operation would move, free, write or read pages an in-flight transfer holds, or compact the host arena "
       "while a transfer is in flight"},
      {ErrorKind::reader_conflict, lease_held, "a host compaction would have to wait for another thread's lease"},
  };
  return kAll;
}

bool known(ErrorKind kind, std::string_view code) {
  if (code.empty()) return true;
  for (const Info& i : catalogue())
    if (i.kind == kind && i.code == code) return true;
  return false;
}

}  // namespace kvtwin::reason
