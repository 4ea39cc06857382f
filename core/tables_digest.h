// A digest of a pool's allocator tables that two backends can compute where their tables live:
// the model on the host, the GPU on the device (one reduction kernel), so comparing two
// backends' tables costs eight bytes per operation instead of downloading every table. The
// full tables come back only when the digests differ, to name the first difference.
//
// How it works: the digest is a sum (mod 2^64) of one term per table row, each term a strong
// mix of (side, part, row index, value); a sum does not depend on the order rows are visited,
// so a parallel reduction on the device gives exactly the host's value. Every field that
// diff_tables compares is covered: v2p and p2v row by row, the free queue as its front and each
// id's successor (free_queue_terms), the holes as a set, and the watermark, allocated count, queue length and hole
// count. Side names are not digested (they are the pool's, not state).
//
// What it does not cover: pool bytes (raw_bytes), readers, batches, graphs. A digest match is
// evidence, not proof (a 2^-64 collision); checkpoints still compare whole tables.
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "core/det_math.h"  // KVTWIN_HOST_DEVICE

namespace kvtwin {

// Which field of a side a digest term covers.
enum class TablesDigestPart : std::uint64_t {
  v2p = 1,
  p2v = 2,
  free_queue = 3,
  hole = 4,
  watermark = 5,
  allocated_pages = 6,
  free_queue_length = 7,
  hole_count = 8,
  free_queue_next = 9,  // the id after an id in the free queue (free_queue_terms)
};

// SplitMix64's finalizer: every input bit reaches every output bit.
KVTWIN_HOST_DEVICE inline std::uint64_t tables_digest_mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The term of one row: `side` in chain order, `index` the row (or queue position; 0 for a counter).
KVTWIN_HOST_DEVICE inline std::uint64_t tables_digest_term(std::uint64_t side, TablesDigestPart part, std::uint64_t index,
                                                           std::int64_t value) {
  const std::uint64_t where = tables_digest_mix(((side << 8) | static_cast<std::uint64_t>(part)) * 0x9e3779b97f4a7c15ULL ^ index);
  return tables_digest_mix(where ^ (static_cast<std::uint64_t>(value) * 0xd6e8feb86659fd93ULL));
}

// A free queue's terms: its front id (position 0 of `free_queue`), and for every id the one after
// it (`free_queue_next`, indexed by the id). The ids of a queue are distinct, so front, successors
// and length (a counter) name the queue exactly; and taking k ids from the front or appending k at
// the back changes O(k) terms, so a backend can keep the sum as its queue changes instead of
// re-reading every position.
KVTWIN_HOST_DEVICE inline std::uint64_t free_queue_front_term(std::uint64_t side, std::int64_t front) {
  return tables_digest_term(side, TablesDigestPart::free_queue, 0, front);
}
KVTWIN_HOST_DEVICE inline std::uint64_t free_queue_link_term(std::uint64_t side, std::int64_t id, std::int64_t next) {
  return tables_digest_term(side, TablesDigestPart::free_queue_next, static_cast<std::uint64_t>(id), next);
}

// The digest of whole tables (the reference every backend's own digest must equal).
std::uint64_t digest_tables(const PoolTables& tables);

// The terms of one side's scalar counters (the GPU adds these on the host to its device sum).
std::uint64_t tables_digest_counters(std::uint64_t side, std::int64_t watermark, std::uint64_t allocated_pages,
                                     std::uint64_t free_queue_length, std::uint64_t hole_count);

}  // namespace kvtwin
