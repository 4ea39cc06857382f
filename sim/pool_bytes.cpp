// The pool's raw bytes. See pool_bytes.h.
#include "sim/pool_bytes.h"

#include <algorithm>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/bytes_digest.h"
#include "core/check.h"
#include "sim/allocation_faults.h"

namespace kvtwin::sim {

// SPEC 3: zero-filled (calloc). The allocation point comes first; a real failure is std::bad_alloc
// too, as it was from a std::vector.
PoolBytes::PoolBytes(std::uint64_t total_bytes) {
  allocation_point();
  storage_.reset(static_cast<std::uint8_t*>(std::calloc(total_bytes == 0 ? 1 : total_bytes, 1)));
  if (!storage_) throw std::bad_alloc();
  bytes_ = std::span<std::uint8_t>(storage_.get(), total_bytes);
  // Every region starts zero, and so does its digest (a zero word's term is 0).
  region_digests_.assign(total_bytes / kRegionBytes, 0);
  region_stale_.assign(total_bytes / kRegionBytes, 0);
}

std::span<std::uint8_t> PoolBytes::writable(std::uint64_t offset, std::uint64_t length) {
  KVTWIN_CHECK(offset <= bytes_.size() && length <= bytes_.size() - offset, "a byte range inside the pool");
  mark_written(offset, length);
  return bytes_.subspan(offset, length);
}

void PoolBytes::mark_written(std::uint64_t offset, std::uint64_t length) {
  ++writes_;
  last_written_ = ByteRange{offset, length};
  if (length == 0) return;
  const std::uint64_t last = std::min<std::uint64_t>((offset + length - 1) / kRegionBytes + 1, region_stale_.size());
  for (std::uint64_t r = offset / kRegionBytes; r < last; ++r) region_stale_[r] = 1;
}

std::uint64_t PoolBytes::region_digest(std::uint64_t r) const {
  if (region_stale_[r] != 0) {
    region_digests_[r] = bytes_digest_of_range(r * kRegionBytes, range(r * kRegionBytes, kRegionBytes));
    region_stale_[r] = 0;
  }
  return region_digests_[r];
}

void PoolBytes::refresh_many_stale(std::span<const ByteRange> ranges) const {
  // Past this many stale regions (16 MiB), up to kThreads threads: each region's digest is its
  // own, and the digest sums them in any order (core/bytes_digest.h), so the answer is the same.
  constexpr std::size_t kManyStale = 256;
  constexpr std::size_t kThreads = 4;
  std::vector<std::uint64_t> stale;
  for (const ByteRange& r : ranges) {
    const std::uint64_t first = (r.offset + kRegionBytes - 1) / kRegionBytes;
    const std::uint64_t past = std::min<std::uint64_t>((r.offset + r.length) / kRegionBytes, region_digests_.size());
    for (std::uint64_t g = first; g < past; ++g)
      if (region_stale_[g] != 0) stale.push_back(g);
  }
  if (stale.size() < kManyStale) return;  // digest() computes them as it goes
  const std::size_t threads = std::min<std::size_t>(kThreads, std::max(1u, std::thread::hardware_concurrency()));
  const std::size_t share = (stale.size() + threads - 1) / threads;
  // Each thread writes the digests of its own regions only.
  const auto refresh = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i)
      region_digests_[stale[i]] = bytes_digest_of_range(stale[i] * kRegionBytes, range(stale[i] * kRegionBytes, kRegionBytes));
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < threads; ++t)
    helpers.emplace_back(refresh, std::min(stale.size(), t * share), std::min(stale.size(), (t + 1) * share));
  refresh(0, std::min(stale.size(), share));
  for (std::thread& h : helpers) h.join();
  for (std::uint64_t g : stale) region_stale_[g] = 0;
}

std::uint64_t PoolBytes::digest(std::span<const ByteRange> ranges) const {
  refresh_many_stale(ranges);
  std::uint64_t sum = 0;
  for (const ByteRange& r : ranges) {
    const std::uint64_t end = r.offset + r.length;
    KVTWIN_CHECK(r.offset <= bytes_.size() && r.length <= bytes_.size() - r.offset, "a digested range inside the pool");
    // The whole regions inside the range (region boundaries are word boundaries: nothing splits).
    const std::uint64_t first = (r.offset + kRegionBytes - 1) / kRegionBytes;
    const std::uint64_t past = std::min<std::uint64_t>(end / kRegionBytes, region_digests_.size());
    if (first >= past) {
      sum += bytes_digest_of_range(r.offset, range(r.offset, r.length));
      continue;
    }
    sum += bytes_digest_of_range(r.offset, range(r.offset, first * kRegionBytes - r.offset));
    for (std::uint64_t g = first; g < past; ++g) sum += region_digest(g);
    sum += bytes_digest_of_range(past * kRegionBytes, range(past * kRegionBytes, end - past * kRegionBytes));
  }
  return sum;
}

std::span<const std::uint8_t> PoolBytes::range(std::uint64_t offset, std::uint64_t length) const {
  KVTWIN_CHECK(offset <= bytes_.size() && length <= bytes_.size() - offset, "a byte range inside the pool");
  return std::span<const std::uint8_t>(bytes_.data(), bytes_.size()).subspan(offset, length);
}

std::uint64_t PoolBytes::row_offset(const DenseEntryLayout& layout, std::int64_t pt, std::size_t part,
                                    std::uint32_t layer, std::uint64_t row_bytes) const {
  Result<std::uint64_t> offset = row_byte_address(layout, PhysicalTokenId{pt}, layout.parts[part], layer);
  KVTWIN_CHECK(offset.ok(), offset.error().message);
  KVTWIN_CHECK(*offset + row_bytes <= bytes_.size(),
               "row of token " + std::to_string(pt) + " of sub-pool '" + layout.sub_pool + "' inside the pool");
  return *offset;
}

std::span<std::uint8_t> PoolBytes::row(const DenseEntryLayout& layout, std::int64_t pt, std::size_t part,
                                       std::uint32_t layer) {
  KVTWIN_CHECK(part < layout.parts.size(), "a part of the layout");
  const std::uint64_t row_bytes = layout.parts[part].row_bytes();
  const std::uint64_t offset = row_offset(layout, pt, part, layer, row_bytes);
  mark_written(offset, row_bytes);
  return bytes_.subspan(offset, row_bytes);
}

std::span<const std::uint8_t> PoolBytes::row(const DenseEntryLayout& layout, std::int64_t pt, std::size_t part,
                                             std::uint32_t layer) const {
  KVTWIN_CHECK(part < layout.parts.size(), "a part of the layout");
  const std::uint64_t row_bytes = layout.parts[part].row_bytes();
  return std::span<const std::uint8_t>(bytes_).subspan(row_offset(layout, pt, part, layer, row_bytes), row_bytes);
}

void PoolBytes::copy_page(const SubPoolGeometry& geometry, std::int64_t src, std::int64_t dst) {
  const std::uint64_t envelope = geometry.page_bytes;
  KVTWIN_CHECK(src >= 0 && dst >= 0 && src != dst, "a page move between two distinct pages");
  const std::uint64_t from = static_cast<std::uint64_t>(src) * envelope;
  const std::uint64_t to = static_cast<std::uint64_t>(dst) * envelope;
  KVTWIN_CHECK(from + envelope <= bytes_.size() && to + envelope <= bytes_.size(),
               "page envelopes of sub-pool '" + geometry.name + "' inside the pool");
  mark_written(to, envelope);
  // Envelopes of one sub-pool never overlap, so a plain copy is exact.
  std::copy_n(bytes_.begin() + static_cast<std::ptrdiff_t>(from), envelope,
              bytes_.begin() + static_cast<std::ptrdiff_t>(to));
}

}  // namespace kvtwin::sim
