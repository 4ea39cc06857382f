// Real threads on the pinned host arena (gpu/host_arena.h) and the transfer kernels
// (gpu/transfer_kernels.cuh), in SPEC 8's order: several threads offload device pages into host
// pages and load them back into other device pages, each on its own copy stream, while another
// thread allocates host pages with compaction (HostWait::block: it synchronizes every recorded
// event and waits for every lease) and frees them again. Afterwards every live host page and
// every loaded-back device page holds exactly the bytes of the device page it came from.
//
// Bounded: a fixed number of rounds per thread (no wall-clock limit; the ctest timeout bounds a
// hang). Run it under compute-sanitizer racecheck and synccheck on the GPU machine:
//   compute-sanitizer --tool racecheck --error-exitcode 1 kvtwin_gpu_tests --gtest_filter='HostTransferStress.*'
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "gpu/cuda_check.h"
#include "gpu/device_buffer.h"
#include "gpu/host_arena.h"
#include "gpu/transfer_kernels.cuh"
#include "tests/gpu/gpu_test_util.h"

namespace kvtwin::gpu {
namespace {

constexpr std::uint64_t kPageBytes = 64 << 10;
constexpr int kWorkers = 4;
constexpr int kRounds = 48;
constexpr std::int64_t kPagesPerWorker = 8;  // device source pages (and as many targets) per worker

// The byte at offset i of a page whose content is `tag`: never zero, different for every tag.
std::uint8_t oracle_byte(std::uint64_t tag, std::uint64_t i) {
  return static_cast<std::uint8_t>((mix_seed(tag, i / 8) >> (8 * (i % 8))) | 1);
}

TEST(HostTransferStress, ThreadsOffloadAndLoadBackWhileAnotherCompacts) {
  KVTWIN_REQUIRE_CUDA();
  const std::uint64_t seed = testing::test_seed(808);
  // Device: per worker kPagesPerWorker source pages and as many target pages.
  const std::int64_t device_pages = 2 * kWorkers * kPagesPerWorker;
  DeviceBuffer<std::uint8_t> device;
  ASSERT_TRUE(device.allocate(static_cast<std::size_t>(device_pages) * kPageBytes).ok());
  // Read only once the threads run (sources and targets are disjoint; targets are never read here).
  std::vector<std::uint8_t> host_pattern(static_cast<std::size_t>(device_pages) * kPageBytes);
  for (std::int64_t p = 0; p < device_pages; ++p)
    for (std::uint64_t i = 0; i < kPageBytes; ++i)
      host_pattern[static_cast<std::size_t>(p) * kPageBytes + i] = oracle_byte(seed + static_cast<std::uint64_t>(p), i);
  KVTWIN_CUDA_CHECK(cudaMemcpy(device.get(), host_pattern.data(), host_pattern.size(), cudaMemcpyHostToDevice));
  // An identity v2p: device page p is virtual page p.
  std::vector<std::int64_t> identity(static_cast<std::size_t>(device_pages));
  for (std::int64_t p = 0; p < device_pages; ++p) identity[static_cast<std::size_t>(p)] = p;
  DeviceBuffer<std::int64_t> v2p = testing::to_device(identity);

  // Host: two sides (as a composite), enough pages for the workers' pages plus the allocator's.
  PinnedHostArena arena;
  const std::int64_t host_pages = 3 * kWorkers * kPagesPerWorker;
  ASSERT_TRUE(arena.init(static_cast<std::uint64_t>(host_pages) * kPageBytes,
                         {{"full", kPageBytes}, {"swa", kPageBytes}}, true)
                  .ok());
  const Faults faults;
  std::atomic<int> failures{0};
  std::mutex report_mutex;
  std::vector<std::string> reports;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(report_mutex);
    reports.push_back(what);
    ++failures;
  };
  // What every live host page must hold: the tag of the device page offloaded into it.
  std::mutex expected_mutex;
  std::map<std::int64_t, std::uint64_t> expected;  // full-side logical -> tag

  auto worker = [&](int w) {
    Rng rng(seed * 31 + static_cast<std::uint64_t>(w));
    const HostThread thread = static_cast<HostThread>(1 + w);
    cudaStream_t to_host = nullptr, to_device = nullptr;
    KVTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&to_host, cudaStreamNonBlocking));
    KVTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&to_device, cudaStreamNonBlocking));
    DeviceBuffer<std::int64_t> lists;
    KVTWIN_CHECK(lists.allocate(8).ok(), "lists");
    std::vector<std::uint8_t> readback(kPageBytes);
    for (int round = 0; round < kRounds; ++round) {
      const std::int64_t source = w * kPagesPerWorker + static_cast<std::int64_t>(rng.below(kPagesPerWorker));
      const std::int64_t target = kWorkers * kPagesPerWorker + w * kPagesPerWorker + static_cast<std::int64_t>(rng.below(kPagesPerWorker));
      // A host page of the full side (block: the allocator's compactions may be waiting).
      Result<Outcome> got = arena.alloc_many(thread, {1, 0}, HostWait::block, faults);
      if (!got.ok() || !std::holds_alternative<HostAllocated>(*got)) continue;  // no room this round
      const std::int64_t logical = std::get<HostAllocated>(*got).logical[0][0];
      // Offload: lease, resolve on the device on the copy stream, copy, finish event, hand the lease.
      for (bool offload : {true, false}) {
        cudaStream_t stream = offload ? to_host : to_device;
        const std::int64_t page = offload ? source : target;
        const std::int64_t ids[2] = {page, logical};
        arena.acquire(thread);
        KVTWIN_CUDA_CHECK(cudaMemcpyAsync(lists.get(), ids, sizeof ids, cudaMemcpyHostToDevice, stream));
        ResolveTransferParams r;
        r.virtual_pages = lists.get();
        r.host_logical = lists.get() + 1;
        r.pages = 1;
        r.v2p = v2p.get();
        r.v2p_len = device_pages;
        r.host_map = arena.device_logical_to_physical(0);
        r.host_pages = arena.page_num();
        r.device_physical = lists.get() + 2;
        r.host_physical = lists.get() + 3;
        KVTWIN_CUDA_CHECK(launch_resolve_transfer(r, stream));
        CopyPagesParams c;
        c.device_base = device.get();
        c.device_bytes = device.bytes();
        c.host_base = arena.device_bytes();
        c.host_bytes = static_cast<std::uint64_t>(arena.page_num()) * kPageBytes;
        c.page_bytes = kPageBytes;
        c.device_physical = r.device_physical;
        c.host_physical = r.host_physical;
        c.pages = 1;
        c.to_host = offload;
        KVTWIN_CUDA_CHECK(launch_copy_pages(c, stream));
        cudaEvent_t finish = nullptr;
        KVTWIN_CUDA_CHECK(cudaEventCreateWithFlags(&finish, cudaEventDisableTiming));
        KVTWIN_CUDA_CHECK(cudaEventRecord(finish, stream));
        KVTWIN_CHECK(arena.hand_lease_to_event(thread, finish).ok(), "hand the lease over");
        // Wait for it (the transfer's wait), then let its lease go.
        KVTWIN_CUDA_CHECK(cudaEventSynchronize(finish));
        KVTWIN_CHECK(arena.settle(finish).ok(), "settle");
        KVTWIN_CUDA_CHECK(cudaEventDestroy(finish));
      }
      // The loaded-back page holds the source's bytes.
      KVTWIN_CUDA_CHECK(cudaMemcpyAsync(readback.data(), device.get() + static_cast<std::uint64_t>(target) * kPageBytes,
                                        kPageBytes, cudaMemcpyDeviceToHost, to_device));
      KVTWIN_CUDA_CHECK(cudaStreamSynchronize(to_device));
      if (std::memcmp(readback.data(), host_pattern.data() + static_cast<std::uint64_t>(source) * kPageBytes, kPageBytes) != 0)
        fail("worker " + std::to_string(w) + " round " + std::to_string(round) + ": device page " + std::to_string(target) +
             " does not hold source page " + std::to_string(source) + "'s bytes after the round trip");
      // Keep the host page (live) half the time, for the final check; free the rest.
      if (rng.below(2) == 0) {
        std::lock_guard<std::mutex> lock(expected_mutex);
        expected[logical] = seed + static_cast<std::uint64_t>(source);
      } else {
        KVTWIN_CHECK(arena.free(0, {logical}).ok(), "free the host page");
      }
    }
    KVTWIN_CUDA_CHECK(cudaStreamDestroy(to_host));
    KVTWIN_CUDA_CHECK(cudaStreamDestroy(to_device));
  };

  // The allocator: swa-side pages, sized so that they fit only once packed (the full side's
  // holes do not serve the swa side), then freed again.
  auto allocator = [&] {
    Rng rng(seed * 7 + 1);
    std::uint64_t compactions = 0;
    for (int round = 0; round < kRounds * 2; ++round) {
      const std::uint64_t k = 1 + rng.below(static_cast<std::uint64_t>(kWorkers * kPagesPerWorker));
      Result<Outcome> got = arena.alloc_many(0, {0, k}, HostWait::block, faults);
      if (!got.ok()) {
        fail("allocator round " + std::to_string(round) + ": " + got.error().message);
        continue;
      }
      if (const auto* a = std::get_if<HostAllocated>(&*got)) {
        compactions += a->moves.empty() ? 0 : 1;
        KVTWIN_CHECK(arena.free(1, a->logical[1]).ok(), "free the swa pages");
      }
    }
    std::printf("[ stress   ] the allocator compacted %llu times\n", static_cast<unsigned long long>(compactions));
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) threads.emplace_back(worker, w);
  threads.emplace_back(allocator);
  for (std::thread& t : threads) t.join();

  for (const std::string& r : reports) ADD_FAILURE() << r;
  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(arena.verify().ok()) << arena.verify().error().message;
  // Every live host page holds its source's bytes (wherever compaction moved it).
  KVTWIN_CUDA_CHECK(cudaDeviceSynchronize());
  std::uint64_t checked = 0;
  arena.acquire(0);
  for (const auto& [logical, tag] : expected) {
    const Result<std::int64_t> physical = arena.resolve(0, 0, logical);
    ASSERT_TRUE(physical.ok()) << physical.error().message;
    const std::uint8_t* page = arena.host_bytes() + static_cast<std::uint64_t>(*physical) * kPageBytes;
    for (std::uint64_t i = 0; i < kPageBytes; ++i)
      ASSERT_EQ(page[i], oracle_byte(tag, i)) << "host logical " << logical << " (physical " << *physical << ") byte " << i;
    ++checked;
  }
  ASSERT_TRUE(arena.release(0).ok());
  std::printf("[ stress   ] %llu live host pages checked\n", static_cast<unsigned long long>(checked));
  EXPECT_GT(checked, 0u);
}

}  // namespace
}  // namespace kvtwin::gpu
