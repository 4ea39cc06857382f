// The storage tier below the GPU's host arena (docs/storage.md "Pool operations", SPEC 8's last
// bullet): store_pages and load_stored move whole pinned host pages between the arena and a real
// on-disk page store (core/page_store.h) of the pool's own, as the model does: the same scratch
// folder scheme, the same spaces (one a side), the same keys, and payloads of the same size
// (StoredPayloadLayout), so that both stores keep and evict the same pages and answer the
// same. The GPU keeps no row identities: its payload's row records are zeros, and a read writes
// back only the page's bytes. What a page read back holds is checked where it lands: a load-back
// puts it in the device pool, and the runner compares the bytes there with the model's.
#include <cstring>
#include <set>

#include "core/layout.h"
#include "core/reasons.h"
#include "gpu/gpu_pool.h"

namespace kvtwin::gpu {
namespace {

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

std::string num(std::uint64_t v) { return std::to_string(v); }

}  // namespace

Result<PageStore*> GpuPool::page_store(std::string_view op) {
  if (config_.host_bytes == 0)
    return invalid(std::string(op) + ": this pool has no host arena (host_bytes is 0); build it with host_bytes to "
                                     "use host operations");
  if (config_.storage_bytes == 0)
    return invalid(std::string(op) + ": this pool has no storage tier; build it with storage_bytes (the page files' "
                                     "bytes the tier may hold, docs/storage.md)");
  if (!store_) {
    KVTWIN_TRY(store_, ScratchPageStore::open(storage_parent_, config_.storage_bytes, {}, op));
  }
  return &store_->store();
}

Status GpuPool::check_storage_pages(std::string_view op, std::size_t side, const std::vector<std::int64_t>& host,
                                    const std::vector<std::uint64_t>& hashes) const {
  if (hashes.size() != host.size())
    return invalid(std::string(op) + ": " + num(host.size()) + " host page(s) but " + num(hashes.size()) +
                   " hash(es); give one hash a host page");
  KVTWIN_TRY_STATUS(check_host_ids(host_arena_, side, host, false, op));
  // A host page an in-flight transfer uses is neither stored nor overwritten (as host_free).
  for (std::int64_t page : host)
    if (const auto t = transfers_.holding_host(side, page))
      return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                          std::string(op) + ": host page " + std::to_string(page) + " of side '" +
                              host_arena_.side_name(side) + "' is used by transfer " + std::to_string(*t) +
                              " in flight; wait for it first (transfer_wait)");
  return ok_status();
}

std::string GpuPool::storage_space(const PageStore& store, std::string_view tag, std::string_view side) const {
  return store.space(config_.shape.name, tag) + "." + std::string(side);
}

OpResult GpuPool::store_pages(const StorePages& op) {
  KVTWIN_TRY(PageStore * store, page_store("store_pages"));
  KVTWIN_TRY(const std::size_t side, side_named(op.side, "store_pages"));
  KVTWIN_TRY_STATUS(check_storage_pages("store_pages", side, op.host, op.hashes));
  if (op.page_count > op.host.size())
    return invalid("store_pages: page_count " + num(op.page_count) + " is above the " + num(op.host.size()) +
                   " host pages given (the chunk's trailing pages are stored)");
  const DenseEntryLayout& layout = derived_.layouts[side];
  const std::string tag = op.layout == "page_major" ? std::string(kPageMajorFormatTag)
                          : op.layout == "untagged" ? std::string()
                                                    : std::string(kTokenMajorFormatTag);
  KVTWIN_TRY(const std::vector<StoredPageKey> keys,
             store->keys(storage_space(*store, tag, op.side), op.hashes, op.page_count));
  const bool with_bytes = host_arena_.host_bytes() != nullptr;
  const std::uint64_t page_bytes = host_arena_.page_bytes(side);
  const StoredPayloadLayout payload_layout = stored_payload_layout(layout, config_.page_size, page_bytes, with_bytes);
  // Synchronous storage access under the thread's lease (SPEC 8): the pages resolved inside it.
  host_arena_.acquire(op.thread);
  const std::size_t first = op.host.size() - keys.size();
  std::vector<std::vector<std::uint8_t>> payloads;
  Status status = ok_status();
  for (std::size_t i = first; i < op.host.size() && status.ok(); ++i) {
    std::vector<std::uint8_t> payload(payload_layout.bytes_offset(), 0);  // no rows kept: a count of 0
    if (with_bytes) {
      Result<std::int64_t> physical = host_arena_.resolve(op.thread, side, op.host[i]);
      if (!physical.ok()) {
        status = physical.error();
        break;
      }
      const std::uint8_t* at = host_arena_.host_bytes() + static_cast<std::uint64_t>(*physical) * page_bytes;
      const std::span<const std::uint8_t> page(at, page_bytes);
      if (op.layout == "page_major") {
        Result<std::vector<std::uint8_t>> reordered = page_major_page(layout, config_.page_size, page);
        if (!reordered.ok()) {
          status = invalid("store_pages: sub-pool '" + op.side + "' has no page-major form: " + reordered.error().message);
          break;
        }
        payload.insert(payload.end(), reordered->begin(), reordered->end());
      } else {
        payload.insert(payload.end(), page.begin(), page.end());
      }
    }
    payloads.push_back(std::move(payload));
  }
  std::vector<StorePage> pages;
  if (status.ok())
    for (std::size_t k = 0; k < keys.size(); ++k) pages.push_back(StorePage{keys[k], payloads[k]});
  Result<StorePut> put = !status.ok() || pages.empty() ? Result<StorePut>(StorePut{}) : store->put_many(pages);
  KVTWIN_TRY_STATUS(host_arena_.release(op.thread));
  KVTWIN_TRY_STATUS(status);
  if (!put.ok()) return put.error();
  Ids out;
  for (std::size_t i = first; i < op.host.size(); ++i) out.values.push_back(static_cast<std::int64_t>(i));
  return Outcome(std::move(out));
}

OpResult GpuPool::load_stored(const LoadStored& op) {
  KVTWIN_TRY(PageStore * store, page_store("load_stored"));
  KVTWIN_TRY(const std::size_t side, side_named(op.side, "load_stored"));
  KVTWIN_TRY_STATUS(check_storage_pages("load_stored", side, op.host, op.hashes));
  const std::string space = storage_space(*store, kTokenMajorFormatTag, op.side);
  const bool with_bytes = host_arena_.host_bytes() != nullptr;
  const std::uint64_t page_bytes = host_arena_.page_bytes(side);
  const StoredPayloadLayout payload = stored_payload_layout(derived_.layouts[side], config_.page_size, page_bytes, with_bytes);
  const std::uint64_t payload_bytes = payload.total_bytes();
  // Every read first (a failing one changes nothing), then the pages, under the thread's lease.
  host_arena_.acquire(op.thread);
  std::vector<StoreRead> reads;
  for (std::uint64_t hash : op.hashes) {
    Result<StoreRead> r = store->get(StoredPageKey{space, hash});
    if (!r.ok()) {
      KVTWIN_TRY_STATUS(host_arena_.release(op.thread));
      return r.error();
    }
    if (r->outcome == StoreReadOutcome::hit && r->bytes.size() != payload_bytes) {
      KVTWIN_TRY_STATUS(host_arena_.release(op.thread));
      return make_error(ErrorKind::internal, "load_stored: a stored page's payload of " + num(r->bytes.size()) +
                                                 " bytes is not one of this pool's (" + num(payload_bytes) + " bytes)");
    }
    reads.push_back(std::move(r).value());
  }
  Ids out;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    if (reads[i].outcome != StoreReadOutcome::hit) {
      out.values.push_back(0);
      continue;
    }
    if (with_bytes) {
      Result<std::int64_t> physical = host_arena_.resolve(op.thread, side, op.host[i]);
      if (!physical.ok()) {
        KVTWIN_TRY_STATUS(host_arena_.release(op.thread));
        return physical.error();
      }
      std::memcpy(host_arena_.host_bytes() + static_cast<std::uint64_t>(*physical) * page_bytes,
                  reads[i].bytes.data() + payload.bytes_offset(), page_bytes);
    }
    out.values.push_back(1);
  }
  KVTWIN_TRY_STATUS(host_arena_.release(op.thread));
  return Outcome(std::move(out));
}

}  // namespace kvtwin::gpu
