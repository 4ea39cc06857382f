// The pool's raw bytes (SPEC.md sections 2 and 3): one zero-filled host buffer of total_bytes
// shared by every sub-pool of the chain, addressed by the byte law
//   byte(pt, part, l) = pt * E + part.offset + l * part.layer_stride.
// It copies whole page envelopes (compaction, move_pages) and reads and writes single rows.
//
// It trusts its callers: ids and pages were validated by the model before they get here, so a
// row or page outside the buffer is an invariant failure, not an error value. It knows nothing
// of tables, marks or the oracle.
//
// It also answers the digest of byte ranges (core/bytes_digest.h) at the cost of what was written
// since the last one: it keeps the digest of every 64 KiB region, 0 for the zero-filled start
// (a zero word adds nothing), and recomputes a region only when it was written since. Every way
// to change a byte goes through this class and marks what it hands out as written (the mutable
// row(), writable(), copy_page()), so a kept digest is never stale: a checkpoint's whole-pool
// digest costs the regions the operations since wrote, not the pool.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "core/backend.h"  // ByteRange
#include "core/layout.h"
#include "core/sizing.h"

namespace kvtwin::sim {

class PoolBytes {
 public:
  explicit PoolBytes(std::uint64_t total_bytes);

  std::uint64_t size() const { return bytes_.size(); }
  std::span<const std::uint8_t> all() const { return bytes_; }

  // [offset, offset + length) of the buffer.
  std::span<const std::uint8_t> range(std::uint64_t offset, std::uint64_t length) const;
  // The same, to write (it counts as written).
  std::span<std::uint8_t> writable(std::uint64_t offset, std::uint64_t length);

  // bytes_digest(all(), ranges) (core/bytes_digest.h): the 64 KiB regions a range covers whole
  // from their kept digests (each recomputed once after a write), the rest read.
  std::uint64_t digest(std::span<const ByteRange> ranges) const;

  // How many times a part of the buffer was handed out to write (or copied onto) so far, and the
  // last such range: the model's digest of what an op wrote, made as it wrote each row, holds only
  // while every write was the row it digested (Model::touched_digest).
  std::uint64_t writes() const { return writes_; }
  ByteRange last_written() const { return last_written_; }

  // The row of (physical token pt, part, layer) of a sub-pool (SPEC 2); the mutable one counts
  // as written.
  std::span<std::uint8_t> row(const DenseEntryLayout& layout, std::int64_t pt, std::size_t part, std::uint32_t layer);
  std::span<const std::uint8_t> row(const DenseEntryLayout& layout, std::int64_t pt, std::size_t part,
                                    std::uint32_t layer) const;

  // Copies the whole page envelope (page_size * E bytes) of physical page src to dst.
  void copy_page(const SubPoolGeometry& geometry, std::int64_t src, std::int64_t dst);

 private:
  // The byte law's offset of a row `row_bytes` long (its callers check `part`), inside the buffer.
  std::uint64_t row_offset(const DenseEntryLayout& layout, std::int64_t pt, std::size_t part, std::uint32_t layer,
                           std::uint64_t row_bytes) const;
  // The kept digests of the regions [offset, offset + length) overlaps go stale.
  void mark_written(std::uint64_t offset, std::uint64_t length);
  // The digest of whole region `r`, kept.
  std::uint64_t region_digest(std::uint64_t r) const;
  // Recomputes the stale whole regions `ranges` cover on several threads, when there are many
  // (a checkpoint's whole-pool digest after a replay wrote most of a large pool).
  void refresh_many_stale(std::span<const ByteRange> ranges) const;

  static constexpr std::uint64_t kRegionBytes = std::uint64_t{64} << 10;

  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  // calloc'ed: the zero fill comes from the allocator (fresh pages of a large pool are zero
  // without being written), so building a large pool costs the pages it touches, not its size.
  std::unique_ptr<std::uint8_t[], Free> storage_;
  std::span<std::uint8_t> bytes_;
  std::uint64_t writes_ = 0;  // writes(), last_written()
  ByteRange last_written_;
  // Per whole region of the buffer (a ragged tail past the last one is always read): its digest,
  // and whether it was written since that was computed.
  mutable std::vector<std::uint64_t> region_digests_;
  mutable std::vector<std::uint8_t> region_stale_;
};

}  // namespace kvtwin::sim
