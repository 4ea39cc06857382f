// The storage tier below the host arena (SPEC.md section 8, last bullet): a real on-disk page
// store in one folder, shared by both backends' host code. It is host code, not a backend: the
// model and the GPU implementation both hand it whole page envelopes and get them back.
//
// How it works. A stored page is keyed by a storage space, `model_name + "-" + format_tag` (a pool
// with no tag: the model name alone), and its page hash; it lives in one file of its own,
// `<space, %-escaped>@<hash, 16 hex digits>.page`, which holds a header (magic, version, the key,
// the payload's size and digest, a write sequence number, the header's own digest) and the page's
// bytes. A put writes a temporary file beside it, syncs it, makes room (evicting the least recently
// used pages), renames it over the final name and syncs the folder: the final name only ever holds
// a whole page, so a crash or a kill mid-write leaves at most a temporary file, which the next open
// removes. Every read is checked against the header and the payload digest: a torn or altered
// file is a miss, counted and reported as a corruption, and removed; never wrong bytes. A failing
// system call (a full disk, a folder without write permission) is an io Error that says what
// failed and what is kept; the store stays usable and consistent with the folder, and nothing it
// already held is lost (a put fails before it evicts anything when its own file cannot be
// written). Capacity `storage_bytes` counts the page files' bytes (header and payload).
// Eviction order is deterministic: least recently used by a logical clock (a put or a hit
// touches a page); at open the clock starts from the pages' write sequence numbers, ties broken
// by key. Nothing depends on the wall clock or the folder's listing order.
//
// Two fault switches (SPEC 10.15 and 10.16, off by default) reproduce the seed bugs of the
// storage keys: `store_zero_pages_as_all` keys a transfer by `hashes[-count:]` with Python's
// `[-0:]` semantics (zero pages keyed as every page), `store_ignores_format_tag` drops the format
// tag from the space, so a page of another layout reads back in its byte order.
//
// What it does not cover: several processes sharing one folder at once (open takes an exclusive
// lock and refuses a second store on the same folder), a power cut between a failed folder sync
// and the next one (the page reads back whole or not at all, but may be forgotten), recency of
// reads across a reopen (the order after a reopen is write order), and the host arena's leases
// (the caller holds them around a synchronous put or get, SPEC 8). The key is the space string:
// an untagged model "m-tm1" and model "m" tagged "tm1" share a space, as engines' keys do.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace kvtwin {

struct DenseEntryLayout;  // core/layout.h

// ------------------------------------------------------------------ fault switches (SPEC 10)

struct PageStoreFaults {
  bool store_zero_pages_as_all = false;   // 15: keys = hashes[-count:], so a count of 0 keys every page
  bool store_ignores_format_tag = false;  // 16: the space is the model name alone, whatever the tag

  bool any() const { return store_zero_pages_as_all || store_ignores_format_tag; }
  bool operator==(const PageStoreFaults&) const = default;
};

// One switch, described for people and for the harness's fault listing (as gpu/faults.h does).
struct PageStoreFaultInfo {
  std::string_view name;
  int spec_class = 0;
  std::string_view what;
  std::string_view where;
};

const std::vector<PageStoreFaultInfo>& page_store_fault_catalogue();
// Turns one switch on by name; an unknown name is an error listing the known ones.
Status set_page_store_fault(PageStoreFaults& faults, std::string_view name);
// The names of the switches that are on, comma-separated ("" when none).
std::string to_string(const PageStoreFaults& faults);

// ------------------------------------------------------------------ keys

// The storage space of a pool: `model_name + "-" + format_tag`, or `model_name` when the pool has
// no tag (an empty tag). Under store_ignores_format_tag, always the model name alone.
std::string storage_space(std::string_view model_name, std::string_view format_tag,
                          const PageStoreFaults& faults = {});

struct StoredPageKey {
  std::string space;
  std::uint64_t page_hash = 0;

  auto operator<=>(const StoredPageKey&) const = default;
};

// "space@0123456789abcdef", for messages.
std::string to_string(const StoredPageKey& key);

// The keys of a transfer of the last `page_count` pages of a chunk whose pages hash to
// `page_hashes` (a sliding-window side's live pages are the trailing ones): page_hashes[-count:],
// where a count of zero is no keys at all (SPEC 10.15). A count above the chunk's pages is an
// invalid_argument Error. Under store_zero_pages_as_all, a count of zero gives every page's key.
Result<std::vector<StoredPageKey>> stored_page_keys(std::string_view space, std::span<const std::uint64_t> page_hashes,
                                                    std::uint64_t page_count, const PageStoreFaults& faults = {});

// ------------------------------------------------------------------ the injection seam

// The system calls the store makes, named so a test can fail one of them.
enum class StoreIoStep : std::uint8_t {
  make_folder,  // create the folder (open)
  lock,         // the folder's lock file (open)
  scan,         // list the folder (open)
  create_temp,  // create a page's temporary file (put)
  write,        // one write of a header or a chunk of payload (put)
  sync_file,    // fsync of the temporary file (put)
  remove,       // unlink an evicted page, a corrupt file or a leftover temporary file
  rename,       // the temporary file over the final name (put)
  sync_folder,  // fsync of the folder after a rename or a removal
  read,         // open and read a page file (get, and its header at open)
};
std::string_view store_io_step_name(StoreIoStep step);

// Called before each system call with the path it concerns; a positive return is taken as that
// call's errno and the call is not made. kStoreIoSkip before a sync_file or sync_folder skips
// that sync as if it had succeeded (a test that needs no durability; anywhere else it is EINVAL).
// A test may also end the process there (the crash test does). Empty: every call is made.
using StoreIoHook = std::function<int(StoreIoStep step, const std::string& path)>;
inline constexpr int kStoreIoSkip = -1;

// ------------------------------------------------------------------ the store

struct PageStoreConfig {
  std::string folder;               // created when missing (its parent must exist)
  std::uint64_t storage_bytes = 0;  // capacity in page-file bytes; must be > 0
  PageStoreFaults faults;
  std::uint64_t write_chunk_bytes = std::uint64_t{1} << 20;  // the payload goes down in writes of at most this
  StoreIoHook io_hook;                                       // tests only
};

// The payload digest a page file records and every read checks: eight interleaved chains, a word
// folded in by h = rotl((h ^ w) * K, 31), K odd; each step is a bijection of the chain's state, so
// any one 8-byte word changed always changes the digest.
std::uint64_t page_store_digest(std::span<const std::uint8_t> bytes);

// The bytes of the file that stores a page of `payload_bytes` under `space`.
std::uint64_t stored_page_file_bytes(std::string_view space, std::uint64_t payload_bytes);

enum class StoreReadOutcome : std::uint8_t {
  hit,      // the page, whole and checked
  miss,     // not stored
  corrupt,  // stored, but its file did not check out: a miss, counted and reported, the file removed
};

struct StoreRead {
  StoreReadOutcome outcome = StoreReadOutcome::miss;
  std::vector<std::uint8_t> bytes;  // the page on a hit, else empty
};

struct StorePut {
  std::uint64_t pages_written = 0;
  std::uint64_t pages_already_stored = 0;  // with the same bytes: only touched, not rewritten
  std::vector<StoredPageKey> evicted;      // pages removed to make room, in eviction order
};

// One page of a put_many: its key and its bytes (not owned).
struct StorePage {
  StoredPageKey key;
  std::span<const std::uint8_t> bytes;
};

struct PageStoreStats {
  std::uint64_t pages = 0;       // stored now
  std::uint64_t bytes_used = 0;  // their files' bytes
  std::uint64_t puts_written = 0;
  std::uint64_t puts_already_stored = 0;
  std::uint64_t payload_bytes_written = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t payload_bytes_read = 0;
  std::uint64_t evictions = 0;
  std::uint64_t corruptions = 0;         // corrupt or vanished page files, at open or at a read
  std::uint64_t temp_files_removed = 0;  // left by a crash, removed at open
  std::uint64_t io_errors = 0;           // puts and gets that returned an io Error

  bool operator==(const PageStoreStats&) const = default;
};

class PageStore {
 public:
  // Opens (or creates) the store in config.folder: takes the folder's lock, removes leftover
  // temporary files, reads every page file's header (a bad one is a corruption: reported and
  // removed), and evicts down to storage_bytes. Errors: invalid_argument for a bad config, io
  // when the folder cannot be made, locked, listed or cleaned.
  static Result<PageStore> open(PageStoreConfig config);

  PageStore(PageStore&& other) noexcept;
  PageStore& operator=(PageStore&& other) noexcept;
  PageStore(const PageStore&) = delete;
  PageStore& operator=(const PageStore&) = delete;
  ~PageStore();  // releases the lock

  // This store's space for a pool (storage_space under this store's faults).
  std::string space(std::string_view model_name, std::string_view format_tag) const;
  // stored_page_keys under this store's faults.
  Result<std::vector<StoredPageKey>> keys(std::string_view space, std::span<const std::uint64_t> page_hashes,
                                          std::uint64_t page_count) const;

  // Stores one page atomically. invalid_argument: an empty page or space, a space too long for a
  // file name, a page file larger than storage_bytes. io: a system call failed; the store then
  // holds what it held (less any pages already evicted for this put, which only happens when the
  // new page's file was complete), and the error says so.
  Result<StorePut> put(const StoredPageKey& key, std::span<const std::uint8_t> page);
  // Stores several pages the same way with one folder sync for all (a put is one sync of each
  // page's file and one of the folder; most of its time). Each page is atomic on its own: a
  // crash may leave some of the batch stored and the rest not. A key twice in one batch, or a
  // batch larger than storage_bytes, is an invalid_argument Error; a failure before the renames
  // stores none of the batch and evicts nothing (as put); a failing rename stores the pages
  // before it, and the error says how many.
  Result<StorePut> put_many(std::span<const StorePage> pages);

  // Stores the last `page_count` pages of a chunk (page i of `chunk` at i * page_bytes, one per
  // hash) under keys(space, page_hashes, page_count), in one put_many: a count of zero stores
  // nothing. Returns the keys stored.
  Result<std::vector<StoredPageKey>> put_chunk_tail(std::string_view space, std::span<const std::uint64_t> page_hashes,
                                                    std::uint64_t page_count, std::span<const std::uint8_t> chunk,
                                                    std::uint64_t page_bytes);

  // Reads one page back, checked. io Error when the file exists but cannot be read (the page
  // stays stored).
  Result<StoreRead> get(const StoredPageKey& key);

  bool contains(const StoredPageKey& key) const { return index_.contains(key); }
  // Every stored page, the next to be evicted first.
  std::vector<StoredPageKey> eviction_order() const;
  const PageStoreStats& stats() const { return stats_; }
  // One line a corruption (the most recent kCorruptionReportsMax are kept; stats counts all).
  const std::vector<std::string>& corruption_reports() const { return corruption_reports_; }
  const PageStoreConfig& config() const { return config_; }
  // The file that holds (or would hold) a page.
  std::string page_path(const StoredPageKey& key) const;

  static constexpr std::size_t kCorruptionReportsMax = 64;
  // A space's %-escaped form, which names its files, is at most this long (a file name is 255).
  static constexpr std::size_t kEscapedSpaceBytesMax = 200;

 private:
  struct Entry {
    std::uint64_t file_bytes = 0;
    std::uint64_t payload_bytes = 0;
    std::uint64_t payload_digest = 0;
    std::uint64_t recency = 0;  // the logical clock when last touched
  };

  explicit PageStore(PageStoreConfig config);
  int hook(StoreIoStep step, const std::string& path) const;
  Status check_page(const StoredPageKey& key, std::span<const std::uint8_t> page) const;
  Status scan_folder();
  Status remove_file(const std::string& path, std::string_view why);
  Status sync_folder();
  void touch(const StoredPageKey& key, Entry& entry);
  void drop(const StoredPageKey& key);
  void report_corruption(std::string line);
  Error io_error(std::string_view doing, const StoredPageKey* key, StoreIoStep step, const std::string& path,
                 int code, std::string_view kept);

  PageStoreConfig config_;
  int lock_fd_ = -1;
  std::uint64_t clock_ = 0;  // the next recency and write sequence number
  std::map<StoredPageKey, Entry> index_;
  std::set<std::pair<std::uint64_t, StoredPageKey>> by_recency_;
  PageStoreStats stats_;
  std::vector<std::string> corruption_reports_;
};

// ------------------------------------------------------------------ a pool's scratch store

// The store a pool's storage tier uses (docs/storage.md "Pool operations"): a PageStore in a fresh
// folder of its own, `kvtwin-store-XXXXXX` under `parent` (the system's temporary folder when
// empty), removed with it: a pool never finds pages an earlier run stored. Its syncs are skipped
// (the folder is scratch; the store's own tests cover durability). Both backends open one the
// same way, so that their stores keep and evict the same pages.
class ScratchPageStore {
 public:
  // io Error (prefixed with `op`) when the folder cannot be made.
  static Result<std::unique_ptr<ScratchPageStore>> open(const std::string& parent, std::uint64_t storage_bytes,
                                                        PageStoreFaults faults, std::string_view op);
  ~ScratchPageStore();  // closes the store, then removes its folder
  ScratchPageStore(const ScratchPageStore&) = delete;
  ScratchPageStore& operator=(const ScratchPageStore&) = delete;

  PageStore& store() { return *store_; }

 private:
  ScratchPageStore() = default;
  std::string folder_;
  std::optional<PageStore> store_;
};

// Where the parts of a stored page's payload lie, for one side of a pool. Both backends write
// payloads of exactly total_bytes(), so that their stores' capacity in page-file bytes holds the
// same pages: a row count (8 bytes), `max_rows` row records of kStoredRowRecordBytes, then the
// page's bytes; tables only, the count alone. Both backends write a count of 0 and zero records
// (the model keeps its oracle identities beside the store), so that equal pages are equal
// payloads and both stores touch, rewrite and evict alike.
inline constexpr std::uint64_t kStoredRowRecordBytes = 17;  // source token, write number, written
struct StoredPayloadLayout {
  std::uint64_t max_rows = 0;    // page_size * layers * parts of the side
  std::uint64_t page_bytes = 0;  // the side's page envelope
  bool with_bytes = false;       // false: a tables-only pool (the count alone)

  std::uint64_t bytes_offset() const { return with_bytes ? 8 + max_rows * kStoredRowRecordBytes : 8; }
  std::uint64_t total_bytes() const { return bytes_offset() + (with_bytes ? page_bytes : 0); }
};
// The payload layout of a side of `layout`, `page_size` entries a page of `page_bytes`.
StoredPayloadLayout stored_payload_layout(const DenseEntryLayout& layout, std::uint64_t page_size,
                                          std::uint64_t page_bytes, bool with_bytes);

}  // namespace kvtwin
