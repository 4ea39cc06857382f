// Small pools for the model's unit tests: shapes scaled down so that a page is a few hundred
// bytes, and configurations sized to an exact page count, so the SPEC's worked examples (pages
// 5-9, watermark 10) can be written with their own numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/op.h"
#include "core/pool_config.h"
#include "sim/model.h"

namespace kvtwin::sim::testing {

// MHA layers with `heads` KV heads of head_dim k_dim / v_dim.
inline ModelShape mha_shape(std::vector<LayerKind> layers, std::uint32_t heads = 1, std::uint32_t k_dim = 16,
                            std::uint32_t v_dim = 16, DType dtype = DType::bf16) {
  ModelShape s;
  s.name = "test-mha";
  s.source = "unit test";
  s.attention = AttentionKind::mha;
  s.layers = std::move(layers);
  s.num_kv_heads = heads;
  s.k_head_dim = k_dim;
  s.v_head_dim = v_dim;
  for (LayerKind k : s.layers)
    if (k == LayerKind::swa) s.sliding_window_tokens = 8;
  s.dtype = dtype;
  return s;
}

inline ModelShape mla_shape(std::uint32_t layers, std::uint32_t lora = 32, std::uint32_t rope = 16) {
  ModelShape s;
  s.name = "test-mla";
  s.source = "unit test";
  s.attention = AttentionKind::mla;
  s.layers.assign(layers, LayerKind::mla);
  s.kv_lora_rank = lora;
  s.qk_rope_head_dim = rope;
  s.dtype = DType::bf16;
  return s;
}

// A configuration whose first (owner) sub-pool has exactly `pages` pages.
inline PoolConfig config_with_pages(const ModelShape& shape, std::uint64_t page_size, std::uint64_t pages,
                                    CompactionMode mode = CompactionMode::eager, bool tables_only = false,
                                    std::uint64_t seed = 7) {
  PoolConfig c;
  c.shape = shape;
  c.page_size = page_size;
  c.mode = mode;
  c.tables_only = tables_only;
  c.seed = seed;
  c.total_bytes = std::uint64_t{1} << 30;
  auto derived = derive_pool(c);
  EXPECT_TRUE(derived.ok()) << (derived.ok() ? "" : derived.error().message);
  c.total_bytes = pages * page_size * derived->layouts.front().entry_bytes;
  return c;
}

// One full layer, 1 head of 16 (E = 64 bytes), page size 4 (256-byte pages, min_page_index 1).
inline PoolConfig one_layer_pool(std::uint64_t pages, CompactionMode mode = CompactionMode::eager) {
  return config_with_pages(mha_shape({LayerKind::full}), 4, pages, mode);
}

// Applies an op that must succeed and returns its outcome.
inline Outcome must(Model& m, const Op& op) {
  OpResult r = m.apply(op);
  EXPECT_TRUE(r.ok()) << to_string(op) << " -> " << to_string(r);
  if (!r.ok()) return Outcome(Done{});
  // The incremental verify (what the op changed) first: it reads the op's record of changes.
  Status changed = m.verify_changed();
  EXPECT_TRUE(changed.ok()) << "after " << to_string(op) << ": " << (changed.ok() ? "" : changed.error().message);
  Status v = m.verify();
  EXPECT_TRUE(v.ok()) << "after " << to_string(op) << ": " << (v.ok() ? "" : v.error().message);
  return r.value();
}

template <class T>
T must_as(Model& m, const Op& op) {
  Outcome o = must(m, op);
  EXPECT_TRUE(std::holds_alternative<T>(o)) << to_string(op) << " -> " << to_string(OpResult(o));
  return std::holds_alternative<T>(o) ? std::get<T>(o) : T{};
}

// Applies an op that must be refused with `kind`, and checks that the state did not change.
inline void refused(Model& m, const Op& op, ErrorKind kind) {
  const std::uint64_t before = m.state_digest();
  OpResult r = m.apply(op);
  ASSERT_FALSE(r.ok()) << to_string(op) << " was accepted: " << to_string(r);
  EXPECT_EQ(error_kind_name(r.error().kind), error_kind_name(kind)) << to_string(op) << ": " << r.error().message;
  EXPECT_FALSE(r.error().message.empty());
  EXPECT_EQ(m.state_digest(), before) << to_string(op) << " changed the state although it was refused";
  Status v = m.verify();
  EXPECT_TRUE(v.ok()) << (v.ok() ? "" : v.error().message);
}

inline const SideTables& side_tables(const PoolTables& t, std::size_t i) { return t.sides.at(i); }

}  // namespace kvtwin::sim::testing
