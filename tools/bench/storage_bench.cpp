// kvtwin_storage_bench: the on-disk page store's throughput (core/page_store.h) against a plain
// sequential file of the same bytes on the same disk, measured in the same run (Google Benchmark;
// speed is measured here, never in timed tests).
//
//   BM_StoreWrite  put N pages into a fresh store (each: temporary file, fsync, rename, folder
//                  fsync) and write the same bytes as one plain file (sequential writes, one fsync
//                  at the end). Also a plain file synced after every page, which is where the
//                  store's extra time goes. Args: page KiB, pages a put_many (1: one put a
//                  page; 16: one folder sync for 16 pages); 32 MiB a run.
//   BM_StoreRead   get N pages back (read, header and digest checks, a fresh vector a page) and
//                  read the plain file back in page-sized reads. Both are warm in the page cache.
//
// Counters: store_MiBps and plain_MiBps (the same bytes); store_over_plain = store throughput /
// plain throughput (1 would be free; the ratio is the figure to compare between runs and disks);
// for writes also plain_sync_each_MiBps and store_over_plain_sync_each.
// The folder is $KVTWIN_BENCH_DIR or the system's temporary folder. Run from a Release build:
//   build/default/tools/bench/kvtwin_storage_bench
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/page_store.h"
#include "core/rng.h"

namespace kvtwin {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kBytesPerRun = std::uint64_t{32} << 20;

fs::path bench_dir() {
  const char* env = std::getenv("KVTWIN_BENCH_DIR");
  return fs::path(env ? env : fs::temp_directory_path().string()) / ("kvtwin-storage-bench-" + std::to_string(::getpid()));
}

std::vector<std::uint8_t> pages_bytes(std::uint64_t bytes) {
  std::vector<std::uint8_t> b(bytes);
  Rng rng(42);
  for (std::size_t i = 0; i + 8 <= b.size(); i += 8) {
    const std::uint64_t v = rng.next_u64();
    for (int k = 0; k < 8; ++k) b[i + k] = static_cast<std::uint8_t>(v >> (8 * k));
  }
  return b;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// A plain file of `bytes`, written in page-sized writes; fsync at the end, or after every page.
bool plain_write(const std::string& path, const std::vector<std::uint8_t>& bytes, std::size_t page, bool sync_each) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = true;
  for (std::size_t at = 0; ok && at < bytes.size(); at += page) {
    ok = write_all(fd, bytes.data() + at, page);
    if (ok && sync_each) ok = ::fsync(fd) == 0;
  }
  if (ok && !sync_each) ok = ::fsync(fd) == 0;
  return ::close(fd) == 0 && ok;
}

PageStoreConfig store_config(const fs::path& folder) {
  PageStoreConfig c;
  c.folder = folder.string();
  c.storage_bytes = 2 * kBytesPerRun;
  return c;
}

// Arg 0: page KiB; arg 1: pages a put_many (1: put one page at a time).
void BM_StoreWrite(benchmark::State& state) {
  const std::size_t page = static_cast<std::size_t>(state.range(0)) << 10;
  const std::uint64_t batch = static_cast<std::uint64_t>(state.range(1));
  const std::uint64_t pages = kBytesPerRun / page;
  const std::vector<std::uint8_t> bytes = pages_bytes(kBytesPerRun);
  const fs::path dir = bench_dir();
  fs::remove_all(dir);
  fs::create_directories(dir);
  double store_s = 0, plain_s = 0, plain_each_s = 0;
  for (auto _ : state) {
    auto t = std::chrono::steady_clock::now();
    if (!plain_write((dir / "plain").string(), bytes, page, false)) return state.SkipWithError("plain write failed");
    plain_s += seconds_since(t);
    t = std::chrono::steady_clock::now();
    if (!plain_write((dir / "plain_each").string(), bytes, page, true)) return state.SkipWithError("plain write failed");
    plain_each_s += seconds_since(t);

    fs::remove_all(dir / "store");
    t = std::chrono::steady_clock::now();
    Result<PageStore> store = PageStore::open(store_config(dir / "store"));
    if (!store.ok()) return state.SkipWithError(store.error().message.c_str());
    std::vector<StorePage> group;
    for (std::uint64_t i = 0; i < pages; ++i) {
      group.push_back(StorePage{{"Llama-3.1-8B-tm1", i}, std::span(bytes).subspan(i * page, page)});
      if (group.size() < batch && i + 1 < pages) continue;
      Result<StorePut> put = store->put_many(group);
      if (!put.ok()) return state.SkipWithError(put.error().message.c_str());
      group.clear();
    }
    const double s = seconds_since(t);
    store_s += s;
    state.SetIterationTime(s);
  }
  const double mib = static_cast<double>(kBytesPerRun) / (1 << 20) * static_cast<double>(state.iterations());
  state.counters["store_MiBps"] = mib / store_s;
  state.counters["plain_MiBps"] = mib / plain_s;
  state.counters["plain_sync_each_MiBps"] = mib / plain_each_s;
  state.counters["store_over_plain"] = plain_s / store_s;
  state.counters["store_over_plain_sync_each"] = plain_each_s / store_s;
  state.SetBytesProcessed(static_cast<std::int64_t>(kBytesPerRun * state.iterations()));
  fs::remove_all(dir);
}
BENCHMARK(BM_StoreWrite)
    ->Args({64, 1})
    ->Args({64, 16})
    ->Args({2048, 1})
    ->Args({2048, 16})
    ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_StoreRead(benchmark::State& state) {
  const std::size_t page = static_cast<std::size_t>(state.range(0)) << 10;
  const std::uint64_t pages = kBytesPerRun / page;
  const std::vector<std::uint8_t> bytes = pages_bytes(kBytesPerRun);
  const fs::path dir = bench_dir();
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (!plain_write((dir / "plain").string(), bytes, page, false)) return state.SkipWithError("plain write failed");
  Result<PageStore> store = PageStore::open(store_config(dir / "store"));
  if (!store.ok()) return state.SkipWithError(store.error().message.c_str());
  for (std::uint64_t i = 0; i < pages; ++i)
    if (!store->put({"Llama-3.1-8B-tm1", i}, std::span(bytes).subspan(i * page, page)).ok())
      return state.SkipWithError("store put failed");
  std::vector<std::uint8_t> buffer(page);
  double store_s = 0, plain_s = 0;
  for (auto _ : state) {
    auto t = std::chrono::steady_clock::now();
    const int fd = ::open((dir / "plain").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return state.SkipWithError("plain open failed");
    std::uint64_t got = 0;
    for (ssize_t n; (n = ::read(fd, buffer.data(), page)) > 0;) got += static_cast<std::uint64_t>(n);
    ::close(fd);
    if (got != kBytesPerRun) return state.SkipWithError("plain read short");
    benchmark::DoNotOptimize(buffer.data());
    plain_s += seconds_since(t);

    t = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < pages; ++i) {
      Result<StoreRead> r = store->get({"Llama-3.1-8B-tm1", i});
      if (!r.ok() || r->outcome != StoreReadOutcome::hit) return state.SkipWithError("store get missed");
      benchmark::DoNotOptimize(r->bytes.data());
    }
    const double s = seconds_since(t);
    store_s += s;
    state.SetIterationTime(s);
  }
  const double mib = static_cast<double>(kBytesPerRun) / (1 << 20) * static_cast<double>(state.iterations());
  state.counters["store_MiBps"] = mib / store_s;
  state.counters["plain_MiBps"] = mib / plain_s;
  state.counters["store_over_plain"] = plain_s / store_s;
  state.SetBytesProcessed(static_cast<std::int64_t>(kBytesPerRun * state.iterations()));
  fs::remove_all(dir);
}
BENCHMARK(BM_StoreRead)->Arg(64)->Arg(2048)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace kvtwin

BENCHMARK_MAIN();
