// The host arena and its transfers on the GPU (gpu/host_arena.h, gpu/transfers.h) through
// GpuPool's operations, every expectation worked out here from SPEC.md section 8 and the
// vocabulary's rules (core/op.h): an offload and a load-back bring every row back byte for byte
// (with either copy mechanism), what a transfer in flight holds is refused to other operations,
// and one reproducer per host fault switch (HostTransferFault.*), each showing the bug change
// what the pool answers or returns.
//
// The reference model does not play host operations side by side yet; until it does these are
// the switches' reproducers (FaultSwitch.EverySwitchHasAReproducer names them).
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/oracle.h"
#include "core/reasons.h"
#include "gpu/gpu_pool.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvtwin::gpu {
namespace {

// 2 KV heads of dim 8 in bf16: K and V rows of 32 bytes (as gpu_pool_test.cpp).
ModelShape tiny_shape(std::vector<LayerKind> layers) {
  ModelShape s;
  s.name = "tiny";
  s.attention = AttentionKind::mha;
  s.layers = std::move(layers);
  s.num_kv_heads = 2;
  s.k_head_dim = 8;
  s.v_head_dim = 8;
  s.sliding_window_tokens = std::find(s.layers.begin(), s.layers.end(), LayerKind::swa) != s.layers.end() ? 4 : 0;
  s.dtype = DType::bf16;
  return s;
}

// A pool of `pages` device pages of the first side and a host arena of `host_pages` pages of the
// largest side.
PoolConfig config_of(std::vector<LayerKind> layers, std::uint64_t page_size, std::uint64_t pages,
                     std::uint64_t host_pages) {
  PoolConfig c;
  c.shape = tiny_shape(std::move(layers));
  c.page_size = page_size;
  c.seed = 91;
  const PoolDerived d = derive_pool(PoolConfig{c.shape, 1, page_size, 1 << 20, CompactionMode::eager, false, 0}).value();
  c.total_bytes = d.geometry.sub_pools[0].page_bytes * pages;
  std::uint64_t largest = 0;
  for (const SubPoolGeometry& g : d.geometry.sub_pools) largest = std::max(largest, g.page_bytes);
  c.host_bytes = largest * host_pages;
  return c;
}

template <class T>
const T& as(const OpResult& r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) throw std::runtime_error(r.error().message);
  EXPECT_TRUE(std::holds_alternative<T>(r.value())) << to_string(r);
  return std::get<T>(r.value());
}

std::vector<std::int64_t> tokens_of(const std::vector<std::int64_t>& pages, std::int64_t ps) {
  std::vector<std::int64_t> out;
  for (std::int64_t v : pages)
    for (std::int64_t s = 0; s < ps; ++s) out.push_back(v * ps + s);
  return out;
}

// The oracle's rows of `tokens` for one (sub-pool, layer, part), back to back.
std::vector<std::uint8_t> oracle_rows(std::uint64_t seed, const std::vector<std::int64_t>& tokens, std::uint32_t sub_pool,
                                      std::uint32_t layer, std::uint32_t part, std::uint64_t write) {
  std::vector<std::uint8_t> out;
  for (std::int64_t t : tokens) {
    std::vector<std::uint8_t> row(32);
    fill_oracle_row(seed, RowIdentity{t, sub_pool, layer, part, write}, DType::bf16, row);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Physical ids of virtual tokens (the translate op).
std::vector<std::int64_t> physical_of(GpuPool& pool, const std::vector<std::int64_t>& tokens) {
  Translate tr;
  tr.ids = tokens;
  tr.shape = {static_cast<std::int64_t>(tokens.size())};
  return as<Ids>(pool.apply(tr)).values;
}

// Virtual pages with their rows written (write number 5, every layer) through a rebound batch.
std::vector<std::int64_t> written_pages(GpuPool& pool, std::uint64_t pages, std::int64_t ps, std::uint32_t layers,
                                        std::uint32_t batch) {
  const std::vector<std::int64_t> v = as<Allocated>(pool.apply(Alloc{pages * static_cast<std::uint64_t>(ps)})).pages;
  EXPECT_TRUE(pool.apply(MakeBatch{batch, tokens_of(v, ps), {}}).ok());
  EXPECT_TRUE(pool.apply(Rebind{batch, 0}).ok());
  for (std::uint32_t l = 0; l < layers; ++l) EXPECT_TRUE(pool.apply(Write{l, 5, batch, {}, false, {}, false}).ok());
  EXPECT_TRUE(pool.apply(DropBatch{batch}).ok());
  return v;
}

Error error_of(const OpResult& r) {
  EXPECT_FALSE(r.ok()) << "expected an error, got " << to_string(r);
  return r.ok() ? Error{} : r.error();
}

class HostTransfer : public ::testing::TestWithParam<CopyMechanism> {
 protected:
  void SetUp() override { KVTWIN_REQUIRE_CUDA(); }
};

// SPEC 8: a virtual token's bytes survive offload, device free, host compaction and load-back.
TEST_P(HostTransfer, OffloadAndLoadBackBringEveryRowBack) {
  GpuPool pool;
  const std::int64_t ps = 2;
  const PoolConfig c = config_of({LayerKind::full, LayerKind::full}, ps, 24, 8);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  pool.set_copy_mechanism(GetParam());
  const std::vector<std::int64_t> v = written_pages(pool, 3, ps, 2, 1);
  const std::vector<std::int64_t> tokens = tokens_of(v, ps);
  const HostAllocated host = as<HostAllocated>(pool.apply(HostAlloc{1, {3}}));
  ASSERT_EQ(host.logical.size(), 1u);
  ASSERT_TRUE(pool.apply(RecordEvent{1, 0}).ok());  // the producer: the writes on the compute stream
  Offload off;
  off.transfer = 1;
  off.thread = 1;
  off.stream = 1;
  off.wait_event = 1u;
  off.side = "full";
  off.ids = v;
  off.host = host.logical[0];
  EXPECT_EQ(as<TransferStarted>(pool.apply(off)).pages, v);
  ASSERT_TRUE(pool.apply(TransferWait{1}).ok());
  ASSERT_TRUE(pool.apply(Free{IdUnit::pages, v}).ok());
  // A write to other pages in between does not touch the host copy.
  (void)written_pages(pool, 2, ps, 2, 2);
  LoadBack back;
  back.transfer = 2;
  back.thread = 1;
  back.stream = 1;
  back.host = {host.logical[0]};
  const std::vector<std::int64_t> fresh = as<TransferStarted>(pool.apply(back)).pages;
  ASSERT_EQ(fresh.size(), 3u);
  ASSERT_TRUE(pool.apply(TransferWait{2}).ok());
  const std::vector<std::int64_t> loc = physical_of(pool, tokens_of(fresh, ps));
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    for (std::uint32_t part = 0; part < 2; ++part)
      EXPECT_EQ(as<Bytes>(pool.apply(Read{layer, part == 0 ? "k" : "v", loc})).bytes.size(), 3u * ps * 32);
  for (std::uint32_t layer = 0; layer < 2; ++layer)
    for (std::uint32_t part = 0; part < 2; ++part)
      EXPECT_EQ(as<Bytes>(pool.apply(Read{layer, part == 0 ? "k" : "v", loc})).bytes,
                oracle_rows(c.seed, tokens, 0, layer, part, 5))
          << "layer " << layer << " part " << part << ": the loaded pages hold the offloaded rows";
  EXPECT_TRUE(pool.verify().ok());
}

INSTANTIATE_TEST_SUITE_P(BothCopies, HostTransfer,
                         ::testing::Values(CopyMechanism::copy_kernel, CopyMechanism::memcpy_batch),
                         [](const ::testing::TestParamInfo<CopyMechanism>& i) {
                           return i.param == CopyMechanism::copy_kernel ? "CopyKernel" : "MemcpyBatch";
                         });

class HostTransferRules : public ::testing::Test {
 protected:
  void SetUp() override { KVTWIN_REQUIRE_CUDA(); }
};

// The vocabulary's rule 8: what a transfer in flight holds is refused to other operations, with
// reader_conflict / transfer_in_flight, and nothing changes; after its wait all of it is allowed.
TEST_F(HostTransferRules, WhatATransferInFlightHoldsIsRefusedUntilItsWait) {
  GpuPool pool;
  const std::int64_t ps = 2;
  const PoolConfig c = config_of({LayerKind::full}, ps, 24, 8);
  ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
  const std::vector<std::int64_t> v = written_pages(pool, 2, ps, 1, 1);
  const HostAllocated host = as<HostAllocated>(pool.apply(HostAlloc{0, {2}}));
  Offload off;
  off.transfer = 7;
  off.stream = 1;
  off.side = "full";
  off.ids = v;
  off.host = host.logical[0];
  ASSERT_TRUE(pool.apply(off).ok());
  auto expect_held = [](const OpResult& r) {
    const Error e = error_of(r);
    EXPECT_EQ(e.kind, ErrorKind::reader_conflict) << e.message;
    EXPECT_EQ(e.reason, reason::transfer_in_flight) << e.message;
  };
  expect_held(pool.apply(Free{IdUnit::pages, {v[0]}}));
  expect_held(pool.apply(HostFree{"full", {host.logical[0][1]}}));
  const std::vector<std::int64_t> loc = physical_of(pool, tokens_of({v[1]}, ps));
  expect_held(pool.apply(Write{0, 6, std::nullopt, loc, true, tokens_of({v[1]}, ps), false}));
  EXPECT_EQ(error_of(pool.apply(off)).kind, ErrorKind::invalid_argument) << "transfer 7 is in flight already";
  Offload bad = off;
  bad.transfer = 8;
  bad.stream = 0;
  EXPECT_EQ(error_of(pool.apply(bad)).kind, ErrorKind::invalid_argument) << "stream 0 is the compute stream";
  bad.stream = 2;
  bad.wait_event = 42u;
  EXPECT_EQ(error_of(pool.apply(bad)).kind, ErrorKind::invalid_argument) << "event 42 was never recorded";
  EXPECT_EQ(error_of(pool.apply(TransferWait{8})).kind, ErrorKind::invalid_argument);
  ASSERT_TRUE(pool.apply(Checkpoint{}).ok()) << "a checkpoint lands the copies; the transfer stays in flight";
  expect_held(pool.apply(Free{IdUnit::pages, {v[0]}}));
  ASSERT_TRUE(pool.apply(TransferWait{7}).ok());
  EXPECT_TRUE(pool.apply(Free{IdUnit::pages, v}).ok());
  EXPECT_TRUE(pool.apply(HostFree{"full", host.logical[0]}).ok());
  EXPECT_TRUE(pool.verify().ok());
}

// Rule 7: a load-back of a host page an in-flight offload writes must be ordered after it.
TEST_F(HostTransferRules, ALoadBackRacingAnOffloadOfItsHostPageIsRefusedUnlessOrdered) {
  GpuPool pool;
  const std::int64_t ps = 2;
  ASSERT_TRUE(pool.apply(BuildPool{config_of({LayerKind::full}, ps, 24, 8)}).ok());
  const std::vector<std::int64_t> v = written_pages(pool, 1, ps, 1, 1);
  const HostAllocated host = as<HostAllocated>(pool.apply(HostAlloc{0, {1}}));
  Offload off;
  off.transfer = 1;
  off.stream = 1;
  off.side = "full";
  off.ids = v;
  off.host = host.logical[0];
  ASSERT_TRUE(pool.apply(off).ok());
  LoadBack back;
  back.transfer = 2;
  back.stream = 2;
  back.host = {host.logical[0]};
  const Error e = error_of(pool.apply(back));
  EXPECT_EQ(e.reason, reason::transfer_in_flight) << e.message;
  ASSERT_TRUE(pool.apply(RecordEvent{3, 1}).ok());  // captures transfer 1
  back.wait_event = 3u;
  EXPECT_TRUE(pool.apply(back).ok()) << "ordered after the offload by its event";
  back.transfer = 4;
  back.wait_event.reset();
  back.stream = 1;
  EXPECT_TRUE(pool.apply(back).ok()) << "ordered after it on its stream";
  for (std::uint32_t t : {1u, 2u, 4u}) EXPECT_TRUE(pool.apply(TransferWait{t}).ok());
}

// ---------------------------------------------------------------- one reproducer per host fault

class HostTransferFault : public ::testing::Test {
 protected:
  void SetUp() override { KVTWIN_REQUIRE_CUDA(); }
};

// Fault 19: logical host ids handed over as physical pages. On a composite the two sides number
// their pages from opposite ends, so logical 0 of each side is physical 0 and page_num - 1; taken
// as physical, both land on byte 0 and the second copy overwrites the first.
TEST_F(HostTransferFault, TransferLogicalAsPhysicalIsCaught) {
  for (const bool planted : {false, true}) {
    SCOPED_TRACE(planted ? "planted" : "clean");
    Faults faults;
    faults.transfer_logical_as_physical = planted;
    GpuPool pool(faults);
    const std::int64_t ps = 2;
    const PoolConfig c = config_of({LayerKind::full, LayerKind::swa}, ps, 32, 6);
    ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
    const std::vector<std::int64_t> v = written_pages(pool, 1, ps, 2, 1);
    const HostAllocated host = as<HostAllocated>(pool.apply(HostAlloc{0, {1, 1}}));
    ASSERT_EQ(host.logical, (std::vector<std::vector<std::int64_t>>{{0}, {0}}));
    for (std::uint32_t side = 0; side < 2; ++side) {
      Offload off;
      off.transfer = side + 1;
      off.stream = 1;
      off.side = side == 0 ? "full" : "swa";
      off.ids = v;
      off.host = {0};
      ASSERT_TRUE(pool.apply(off).ok());
    }
    ASSERT_TRUE(pool.apply(TransferWait{1}).ok());
    ASSERT_TRUE(pool.apply(TransferWait{2}).ok());
    ASSERT_TRUE(pool.apply(Free{IdUnit::pages, v}).ok());
    LoadBack back;
    back.transfer = 3;
    back.stream = 1;
    back.host = {{0}, {0}};
    const std::vector<std::int64_t> fresh = as<TransferStarted>(pool.apply(back)).pages;
    ASSERT_TRUE(pool.apply(TransferWait{3}).ok());
    const std::vector<std::int64_t> loc = physical_of(pool, tokens_of(fresh, ps));
    const bool same = as<Bytes>(pool.apply(Read{0, "k", loc})).bytes == oracle_rows(c.seed, tokens_of(v, ps), 0, 0, 0, 5);
    EXPECT_EQ(same, !planted) << "the full layer's rows come back exactly when the fault is off";
  }
}

// Fault 20: host compaction while a transfer is in flight. SPEC 8: compaction waits for every
// recorded transfer event; the pool refuses it (as the model) until the transfer is waited for.
TEST_F(HostTransferFault, CompactionIgnoresTransfersIsCaught) {
  for (const bool planted : {false, true}) {
    SCOPED_TRACE(planted ? "planted" : "clean");
    Faults faults;
    faults.compaction_ignores_transfers = planted;
    GpuPool pool(faults);
    const std::int64_t ps = 2;
    ASSERT_TRUE(pool.apply(BuildPool{config_of({LayerKind::full, LayerKind::swa}, ps, 32, 6)}).ok());
    const std::vector<std::int64_t> v = written_pages(pool, 1, ps, 2, 1);
    // docs/host_arena.md: full 0-2 on pages 0-2, swa 0-1 on 5, 4; free full 0 and 1: holes 0, 1.
    ASSERT_TRUE(pool.apply(HostAlloc{0, {3, 2}}).ok());
    ASSERT_TRUE(pool.apply(HostFree{"full", {0, 1}}).ok());
    Offload off;
    off.transfer = 1;
    off.stream = 1;
    off.side = "full";
    off.ids = v;
    off.host = {2};
    ASSERT_TRUE(pool.apply(off).ok());
    // Three more swa pages fit only once packed (the full side's holes do not serve the swa side).
    const OpResult r = pool.apply(HostAlloc{0, {0, 3}});
    if (planted) {
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_FALSE(as<HostAllocated>(r).moves.empty()) << "it compacted under the copy";
    } else {
      const Error e = error_of(r);
      EXPECT_EQ(e.kind, ErrorKind::reader_conflict);
      EXPECT_EQ(e.reason, reason::transfer_in_flight);
    }
    ASSERT_TRUE(pool.apply(TransferWait{1}).ok());
  }
}

// Fault 21: an SWA offload that filters single tokens. Listing every token of one page and one
// token of another selects the whole page only (rule 6); the filter takes three tokens, not a
// multiple of the page size, and the transfer is refused as the seed's assert refused it.
TEST_F(HostTransferFault, SwaOffloadTokenFilterIsCaught) {
  for (const bool planted : {false, true}) {
    SCOPED_TRACE(planted ? "planted" : "clean");
    Faults faults;
    faults.swa_offload_token_filter = planted;
    GpuPool pool(faults);
    const std::int64_t ps = 2;
    ASSERT_TRUE(pool.apply(BuildPool{config_of({LayerKind::full, LayerKind::swa}, ps, 32, 6)}).ok());
    const std::vector<std::int64_t> v = written_pages(pool, 2, ps, 2, 1);
    const HostAllocated host = as<HostAllocated>(pool.apply(HostAlloc{0, {0, 1}}));
    Offload off;
    off.transfer = 1;
    off.stream = 1;
    off.side = "swa";
    off.unit = IdUnit::tokens;
    off.ids = {v[0] * ps, v[0] * ps + 1, v[1] * ps};
    off.host = host.logical[1];
    const OpResult r = pool.apply(off);
    if (planted) {
      EXPECT_EQ(error_of(r).kind, ErrorKind::invalid_argument);
    } else {
      EXPECT_EQ(as<TransferStarted>(r).pages, (std::vector<std::int64_t>{v[0]}));
      ASSERT_TRUE(pool.apply(TransferWait{1}).ok());
    }
  }
}

// Fault 13: the copy enqueued before the waits for its producers. A load-back ordered after an
// offload of the same host page by an event reads that page; without the wait it reads it before
// the offload has written it. The clean run must read the rows every time; the planted one is a
// race, seen in at least one of several tries (a 64 MiB offload stays in flight long enough).
TEST_F(HostTransferFault, TransferBeforeProducerEventIsCaught) {
  for (const bool planted : {false, true}) {
    SCOPED_TRACE(planted ? "planted" : "clean");
    int wrong = 0;
    const int tries = 8;
    for (int attempt = 0; attempt < tries; ++attempt) {
      Faults faults;
      faults.transfer_before_producer_event = planted;
      GpuPool pool(faults);
      const std::int64_t ps = 64;  // pages of 64 entries of 2 layers x 64 bytes: 8 KiB
      constexpr std::uint64_t kPages = 8192;  // a 64 MiB offload, in flight for a millisecond or so
      const PoolConfig c = config_of({LayerKind::full, LayerKind::full}, ps, kPages + 8, kPages + 1);
      ASSERT_TRUE(pool.apply(BuildPool{c}).ok());
      std::vector<std::int64_t> v = as<Allocated>(pool.apply(Alloc{(kPages - 1) * ps})).pages;
      v.push_back(written_pages(pool, 1, ps, 2, 1).front());  // the highest page: offloaded last
      const HostAllocated host = as<HostAllocated>(pool.apply(HostAlloc{0, {kPages}}));
      Offload off;
      off.transfer = 1;
      off.stream = 1;
      off.side = "full";
      off.ids = v;
      off.host = host.logical[0];
      ASSERT_TRUE(pool.apply(off).ok());
      ASSERT_TRUE(pool.apply(RecordEvent{1, 1}).ok());
      LoadBack back;
      back.transfer = 2;
      back.stream = 2;
      back.wait_event = 1u;
      back.host = {{host.logical[0].back()}};  // the page the offload writes last
      const std::vector<std::int64_t> fresh = as<TransferStarted>(pool.apply(back)).pages;
      ASSERT_TRUE(pool.apply(TransferWait{2}).ok());
      ASSERT_TRUE(pool.apply(TransferWait{1}).ok());
      const std::vector<std::int64_t> loc = physical_of(pool, tokens_of(fresh, ps));
      if (as<Bytes>(pool.apply(Read{1, "v", loc})).bytes != oracle_rows(c.seed, tokens_of({v.back()}, ps), 0, 1, 1, 5))
        ++wrong;
    }
    std::printf("[ fault 13 ] %s: %d of %d load-backs read the page before its producer wrote it\n",
                planted ? "planted" : "clean", wrong, tries);
    if (planted) {
      EXPECT_GT(wrong, 0) << "the race was never seen";
    } else {
      EXPECT_EQ(wrong, 0);
    }
  }
}

}  // namespace
}  // namespace kvtwin::gpu
