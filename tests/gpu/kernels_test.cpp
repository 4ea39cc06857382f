// The kernels of gpu/kernels.cuh, each against a plain host reference written here from SPEC.md
// (not from gpu/ and not from sim/): random inputs that are never all zeros, outputs poisoned
// before every launch, exact comparisons, and a check that no cell outside the output changed.
// Also the stride-parity property: the same pages through a contiguous per-layer cache and
// through the token-major strided view give bitwise-identical attention.
//
// Not covered here: the allocator's table kernels and the pool's operations (gpu_pool_test.cpp),
// and agreement with the reference model (the differential property).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>

#include <gtest/gtest.h>

#include "core/det_math.h"
#include "core/oracle.h"
#include "gpu/kernels.cuh"
#include "tests/gpu/gpu_test_util.h"

namespace kvtwin::gpu {
namespace {

using testing::random_bytes;
using testing::test_seed;
using testing::to_device;
using testing::to_host;

constexpr std::int64_t kPoison = 0x5a5a5a5a5a5a5a5aLL;

// Float outputs are poisoned with a NaN: no finite result can equal it (a real value can equal
// any finite poison: a one-hot softmax returns a V element exactly).
float poison_float() { return det::from_bits(0x7fc0dead); }

// SPEC 5, written out again: t < 0 -> 0; t // ps >= len(v2p) -> 0; else max(v2p[t // ps] * ps + t % ps, 0).
std::int64_t ref_translate(const std::vector<std::int64_t>& v2p, std::int64_t ps, std::int64_t t) {
  if (t < 0) return 0;
  const std::int64_t page = t / ps;
  if (page >= static_cast<std::int64_t>(v2p.size())) return 0;
  return std::max<std::int64_t>(v2p[static_cast<std::size_t>(page)] * ps + t % ps, 0);
}

// v2p with the sink row, the -1 sentinel, bound pages and tombstones.
std::vector<std::int64_t> random_v2p(Rng& rng, std::int64_t len) {
  std::vector<std::int64_t> v2p(static_cast<std::size_t>(len), -1);
  v2p[0] = 0;
  for (std::int64_t v = 1; v + 1 < len; ++v)
    if (!rng.chance(2, 5)) v2p[static_cast<std::size_t>(v)] = rng.between(1, 4000);
  return v2p;
}

// Ids around every boundary of the table: negative, the sentinel page, past the end, live pages.
std::vector<std::int64_t> random_ids(Rng& rng, std::size_t n, std::int64_t v2p_len, std::int64_t ps) {
  std::vector<std::int64_t> ids(n);
  for (std::int64_t& t : ids) t = rng.between(-3 * ps, (v2p_len + 2) * ps);
  if (n >= 4) {
    ids[0] = -1;
    ids[1] = (v2p_len - 1) * ps;  // the sentinel row
    ids[2] = v2p_len * ps + 1;    // past the end
    ids[3] = 0;                   // the sink
  }
  return ids;
}

struct TranslateCase {
  std::int64_t rows = 1, cols = 0;
  std::int64_t in_row_stride = 0, in_col_stride = 1;
  std::int64_t out_row_stride = 0, out_col_stride = 1;
  std::int64_t out_cols = 0;
  bool alias = false;
  bool in32 = false;
};

void run_translate_case(Rng& rng, std::int64_t ps, const TranslateCase& c) {
  SCOPED_TRACE("ps " + std::to_string(ps) + " rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) +
               " in strides " + std::to_string(c.in_row_stride) + "/" + std::to_string(c.in_col_stride) +
               " out strides " + std::to_string(c.out_row_stride) + "/" + std::to_string(c.out_col_stride) +
               " out_cols " + std::to_string(c.out_cols) + (c.alias ? " alias" : "") + (c.in32 ? " int32" : ""));
  const std::int64_t v2p_len = 1 + rng.between(2, 200);
  const std::vector<std::int64_t> v2p = random_v2p(rng, v2p_len);
  const std::vector<std::int64_t> ids = random_ids(rng, static_cast<std::size_t>(c.rows * c.cols), v2p_len, ps);
  const std::int64_t in_storage = (c.rows - 1) * c.in_row_stride + (c.alias ? c.out_cols : c.cols - 1) * c.in_col_stride + 1;
  const std::int64_t out_storage = (c.rows - 1) * c.out_row_stride + (c.out_cols - 1) * c.out_col_stride + 1;
  auto in_at = [&](std::int64_t r, std::int64_t col) { return r * c.in_row_stride + col * c.in_col_stride; };
  auto out_at = [&](std::int64_t r, std::int64_t col) { return r * c.out_row_stride + col * c.out_col_stride; };

  DeviceBuffer<std::int64_t> v2p_dev = to_device(v2p);
  DeviceBuffer<std::int32_t> in32;
  DeviceBuffer<std::int64_t> in64, out64;
  std::vector<std::int64_t> in_host64(static_cast<std::size_t>(in_storage), kPoison);
  std::vector<std::int32_t> in_host32(static_cast<std::size_t>(in_storage), 0x5a5a5a5a);
  for (std::int64_t r = 0; r < c.rows; ++r)
    for (std::int64_t col = 0; col < c.cols; ++col) {
      in_host64[static_cast<std::size_t>(in_at(r, col))] = ids[static_cast<std::size_t>(r * c.cols + col)];
      in_host32[static_cast<std::size_t>(in_at(r, col))] = static_cast<std::int32_t>(ids[static_cast<std::size_t>(r * c.cols + col)]);
    }
  if (c.alias)  // an aliasing buffer's lanes past n hold stale ids, which the zero-fill must clear
    for (std::int64_t col = c.cols; col < c.out_cols; ++col) in_host64[static_cast<std::size_t>(in_at(0, col))] = 1000 + col;
  TranslateParams p;
  if (c.in32) {
    in32 = to_device(in_host32);
    p.in = in32.get();
  } else {
    in64 = to_device(in_host64);
    p.in = in64.get();
  }
  if (c.alias) {
    p.out = in64.get();
  } else {
    out64 = to_device(std::vector<std::int64_t>(static_cast<std::size_t>(out_storage), kPoison));
    p.out = out64.get();
  }
  p.in_int32 = c.in32;
  p.rows = c.rows;
  p.cols = c.cols;
  p.in_row_stride = c.in_row_stride;
  p.in_col_stride = c.in_col_stride;
  p.out_row_stride = c.out_row_stride;
  p.out_col_stride = c.out_col_stride;
  p.out_cols = c.out_cols;
  p.v2p = v2p_dev.get();
  p.v2p_len = v2p_len;
  p.page_size = ps;
  ASSERT_EQ(launch_translate(p, nullptr), cudaSuccess);
  const std::vector<std::int64_t> out = to_host(c.alias ? in64 : out64, static_cast<std::size_t>(out_storage));
  std::vector<bool> owned(static_cast<std::size_t>(out_storage), false);
  for (std::int64_t r = 0; r < c.rows; ++r)
    for (std::int64_t col = 0; col < c.out_cols; ++col) {
      const std::size_t at = static_cast<std::size_t>(out_at(r, col));
      owned[at] = true;
      const std::int64_t expected = col < c.cols ? ref_translate(v2p, ps, ids[static_cast<std::size_t>(r * c.cols + col)]) : 0;
      ASSERT_EQ(out[at], expected) << "row " << r << " col " << col;
    }
  for (std::size_t at = 0; at < out.size(); ++at)
    if (!owned[at]) {
      ASSERT_EQ(out[at], c.alias ? in_host64[at] : kPoison) << "storage cell " << at << " changed";
    }
  if (c.in32 || !c.alias) {  // the input is left as it was
    if (c.in32) {
      EXPECT_EQ(to_host(in32, in_host32.size()), in_host32);
    } else {
      EXPECT_EQ(to_host(in64, in_host64.size()), in_host64);
    }
  }
}

TEST(TranslateKernel, MatchesSpecForEveryBufferLayout) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(11));
  for (std::int64_t ps : {1, 4, 16}) {
    for (bool in32 : {false, true}) {
      const std::int64_t n = rng.between(5, 300);
      run_translate_case(rng, ps, {1, n, 0, 1, 0, 1, n, false, in32});                // contiguous
      run_translate_case(rng, ps, {1, n, 0, 3, 0, 1, n, false, in32});                // strided input
      run_translate_case(rng, ps, {1, n, 0, 1, 0, 2, n, false, in32});                // strided output
      run_translate_case(rng, ps, {1, n, 0, 2, 0, 1, n + 37, false, in32});           // out_width zero-fill
      run_translate_case(rng, ps, {7, 13, 20, 1, 15, 1, 13, false, in32});            // 2-D, row strides
      if (!in32) {
        run_translate_case(rng, ps, {1, n, 0, 1, 0, 1, n, true, false});              // aliasing, in place
        run_translate_case(rng, ps, {1, n, 0, 2, 0, 2, n + 9, true, false});          // aliasing, strided, zero-fill
        run_translate_case(rng, ps, {5, 11, 16, 1, 16, 1, 11, true, false});          // aliasing 2-D
      }
    }
  }
}

TEST(TranslateKernel, NegativeWrapsAndLiveTombstonesDifferFromSpec) {
  KVTWIN_REQUIRE_CUDA();
  // Faults 9 and 10 are real behaviours of the kernel behind switches: check they do what their
  // bug does, so that a harness that catches them catches the real bug.
  const std::int64_t ps = 4;
  const std::vector<std::int64_t> v2p = {0, 7, -1, 9, -1};  // page 4 is the -1 sentinel
  const std::vector<std::int64_t> ids = {-1, -ps - 1, 2 * ps + 1, 3 * ps + 2};
  DeviceBuffer<std::int64_t> in = to_device(ids), table = to_device(v2p);
  DeviceBuffer<std::int64_t> out = to_device(std::vector<std::int64_t>(ids.size(), kPoison));
  TranslateParams p;
  p.in = in.get();
  p.cols = static_cast<std::int64_t>(ids.size());
  p.out = out.get();
  p.out_cols = p.cols;
  p.v2p = table.get();
  p.v2p_len = static_cast<std::int64_t>(v2p.size());
  p.page_size = ps;
  ASSERT_EQ(launch_translate(p, nullptr), cudaSuccess);
  std::vector<std::int64_t> spec;
  for (std::int64_t t : ids) spec.push_back(ref_translate(v2p, ps, t));
  EXPECT_EQ(to_host(out, ids.size()), spec);
  p.negative_wraps = true;
  ASSERT_EQ(launch_translate(p, nullptr), cudaSuccess);
  const std::vector<std::int64_t> wrapped = to_host(out, ids.size());
  // -ps-1 is page -2 from the end: v2p[3] = 9, slot ps-1.
  EXPECT_EQ(wrapped[1], 9 * ps + ps - 1);
  EXPECT_EQ(wrapped[0], 0) << "-1 lands on the -1 sentinel row, which still goes to the sink";
  p.negative_wraps = false;
  p.tombstone_live = true;
  ASSERT_EQ(launch_translate(p, nullptr), cudaSuccess);
  EXPECT_EQ(to_host(out, ids.size())[2], -1 * ps + 1) << "a tombstone is no longer clamped to the sink";
}

TEST(SwaTranslateKernel, MatchesSpec) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(12));
  for (std::int64_t ps : {1, 8}) {
    const std::int64_t pages = 60, virtual_len = 50;
    std::vector<std::int64_t> full_p2v(static_cast<std::size_t>(pages + 1), -1), swa_v2p(static_cast<std::size_t>(virtual_len), -1);
    full_p2v[0] = 0;
    swa_v2p[0] = 0;
    for (std::int64_t p = 3; p < pages; ++p)
      if (rng.chance(1, 2)) full_p2v[static_cast<std::size_t>(p)] = rng.between(1, virtual_len - 2);
    for (std::int64_t v = 1; v + 1 < virtual_len; ++v)
      if (rng.chance(2, 3)) swa_v2p[static_cast<std::size_t>(v)] = rng.between(2, 90);
    std::vector<std::int64_t> ids(257);
    for (std::int64_t& k : ids) k = rng.between(-2 * ps, (pages + 3) * ps);
    DeviceBuffer<std::int64_t> in = to_device(ids), p2v_dev = to_device(full_p2v), v2p_dev = to_device(swa_v2p);
    DeviceBuffer<std::int64_t> out = to_device(std::vector<std::int64_t>(ids.size(), kPoison));
    SwaTranslateParams p;
    p.in = in.get();
    p.out = out.get();
    p.n = static_cast<std::int64_t>(ids.size());
    p.full_p2v = p2v_dev.get();
    p.full_p2v_len = pages + 1;
    p.swa_v2p = v2p_dev.get();
    p.swa_v2p_len = virtual_len;
    p.page_size = ps;
    ASSERT_EQ(launch_swa_translate(p, nullptr), cudaSuccess);
    const std::vector<std::int64_t> got = to_host(out, ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      // SPEC 4.3: vpage = max(p2v_full[k // ps], 0), swa = max(swa_v2p[vpage] * ps + k % ps, 0);
      // a negative id goes to the sink; a page past p2v reads as the -1 sentinel.
      const std::int64_t k = ids[i];
      std::int64_t expected = 0;
      if (k >= 0) {
        const std::int64_t owner = k / ps < pages + 1 ? full_p2v[static_cast<std::size_t>(k / ps)] : -1;
        const std::int64_t vpage = std::max<std::int64_t>(owner, 0);
        expected = std::max<std::int64_t>(swa_v2p[static_cast<std::size_t>(vpage)] * ps + k % ps, 0);
      }
      ASSERT_EQ(got[i], expected) << "id " << k << " ps " << ps;
    }
  }
}

TEST(PageTableKernel, FusesTheLookupAndLeavesThePastPrefixAlone) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(13));
  for (std::int64_t ps : {1, 4, 16}) {
    const std::int64_t v2p_len = 80, rt_rows = 6, rt_cols = 70, bs = 5;
    const std::int64_t table_cols = (rt_cols + ps - 1) / ps;
    const std::vector<std::int64_t> v2p = random_v2p(rng, v2p_len);
    std::vector<std::int64_t> rt(static_cast<std::size_t>(rt_rows * rt_cols));
    for (std::int64_t& t : rt) t = rng.between(-ps, (v2p_len + 1) * ps);
    std::vector<std::int64_t> req(static_cast<std::size_t>(bs)), lens(static_cast<std::size_t>(bs));
    for (std::int64_t b = 0; b < bs; ++b) {
      req[static_cast<std::size_t>(b)] = rng.between(0, rt_rows - 1);
      lens[static_cast<std::size_t>(b)] = rng.between(0, rt_cols);
    }
    const std::vector<std::int64_t> prior(static_cast<std::size_t>(bs * table_cols), -7);
    DeviceBuffer<std::int64_t> rt_dev = to_device(rt), req_dev = to_device(req), len_dev = to_device(lens);
    DeviceBuffer<std::int64_t> v2p_dev = to_device(v2p), table = to_device(prior);
    PageTableParams p;
    p.req_to_token = rt_dev.get();
    p.rt_rows = rt_rows;
    p.rt_cols = rt_cols;
    p.rt_row_stride = rt_cols;
    p.req = req_dev.get();
    p.seq_lens = len_dev.get();
    p.bs = bs;
    p.table = table.get();
    p.table_cols = table_cols;
    p.table_row_stride = table_cols;
    p.v2p = v2p_dev.get();
    p.v2p_len = v2p_len;
    p.page_size = ps;
    ASSERT_EQ(launch_page_table(p, nullptr), cudaSuccess);
    const std::vector<std::int64_t> got = to_host(table, prior.size());
    for (std::int64_t b = 0; b < bs; ++b)
      for (std::int64_t c = 0; c < table_cols; ++c) {
        const std::int64_t live = (lens[static_cast<std::size_t>(b)] + ps - 1) / ps;
        std::int64_t expected = -7;
        if (c < live) {
          const std::int64_t t = rt[static_cast<std::size_t>(req[static_cast<std::size_t>(b)] * rt_cols + c * ps)];
          expected = 0;
          if (t >= 0 && t / ps < v2p_len) expected = std::max<std::int64_t>(v2p[static_cast<std::size_t>(t / ps)], 0);
        }
        ASSERT_EQ(got[static_cast<std::size_t>(b * table_cols + c)], expected) << "row " << b << " col " << c;
      }
  }
}

TEST(RemapKernel, RemapsInPlaceUpToTheBoundReadOnTheDevice) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(14));
  const std::int64_t ps = 4, v2p_len = 64, capacity = 500;
  const std::vector<std::int64_t> v2p = random_v2p(rng, v2p_len);
  const std::vector<std::int64_t> indices = random_ids(rng, capacity, v2p_len, ps);
  const std::vector<std::int64_t> indptr = {0, 100, 230, 317};  // bs = 3: the live prefix is 317
  DeviceBuffer<std::int64_t> buffer = to_device(indices), ptr = to_device(indptr), table = to_device(v2p);
  RemapParams p;
  p.in = buffer.get();
  p.out = buffer.get();
  p.capacity = capacity;
  p.kv_indptr = ptr.get();
  p.bs = 3;
  p.v2p = table.get();
  p.v2p_len = v2p_len;
  p.page_size = ps;
  ASSERT_EQ(launch_remap_indices(p, nullptr), cudaSuccess);
  const std::vector<std::int64_t> got = to_host(buffer, indices.size());
  for (std::int64_t i = 0; i < capacity; ++i) {
    const std::int64_t expected = i < 317 ? ref_translate(v2p, ps, indices[static_cast<std::size_t>(i)]) : indices[static_cast<std::size_t>(i)];
    ASSERT_EQ(got[static_cast<std::size_t>(i)], expected) << "index " << i;
  }
}

// ---------------------------------------------------------------- the doors

struct DoorSetup {
  std::uint64_t entry = 256;
  std::int64_t slots = 300;
  std::int64_t first_slot = 6;
  std::vector<RowSegment> segments;
  std::uint64_t lane_stride = 0;
};

// Three row families inside an entry, disjoint: [0,64) [64,160) [224,256) times `scale`; the
// third is indexed by a second loc array. Scale 1: rows of a few 16-byte units; scale 48: rows of
// 1.5-4.5 KiB, longer than one pass of a thread group (the groups walk them in several chunks).
DoorSetup door_setup(std::uint64_t scale) {
  DoorSetup s;
  s.entry = 256 * scale;
  const std::uint64_t offsets[] = {0, 64, 224}, rows[] = {64, 96, 32};
  std::uint64_t staging = 0;
  for (int i = 0; i < 3; ++i) {
    RowSegment seg;
    seg.pool_offset_bytes = offsets[i] * scale;
    seg.entry_bytes = s.entry;
    seg.staging_offset_bytes = staging;
    seg.row_bytes = static_cast<std::uint32_t>(rows[i] * scale);
    seg.loc_set = i == 2 ? 1 : 0;
    seg.first_slot = s.first_slot;
    s.segments.push_back(seg);
    staging += rows[i] * scale;
  }
  s.lane_stride = staging;
  return s;
}

std::vector<std::int64_t> distinct_locs(Rng& rng, std::int64_t lanes, std::int64_t first, std::int64_t slots) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(slots - first));
  std::iota(all.begin(), all.end(), first);
  for (std::size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[static_cast<std::size_t>(rng.below(i))]);
  std::vector<std::int64_t> locs(all.begin(), all.begin() + lanes);
  for (std::int64_t& l : locs)
    if (rng.chance(1, 6)) l = rng.between(0, first - 1);  // sink lanes
  return locs;
}

TEST(DoorKernels, ScatterThenGatherMatchesTheByteLaw) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(15));
  for (std::uint64_t scale : {1u, 48u})
    for (bool vector16 : {true, false}) {
      SCOPED_TRACE((vector16 ? "16-byte path, scale " : "byte path, scale ") + std::to_string(scale));
      const DoorSetup s = door_setup(scale);
      const std::int64_t lanes = 200;
      const std::vector<std::int64_t> loc0 = distinct_locs(rng, lanes, s.first_slot, s.slots);
      const std::vector<std::int64_t> loc1 = distinct_locs(rng, lanes, s.first_slot, s.slots);
      const std::vector<std::uint8_t> pool_before = random_bytes(rng, s.entry * static_cast<std::uint64_t>(s.slots));
      const std::vector<std::uint8_t> staging = random_bytes(rng, s.lane_stride * lanes);
      // byte(loc, part, layer) = loc * E + offset; sink lanes write nothing.
      std::vector<std::uint8_t> expected = pool_before;
      for (std::int64_t lane = 0; lane < lanes; ++lane)
        for (const RowSegment& seg : s.segments) {
          const std::int64_t t = (seg.loc_set == 0 ? loc0 : loc1)[static_cast<std::size_t>(lane)];
          if (t < s.first_slot) continue;
          std::memcpy(expected.data() + static_cast<std::uint64_t>(t) * s.entry + seg.pool_offset_bytes,
                      staging.data() + seg.staging_offset_bytes + static_cast<std::uint64_t>(lane) * s.lane_stride,
                      seg.row_bytes);
        }
      // The read door: the same rows back, sink lanes as zeros (into a poisoned staging).
      std::vector<std::uint8_t> want(staging.size(), 0xa5);
      for (std::int64_t lane = 0; lane < lanes; ++lane)
        for (const RowSegment& seg : s.segments) {
          const std::int64_t t = (seg.loc_set == 0 ? loc0 : loc1)[static_cast<std::size_t>(lane)];
          std::uint8_t* to = want.data() + seg.staging_offset_bytes + static_cast<std::uint64_t>(lane) * s.lane_stride;
          if (t < s.first_slot)
            std::memset(to, 0, seg.row_bytes);
          else
            std::memcpy(to, expected.data() + static_cast<std::uint64_t>(t) * s.entry + seg.pool_offset_bytes, seg.row_bytes);
        }
      DeviceBuffer<std::uint8_t> staging_dev = to_device(staging);
      DeviceBuffer<RowSegment> segments = to_device(s.segments);
      DeviceBuffer<std::int64_t> l0 = to_device(loc0), l1 = to_device(loc1);
      std::uint32_t max_row_bytes = 0;
      for (const RowSegment& seg : s.segments) max_row_bytes = std::max(max_row_bytes, seg.row_bytes);
      {
        DeviceBuffer<std::uint8_t> pool = to_device(pool_before);
        RowCopyParams p;
        p.pool = pool.get();
        p.pool_bytes = pool_before.size();
        p.staging = staging_dev.get();
        p.staging_lane_stride_bytes = s.lane_stride;
        p.segments = segments.get();
        p.num_segments = 3;
        p.max_row_bytes = max_row_bytes;
        p.locs[0] = l0.get();
        p.locs[1] = l1.get();
        p.lanes = lanes;
        p.vector16 = vector16 && rows_vector16(p.pool, p.staging, s.lane_stride, s.segments.data(), 3);
        ASSERT_EQ(p.vector16, vector16);
        ASSERT_EQ(launch_scatter_rows(p, nullptr), cudaSuccess);
        ASSERT_EQ(to_host(pool, expected.size()), expected);

        DeviceBuffer<std::uint8_t> gathered = to_device(std::vector<std::uint8_t>(staging.size(), 0xa5));
        p.staging = gathered.get();
        ASSERT_EQ(launch_gather_rows(p, nullptr), cudaSuccess);
        ASSERT_EQ(to_host(gathered, want.size()), want);
      }
    }
}

TEST(MovePagesKernel, CopiesWholeEnvelopes) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(16));
  // The 16-byte path (40016: three blocks' worth of 16 KiB, the last ragged) and the byte path
  // (3000: three blocks' worth of 1 KiB).
  for (std::uint64_t page_bytes : {4096u, 4096u + 32u, 40016u, 100u, 3000u}) {
    const std::int64_t pages = 64;
    const std::vector<std::uint8_t> before = random_bytes(rng, page_bytes * pages);
    std::vector<std::int64_t> order(static_cast<std::size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[static_cast<std::size_t>(rng.below(i))]);
    const std::vector<std::int64_t> src(order.begin(), order.begin() + 20), dst(order.begin() + 20, order.begin() + 40);
    DeviceBuffer<std::uint8_t> pool = to_device(before);
    DeviceBuffer<std::int64_t> s = to_device(src), d = to_device(dst);
    PageMoveParams p;
    p.pool = pool.get();
    p.pool_bytes = before.size();
    p.page_bytes = page_bytes;
    p.src = s.get();
    p.dst = d.get();
    p.pages = 20;
    std::vector<std::uint8_t> expected = before;
    for (std::size_t i = 0; i < src.size(); ++i)
      std::memcpy(expected.data() + static_cast<std::uint64_t>(dst[i]) * page_bytes,
                  before.data() + static_cast<std::uint64_t>(src[i]) * page_bytes, page_bytes);
    ASSERT_EQ(launch_move_pages(p, nullptr), cudaSuccess);
    ASSERT_EQ(to_host(pool, expected.size()), expected) << "page bytes " << page_bytes;
  }
}

// ---------------------------------------------------------------- reference decode attention

float element(const std::vector<std::uint8_t>& bytes, DType dtype, std::uint64_t element_index) {
  const std::uint8_t* p = bytes.data() + element_index * dtype_size_bytes(dtype);
  switch (dtype) {
    case DType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return det::bf16_to_float(v);
    }
    case DType::fp16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return det::fp16_to_float(v);
    }
    case DType::fp8_e4m3:
      return det::fp8e4m3_to_float(*p);
    case DType::fp32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
  return 0;
}

// A pool of `pages` pages of `ps` slots whose entries hold `layers` layers of K (heads x k_dim)
// and V (heads x v_dim) rows, or, for MLA, one latent row of k_dim (V = its first v_dim).
struct AttnPool {
  bool mla = false;
  std::uint32_t layers = 2, heads = 2, k_dim = 16, v_dim = 8;
  DType dtype = DType::bf16;
  std::int64_t ps = 1, pages = 24;
  std::uint64_t k_row = 0, v_row = 0, entry = 0;
  std::vector<std::uint8_t> bytes;

  void build(Rng& rng) {
    const std::uint64_t is = dtype_size_bytes(dtype);
    k_row = std::uint64_t{heads} * k_dim * is;
    v_row = mla ? 0 : std::uint64_t{heads} * v_dim * is;
    entry = (layers * (k_row + v_row) + 31) / 32 * 32;
    bytes = random_bytes(rng, entry * static_cast<std::uint64_t>(ps * pages));
    // Rows hold finite oracle values (random bytes elsewhere: padding must not matter).
    std::vector<std::uint8_t> row(std::max(k_row, v_row));
    for (std::int64_t slot = 0; slot < ps * pages; ++slot)
      for (std::uint32_t l = 0; l < layers; ++l)
        for (std::uint32_t part = 0; part < (mla ? 1u : 2u); ++part) {
          const std::uint64_t size = part == 0 ? k_row : v_row;
          fill_oracle_row(rng.next_u64(), RowIdentity{slot, 0, l, part, 1}, dtype, std::span<std::uint8_t>(row.data(), size));
          std::memcpy(bytes.data() + static_cast<std::uint64_t>(slot) * entry + l * (k_row + v_row) + part * k_row,
                      row.data(), size);
        }
  }
  // Byte of element (slot, layer, part, head, d) under the byte law.
  std::uint64_t byte_of(std::int64_t slot, std::uint32_t layer, int part, std::uint32_t head, std::uint32_t d) const {
    const std::uint64_t dim = part == 0 || mla ? k_dim : v_dim;
    return static_cast<std::uint64_t>(slot) * entry + layer * (k_row + v_row) + (part == 1 && !mla ? k_row : 0) +
           (head * dim + d) * dtype_size_bytes(dtype);
  }
  // The token-major paged view of (layer, part): strides from the entry, never from the shape.
  PagedView view(std::uint32_t layer, int part) const {
    const std::int64_t is = dtype_size_bytes(dtype);
    PagedView v;
    v.dtype = dtype;
    v.storage_offset = static_cast<std::int64_t>(layer * (k_row + v_row) + (part == 1 && !mla ? k_row : 0)) / is;
    v.token_stride = static_cast<std::int64_t>(entry) / is;
    v.page_stride = ps * v.token_stride;
    v.head_stride = part == 0 || mla ? k_dim : v_dim;
    v.dim_stride = 1;
    v.limit_elements = bytes.size() / static_cast<std::uint64_t>(is);
    return v;
  }
};

// docs/decisions.md "The decode step and its reference attention", written out on the host.
std::vector<float> ref_attention(const AttnPool& a, std::uint32_t layer, std::uint32_t query_heads,
                                 const std::vector<std::int64_t>& table, std::int64_t table_cols,
                                 const std::vector<std::int64_t>& lens, const std::vector<float>& q) {
  const std::uint32_t kv_heads = a.mla ? 1 : a.heads;
  std::vector<float> out(lens.size() * query_heads * a.v_dim, 0.0f);
  const float scale = det::div(1.0f, det::sqrt(static_cast<float>(a.k_dim)));
  for (std::size_t b = 0; b < lens.size(); ++b) {
    const std::int64_t len = lens[b];
    for (std::uint32_t h = 0; h < query_heads; ++h) {
      const std::uint32_t g = h / (query_heads / kv_heads);
      std::vector<float> s(static_cast<std::size_t>(len));
      auto slot_of = [&](std::int64_t j) { return table[b * static_cast<std::size_t>(table_cols) + static_cast<std::size_t>(j / a.ps)] * a.ps + j % a.ps; };
      for (std::int64_t j = 0; j < len; ++j) {
        float acc = 0.0f;
        for (std::uint32_t d = 0; d < a.k_dim; ++d)
          acc = det::add(acc, det::mul(q[(b * query_heads + h) * a.k_dim + d],
                                       element(a.bytes, a.dtype, a.byte_of(slot_of(j), layer, 0, g, d) / dtype_size_bytes(a.dtype))));
        s[static_cast<std::size_t>(j)] = det::mul(acc, scale);
      }
      float m = s[0];
      for (std::int64_t j = 1; j < len; ++j) m = s[static_cast<std::size_t>(j)] > m ? s[static_cast<std::size_t>(j)] : m;
      float l = 0.0f;
      for (float& x : s) {
        x = det::exp_nonpositive(det::sub(x, m));
        l = det::add(l, x);
      }
      for (std::uint32_t e = 0; e < a.v_dim; ++e) {
        float acc = 0.0f;
        for (std::int64_t j = 0; j < len; ++j)
          acc = det::add(acc, det::mul(s[static_cast<std::size_t>(j)],
                                       element(a.bytes, a.dtype, a.byte_of(slot_of(j), layer, 1, g, e) / dtype_size_bytes(a.dtype))));
        out[(b * query_heads + h) * a.v_dim + e] = det::div(acc, l);
      }
    }
  }
  return out;
}

struct AttnRun {
  std::vector<std::int64_t> table, lens;
  std::int64_t table_cols = 0;
  std::vector<float> q;
  std::uint32_t query_heads = 0;
};

AttnRun attn_inputs(Rng& rng, const AttnPool& a, std::uint32_t query_heads, std::int64_t rows) {
  AttnRun r;
  r.query_heads = query_heads;
  r.table_cols = 6;
  for (std::int64_t b = 0; b < rows; ++b) {
    r.lens.push_back(rng.between(1, r.table_cols * a.ps));
    for (std::int64_t c = 0; c < r.table_cols; ++c) r.table.push_back(rng.between(1, a.pages - 1));
  }
  for (std::int64_t b = 0; b < rows; ++b)
    for (std::uint32_t h = 0; h < query_heads; ++h)
      for (std::uint32_t d = 0; d < a.k_dim; ++d)
        r.q.push_back(oracle_query_value(rng.next_u64(), static_cast<std::uint32_t>(b), h, d));
  return r;
}

// Runs the attention kernel over the given views; output poisoned first.
std::vector<float> run_attention(const AttnPool& a, const PagedView& k, const PagedView& v, const AttnRun& r) {
  const std::int64_t rows = static_cast<std::int64_t>(r.lens.size());
  DeviceBuffer<std::int64_t> table = to_device(r.table), lens = to_device(r.lens);
  DeviceBuffer<float> q = to_device(r.q);
  DeviceBuffer<float> scores = to_device(std::vector<float>(static_cast<std::size_t>(rows) * r.query_heads * r.table_cols * a.ps, 0.0f));
  DeviceBuffer<float> out = to_device(std::vector<float>(static_cast<std::size_t>(rows) * r.query_heads * a.v_dim, poison_float()));
  AttentionParams p;
  p.k = k;
  p.v = v;
  p.page_table = table.get();
  p.table_row_stride = r.table_cols;
  p.seq_lens = lens.get();
  p.rows = rows;
  p.page_size = a.ps;
  p.max_tokens = r.table_cols * a.ps;
  p.q = q.get();
  p.scores = scores.get();
  p.out = out.get();
  p.query_heads = r.query_heads;
  p.kv_heads = a.mla ? 1 : a.heads;
  p.k_dim = a.k_dim;
  p.v_dim = a.v_dim;
  EXPECT_EQ(launch_decode_attention(p, nullptr), cudaSuccess);
  return to_host(out, static_cast<std::size_t>(rows) * r.query_heads * a.v_dim);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(AttentionKernel, BitIdenticalToTheHostReference) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(17));
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp32})
    for (std::int64_t ps : {1, 4})
      for (bool mla : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " ps " + std::to_string(ps) + (mla ? " MLA" : " MHA"));
        AttnPool a;
        a.mla = mla;
        a.dtype = dtype;
        a.ps = ps;
        if (mla) {
          a.heads = 1;
          a.k_dim = 48;  // kv_lora_rank 32 + rope 16
          a.v_dim = 32;
        }
        a.build(rng);
        const std::uint32_t query_heads = 4;  // grouped: 2 query heads per KV head (MHA), 4 on one (MLA)
        const AttnRun r = attn_inputs(rng, a, query_heads, 5);
        PagedView k = a.view(1, 0), v = a.view(1, mla ? 0 : 1);
        DeviceBuffer<std::uint8_t> pool = to_device(a.bytes);
        k.base = v.base = pool.get();
        const std::vector<float> got = run_attention(a, k, v, r);
        const std::vector<float> want = ref_attention(a, 1, query_heads, r.table, r.table_cols, r.lens, r.q);
        ASSERT_TRUE(same_bits(got, want));
        for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "every output written, and finite";
      }
}

// Stride parity: identical page contents pushed through a contiguous per-layer cache and through
// the token-major strided view give bitwise-identical attention (no tolerance).
TEST(AttentionKernel, StrideParityContiguousCacheAndTokenMajorView) {
  KVTWIN_REQUIRE_CUDA();
  Rng rng(test_seed(18));
  struct Shape {
    bool mla;
    std::uint32_t heads, k_dim, v_dim, query_heads;
  };
  const Shape shapes[] = {{false, 1, 32, 32, 2}, {false, 2, 16, 8, 4}, {false, 8, 32, 32, 8}, {true, 1, 48, 32, 4}};
  for (std::int64_t ps : {1, 16})
    for (const Shape& shape : shapes) {
      SCOPED_TRACE("ps " + std::to_string(ps) + (shape.mla ? " MLA" : " MHA") + " heads " + std::to_string(shape.heads));
      AttnPool a;
      a.mla = shape.mla;
      a.heads = shape.heads;
      a.k_dim = shape.k_dim;
      a.v_dim = shape.v_dim;
      a.ps = ps;
      a.pages = 12;
      a.layers = 3;
      a.build(rng);
      const std::uint32_t layer = 1;
      const AttnRun r = attn_inputs(rng, a, shape.query_heads, 4);
      // The contiguous per-layer caches hold the same elements: [pages, ps, heads, dim].
      const std::uint64_t is = dtype_size_bytes(a.dtype);
      const std::uint64_t slots = static_cast<std::uint64_t>(a.ps * a.pages);
      std::vector<std::uint8_t> k_cache(slots * a.heads * a.k_dim * is), v_cache(slots * a.heads * a.v_dim * is);
      for (std::uint64_t slot = 0; slot < slots; ++slot)
        for (std::uint32_t h = 0; h < a.heads; ++h) {
          for (std::uint32_t d = 0; d < a.k_dim; ++d)
            std::memcpy(k_cache.data() + ((slot * a.heads + h) * a.k_dim + d) * is,
                        a.bytes.data() + a.byte_of(static_cast<std::int64_t>(slot), layer, 0, h, d), is);
          if (!a.mla)
            for (std::uint32_t e = 0; e < a.v_dim; ++e)
              std::memcpy(v_cache.data() + ((slot * a.heads + h) * a.v_dim + e) * is,
                          a.bytes.data() + a.byte_of(static_cast<std::int64_t>(slot), layer, 1, h, e), is);
        }
      DeviceBuffer<std::uint8_t> pool = to_device(a.bytes), kc = to_device(k_cache), vc = to_device(v_cache);
      PagedView tk = a.view(layer, 0), tv = a.view(layer, a.mla ? 0 : 1);
      tk.base = tv.base = pool.get();
      PagedView ck, cv;
      ck.base = kc.get();
      ck.dtype = a.dtype;
      ck.head_stride = a.k_dim;
      ck.token_stride = static_cast<std::int64_t>(a.heads * a.k_dim);
      ck.page_stride = a.ps * ck.token_stride;
      ck.limit_elements = k_cache.size() / is;
      cv = ck;  // MLA: V is the latent's prefix, in the same cache
      if (!a.mla) {
        cv.base = vc.get();
        cv.head_stride = a.v_dim;
        cv.token_stride = static_cast<std::int64_t>(a.heads * a.v_dim);
        cv.page_stride = a.ps * cv.token_stride;
        cv.limit_elements = v_cache.size() / is;
      }
      const std::vector<float> strided = run_attention(a, tk, tv, r);
      const std::vector<float> contiguous = run_attention(a, ck, cv, r);
      ASSERT_TRUE(same_bits(strided, contiguous));
      ASSERT_TRUE(same_bits(strided, ref_attention(a, layer, shape.query_heads, r.table, r.table_cols, r.lens, r.q)));
      // And the bug the parity guards against: a token stride taken from the shape reads other bytes.
      PagedView wrong_k = tk, wrong_v = tv;
      wrong_k.token_stride = static_cast<std::int64_t>(a.heads * a.k_dim);
      wrong_k.page_stride = a.ps * wrong_k.token_stride;
      wrong_v.token_stride = static_cast<std::int64_t>(a.heads * (a.mla ? a.k_dim : a.v_dim));
      wrong_v.page_stride = a.ps * wrong_v.token_stride;
      EXPECT_FALSE(same_bits(run_attention(a, wrong_k, wrong_v, r), strided));
    }
}

}  // namespace
}  // namespace kvtwin::gpu
