// Reason codes: why an operation was refused, where one error kind has several causes. Backends
// answer them with the kind (Error::reason), traces carry them ("reason" beside "error"), and
// every comparison of two answers compares them, so that a refusal for the wrong reason (a free
// of the sink answered as a free of a page never allocated) is a divergence, not "the same
// error". A kind with one cause has no code. The codes are part of the trace format: never
// rename one; add new ones at the end.
#pragma once

#include <string_view>
#include <vector>

#include "core/result.h"

namespace kvtwin::reason {

// out_of_range, for ids of a free or free_swa (docs/decisions.md):
inline constexpr std::string_view negative_id = "negative_id";        // an id below 0
inline constexpr std::string_view reserved_page = "reserved_page";    // the sink, or a page below the first usable
inline constexpr std::string_view past_last_page = "past_last_page";  // a page at or past the table's end
// double_free (SPEC 4, docs/decisions.md):
inline constexpr std::string_view not_allocated = "not_allocated";              // v2p[v] < 0
inline constexpr std::string_view left_window = "already_left_window";  // free_swa of an SWA tombstone
// reader_conflict (SPEC 7, 8; docs/host_arena.md). A conflict with an open reader has no code
// (traces written before transfers).
inline constexpr std::string_view transfer_in_flight = "transfer_in_flight";  // pages or a compaction an in-flight transfer holds
inline constexpr std::string_view lease_held = "lease_held";  // a host compaction would wait for another thread's lease

struct Info {
  ErrorKind kind;
  std::string_view code;
  std::string_view what;
};

// Every code, with its kind and what it means (docs/traces.md lists the same).
const std::vector<Info>& catalogue();

// Whether `code` is a known code of `kind` (empty is always allowed: no code).
bool known(ErrorKind kind, std::string_view code);

}  // namespace kvtwin::reason
