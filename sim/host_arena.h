// The host arena of SPEC.md section 8, as a plain reference: one host byte arena shared by the
// `full` and `swa` sides of one device pool (one side or two). A side's host page is exactly its
// device page envelope (page_size * E bytes); the two sides grow from opposite ends.
//
// How it works: each side numbers `page_num = total_bytes // max(page_bytes)` physical host pages
// and as many logical ids. Logical ids are what caches hold; they never change while allocated.
// A side keeps its free logical ids as sorted, merged extents (taken lowest first), the logical
// <-> physical maps, its holes (unmapped physical pages inside its band) and its watermark: the up
// side (side 0) occupies physical pages [0, wm), the down side (side 1) (wm, page_num - 1]. There
// is no sink. alloc_many first plans (which ids, which pages, whether every side must be packed
// first) without touching anything, checks a compacting plan against leases and recorded
// transfers, and only then commits exactly that plan: a refusal leaves the arena as it was. Each
// policy choice sits next to the SPEC 8 rule it implements; docs/host_arena.md collects them.
//
// What it does not cover: the transfers themselves (offload, load-back, the producer's event, the
// transfer stream: a recorded transfer is only a counter here; the model's transfers are
// sim/transfers.h and sim/model_host.cpp), stored pages and format tags, and token ids (this unit
// takes whole host pages; the caller converts). Threads are simulated: a thread id is an integer and the
// arena is single-threaded, so a compaction that would have to wait for another thread's lease
// or for a transfer is refused with an error that says so, instead of waiting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/result.h"

namespace kvtwin::sim {

// A simulated thread: the holder of a lease and the caller of alloc_many.
using HostThreadId = std::int64_t;

// One side of the arena: its device sub-pool's name, page size (slots) and entry bytes (E).
struct HostSideConfig {
  std::string name;
  std::uint64_t page_size = 0;
  std::uint64_t entry_bytes = 0;
};

struct HostArenaConfig {
  std::uint64_t total_bytes = 0;
  // One side (grows up) or two: side 0 grows up, side 1 grows down (as the device chain: full
  // is chain index 0, SPEC 4.3 and docs/decisions.md).
  std::vector<HostSideConfig> sides;
  // Whether the arena owns a zero-filled byte buffer of total_bytes that compaction moves along
  // (page_bytes()). Off: tables only.
  bool with_bytes = false;
};

// Free logical ids [begin, end).
struct HostExtent {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  bool operator==(const HostExtent&) const = default;
};

// One page move of a compaction: the envelope of physical host page `src` of `side` goes to `dst`.
struct HostPageMove {
  std::size_t side = 0;
  std::int64_t src = 0;
  std::int64_t dst = 0;
  bool operator==(const HostPageMove&) const = default;
};

// A fitting alloc_many: per side, the logical ids taken (ascending) and the physical page each one
// was bound to (physical[s][i] holds logical[s][i]). When the request fitted only once packed,
// `compacted` is set and `moves` lists the compaction's page moves in the order they ran (each
// move's dst was free when it ran, so a byte layer may replay them one by one).
struct HostAllocated {
  std::vector<std::vector<std::int64_t>> logical;
  std::vector<std::vector<std::int64_t>> physical;
  bool compacted = false;
  std::vector<HostPageMove> moves;
  bool operator==(const HostAllocated&) const = default;
};

// The request does not fit even once packed (SPEC 8). Not an error, as SPEC 4's "no room": the
// caller evicts or gives up. Nothing changed. `why` names the side and the numbers.
struct HostNoRoom {
  std::string why;
  bool operator==(const HostNoRoom&) const = default;
};

using HostAllocOutcome = std::variant<HostAllocated, HostNoRoom>;

// A read-only copy of one side's state, for tests and reports.
struct HostSideTables {
  std::string name;
  bool grows_up = true;
  std::uint64_t page_bytes = 0;
  std::int64_t watermark = 0;
  std::vector<std::int64_t> logical_to_physical;  // page_num rows, -1 where free
  std::vector<std::int64_t> physical_to_logical;  // page_num rows, -1 where unmapped
  std::vector<std::int64_t> holes;                // ascending
  std::vector<HostExtent> free_extents;           // ascending, merged
  std::uint64_t live_pages = 0;
  bool operator==(const HostSideTables&) const = default;
};

struct HostArenaTables {
  std::uint64_t total_bytes = 0;
  std::int64_t page_num = 0;
  std::vector<HostSideTables> sides;
  std::vector<std::pair<HostThreadId, std::uint64_t>> leases;  // (thread, depth), ascending thread
  std::uint64_t pending_transfers = 0;
  bool operator==(const HostArenaTables&) const = default;
};

class HostArena {
 public:
  // One side's state. Public so that a test can corrupt it (side_for_test) and see verify() notice.
  struct Side {
    std::string name;
    bool grows_up = true;
    std::uint64_t page_bytes = 0;
    std::vector<std::int64_t> logical_to_physical;
    std::vector<std::int64_t> physical_to_logical;
    std::set<std::int64_t> holes;
    std::int64_t watermark = 0;
    std::vector<HostExtent> free_extents;
    std::uint64_t live_pages = 0;
  };

  // Sizes the arena (SPEC 8: page_num = total // max(page_bytes)). Errors: no side or more than
  // two, a zero page size or entry, page bytes past 64 bits, or total_bytes below one page.
  static Result<HostArena> create(const HostArenaConfig& config);

  std::size_t side_count() const { return sides_.size(); }
  std::int64_t page_num() const { return page_num_; }
  std::uint64_t total_bytes() const { return total_bytes_; }
  const Side& side(std::size_t i) const { return sides_.at(i); }
  // Bytes between the up side's frontier (wm_up * page_bytes_up) and the down side's
  // ((wm_down + 1) * page_bytes_down), or the end of the up side's numbering (page_num * page_bytes)
  // when there is one side.
  std::uint64_t gap_bytes() const;
  HostArenaTables tables() const;

  // Allocates pages_per_side[s] host pages on every side s, all or nothing (SPEC 8); `thread` is
  // the caller, which matters only when a compaction is needed. Errors (nothing changed): a count
  // list of the wrong length; a needed compaction while `thread` holds a lease (invalid_argument:
  // it would wait for itself); a needed compaction while another thread holds a lease or a
  // recorded transfer is pending (reader_conflict: it would have to wait; retry later).
  Result<HostAllocOutcome> alloc_many(HostThreadId thread, const std::vector<std::uint64_t>& pages_per_side);

  // Frees logical ids of one side (SPEC 8): merges them into the free extents, leaves their
  // physical pages as holes and moves the watermark back past holes adjacent to it. Errors
  // (nothing changed): a side that does not exist, an id outside [0, page_num) (out_of_range), an
  // id listed twice or not allocated (double_free).
  Status free(std::size_t side, const std::vector<std::int64_t>& logical);

  // Leases (SPEC 8): per thread and reentrant; a nested acquire deepens. Release without a lease
  // held by that thread is an error (invalid_argument).
  void acquire(HostThreadId thread);
  Status release(HostThreadId thread);
  std::uint64_t lease_depth(HostThreadId thread) const;

  // Logical -> physical, only inside a lease held by `thread` (SPEC 8); errors otherwise, or for
  // an id outside the table (out_of_range) or not allocated (invalid_argument).
  Result<std::int64_t> resolve(HostThreadId thread, std::size_t side, std::int64_t logical) const;

  // Recorded transfer events, minimally: a transfer records one when submitted and completes it
  // when its copy is done. A compaction waits for every one of them (SPEC 8), so alloc_many
  // refuses to compact while any is pending. Completing with none pending is an error.
  void record_pending_transfer() { ++pending_transfers_; }
  Status complete_transfer();
  std::uint64_t pending_transfers() const { return pending_transfers_; }

  // The host bytes of a logical page (page_bytes of its side), only with with_bytes and only
  // inside a lease held by `thread` (the span is a physical address). Valid until the next
  // alloc_many (a compaction moves the page) or free.
  Result<std::span<std::byte>> page_bytes(HostThreadId thread, std::size_t side, std::int64_t logical);

  // The bytes of a physical host page (with_bytes only): what a transfer copies at the address it
  // resolved inside its lease, and what a verifier reads. A page past the side's numbering is an
  // invariant failure.
  std::span<std::byte> physical_page_bytes(std::size_t side, std::int64_t physical);
  std::span<const std::byte> physical_page_bytes(std::size_t side, std::int64_t physical) const;
  // The whole byte buffer (empty without with_bytes), for digests.
  std::span<const std::byte> all_bytes() const { return bytes_; }
  bool with_bytes() const { return with_bytes_; }

  // Test seam for a planted bug (traces/backends.cpp): a compaction that does not wait for
  // recorded transfer events (SPEC 10.20).
  void set_compaction_ignores_transfers_for_test(bool ignore) { compaction_ignores_transfers_ = ignore; }

  // Re-derives every invariant from scratch (maps inverse, extents sorted, merged and disjoint
  // from the live ids, pages inside their side's band, holes exactly the unmapped band pages, the
  // band's frontier page live, the two bands apart in bytes, counts). An internal error names the
  // first broken one.
  Status verify() const;

  // Test seam: a side's state, writable.
  Side& side_for_test(std::size_t i) { return sides_.at(i); }

 private:
  HostArena() = default;

  // Whether `k[s]` more pages fit on every side as the arena stands (holes first, then the gap),
  // or once every side is packed. Both need k[s] <= free logical ids of side s.
  bool fits_as_is(const std::vector<std::uint64_t>& k) const;
  bool fits_packed(const std::vector<std::uint64_t>& k) const;
  Status check_compaction_allowed(HostThreadId thread) const;

  std::uint64_t total_bytes_ = 0;
  std::int64_t page_num_ = 0;
  std::vector<Side> sides_;
  std::map<HostThreadId, std::uint64_t> leases_;  // depth > 0 only
  std::uint64_t pending_transfers_ = 0;
  bool with_bytes_ = false;
  bool compaction_ignores_transfers_ = false;
  std::vector<std::byte> bytes_;  // total_bytes when with_bytes
};

}  // namespace kvtwin::sim
