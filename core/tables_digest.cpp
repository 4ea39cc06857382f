// The host reference of the allocator tables' digest (tables_digest.h).
#include "core/tables_digest.h"

namespace kvtwin {

std::uint64_t tables_digest_counters(std::uint64_t side, std::int64_t watermark, std::uint64_t allocated_pages,
                                     std::uint64_t free_queue_length, std::uint64_t hole_count) {
  return tables_digest_term(side, TablesDigestPart::watermark, 0, watermark) +
         tables_digest_term(side, TablesDigestPart::allocated_pages, 0, static_cast<std::int64_t>(allocated_pages)) +
         tables_digest_term(side, TablesDigestPart::free_queue_length, 0, static_cast<std::int64_t>(free_queue_length)) +
         tables_digest_term(side, TablesDigestPart::hole_count, 0, static_cast<std::int64_t>(hole_count));
}

namespace {

std::uint64_t queue_terms(std::uint64_t side, const std::vector<std::int64_t>& queue) {
  if (queue.empty()) return 0;
  std::uint64_t sum = free_queue_front_term(side, queue.front());
  for (std::size_t j = 1; j < queue.size(); ++j) sum += free_queue_link_term(side, queue[j - 1], queue[j]);
  return sum;
}

}  // namespace

std::uint64_t digest_tables(const PoolTables& tables) {
  std::uint64_t sum = 0;
  for (std::uint64_t s = 0; s < tables.sides.size(); ++s) {
    const SideTables& t = tables.sides[s];
    for (std::uint64_t r = 0; r < t.v2p.size(); ++r) sum += tables_digest_term(s, TablesDigestPart::v2p, r, t.v2p[r]);
    for (std::uint64_t r = 0; r < t.p2v.size(); ++r) sum += tables_digest_term(s, TablesDigestPart::p2v, r, t.p2v[r]);
    sum += queue_terms(s, t.free_queue);
    // The holes as a set: the term of page h (a list that is not ascending is a table bug the
    // invariant check names; as a set it digests the same).
    for (std::int64_t h : t.holes) sum += tables_digest_term(s, TablesDigestPart::hole, static_cast<std::uint64_t>(h), 1);
    sum += tables_digest_counters(s, t.watermark, t.allocated_pages, t.free_queue.size(), t.holes.size());
    if (t.span_low != 0) sum += tables_digest_term(s, TablesDigestPart::watermark, 1, t.span_low);
  }
  // Hybrid chains (SPEC 11): the state side digests as side 15, its request table and quarantine
  // as rows of their own parts.
  if (tables.state) {
    constexpr std::uint64_t kStateSide = 15;
    const SideTables& t = *tables.state;
    for (std::uint64_t r = 0; r < t.v2p.size(); ++r) sum += tables_digest_term(kStateSide, TablesDigestPart::v2p, r, t.v2p[r]);
    for (std::uint64_t r = 0; r < t.p2v.size(); ++r) sum += tables_digest_term(kStateSide, TablesDigestPart::p2v, r, t.p2v[r]);
    sum += queue_terms(kStateSide, t.free_queue);
    for (std::int64_t h : t.holes) sum += tables_digest_term(kStateSide, TablesDigestPart::hole, static_cast<std::uint64_t>(h), 1);
    sum += tables_digest_counters(kStateSide, t.watermark, t.allocated_pages, t.free_queue.size(), t.holes.size());
    for (const auto& [request, slot] : tables.state_requests)
      sum += tables_digest_term(kStateSide + 1, TablesDigestPart::v2p, request, slot);
    for (std::int64_t q : tables.state_quarantine)
      sum += tables_digest_term(kStateSide + 1, TablesDigestPart::hole, static_cast<std::uint64_t>(q), 1);
  }
  return sum;
}

}  // namespace kvtwin

namespace kvtwin {

Result<std::uint64_t> Backend::tables_digest() const {
  Result<PoolTables> t = tables();
  if (!t.ok()) return t.error();
  return digest_tables(*t);
}

Status Backend::queue_tables_digest() {
  KVTWIN_TRY(const std::uint64_t digest, tables_digest());
  queued_digests_.push_back(digest);
  return ok_status();
}

Status Backend::queue_bytes_digest(std::span<const ByteRange> ranges) {
  KVTWIN_TRY(const std::uint64_t digest, bytes_digest(ranges));
  queued_digests_.push_back(digest);
  return ok_status();
}

Result<std::vector<std::uint64_t>> Backend::collect_digests() {
  std::vector<std::uint64_t> out;
  out.swap(queued_digests_);
  return out;
}

}  // namespace kvtwin
