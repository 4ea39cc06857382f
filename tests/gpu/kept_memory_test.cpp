// gpu/kept_memory.h: releases are kept only inside a QuietRelease, held (not reused) inside a
// HoldReleases scope until their holder releases them, a kept block serves the next allocation of
// its kind and size class, the failure injector fails a kept allocation as it fails a new one, a
// pool frees nothing through the driver at its end (its captured graphs' buffers included), and a
// pool built on what an earlier pool left starts as a new pool does (its bytes zero and its tables
// fresh, though the memory held the earlier pool's rows). Events, streams and executable graphs:
// a kept event records anew, a stream is kept only under a QuietRelease, a kept executable graph
// updated to the next graph of its topology runs that graph (one of another topology is made
// anew), and a second pool builds on the first one's streams and graphs.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/cuda_check.h"
#include "gpu/gpu_pool.h"
#include "gpu/kept_memory.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvtwin::gpu {
namespace {

class KeptMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVTWIN_REQUIRE_CUDA();
    drop_kept_memory();
  }
  void TearDown() override { drop_kept_memory(); }
};

// A size no other allocation of these tests has.
constexpr std::size_t kOddBytes = 3 * 4096 + 24;

TEST_F(KeptMemoryTest, AReleaseOutsideAQuietReleaseIsFreed) {
  const KeptMemoryStats before = kept_memory_stats();
  void* block = take_memory(MemoryKind::device, kOddBytes).value();
  release_memory(MemoryKind::device, block, kOddBytes);
  const KeptMemoryStats after = kept_memory_stats();
  EXPECT_EQ(after.freed_now, before.freed_now + 1);
  EXPECT_EQ(after.kept, before.kept);
  EXPECT_EQ(after.bytes_kept, 0u);
}

TEST_F(KeptMemoryTest, AKeptBlockServesTheNextAllocationOfItsKindAndSize) {
  void* block = take_memory(MemoryKind::device, kOddBytes).value();
  {
    const QuietRelease quiet;
    release_memory(MemoryKind::device, block, kOddBytes);
  }
  EXPECT_EQ(kept_memory_stats().bytes_kept, size_class_bytes(kOddBytes));
  // Another size class, another kind: new blocks.
  void* other_size = take_memory(MemoryKind::device, 2 * kOddBytes).value();
  void* other_kind = take_memory(MemoryKind::pinned, kOddBytes).value();
  EXPECT_NE(other_size, block);
  EXPECT_NE(other_kind, block);
  const KeptMemoryStats before = kept_memory_stats();
  void* again = take_memory(MemoryKind::device, kOddBytes).value();
  EXPECT_EQ(again, block);
  EXPECT_EQ(kept_memory_stats().taken_kept, before.taken_kept + 1);
  EXPECT_EQ(kept_memory_stats().bytes_kept, 0u);
  release_memory(MemoryKind::device, again, kOddBytes);
  release_memory(MemoryKind::device, other_size, 2 * kOddBytes);
  release_memory(MemoryKind::pinned, other_kind, kOddBytes);
}

TEST(KeptMemorySizeClass, AClassHoldsItsSizeAndWastesAtMostAQuarter) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{512}, std::size_t{513}, std::size_t{4096}, kOddBytes,
                            std::size_t{3} << 20, (std::size_t{1} << 30) - 1}) {
    const std::size_t c = size_class_bytes(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c, std::max<std::size_t>(512, bytes + bytes / 4)) << bytes;
    EXPECT_EQ(size_class_bytes(c), c) << "a class's own size is its class";
  }
  // Past the largest kept block, exactly as asked (a 2 GiB pool is not rounded up).
  EXPECT_EQ(size_class_bytes((std::size_t{2} << 30) + 24), (std::size_t{2} << 30) + 24);
}

TEST_F(KeptMemoryTest, AKeptBlockServesTheSizesOfItsClass) {
  void* block = take_memory(MemoryKind::device, kOddBytes).value();
  {
    const QuietRelease quiet;
    release_memory(MemoryKind::device, block, kOddBytes);
  }
  ASSERT_EQ(size_class_bytes(kOddBytes + 8), size_class_bytes(kOddBytes));
  void* again = take_memory(MemoryKind::device, kOddBytes + 8).value();
  EXPECT_EQ(again, block);
  release_memory(MemoryKind::device, again, kOddBytes + 8);
}

TEST_F(KeptMemoryTest, AHeldReleaseIsNeitherFreedNorReusedUntilItsHolderReleasesIt) {
  HeldReleases held;
  void* block = take_memory(MemoryKind::device, kOddBytes).value();
  const KeptMemoryStats before = kept_memory_stats();
  {
    const HoldReleases hold(held);
    release_memory(MemoryKind::device, block, kOddBytes);
    EXPECT_EQ(held.bytes(), size_class_bytes(kOddBytes));
    // Not reused while held: device work enqueued before the release may still touch it.
    void* other = take_memory(MemoryKind::device, kOddBytes).value();
    EXPECT_NE(other, block);
    const QuietRelease quiet;  // a QuietRelease wins over a holder: kept, not held
    release_memory(MemoryKind::device, other, kOddBytes);
  }
  KeptMemoryStats after = kept_memory_stats();
  EXPECT_EQ(after.held, before.held + 1);
  EXPECT_EQ(after.kept, before.kept + 1);
  EXPECT_EQ(after.freed_now, before.freed_now);
  {
    const QuietRelease quiet;
    held.release_all();
  }
  EXPECT_EQ(held.bytes(), 0u);
  after = kept_memory_stats();
  EXPECT_EQ(after.kept, before.kept + 2);
  EXPECT_EQ(after.freed_now, before.freed_now);
  EXPECT_EQ(after.bytes_kept, 2 * size_class_bytes(kOddBytes));
  // Outside any scope a holder's release frees.
  void* third = take_memory(MemoryKind::pinned, kOddBytes).value();
  {
    const HoldReleases hold(held);
    release_memory(MemoryKind::pinned, third, kOddBytes);
  }
  held.release_all();
  EXPECT_EQ(kept_memory_stats().freed_now, before.freed_now + 1);
}

TEST_F(KeptMemoryTest, TheInjectorFailsAKeptAllocationAsItFailsANewOne) {
  void* block = take_memory(MemoryKind::pinned_mapped, kOddBytes).value();
  {
    const QuietRelease quiet;
    release_memory(MemoryKind::pinned_mapped, block, kOddBytes);
  }
  CudaFaultPlan plan;
  plan.kinds = 1u << static_cast<unsigned>(CudaCallKind::allocation);
  plan.fail_at = 1;
  arm_cuda_faults(plan);
  const Result<void*> refused = take_memory(MemoryKind::pinned_mapped, kOddBytes);
  disarm_cuda_faults();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::environment);
  // The kept block stays kept.
  EXPECT_EQ(take_memory(MemoryKind::pinned_mapped, kOddBytes).value(), block);
  release_memory(MemoryKind::pinned_mapped, block, kOddBytes);
}

PoolConfig small_config() {
  ModelShape s;
  s.name = "kept-memory-test";
  s.attention = AttentionKind::mha;
  s.layers = {LayerKind::full, LayerKind::full};
  s.num_kv_heads = 2;
  s.k_head_dim = 8;
  s.v_head_dim = 8;
  s.dtype = DType::bf16;
  PoolConfig c;
  c.shape = s;
  c.page_size = 2;
  c.seed = 5;
  const PoolDerived d = derive_pool(PoolConfig{c.shape, 1, c.page_size, 1 << 20, c.mode, false, 0}).value();
  c.total_bytes = d.geometry.sub_pools[0].page_bytes * 24;
  return c;
}

// A pool whose buffers were kept starts as a new one: the second pool's memory held the first
// pool's rows, and it must show zeros and fresh tables all the same.
TEST_F(KeptMemoryTest, APoolBuiltOnKeptMemoryStartsFresh) {
  const PoolConfig c = small_config();
  const PoolDerived d = derive_pool(c).value();
  const std::int64_t m = static_cast<std::int64_t>(d.geometry.sub_pools[0].min_page_index);
  PoolTables fresh;
  {
    GpuPool first;
    ASSERT_TRUE(first.apply(BuildPool{c}).ok());
    fresh = first.tables().value();
    ASSERT_TRUE(first.apply(Alloc{8}).ok());
    std::vector<std::int64_t> tokens;
    for (std::int64_t t = m * 2; t < (m + 4) * 2; ++t) tokens.push_back(t);
    ASSERT_TRUE(first.apply(MakeBatch{1, tokens, {}}).ok());
    ASSERT_TRUE(first.apply(Rebind{1, 0}).ok());
    for (std::uint32_t layer = 0; layer < 2; ++layer)
      ASSERT_TRUE(first.apply(Write{layer, 9, 1u, {}, false, {}, false}).ok());
    const std::vector<std::uint8_t> written = first.raw_bytes(0, c.total_bytes).value();
    ASSERT_NE(written, std::vector<std::uint8_t>(c.total_bytes, 0)) << "the first pool wrote rows";
  }
  const KeptMemoryStats kept = kept_memory_stats();
  EXPECT_GT(kept.bytes_kept, c.total_bytes) << "the first pool's buffers, its bytes among them, were kept";
  GpuPool second;
  ASSERT_TRUE(second.apply(BuildPool{c}).ok());
  EXPECT_GT(kept_memory_stats().taken_kept, kept.taken_kept);
  EXPECT_EQ(second.raw_bytes(0, c.total_bytes).value(), std::vector<std::uint8_t>(c.total_bytes, 0));
  EXPECT_EQ(second.tables().value(), fresh);
  EXPECT_TRUE(second.verify().ok());
  // A rebuild keeps what the pool held, and starts fresh again.
  ASSERT_TRUE(second.apply(Alloc{4}).ok());
  const std::uint64_t freed_before = kept_memory_stats().freed_now;
  ASSERT_TRUE(second.apply(BuildPool{c}).ok());
  EXPECT_EQ(kept_memory_stats().freed_now, freed_before) << "a rebuild frees nothing through the driver";
  EXPECT_EQ(second.tables().value(), fresh);
}

// A pool's end frees nothing through the driver, its captured graphs' buffers included (they were
// freed before the pool synchronized its stream, each cudaFree waiting for the whole device).
TEST_F(KeptMemoryTest, APoolsEndFreesNothingThroughTheDriver) {
  const PoolConfig c = small_config();
  const std::uint64_t freed_before = kept_memory_stats().freed_now;
  {
    GpuPool pool;
    ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
    ASSERT_TRUE(pool.apply(Alloc{4}).ok());
    ASSERT_TRUE(pool.apply(Capture{1, 4, 2, 0, 2}).ok());
    ASSERT_TRUE(pool.apply(Capture{2, 2, 3, 1, 2}).ok());
  }
  EXPECT_EQ(kept_memory_stats().freed_now, freed_before);
}

TEST_F(KeptMemoryTest, AKeptEventIsReusedAndRecordsAnew) {
  cudaStream_t stream = take_stream().value();
  const cudaEvent_t event = take_event().value();
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
  release_event(event);
  const KeptMemoryStats before = kept_memory_stats();
  const cudaEvent_t again = take_event().value();
  EXPECT_EQ(again, event);
  EXPECT_EQ(kept_memory_stats().events_kept, before.events_kept + 1);
  void* block = take_memory(MemoryKind::device, kOddBytes).value();
  ASSERT_EQ(cudaMemsetAsync(block, 7, kOddBytes, stream), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(again, stream), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(again), cudaSuccess);
  std::vector<std::uint8_t> host(kOddBytes);
  ASSERT_EQ(cudaMemcpy(host.data(), block, kOddBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, std::vector<std::uint8_t>(kOddBytes, 7));
  release_event(again);
  release_memory(MemoryKind::device, block, kOddBytes);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  release_stream(stream);
}

TEST_F(KeptMemoryTest, AStreamIsKeptOnlyUnderAQuietRelease) {
  const cudaStream_t loud = take_stream().value();
  release_stream(loud);  // outside a QuietRelease: destroyed
  const KeptMemoryStats before = kept_memory_stats();
  const cudaStream_t quiet = take_stream().value();
  EXPECT_EQ(kept_memory_stats().streams_new, before.streams_new + 1) << "the loud release kept nothing";
  {
    const QuietRelease q;
    release_stream(quiet);
  }
  const cudaStream_t again = take_stream().value();
  EXPECT_EQ(again, quiet);
  EXPECT_EQ(kept_memory_stats().streams_kept, before.streams_kept + 1);
  {
    const QuietRelease q;
    release_stream(again);
  }
}

// A graph that sets `bytes` bytes of `block` to `value`, once or twice (two nodes: another topology).
cudaGraph_t memset_graph(cudaStream_t stream, void* block, std::size_t bytes, int value, bool twice) {
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(block, value, bytes, stream), cudaSuccess);
  if (twice) {
    EXPECT_EQ(cudaMemsetAsync(block, value, bytes / 2, stream), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  return graph;
}

std::vector<std::uint8_t> launched(cudaGraphExec_t exec, cudaStream_t stream, const void* block, std::size_t bytes) {
  EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<std::uint8_t> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), block, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

TEST_F(KeptMemoryTest, AKeptGraphRunsTheNextGraphOfItsTopology) {
  const cudaStream_t stream = take_stream().value();
  void* a = take_memory(MemoryKind::device, kOddBytes).value();
  void* b = take_memory(MemoryKind::device, 2 * kOddBytes).value();
  const cudaGraph_t first = memset_graph(stream, a, kOddBytes, 1, false);
  const std::uint64_t key = graph_exec_key(first).value();
  const cudaGraphExec_t exec = take_graph_exec(first, key).value();
  EXPECT_EQ(launched(exec, stream, a, kOddBytes), std::vector<std::uint8_t>(kOddBytes, 1));
  {
    const QuietRelease q;
    release_graph_exec(exec, key);
  }
  // Another buffer and value, one topology: the kept executable graph, updated, runs it.
  const KeptMemoryStats before = kept_memory_stats();
  const cudaGraph_t second = memset_graph(stream, b, kOddBytes, 2, false);
  ASSERT_EQ(graph_exec_key(second).value(), key);
  const cudaGraphExec_t updated = take_graph_exec(second, key).value();
  EXPECT_EQ(updated, exec);
  EXPECT_EQ(kept_memory_stats().graphs_updated, before.graphs_updated + 1);
  EXPECT_EQ(launched(updated, stream, b, kOddBytes), std::vector<std::uint8_t>(kOddBytes, 2));
  EXPECT_EQ(launched(updated, stream, a, kOddBytes), std::vector<std::uint8_t>(kOddBytes, 1)) << "a untouched";
  {
    const QuietRelease q;
    release_graph_exec(updated, key);
  }
  // Another topology has another key: a new executable graph, the kept one left for its own.
  const cudaGraph_t third = memset_graph(stream, a, kOddBytes, 3, true);
  const std::uint64_t other = graph_exec_key(third).value();
  EXPECT_NE(other, key);
  const KeptMemoryStats mid = kept_memory_stats();
  const cudaGraphExec_t fresh = take_graph_exec(third, other).value();
  EXPECT_NE(fresh, exec);
  EXPECT_EQ(kept_memory_stats().graphs_new, mid.graphs_new + 1);
  EXPECT_EQ(launched(fresh, stream, a, kOddBytes), std::vector<std::uint8_t>(kOddBytes, 3));
  release_graph_exec(fresh, other);  // outside a QuietRelease: destroyed
  for (cudaGraph_t g : {first, second, third}) EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  release_memory(MemoryKind::device, a, kOddBytes);
  release_memory(MemoryKind::device, b, 2 * kOddBytes);
  release_stream(stream);
}

// The gate builds a pool per case: the second builds on the first one's streams and graphs.
TEST_F(KeptMemoryTest, ASecondPoolTakesTheFirstOnesStreamsAndGraphs) {
  const PoolConfig c = small_config();
  for (int round = 0; round < 2; ++round) {
    const KeptMemoryStats before = kept_memory_stats();
    {
      GpuPool pool;
      ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
      ASSERT_TRUE(pool.apply(Alloc{4}).ok());
      ASSERT_TRUE(pool.apply(Capture{1, 4, 2, 0, 2}).ok());
    }
    const KeptMemoryStats after = kept_memory_stats();
    if (round == 0) continue;
    EXPECT_EQ(after.streams_new, before.streams_new);
    EXPECT_GT(after.streams_kept, before.streams_kept);
    EXPECT_EQ(after.graphs_new, before.graphs_new);
    EXPECT_EQ(after.graphs_updated, before.graphs_updated + 1);
  }
}

}  // namespace
}  // namespace kvtwin::gpu
