// The on-disk page store: see page_store.h for its rules.
//
// A page file, all integers little-endian:
//   [0, 8)          magic "kvtwPAGE"
//   [8, 12)         version (1)
//   [12, 16)        space_bytes s
//   [16, 24)        page hash
//   [24, 32)        payload bytes n
//   [32, 40)        payload digest (page_store_digest)
//   [40, 48)        write sequence number (the store's logical clock when it was written)
//   [48, 48+s)      the space
//   [48+s, 56+s)    header digest: digest_bytes (core/oracle.h) of [0, 48+s)
//   [56+s, 56+s+n)  the payload
#include "core/page_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/layout.h"
#include "core/oracle.h"
#include "core/printable.h"
#include "core/rng.h"

namespace kvtwin {
namespace {

constexpr char kMagic[8] = {'k', 'v', 't', 'w', 'P', 'A', 'G', 'E'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kFixedHeaderBytes = 48;
constexpr std::string_view kPageSuffix = ".page";
constexpr std::string_view kTempSuffix = ".page.tmp";
constexpr std::string_view kLockName = "kvtwin-store.lock";

void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{p[i]} << (8 * i);
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

std::string hex16(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = kDigits[v & 15];
  return s;
}

bool parse_hex16(std::string_view s, std::uint64_t& v) {
  if (s.size() != 16) return false;
  v = 0;
  for (char c : s) {
    int d = 0;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return false;
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Letters, digits, '-' and '_' stay; '.' stays except first (no hidden files); all else is %XX.
std::string escape_space(std::string_view space) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (std::size_t i = 0; i < space.size(); ++i) {
    const auto c = static_cast<unsigned char>(space[i]);
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_' || (c == '.' && i > 0);
    if (keep) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

// The inverse of escape_space; false unless `escaped` is exactly what escape_space makes.
bool unescape_space(std::string_view escaped, std::string& space) {
  space.clear();
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '%') {
      space.push_back(escaped[i]);
      continue;
    }
    if (i + 2 >= escaped.size()) return false;
    int v = 0;
    for (std::size_t k = 1; k <= 2; ++k) {
      const char c = escaped[i + k];
      int d = 0;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return false;
      v = v * 16 + d;
    }
    space.push_back(static_cast<char>(v));
    i += 2;
  }
  return escape_space(space) == escaped;
}

// "<escaped>@<hex>.page" -> the key; false for a name this store did not make.
bool parse_page_name(std::string_view name, StoredPageKey& key) {
  if (!ends_with(name, kPageSuffix)) return false;
  const std::string_view stem = name.substr(0, name.size() - kPageSuffix.size());
  const std::size_t at = stem.rfind('@');
  if (at == std::string_view::npos || at == 0) return false;
  return parse_hex16(stem.substr(at + 1), key.page_hash) && unescape_space(stem.substr(0, at), key.space);
}

std::vector<std::uint8_t> encode_header(const StoredPageKey& key, std::uint64_t payload_bytes,
                                        std::uint64_t payload_digest, std::uint64_t sequence) {
  std::vector<std::uint8_t> h(kFixedHeaderBytes + key.space.size() + 8);
  std::memcpy(h.data(), kMagic, 8);
  put_u32(h.data() + 8, kVersion);
  put_u32(h.data() + 12, static_cast<std::uint32_t>(key.space.size()));
  put_u64(h.data() + 16, key.page_hash);
  put_u64(h.data() + 24, payload_bytes);
  put_u64(h.data() + 32, payload_digest);
  put_u64(h.data() + 40, sequence);
  std::memcpy(h.data() + kFixedHeaderBytes, key.space.data(), key.space.size());
  const std::size_t covered = kFixedHeaderBytes + key.space.size();
  put_u64(h.data() + covered, digest_bytes(std::span<const std::uint8_t>(h.data(), covered)));
  return h;
}

struct DecodedHeader {
  std::uint64_t payload_bytes = 0;
  std::uint64_t payload_digest = 0;
  std::uint64_t sequence = 0;
};

// Checks a header read from the file of `key` whose size is `file_bytes`. Empty string: good;
// else why not.
std::string check_header(std::span<const std::uint8_t> h, const StoredPageKey& key, std::uint64_t file_bytes,
                         DecodedHeader& out) {
  const std::size_t want = kFixedHeaderBytes + key.space.size() + 8;
  if (h.size() < want) return "the file is shorter than its header (" + std::to_string(file_bytes) + " bytes)";
  if (std::memcmp(h.data(), kMagic, 8) != 0) return "the file does not start with the page magic";
  if (get_u32(h.data() + 8) != kVersion)
    return "page format version " + std::to_string(get_u32(h.data() + 8)) + ", this build reads " +
           std::to_string(kVersion);
  const std::size_t covered = kFixedHeaderBytes + key.space.size();
  if (get_u32(h.data() + 12) != key.space.size() ||
      std::memcmp(h.data() + kFixedHeaderBytes, key.space.data(), key.space.size()) != 0 ||
      get_u64(h.data() + 16) != key.page_hash)
    return "the header names another key than the file name";
  if (get_u64(h.data() + covered) != digest_bytes(h.subspan(0, covered))) return "the header digest does not match";
  out.payload_bytes = get_u64(h.data() + 24);
  out.payload_digest = get_u64(h.data() + 32);
  out.sequence = get_u64(h.data() + 40);
  if (out.payload_bytes != file_bytes - want)
    return "the file holds " + std::to_string(file_bytes - want) + " payload bytes, its header says " +
           std::to_string(out.payload_bytes);
  return {};
}

// Reads exactly out.size() bytes; errno-style code on failure (EIO for a short file).
int read_exactly(int fd, std::span<std::uint8_t> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

std::string advice_for(int code) {
  switch (code) {
    case ENOSPC:
    case EDQUOT:
      return "the disk is full";
    case EACCES:
    case EPERM:
      return "no permission";
    case EROFS:
      return "the file system is read-only";
    default:
      return std::strerror(code);
  }
}

}  // namespace

// ------------------------------------------------------------------ fault switches

const std::vector<PageStoreFaultInfo>& page_store_fault_catalogue() {
  static const std::vector<PageStoreFaultInfo> kAll = {
      {"store_zero_pages_as_all", 15,
       "a transfer's keys are page_hashes[-page_count:] with Python's [-0:] semantics: a count of zero keys "
       "every page of the chunk, so pages that were never transferred are stored and later read back as hits",
       "core/page_store.cpp stored_page_keys(); every put_chunk_tail() and every caller of keys()"},
      {"store_ignores_format_tag", 16,
       "the storage space is the model name alone, whatever the pool's format tag: a page written under the "
       "page-major law reads back into a token-major pool in the wrong byte order",
       "core/page_store.cpp storage_space(); every PageStore::space() caller"},
  };
  return kAll;
}

Status set_page_store_fault(PageStoreFaults& faults, std::string_view name) {
  if (name == "store_zero_pages_as_all") {
    faults.store_zero_pages_as_all = true;
    return ok_status();
  }
  if (name == "store_ignores_format_tag") {
    faults.store_ignores_format_tag = true;
    return ok_status();
  }
  std::string known;
  for (const PageStoreFaultInfo& f : page_store_fault_catalogue()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  return make_error(ErrorKind::invalid_argument,
                    "unknown page store fault '" + printable(name) + "'; the known ones are " + known);
}

std::string to_string(const PageStoreFaults& faults) {
  std::string s;
  if (faults.store_zero_pages_as_all) s += "store_zero_pages_as_all";
  if (faults.store_ignores_format_tag) s += std::string(s.empty() ? "" : ",") + "store_ignores_format_tag";
  return s;
}

// ------------------------------------------------------------------ keys

std::string storage_space(std::string_view model_name, std::string_view format_tag, const PageStoreFaults& faults) {
  // SPEC 8: model_name + "-" + format_tag; a pool with no tag stores under the model name alone.
  if (format_tag.empty() || faults.store_ignores_format_tag) return std::string(model_name);
  return std::string(model_name) + "-" + std::string(format_tag);
}

std::string to_string(const StoredPageKey& key) { return printable(key.space) + "@" + hex16(key.page_hash); }

Result<std::vector<StoredPageKey>> stored_page_keys(std::string_view space, std::span<const std::uint64_t> page_hashes,
                                                    std::uint64_t page_count, const PageStoreFaults& faults) {
  if (page_count > page_hashes.size())
    return make_error(ErrorKind::invalid_argument,
                      "a transfer of " + std::to_string(page_count) + " pages from a chunk of " +
                          std::to_string(page_hashes.size()) + " page hashes: give one hash a page");
  // SPEC 10.15: the last page_count hashes, and none for a count of zero. The fault is Python's
  // page_hashes[-page_count:], where [-0:] is the whole list.
  std::uint64_t taken = page_count;
  if (page_count == 0 && faults.store_zero_pages_as_all) taken = page_hashes.size();
  std::vector<StoredPageKey> keys;
  keys.reserve(taken);
  for (std::size_t i = page_hashes.size() - taken; i < page_hashes.size(); ++i)
    keys.push_back(StoredPageKey{std::string(space), page_hashes[i]});
  return keys;
}

std::string_view store_io_step_name(StoreIoStep step) {
  switch (step) {
    case StoreIoStep::make_folder: return "make_folder";
    case StoreIoStep::lock: return "lock";
    case StoreIoStep::scan: return "scan";
    case StoreIoStep::create_temp: return "create_temp";
    case StoreIoStep::write: return "write";
    case StoreIoStep::sync_file: return "sync_file";
    case StoreIoStep::remove: return "remove";
    case StoreIoStep::rename: return "rename";
    case StoreIoStep::sync_folder: return "sync_folder";
    case StoreIoStep::read: return "read";
  }
  return "?";
}

// The payload's digest: eight interleaved chains, each word folded in by h = rotl((h ^ w) * K, 31)
// with K odd. Every step is a bijection of the chain's state for a given word, so a page that
// differs from the stored one in any single 8-byte word always digests differently (several
// words: a 2^-64 chance); the eight chains run side by side, about five times as fast as
// digest_bytes (core/oracle.h), which a read would otherwise spend most of its time in.
std::uint64_t page_store_digest(std::span<const std::uint8_t> bytes) {
  constexpr std::size_t kLanes = 8;
  constexpr std::uint64_t kOdd = 0x9e3779b97f4a7c15ULL;
  std::uint64_t h[kLanes];
  for (std::size_t l = 0; l < kLanes; ++l) h[l] = splitmix64_mix(0x6a09e667f3bcc909ULL ^ bytes.size() ^ (l << 56));
  std::size_t i = 0;
  for (; i + 8 * kLanes <= bytes.size(); i += 8 * kLanes) {
    std::uint64_t w[kLanes];
    std::memcpy(w, bytes.data() + i, sizeof w);
    for (std::size_t l = 0; l < kLanes; ++l) h[l] = std::rotl((h[l] ^ w[l]) * kOdd, 31);
  }
  for (std::size_t l = 0; i + 8 <= bytes.size(); i += 8, ++l) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, 8);
    h[l] = std::rotl((h[l] ^ w) * kOdd, 31);
  }
  std::uint64_t tail = 0;
  for (std::size_t s = 0; i < bytes.size(); ++i, s += 8) tail |= std::uint64_t{bytes[i]} << s;
  std::uint64_t out = splitmix64_mix(tail ^ 0xff51afd7ed558ccdULL);
  for (std::size_t l = 0; l < kLanes; ++l) out = splitmix64_mix(out ^ h[l]);
  return out;
}

std::uint64_t stored_page_file_bytes(std::string_view space, std::uint64_t payload_bytes) {
  return kFixedHeaderBytes + space.size() + 8 + payload_bytes;
}

// ------------------------------------------------------------------ the store

PageStore::PageStore(PageStoreConfig config) : config_(std::move(config)) {}

PageStore::PageStore(PageStore&& other) noexcept
    : config_(std::move(other.config_)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      clock_(other.clock_),
      index_(std::move(other.index_)),
      by_recency_(std::move(other.by_recency_)),
      stats_(other.stats_),
      corruption_reports_(std::move(other.corruption_reports_)) {}

PageStore& PageStore::operator=(PageStore&& other) noexcept {
  if (this == &other) return *this;
  if (lock_fd_ >= 0) ::close(lock_fd_);
  config_ = std::move(other.config_);
  lock_fd_ = std::exchange(other.lock_fd_, -1);
  clock_ = other.clock_;
  index_ = std::move(other.index_);
  by_recency_ = std::move(other.by_recency_);
  stats_ = other.stats_;
  corruption_reports_ = std::move(other.corruption_reports_);
  return *this;
}

PageStore::~PageStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing the descriptor releases the flock
}

int PageStore::hook(StoreIoStep step, const std::string& path) const {
  if (!config_.io_hook) return 0;
  const int code = config_.io_hook(step, path);
  if (code >= 0) return code;
  // kStoreIoSkip is passed on for the two sync steps, which skip their call on it.
  return code == kStoreIoSkip && (step == StoreIoStep::sync_file || step == StoreIoStep::sync_folder) ? code : EINVAL;
}

std::string PageStore::page_path(const StoredPageKey& key) const {
  return config_.folder + "/" + escape_space(key.space) + "@" + hex16(key.page_hash) + std::string(kPageSuffix);
}

std::string PageStore::space(std::string_view model_name, std::string_view format_tag) const {
  return storage_space(model_name, format_tag, config_.faults);
}

Result<std::vector<StoredPageKey>> PageStore::keys(std::string_view space, std::span<const std::uint64_t> page_hashes,
                                                   std::uint64_t page_count) const {
  return stored_page_keys(space, page_hashes, page_count, config_.faults);
}

Error PageStore::io_error(std::string_view doing, const StoredPageKey* key, StoreIoStep step, const std::string& path,
                          int code, std::string_view kept) {
  ++stats_.io_errors;
  std::string m = "page store " + printable(config_.folder, 400) + ": cannot " + std::string(doing);
  if (key) m += " page " + to_string(*key);
  m += ": " + std::string(store_io_step_name(step)) + " of " + printable(path, 400) + " failed (" +
       std::strerror(code) + ")";
  const std::string advice = advice_for(code);
  if (advice != std::strerror(code)) m += ": " + advice;
  m += "; " + std::string(kept);
  return make_error(ErrorKind::io, std::move(m));
}

void PageStore::touch(const StoredPageKey& key, Entry& entry) {
  by_recency_.erase({entry.recency, key});
  entry.recency = clock_++;
  by_recency_.insert({entry.recency, key});
}

void PageStore::drop(const StoredPageKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  by_recency_.erase({it->second.recency, key});
  stats_.bytes_used -= it->second.file_bytes;
  --stats_.pages;
  index_.erase(it);
}

void PageStore::report_corruption(std::string line) {
  ++stats_.corruptions;
  if (corruption_reports_.size() == kCorruptionReportsMax) corruption_reports_.erase(corruption_reports_.begin());
  corruption_reports_.push_back(std::move(line));
}

Status PageStore::remove_file(const std::string& path, std::string_view why) {
  int code = hook(StoreIoStep::remove, path);
  if (code == 0 && ::unlink(path.c_str()) != 0 && errno != ENOENT) code = errno;
  if (code != 0)
    return io_error("remove " + std::string(why), nullptr, StoreIoStep::remove, path, code,
                    "the pages stored are kept");
  return ok_status();
}

Status PageStore::sync_folder() {
  int code = hook(StoreIoStep::sync_folder, config_.folder);
  if (code == kStoreIoSkip) return ok_status();
  if (code == 0) {
    const int fd = ::open(config_.folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      code = errno;
    } else {
      if (::fsync(fd) != 0) code = errno;
      ::close(fd);
    }
  }
  if (code != 0)
    return io_error("sync the folder", nullptr, StoreIoStep::sync_folder, config_.folder, code,
                    "every page reads back whole or not at all, but a power cut may forget the latest changes");
  return ok_status();
}

Result<PageStore> PageStore::open(PageStoreConfig config) {
  if (config.folder.empty())
    return make_error(ErrorKind::invalid_argument, "page store: give a folder (--storage-dir)");
  if (config.storage_bytes == 0)
    return make_error(ErrorKind::invalid_argument,
                      "page store " + printable(config.folder, 400) + ": storage_bytes is 0; give a capacity");
  if (config.write_chunk_bytes == 0)
    return make_error(ErrorKind::invalid_argument, "page store: write_chunk_bytes is 0");
  while (config.folder.size() > 1 && config.folder.back() == '/') config.folder.pop_back();
  PageStore store(std::move(config));
  const std::string& folder = store.config_.folder;

  int code = store.hook(StoreIoStep::make_folder, folder);
  if (code == 0 && ::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) code = errno;
  if (code == 0) {
    struct stat st {};
    if (::stat(folder.c_str(), &st) != 0)
      code = errno;
    else if (!S_ISDIR(st.st_mode))
      code = ENOTDIR;
  }
  if (code != 0)
    return store.io_error("open the store", nullptr, StoreIoStep::make_folder, folder, code,
                          "the run can go on without the storage tier");

  // One store a folder at a time: the lock is released when its descriptor closes (on exit too).
  const std::string lock_path = folder + "/" + std::string(kLockName);
  code = store.hook(StoreIoStep::lock, lock_path);
  if (code == 0) {
    store.lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (store.lock_fd_ < 0) code = errno;
  }
  if (code == 0 && ::flock(store.lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    code = errno;
    if (code == EWOULDBLOCK)
      return make_error(ErrorKind::io, "page store " + printable(folder, 400) +
                                           ": another store has this folder open; give each run its own folder");
  }
  if (code != 0)
    return store.io_error("open the store", nullptr, StoreIoStep::lock, lock_path, code,
                          "the run can go on without the storage tier");

  KVTWIN_TRY_STATUS(store.scan_folder());
  // A smaller capacity than last time: evict down to it, in the usual order.
  bool evicted = false;
  while (store.stats_.bytes_used > store.config_.storage_bytes) {
    const StoredPageKey victim = store.by_recency_.begin()->second;
    KVTWIN_TRY_STATUS(store.remove_file(store.page_path(victim), "an evicted page"));
    store.drop(victim);
    ++store.stats_.evictions;
    evicted = true;
  }
  if (evicted) KVTWIN_TRY_STATUS(store.sync_folder());
  return store;
}

Status PageStore::scan_folder() {
  const std::string& folder = config_.folder;
  std::vector<std::string> names;
  int code = hook(StoreIoStep::scan, folder);
  if (code == 0) {
    DIR* dir = ::opendir(folder.c_str());
    if (!dir) {
      code = errno;
    } else {
      while (const dirent* e = ::readdir(dir)) names.emplace_back(e->d_name);
      ::closedir(dir);
    }
  }
  if (code != 0)
    return io_error("open the store", nullptr, StoreIoStep::scan, folder, code,
                    "the run can go on without the storage tier");
  // The listing order is the file system's: sort, so that reports and ties never depend on it.
  std::sort(names.begin(), names.end());

  bool removed = false;
  for (const std::string& name : names) {
    const std::string path = folder + "/" + name;
    if (ends_with(name, kTempSuffix)) {
      // A put that never reached its rename (a crash, a kill): never a page.
      KVTWIN_TRY_STATUS(remove_file(path, "a leftover temporary file"));
      ++stats_.temp_files_removed;
      removed = true;
      continue;
    }
    StoredPageKey key;
    if (!parse_page_name(name, key)) continue;  // not a file of this store: left alone

    std::string why;
    DecodedHeader header;
    code = hook(StoreIoStep::read, path);
    std::uint64_t file_bytes = 0;
    if (code == 0) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        code = errno;
      } else {
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
          code = errno;
        } else {
          file_bytes = static_cast<std::uint64_t>(st.st_size);
          std::vector<std::uint8_t> h(std::min<std::uint64_t>(file_bytes, kFixedHeaderBytes + key.space.size() + 8));
          const int read_code = read_exactly(fd, h);
          if (read_code != 0 && read_code != EIO) code = read_code;
          else if (read_code == EIO) why = "the file could not be read whole";
          else why = check_header(h, key, file_bytes, header);
        }
        ::close(fd);
      }
    }
    if (code != 0)
      return io_error("open the store", &key, StoreIoStep::read, path, code,
                      "the run can go on without the storage tier");
    if (!why.empty()) {
      report_corruption("page store " + printable(folder, 400) + ": at open, " + printable(name, 400) + ": " + why +
                        "; removed");
      KVTWIN_TRY_STATUS(remove_file(path, "a corrupt page file"));
      removed = true;
      continue;
    }
    Entry entry{file_bytes, header.payload_bytes, header.payload_digest, header.sequence};
    index_.emplace(key, entry);
    by_recency_.insert({entry.recency, key});
    stats_.bytes_used += file_bytes;
    ++stats_.pages;
    clock_ = std::max(clock_, header.sequence + 1);
  }
  if (removed) KVTWIN_TRY_STATUS(sync_folder());
  return ok_status();
}

Status PageStore::check_page(const StoredPageKey& key, std::span<const std::uint8_t> page) const {
  if (key.space.empty()) return make_error(ErrorKind::invalid_argument, "page store: a page key needs a space");
  if (escape_space(key.space).size() > kEscapedSpaceBytesMax)
    return make_error(ErrorKind::invalid_argument, "page store: the space '" + printable(key.space) + "' is too long (" +
                                                       std::to_string(key.space.size()) +
                                                       " bytes) to name a file; use a shorter model name");
  if (page.empty()) return make_error(ErrorKind::invalid_argument, "page store: page " + to_string(key) + " is empty");
  return ok_status();
}

Result<StorePut> PageStore::put(const StoredPageKey& key, std::span<const std::uint8_t> page) {
  const StorePage one{key, page};
  return put_many(std::span<const StorePage>(&one, 1));
}

Result<StorePut> PageStore::put_many(std::span<const StorePage> pages) {
  // 0. Checks, and the pages already stored with these very bytes (touched, not rewritten).
  struct Pending {
    const StorePage* page = nullptr;
    std::uint64_t digest = 0;
    std::uint64_t file_bytes = 0;
    std::uint64_t sequence = 0;
    std::string temp;
  };
  std::vector<Pending> pending;
  std::set<StoredPageKey> batch;
  std::uint64_t batch_file_bytes = 0;
  StorePut result;
  for (const StorePage& p : pages) {
    KVTWIN_TRY_STATUS(check_page(p.key, p.bytes));
    if (!batch.insert(p.key).second)
      return make_error(ErrorKind::invalid_argument, "page store: page " + to_string(p.key) + " twice in one put");
    batch_file_bytes += stored_page_file_bytes(p.key.space, p.bytes.size());
  }
  if (batch_file_bytes > config_.storage_bytes)
    return make_error(ErrorKind::invalid_argument,
                      "page store " + printable(config_.folder, 400) + ": " + std::to_string(pages.size()) +
                          " pages need files of " + std::to_string(batch_file_bytes) +
                          " bytes, more than storage_bytes " + std::to_string(config_.storage_bytes) +
                          "; give a larger capacity");
  for (const StorePage& p : pages) {
    const std::uint64_t digest = page_store_digest(p.bytes);
    auto it = index_.find(p.key);
    if (it != index_.end() && it->second.payload_bytes == p.bytes.size() && it->second.payload_digest == digest) {
      touch(p.key, it->second);
      ++stats_.puts_already_stored;
      ++result.pages_already_stored;
      continue;
    }
    pending.push_back(Pending{&p, digest, stored_page_file_bytes(p.key.space, p.bytes.size()), 0, {}});
  }
  if (pending.empty()) return result;

  // 1. Every new page whole into its temporary file, synced. Nothing stored is touched yet; a
  // failure removes this batch's temporary files and changes nothing else.
  auto discard_temps = [&] {
    for (const Pending& q : pending)
      if (!q.temp.empty()) ::unlink(q.temp.c_str());  // best effort; a leftover goes at the next open
  };
  for (Pending& q : pending) {
    const StoredPageKey& key = q.page->key;
    const std::string final_path = page_path(key);
    const std::string temp = final_path.substr(0, final_path.size() - kPageSuffix.size()) + std::string(kTempSuffix);
    q.sequence = clock_++;
    const std::vector<std::uint8_t> header = encode_header(key, q.page->bytes.size(), q.digest, q.sequence);
    StoreIoStep step = StoreIoStep::create_temp;
    int code = hook(step, temp);
    int fd = -1;
    if (code == 0) {
      fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) code = errno;
    }
    if (fd >= 0) q.temp = temp;
    auto write_all = [&](std::span<const std::uint8_t> bytes) {
      std::size_t done = 0;
      while (done < bytes.size()) {
        const std::size_t n = std::min<std::uint64_t>(bytes.size() - done, config_.write_chunk_bytes);
        if (int c = hook(StoreIoStep::write, temp); c != 0) return c;
        const ssize_t w = ::write(fd, bytes.data() + done, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          return errno;
        }
        done += static_cast<std::size_t>(w);
      }
      return 0;
    };
    if (code == 0) {
      step = StoreIoStep::write;
      code = write_all(header);
      if (code == 0) code = write_all(q.page->bytes);
    }
    if (code == 0) {
      step = StoreIoStep::sync_file;
      code = hook(step, temp);
      if (code == kStoreIoSkip)
        code = 0;
      else if (code == 0 && ::fsync(fd) != 0)
        code = errno;
    }
    if (fd >= 0 && ::close(fd) != 0 && code == 0) {
      step = StoreIoStep::write;
      code = errno;
    }
    if (code != 0) {
      discard_temps();
      return io_error("store", &key, step, temp, code, "nothing was evicted and the pages stored before are kept");
    }
  }

  // 2. Room: evict least recently used pages, never one of this batch (a rename replaces those).
  std::uint64_t replaced = 0, incoming = 0;
  for (const Pending& q : pending) {
    incoming += q.file_bytes;
    if (auto it = index_.find(q.page->key); it != index_.end()) replaced += it->second.file_bytes;
  }
  auto victim = by_recency_.begin();
  while (stats_.bytes_used - replaced + incoming > config_.storage_bytes) {
    while (victim != by_recency_.end() && batch.contains(victim->second)) ++victim;
    // The batch alone fits storage_bytes (checked above), so a page outside it is left to evict.
    KVTWIN_CHECK(victim != by_recency_.end(), "page store: nothing left to evict, yet the pages do not fit");
    const StoredPageKey victim_key = victim->second;
    ++victim;
    const std::string victim_path = page_path(victim_key);
    int code = hook(StoreIoStep::remove, victim_path);
    if (code == 0 && ::unlink(victim_path.c_str()) != 0 && errno != ENOENT) code = errno;
    if (code != 0) {
      discard_temps();
      return io_error("make room for", &pending.front().page->key, StoreIoStep::remove, victim_path, code,
                      "no page of this put was stored; " + std::to_string(result.evicted.size()) +
                          " pages were evicted for it, the rest are kept");
    }
    drop(victim_key);
    ++stats_.evictions;
    result.evicted.push_back(victim_key);
  }

  // 3. Each whole file under its name, in one step.
  for (std::size_t i = 0; i < pending.size(); ++i) {
    Pending& q = pending[i];
    const StoredPageKey& key = q.page->key;
    const std::string final_path = page_path(key);
    int code = hook(StoreIoStep::rename, q.temp);
    if (code == 0 && ::rename(q.temp.c_str(), final_path.c_str()) != 0) code = errno;
    if (code != 0) {
      for (std::size_t k = i; k < pending.size(); ++k) ::unlink(pending[k].temp.c_str());
      return io_error("store", &key, StoreIoStep::rename, final_path, code,
                      std::to_string(i) + " pages of this put were stored, the rest not; " +
                          std::to_string(result.evicted.size()) + " pages were evicted for it, the rest are kept");
    }
    q.temp.clear();
    drop(key);
    const Entry entry{q.file_bytes, q.page->bytes.size(), q.digest, q.sequence};
    index_.emplace(key, entry);
    by_recency_.insert({q.sequence, key});
    stats_.bytes_used += q.file_bytes;
    ++stats_.pages;
    ++stats_.puts_written;
    stats_.payload_bytes_written += q.page->bytes.size();
    ++result.pages_written;
  }

  // 4. The renames made durable, all with one sync of the folder.
  KVTWIN_TRY_STATUS(sync_folder());
  return result;
}

Result<std::vector<StoredPageKey>> PageStore::put_chunk_tail(std::string_view space,
                                                             std::span<const std::uint64_t> page_hashes,
                                                             std::uint64_t page_count, std::span<const std::uint8_t> chunk,
                                                             std::uint64_t page_bytes) {
  if (page_bytes == 0 || chunk.size() != page_hashes.size() * page_bytes)
    return make_error(ErrorKind::invalid_argument,
                      "page store: a chunk of " + std::to_string(chunk.size()) + " bytes is not " +
                          std::to_string(page_hashes.size()) + " pages of " + std::to_string(page_bytes) + " bytes");
  KVTWIN_TRY(std::vector<StoredPageKey> keyed, keys(space, page_hashes, page_count));
  // keyed[i] is the key of chunk page first + i: the trailing pages.
  const std::size_t first = page_hashes.size() - keyed.size();
  std::vector<StorePage> pages;
  for (std::size_t i = 0; i < keyed.size(); ++i)
    pages.push_back(StorePage{keyed[i], chunk.subspan((first + i) * page_bytes, page_bytes)});
  if (pages.empty()) return keyed;
  KVTWIN_TRY_STATUS(put_many(pages));
  return keyed;
}

Result<StoreRead> PageStore::get(const StoredPageKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return StoreRead{};
  }
  const std::string path = page_path(key);
  const Entry entry = it->second;
  int code = hook(StoreIoStep::read, path);
  std::string why;
  std::vector<std::uint8_t> header(kFixedHeaderBytes + key.space.size() + 8);
  StoreRead read;
  if (code == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      code = errno;
      if (code == ENOENT) {
        why = "its file has vanished";
        code = 0;
      }
    } else {
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        code = errno;
      } else if (static_cast<std::uint64_t>(st.st_size) != entry.file_bytes) {
        why = "the file holds " + std::to_string(st.st_size) + " bytes, " + std::to_string(entry.file_bytes) +
              " were stored";
      } else {
        code = read_exactly(fd, header);
        DecodedHeader decoded;
        if (code == 0) why = check_header(header, key, entry.file_bytes, decoded);
        if (code == 0 && why.empty() &&
            (decoded.payload_bytes != entry.payload_bytes || decoded.payload_digest != entry.payload_digest))
          why = "the header describes other bytes than were stored";
        if (code == 0 && why.empty()) {
          read.bytes.resize(entry.payload_bytes);
          code = read_exactly(fd, read.bytes);
          if (code == 0 && page_store_digest(read.bytes) != entry.payload_digest)
            why = "the payload digest does not match";
        }
      }
      ::close(fd);
    }
  }
  if (code != 0)
    return io_error("read", &key, StoreIoStep::read, path, code, "the page stays stored; read it as a miss");
  if (!why.empty()) {
    // Never wrong bytes: a miss, reported, and the file gone so it cannot be read again.
    drop(key);
    ++stats_.misses;
    const Status removed = remove_file(path, "a corrupt page file");
    report_corruption("page store " + printable(config_.folder, 400) + ": page " + to_string(key) + " in " +
                      printable(path, 400) + ": " + why + (removed.ok() ? "; removed" : "; could not remove it") +
                      ", read as a miss");
    return StoreRead{StoreReadOutcome::corrupt, {}};
  }
  touch(key, index_.find(key)->second);
  ++stats_.hits;
  stats_.payload_bytes_read += read.bytes.size();
  read.outcome = StoreReadOutcome::hit;
  return read;
}

std::vector<StoredPageKey> PageStore::eviction_order() const {
  std::vector<StoredPageKey> order;
  order.reserve(by_recency_.size());
  for (const auto& [recency, key] : by_recency_) order.push_back(key);
  return order;
}

// ------------------------------------------------------------------ a pool's scratch store

Result<std::unique_ptr<ScratchPageStore>> ScratchPageStore::open(const std::string& parent, std::uint64_t storage_bytes,
                                                                 PageStoreFaults faults, std::string_view op) {
  std::error_code ec;
  const std::filesystem::path base = parent.empty() ? std::filesystem::temp_directory_path(ec) : std::filesystem::path(parent);
  if (ec) return make_error(ErrorKind::io, std::string(op) + ": no temporary folder for the storage tier: " + ec.message());
  std::string pattern = (base / "kvtwin-store-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    const int err = errno;
    return make_error(ErrorKind::io, std::string(op) + ": cannot make a folder for the storage tier under " +
                                         base.string() + ": " + std::strerror(err));
  }
  std::unique_ptr<ScratchPageStore> out(new ScratchPageStore());
  out->folder_ = pattern;
  PageStoreConfig c;
  c.folder = pattern + "/pages";
  c.storage_bytes = storage_bytes;
  c.faults = faults;
  c.io_hook = [](StoreIoStep step, const std::string&) {
    return step == StoreIoStep::sync_file || step == StoreIoStep::sync_folder ? kStoreIoSkip : 0;
  };
  KVTWIN_TRY(PageStore store, PageStore::open(std::move(c)));
  out->store_.emplace(std::move(store));
  return out;
}

ScratchPageStore::~ScratchPageStore() {
  store_.reset();
  std::error_code ignored;
  if (!folder_.empty()) std::filesystem::remove_all(folder_, ignored);
}

StoredPayloadLayout stored_payload_layout(const DenseEntryLayout& layout, std::uint64_t page_size,
                                          std::uint64_t page_bytes, bool with_bytes) {
  const std::uint64_t rows_per_entry = layout.parts.empty() ? 0 : layout.parts.front().layer_num * layout.parts.size();
  return StoredPayloadLayout{page_size * rows_per_entry, page_bytes, with_bytes};
}

}  // namespace kvtwin
