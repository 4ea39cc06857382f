// The one backend interface. The reference model (sim/) and the CUDA implementation (gpu/)
// both implement it; the runner plays operations against one or two of them and compares what
// this interface exposes: results, allocator tables, and raw pool bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "core/op.h"
#include "core/result.h"

namespace kvtwin {

// One sub-pool's allocator tables, as SPEC.md section 4 defines them.
struct SideTables {
  std::string name;
  std::vector<std::int64_t> v2p;         // num_virtual + 1 (last row: the -1 sentinel)
  std::vector<std::int64_t> p2v;         // num_pages + 1
  std::vector<std::int64_t> free_queue;  // owner side only: free virtual pages, front first
  std::int64_t watermark = 0;
  std::vector<std::int64_t> holes;       // lazy mode: freed physical pages inside the band, ascending
  std::uint64_t allocated_pages = 0;
  std::int64_t span_low = 0;             // a float middle (SPEC 11): its band is [span_low, watermark)

  bool operator==(const SideTables&) const = default;
};

struct PoolTables {
  std::vector<SideTables> sides;  // token sub-pools, chain order: [up] or [up, down] (hybrid: [owner, swa float])
  // Hybrid chains (SPEC 11): the state sub-pool's slot tables (its own free queue), the request ->
  // virtual slot table, and the physical slots quarantined for readers (SPEC 10.22), ascending.
  std::optional<SideTables> state = {};
  std::vector<std::pair<std::uint64_t, std::int64_t>> state_requests = {};  // ascending by request
  std::vector<std::int64_t> state_quarantine = {};
  bool operator==(const PoolTables&) const = default;
};

// A span of raw pool bytes.
struct ByteRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool operator==(const ByteRange&) const = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;

  // Plays one operation. Operating errors come back as Error values and leave the state as it was.
  virtual OpResult apply(const Op& op) = 0;

  // The allocator tables (an error before any pool is built).
  virtual Result<PoolTables> tables() const = 0;

  // digest_tables(tables()) (core/tables_digest.h), computed where the tables live: a backend
  // whose tables are far away (the GPU's) overrides it so that a comparison costs a few bytes.
  virtual Result<std::uint64_t> tables_digest() const;

  // `length` raw pool bytes from `offset` (an error in tables-only mode or out of range).
  virtual Result<std::vector<std::uint8_t>> raw_bytes(std::uint64_t offset, std::uint64_t length) const = 0;

  // The digest of pool byte ranges (core/bytes_digest.h), computed where the bytes live: the
  // default reads them with raw_bytes; a backend whose bytes are far away (the GPU's) overrides it
  // so that comparing what an operation wrote costs a few bytes. The same errors as raw_bytes.
  virtual Result<std::uint64_t> bytes_digest(std::span<const ByteRange> ranges) const;

  // Deferred digests, for the runner's comparison window (traces/runner.h CheckCadence::
  // compare_window): queue_tables_digest() and queue_bytes_digest() ask for a digest of the state
  // as it is now, and collect_digests() answers every digest queued since the last collect, in
  // the order they were queued. A backend whose state is far away (the GPU's) overrides all three
  // so that it queues the reductions on its stream and answers a whole window with one transfer
  // and one synchronization, not one a digest. By default each digest is computed at once
  // (tables_digest, bytes_digest) and kept until collected. The same errors as those two.
  // The runner defers this backend's digests only when it says they are far away.
  virtual bool digests_are_far() const { return false; }
  virtual Status queue_tables_digest();
  virtual Status queue_bytes_digest(std::span<const ByteRange> ranges);
  virtual Result<std::vector<std::uint64_t>> collect_digests();

 private:
  std::vector<std::uint64_t> queued_digests_;  // the default queue's answers, oldest first
};

}  // namespace kvtwin
