// The reference model's storage tier (docs/storage.md, SPEC 8's last bullet): store_pages and
// load_stored move whole host pages between the host arena and a real on-disk page store
// (core/page_store.h) in a folder of the pool's own. A stored page carries its host bytes and the
// content oracle's row identities (tables only: the identities alone), so a page read back is
// checked by verify() like any host page: bytes in another layout's order show there, and an
// answer (which pages were stored, which reads hit) is compared with the trace's expectation.
#include <cstring>
#include <set>

#include "core/check.h"
#include "core/layout.h"
#include "core/reasons.h"
#include "core/printable.h"
#include "sim/model.h"
#include "sim/model_state.h"

namespace kvtwin::sim {
namespace {

std::string num(std::uint64_t v) { return std::to_string(v); }

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

// A stored page's payload (core/page_store.h StoredPayloadLayout, the same size for every page of
// a side and on both backends): the row count, each row's identity, zero records up to the side's
// max_rows, then the page's bytes (none in a tables-only pool). Little-endian fixed-width fields.
void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
std::uint64_t get_u64(std::span<const std::uint8_t> in, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{in[at + static_cast<std::size_t>(i)]} << (8 * i);
  return v;
}

std::vector<std::uint8_t> encode_payload(const std::vector<WrittenRow>& rows, std::span<const std::uint8_t> bytes,
                                         const StoredPayloadLayout& payload) {
  KVTWIN_CHECK(rows.size() <= payload.max_rows, "a host page holds at most a page's rows");
  std::vector<std::uint8_t> out;
  out.reserve(payload.total_bytes());
  put_u64(out, rows.size());
  for (const WrittenRow& r : rows) {
    put_u64(out, static_cast<std::uint64_t>(r.source_token));
    put_u64(out, r.write_number);
    out.push_back(r.written ? 1 : 0);
  }
  if (payload.with_bytes) out.resize(payload.bytes_offset(), 0);
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

// The rows and the page bytes of a payload; an error when it is not one of `payload`'s layout
// (the store checked its digest, so only a foreign writer gets here).
Result<std::pair<std::vector<WrittenRow>, std::span<const std::uint8_t>>> decode_payload(
    std::span<const std::uint8_t> in, const StoredPayloadLayout& payload) {
  const std::uint64_t want = payload.total_bytes();
  if (in.size() != want || get_u64(in, 0) > (payload.with_bytes ? payload.max_rows : 0))
    return make_error(ErrorKind::internal, "a stored page's payload of " + num(std::uint64_t{in.size()}) +
                                               " bytes is not one of this pool's (" + num(want) + " bytes, at most " +
                                               num(payload.max_rows) + " rows)");
  const std::uint64_t n = get_u64(in, 0);
  std::vector<WrittenRow> rows(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::size_t at = 8 + i * kStoredRowRecordBytes;
    rows[i].source_token = static_cast<std::int64_t>(get_u64(in, at));
    rows[i].write_number = get_u64(in, at + 8);
    rows[i].written = in[at + 16] != 0;
  }
  return std::pair{std::move(rows), in.subspan(static_cast<std::size_t>(payload.bytes_offset()))};
}


// The space of one side's pages: the pool's storage space and the side ("llama-tm1.full"). A
// composite's full and sliding-window pages of one prefix share its hash; their layouts differ.
std::string side_space(const PageStore& store, std::string_view model, std::string_view tag, std::string_view side) {
  return store.space(model, tag) + "." + std::string(side);
}

}  // namespace

Result<PageStore*> Model::page_store(std::string_view op) {
  KVTWIN_TRY(HostArena * host, host_arena(op));
  (void)host;
  if (pool_->config.storage_bytes == 0)
    return invalid(std::string(op) + ": this pool has no storage tier; build it with storage_bytes (the page files' "
                                     "bytes the tier may hold, docs/storage.md)");
  // A fresh folder of the pool's own under the storage parent (set_storage_parent; its name is
  // never observable: keys and answers do not depend on it).
  if (!pool_->store) {
    KVTWIN_TRY(pool_->store, ScratchPageStore::open(storage_parent_, pool_->config.storage_bytes, page_store_faults(), op));
  }
  return &pool_->store->store();
}

Status Model::check_storage_pages(std::string_view op, std::size_t side, const std::vector<std::int64_t>& host,
                                  const std::vector<std::uint64_t>& hashes) {
  if (hashes.size() != host.size())
    return invalid(std::string(op) + ": " + num(std::uint64_t{host.size()}) + " host page(s) but " +
                   num(std::uint64_t{hashes.size()}) + " hash(es); give one hash a host page");
  KVTWIN_TRY_STATUS(checked_host_ids(op, side, host, false));
  // A host page an in-flight transfer uses is neither stored nor overwritten (as host_free).
  for (std::int64_t l : host)
    if (pool_->host_held[side].count(l) != 0)
      return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                          std::string(op) + ": host page " + std::to_string(l) + " of side '" +
                              pool_->host->side(side).name +
                              "' is used by an in-flight transfer; wait for it first (transfer_wait)");
  return ok_status();
}

OpResult Model::on(const StorePages& op) {
  KVTWIN_TRY(PageStore * store, page_store("store_pages"));
  KVTWIN_TRY(const std::size_t side, side_named(op.side));
  KVTWIN_TRY_STATUS(check_storage_pages("store_pages", side, op.host, op.hashes));
  if (op.page_count > op.host.size())
    return invalid("store_pages: page_count " + num(op.page_count) + " is above the " +
                   num(std::uint64_t{op.host.size()}) + " host pages given (the chunk's trailing pages are stored)");
  const DenseEntryLayout& layout = pool_->derived.layouts[side];
  HostArena& host = *pool_->host;
  const StoredPayloadLayout payload =
      stored_payload_layout(layout, pool_->config.page_size, host.side(side).page_bytes, host.with_bytes());
  const std::string tag = op.layout == "page_major" ? std::string(kPageMajorFormatTag)
                          : op.layout == "untagged" ? std::string()
                                                    : std::string(kTokenMajorFormatTag);
  const std::string space = side_space(*store, pool_->config.shape.name, tag, op.side);
  KVTWIN_TRY(const std::vector<StoredPageKey> keys, store->keys(space, op.hashes, op.page_count));
  // The pages stored are the last keys.size() of `host` (all of them under SPEC 10.15's fault).
  const std::size_t first = op.host.size() - keys.size();
  std::vector<std::vector<std::uint8_t>> payloads;
  std::vector<std::vector<WrittenRow>> page_rows;
  for (std::size_t i = first; i < op.host.size(); ++i) {
    const std::int64_t logical = op.host[i];
    const auto rows = pool_->host_rows[side].find(logical);
    std::vector<std::uint8_t> bytes;
    if (host.with_bytes()) {
      const std::int64_t p = host.side(side).logical_to_physical[static_cast<std::size_t>(logical)];
      const std::span<const std::byte> page = host.physical_page_bytes(side, p);
      const std::span<const std::uint8_t> page_u8(reinterpret_cast<const std::uint8_t*>(page.data()), page.size());
      if (op.layout == "page_major") {
        Result<std::vector<std::uint8_t>> reordered = page_major_page(layout, pool_->config.page_size, page_u8);
        if (!reordered.ok())
          return invalid("store_pages: sub-pool '" + op.side + "' has no page-major form: " + reordered.error().message);
        bytes = std::move(reordered).value();
      } else {
        bytes.assign(page_u8.begin(), page_u8.end());
      }
    }
    // The payload is the page alone (a count of 0 and zero records, as the GPU writes); the rows'
    // identities are kept beside the store (stored_rows).
    payloads.push_back(encode_payload({}, bytes, payload));
    page_rows.push_back(rows == pool_->host_rows[side].end() ? std::vector<WrittenRow>{} : rows->second);
  }
  std::vector<StorePage> pages;
  for (std::size_t k = 0; k < keys.size(); ++k) pages.push_back(StorePage{keys[k], payloads[k]});
  // Synchronous storage access runs under the thread's lease (SPEC 8).
  host.acquire(op.thread);
  Result<StorePut> put = pages.empty() ? Result<StorePut>(StorePut{}) : store->put_many(pages);
  KVTWIN_CHECK(host.release(op.thread).ok(), "the lease store_pages took is released");
  if (!put.ok()) return put.error();
  for (std::size_t k = 0; k < keys.size(); ++k) {
    if (page_rows[k].empty())
      pool_->stored_rows.erase(keys[k]);
    else
      pool_->stored_rows[keys[k]] = std::move(page_rows[k]);
  }
  Ids out;
  for (std::size_t i = first; i < op.host.size(); ++i) out.values.push_back(static_cast<std::int64_t>(i));
  return Outcome(std::move(out));
}

OpResult Model::on(const LoadStored& op) {
  KVTWIN_TRY(PageStore * store, page_store("load_stored"));
  KVTWIN_TRY(const std::size_t side, side_named(op.side));
  KVTWIN_TRY_STATUS(check_storage_pages("load_stored", side, op.host, op.hashes));
  HostArena& host = *pool_->host;
  const std::uint64_t page_bytes = host.side(side).page_bytes;
  const StoredPayloadLayout payload =
      stored_payload_layout(pool_->derived.layouts[side], pool_->config.page_size, page_bytes, host.with_bytes());
  const std::string space = side_space(*store, pool_->config.shape.name, kTokenMajorFormatTag, op.side);
  // Every read and decode first (a failing one changes nothing), then the pages.
  std::vector<StoreRead> reads;
  std::vector<std::optional<std::pair<std::vector<WrittenRow>, std::span<const std::uint8_t>>>> hits;
  host.acquire(op.thread);
  for (std::uint64_t hash : op.hashes) {
    Result<StoreRead> r = store->get(StoredPageKey{space, hash});
    if (!r.ok()) {
      KVTWIN_CHECK(host.release(op.thread).ok(), "the lease load_stored took is released");
      return r.error();
    }
    reads.push_back(std::move(r).value());
  }
  KVTWIN_CHECK(host.release(op.thread).ok(), "the lease load_stored took is released");
  for (std::size_t i = 0; i < reads.size(); ++i) {
    const StoreRead& r = reads[i];
    if (r.outcome != StoreReadOutcome::hit) {
      hits.emplace_back();
      continue;
    }
    KVTWIN_TRY(auto decoded, decode_payload(r.bytes, payload));
    // The identities of the rows the page was stored with (kept beside the store).
    const auto rows = pool_->stored_rows.find(StoredPageKey{space, op.hashes[i]});
    decoded.first = rows == pool_->stored_rows.end() ? std::vector<WrittenRow>{} : rows->second;
    hits.emplace_back(std::move(decoded));
  }
  Ids out;
  for (std::size_t i = 0; i < hits.size(); ++i) {
    if (!hits[i]) {
      out.values.push_back(0);
      continue;
    }
    auto& decoded = *hits[i];
    const std::int64_t logical = op.host[i];
    if (host.with_bytes() && decoded.second.size() == page_bytes) {
      const std::int64_t p = host.side(side).logical_to_physical[static_cast<std::size_t>(logical)];
      std::span<std::byte> page = host.physical_page_bytes(side, p);
      std::memcpy(page.data(), decoded.second.data(), page_bytes);
      ++pool_->host_writes;
    }
    if (pool_->bytes) {
      if (decoded.first.empty())
        pool_->host_rows[side].erase(logical);
      else
        pool_->host_rows[side][logical] = std::move(decoded.first);
    }
    host_pages_changed_.emplace_back(side, logical);
    out.values.push_back(1);
  }
  return Outcome(std::move(out));
}

}  // namespace kvtwin::sim
