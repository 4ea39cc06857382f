// Helpers shared by the traces tests: where the test data lives, and a random operation of any
// kind (every field drawn, extremes included) for round-trip properties.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/catalogue.h"
#include "core/op.h"
#include "core/pool_config.h"
#include "core/reasons.h"
#include "core/rng.h"

namespace kvtwin::traces::testing {

// The repository root (ctest runs tests there and sets KVTWIN_SOURCE_DIR).
inline std::string source_dir() {
  const char* dir = std::getenv("KVTWIN_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}
inline std::string data_path(const std::string& relative) { return source_dir() + "/tests/traces/data/" + relative; }

// A small pool a reader accepts (llama-3.1-8b, 16-token pages, 32 pages, tables only).
inline PoolConfig small_config() {
  PoolConfig c;
  c.shape = find_model("llama-3.1-8b").value();
  c.page_size = 16;
  c.total_bytes = std::uint64_t{64} << 20;
  c.tables_only = true;
  c.seed = 1;
  return c;
}

// A value spread over small numbers and the extremes of its type.
inline std::int64_t any_i64(Rng& rng) {
  switch (rng.below(6)) {
    case 0:
      return INT64_MIN;
    case 1:
      return INT64_MAX;
    case 2:
      return -1;
    case 3:
      return static_cast<std::int64_t>(rng.next_u64());
    default:
      return rng.between(-5, 300);
  }
}
inline std::uint64_t any_u64(Rng& rng) {
  switch (rng.below(4)) {
    case 0:
      return UINT64_MAX;
    case 1:
      return rng.next_u64();
    default:
      return rng.below(5000);
  }
}
inline std::uint32_t any_u32(Rng& rng) {
  return rng.chance(1, 5) ? UINT32_MAX : static_cast<std::uint32_t>(rng.below(64));
}
inline std::vector<std::int64_t> any_ids(Rng& rng, std::size_t max_len = 8) {
  std::vector<std::int64_t> v(rng.below(max_len + 1));
  for (std::int64_t& x : v) x = any_i64(rng);
  return v;
}
inline std::vector<std::vector<std::int64_t>> any_matrix(Rng& rng) {
  std::vector<std::vector<std::int64_t>> m(rng.below(4));
  for (auto& row : m) row = any_ids(rng, 5);
  return m;
}

// An op of any kind that a reader accepts under small_config() (layers, sub-pool and part names
// exist; shapes agree with their data); every other field is drawn freely.
inline Op any_op(Rng& rng) {
  const std::uint32_t layers = 32;
  switch (rng.below(22)) {
    case 0: {
      PoolConfig c = small_config();
      c.page_size = 1 + rng.below(64);
      c.total_bytes = (std::uint64_t{8} << 20) * (1 + rng.below(64)) * c.page_size;
      c.mode = rng.chance(1, 2) ? CompactionMode::lazy : CompactionMode::eager;
      c.seed = any_u64(rng);
      return BuildPool{c};
    }
    case 1:
      return Alloc{any_u64(rng)};
    case 2: {
      AllocMany o;
      o.tokens.resize(rng.below(5));
      for (auto& t : o.tokens) t = any_u64(rng);
      return o;
    }
    case 3:
      return Free{rng.chance(1, 2) ? IdUnit::tokens : IdUnit::pages, any_ids(rng)};
    case 4:
      return FreeSwa{rng.chance(1, 2) ? IdUnit::tokens : IdUnit::pages, any_ids(rng)};
    case 5:
      return Flush{};
    case 6:
      return MovePages{"full", any_ids(rng), any_ids(rng)};
    case 7:
      return BeginRead{any_u32(rng), "full", any_ids(rng)};
    case 8:
      return EndRead{any_u32(rng)};
    case 9: {
      MakeBatch o{any_u32(rng), any_ids(rng), {}};
      if (rng.chance(1, 3)) {
        o.encoder_tokens.resize(o.tokens.size());
        for (auto& t : o.encoder_tokens) t = any_i64(rng);
      }
      return o;
    }
    case 10:
      return Rebind{any_u32(rng), rng.chance(1, 2) ? 0 : any_u64(rng)};
    case 11:
      return Split{any_u32(rng), any_u64(rng), any_u32(rng), any_u32(rng)};
    case 12:
      return DropBatch{any_u32(rng)};
    case 13: {
      Write w;
      w.layer = static_cast<std::uint32_t>(rng.below(layers));
      w.write_number = any_u64(rng);
      if (rng.chance(1, 2)) {
        w.batch = any_u32(rng);
      } else {
        w.loc = any_ids(rng);
        w.tokens.resize(w.loc.size());
        for (auto& t : w.tokens) t = any_i64(rng);
        w.physical = rng.chance(1, 2);
      }
      w.checked = rng.chance(1, 3);
      return w;
    }
    case 14:
      return Read{static_cast<std::uint32_t>(rng.below(layers)), rng.chance(1, 2) ? "k" : "v", any_ids(rng)};
    case 15: {
      Translate t;
      if (rng.chance(1, 2)) {
        t.ids = any_ids(rng);
        t.shape = {static_cast<std::int64_t>(t.ids.size())};
      } else {
        const std::int64_t rows = rng.between(0, 3), cols = rng.between(0, 3);
        t.shape = {rows, cols};
        t.ids.resize(static_cast<std::size_t>(rows * cols));
        for (auto& x : t.ids) x = any_i64(rng);
      }
      t.index_dtype = rng.chance(1, 2) ? IndexDtype::int32 : IndexDtype::int64;
      t.input_stride = rng.chance(1, 2) ? 0 : any_i64(rng);
      t.out = static_cast<OutPlacement>(rng.below(3));
      t.out_stride = rng.chance(1, 2) ? 0 : any_i64(rng);
      t.out_dtype = rng.chance(1, 2) ? IndexDtype::int32 : IndexDtype::int64;
      t.out_width = rng.chance(1, 2) ? 0 : any_u64(rng);
      return t;
    }
    case 16:
      return SwaTranslate{any_ids(rng)};
    case 17: {
      PageTable p;
      p.req_to_token = any_matrix(rng);
      p.req = any_ids(rng, 4);
      p.seq_len.resize(p.req.size());
      for (auto& x : p.seq_len) x = any_i64(rng);
      p.prior = any_matrix(rng);
      return p;
    }
    case 18: {
      RemapIndices r;
      r.bs = rng.below(4);
      r.kv_indptr.resize(r.bs + 1);
      for (auto& x : r.kv_indptr) x = any_i64(rng);
      r.kv_indices = any_ids(rng);
      return r;
    }
    case 19:
      return Capture{any_u32(rng), any_u32(rng), any_u32(rng), static_cast<std::uint32_t>(rng.below(layers)),
                     any_u32(rng)};
    case 20:
      return Replay{any_u32(rng), any_matrix(rng), any_u64(rng), any_u64(rng)};
    default:
      return Checkpoint{};
  }
}

// A result of any kind (errors of every kind, every outcome).
inline OpResult any_result(Rng& rng) {
  switch (rng.below(11)) {
    case 0: {
      // Any kind, with one of its reason codes (core/reasons.h) half the time when it has some.
      const auto kind = static_cast<ErrorKind>(rng.below(14));
      std::vector<std::string_view> codes;
      for (const reason::Info& i : reason::catalogue())
        if (i.kind == kind) codes.push_back(i.code);
      const std::string_view code = !codes.empty() && rng.below(2) == 0 ? codes[rng.below(codes.size())] : "";
      return OpResult(make_refusal(kind, code, "message " + std::to_string(rng.below(100))));
    }
    case 1:
      return OpResult(Outcome(Done{}));
    case 2:
      return OpResult(Outcome(NoRoom{}));
    case 3:
      return OpResult(Outcome(Allocated{any_ids(rng)}));
    case 4: {
      AllocatedMany m;
      m.pages.resize(1 + rng.below(3));
      for (auto& p : m.pages) p = any_ids(rng, 3);
      return OpResult(Outcome(m));
    }
    case 5: {
      Compaction c;
      for (std::uint64_t i = rng.below(4); i > 0; --i)
        c.moves.push_back(PageMove{rng.chance(1, 2) ? "full" : "swa", any_i64(rng), any_i64(rng)});
      return OpResult(Outcome(c));
    }
    case 6:
      return OpResult(Outcome(Ids{any_ids(rng)}));
    case 7:
      return OpResult(Outcome(Table{any_matrix(rng)}));
    case 8: {
      std::vector<std::uint8_t> data(rng.below(40));
      for (auto& b : data) b = static_cast<std::uint8_t>(rng.below(256));
      Bytes b = Bytes::of(std::move(data));
      b.bytes.clear();  // a trace stores size and digest only
      return OpResult(Outcome(b));
    }
    case 9:
      return OpResult(Outcome(Marks{rng.chance(1, 2), rng.chance(1, 2)}));
    default: {
      Decode d;
      d.loc = any_ids(rng);
      d.table = any_matrix(rng);
      std::vector<std::uint8_t> data(1 + rng.below(16), 0x5a);
      d.attention = Bytes::of(std::move(data));
      d.attention.bytes.clear();
      return OpResult(Outcome(d));
    }
  }
}

}  // namespace kvtwin::traces::testing
