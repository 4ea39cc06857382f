// RapidCheck properties of the byte law over random valid specs (layers 1-128, KV heads 1-64,
// head dims up to 576, every dtype, page sizes 1-512, TP 1-16) and random invalid ones.
//
// Each property compares core/ against a second derivation written here from SPEC.md's words:
//  - the flat token-major formula (row_byte_address) against a page/slot walk that rebuilds the
//    entry [K_0 | V_0 | K_1 | V_1 | ... | pad] by accumulating row sizes, and against the views;
//  - no two rows overlap, every row lies inside the pool, alignment holds;
//  - the page-major and token-major laws each map one page's rows bijectively into the page
//    envelope (the same envelope when the entry has no padding);
//  - validate() agrees with a brute-force checker on random part layouts, and random shapes
//    are error values or consistent layouts, never a crash;
//  - byte offsets past 2^31 and near 2^63 / 2^64 are exact (checked in 128-bit arithmetic) or an
//    overflow error.
//
// RapidCheck prints its seed first and, on a failure, the RC_PARAMS="reproduce=..." that replays
// it; the case count is RapidCheck's (100 unless RC_PARAMS says otherwise). Each case is kept
// small (at most one page's rows are enumerated) so the suite runs in seconds.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "core/catalogue.h"
#include "core/checked.h"
#include "core/layout.h"
#include "core/model.h"
#include "core/sizing.h"

namespace kvtwin {
namespace {

using u128 = unsigned __int128;

// ---------------------------------------------------------------- generators

const DType kDtypes[] = {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp32};

// A valid MHA (optionally composite) or MLA shape with its TP size and page size.
struct ValidCase {
  ModelShape shape;
  std::uint32_t tp = 1;
  std::uint64_t page_size = 1;
};

std::uint32_t gcd_u32(std::uint32_t a, std::uint32_t b) { return std::gcd(a, b); }

// A head dim in [1, 576] that makes heads * dim * itemsize a multiple of 16 bytes.
rc::Gen<std::uint32_t> aligned_head_dim(std::uint32_t heads_per_rank, std::uint32_t itemsize) {
  const std::uint32_t quantum = 16 / gcd_u32(16, heads_per_rank * itemsize);
  return rc::gen::map(rc::gen::inRange<std::uint32_t>(1, 576 / quantum + 1),
                      [quantum](std::uint32_t k) { return k * quantum; });
}

// KV heads that split (or replicate) evenly over tp ranks, at most 64.
rc::Gen<std::uint32_t> kv_heads_for(std::uint32_t tp) {
  std::vector<std::uint32_t> choices;
  for (std::uint32_t h = 1; h <= 64; ++h)
    if ((h >= tp && h % tp == 0) || (h < tp && tp % h == 0)) choices.push_back(h);
  return rc::gen::elementOf(choices);
}

std::uint32_t heads_per_rank(std::uint32_t kv_heads, std::uint32_t tp) { return kv_heads >= tp ? kv_heads / tp : 1; }

rc::Gen<ValidCase> valid_case() {
  return rc::gen::exec([] {
    ValidCase c;
    c.tp = *rc::gen::inRange<std::uint32_t>(1, 17);
    c.page_size = *rc::gen::inRange<std::uint64_t>(1, 513);
    const DType dtype = *rc::gen::elementOf(std::vector<DType>(std::begin(kDtypes), std::end(kDtypes)));
    const std::uint32_t is = dtype_size_bytes(dtype);
    ModelShape& s = c.shape;
    s.name = "random";
    s.dtype = dtype;
    const std::uint32_t layers = *rc::gen::inRange<std::uint32_t>(1, 129);
    if (*rc::gen::inRange(0, 4) == 0) {
      // MLA: latent + rope with a row a multiple of 16 bytes (the latent row is not split).
      s.attention = AttentionKind::mla;
      s.layers = std::vector<LayerKind>(layers, LayerKind::mla);
      const std::uint32_t row = *aligned_head_dim(1, is);
      s.qk_rope_head_dim = *rc::gen::inRange<std::uint32_t>(0, row);
      s.kv_lora_rank = row - s.qk_rope_head_dim;
      return c;
    }
    s.attention = AttentionKind::mha;
    s.num_kv_heads = *kv_heads_for(c.tp);
    const std::uint32_t h = heads_per_rank(s.num_kv_heads, c.tp);
    s.k_head_dim = *aligned_head_dim(h, is);
    s.v_head_dim = *rc::gen::oneOf(rc::gen::just(s.k_head_dim), aligned_head_dim(h, is));
    s.layers = std::vector<LayerKind>(layers, LayerKind::full);
    if (layers > 1 && *rc::gen::arbitrary<bool>()) {
      // A composite: some layers slide; layer 0 stays full so the full side exists.
      for (std::uint32_t l = 1; l < layers; ++l)
        if (*rc::gen::inRange(0, 3) != 0) s.layers[l] = LayerKind::swa;
      if (std::count(s.layers.begin(), s.layers.end(), LayerKind::swa) > 0) {
        s.sliding_window_tokens = *rc::gen::inRange<std::uint32_t>(1, 4097);
        const std::uint32_t swa_heads = *kv_heads_for(c.tp);
        if (heads_per_rank(swa_heads, c.tp) * s.k_head_dim * is % 16 == 0 &&
            heads_per_rank(swa_heads, c.tp) * s.v_head_dim * is % 16 == 0)
          s.swa_num_kv_heads = swa_heads;
      }
    }
    return c;
  });
}

// On a failure RapidCheck prints the case as a spec file plus the pool options.
void showValue(const ValidCase& c, std::ostream& os) {
  os << "tp " << c.tp << ", page size " << c.page_size << ", shape " << shape_to_json(c.shape).dump();
}

// ---------------------------------------------------------------- the independent model

// One row of an entry as SPEC 2's words build it: layer by layer, parts in order.
struct WalkRow {
  std::size_t part = 0;
  std::uint32_t layer = 0;
  std::uint64_t offset = 0;  // inside the entry
  std::uint64_t bytes = 0;
};

struct WalkEntry {
  std::vector<WalkRow> rows;
  std::uint64_t entry_bytes = 0;
  std::uint64_t used_bytes = 0;
};

// [K_0 | V_0 | K_1 | V_1 | ... | pad] or [KV_0 | KV_1 | ... | pad], accumulated.
WalkEntry walk_entry(const SubPoolSpec& s) {
  const std::uint64_t is = dtype_size_bytes(s.dtype);
  std::vector<std::uint64_t> part_rows;
  if (s.kind == SubPoolKind::mla)
    part_rows = {std::uint64_t{s.k_head_dim} * is};
  else
    part_rows = {std::uint64_t{s.heads_per_rank} * s.k_head_dim * is, std::uint64_t{s.heads_per_rank} * s.v_head_dim * is};
  WalkEntry w;
  std::uint64_t cursor = 0;
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    for (std::size_t p = 0; p < part_rows.size(); ++p) {
      w.rows.push_back({p, l, cursor, part_rows[p]});
      cursor += part_rows[p];
    }
  }
  w.used_bytes = cursor;
  w.entry_bytes = (cursor + 31) / 32 * 32;
  return w;
}

// A pool size SPEC 3 accepts: with the floor at ps * max E, a sub-pool of entry E needs
// num_pages = floor(k * maxE / E) > ceil(maxE / E) = min_page_index, which k = 3 pages of the
// largest entry always gives (k = 2 is enough for a single sub-pool). A composite also needs its
// shared bytes to hold one page of each side (core/sizing.h): the up side's frontier is below
// 2 pages of the largest entry and the down side's top above k - 1, so k = 5 leaves more than
// 2 such pages between them, at least the two sides' pages together.
std::uint64_t pool_bytes_for(std::uint64_t max_entry, std::uint64_t ps, std::uint64_t extra_pages, std::uint64_t tail) {
  return (5 + extra_pages) * ps * max_entry + tail;
}

struct Planned {
  PoolPlan plan;
  std::vector<DenseEntryLayout> layouts;
};

Planned plan_or_fail(const ValidCase& c) {
  auto plan = plan_sub_pools(c.shape, c.tp);
  RC_ASSERT(plan.ok());
  Planned p{*plan, {}};
  for (const SubPoolSpec& s : plan->sub_pools) {
    auto layout = s.layout();
    RC_ASSERT(layout.ok());
    p.layouts.push_back(*layout);
  }
  return p;
}

// ---------------------------------------------------------------- properties: valid specs

RC_GTEST_PROP(ByteLawProps, FlatFormulaAgreesWithThePageSlotWalkAndTheViews, ()) {
  const ValidCase c = *valid_case();
  const Planned p = plan_or_fail(c);
  for (std::size_t i = 0; i < p.layouts.size(); ++i) {
    const DenseEntryLayout& layout = p.layouts[i];
    const WalkEntry walk = walk_entry(p.plan.sub_pools[i]);
    RC_ASSERT(layout.entry_bytes == walk.entry_bytes);
    const std::uint64_t ps = c.page_size, E = walk.entry_bytes;
    const std::uint64_t total = pool_bytes_for(E, ps, *rc::gen::inRange<std::uint64_t>(0, 50), *rc::gen::inRange<std::uint64_t>(0, E));
    const std::uint64_t max_slots = total / E, num_pages = max_slots / ps;
    // Slots to check: the sink, page edges, the last slot, and a few at random.
    std::vector<std::uint64_t> slots = {0, ps - 1, ps, max_slots - 1, num_pages * ps - 1};
    for (int k = 0; k < 4; ++k) slots.push_back(*rc::gen::inRange<std::uint64_t>(0, max_slots));
    for (const WalkRow& row : walk.rows) {
      const DensePart& part = layout.parts[row.part];
      auto flat = per_layer_view(layout, part, row.layer, max_slots);
      auto paged = paged_view(layout, part, row.layer, num_pages, ps);
      RC_ASSERT(flat.ok());
      RC_ASSERT(paged.ok());
      const std::uint32_t is = dtype_size_bytes(part.dtype);
      for (std::uint64_t pt : slots) {
        // The walk: whole pages, then whole entries, then the rows before this one.
        const std::uint64_t page = pt / ps, slot = pt % ps;
        const std::uint64_t walked = page * (ps * E) + slot * E + row.offset;
        auto formula = row_byte_address(layout, PhysicalTokenId{static_cast<std::int64_t>(pt)}, part, row.layer);
        RC_ASSERT(formula.ok());
        RC_ASSERT(*formula == walked);
        // The views' first and last elements of that row.
        const std::int64_t last_head = part.heads() - 1, last_dim = part.head_dim() - 1;
        auto a = view_element_byte(*flat, {static_cast<std::int64_t>(pt), 0, 0}, is);
        auto b = view_element_byte(*flat, {static_cast<std::int64_t>(pt), last_head, last_dim}, is);
        RC_ASSERT(a.ok() && b.ok());
        RC_ASSERT(*a == walked);
        RC_ASSERT(*b + is == walked + row.bytes);
        if (page < num_pages) {
          auto c2 = view_element_byte(*paged, {static_cast<std::int64_t>(page), static_cast<std::int64_t>(slot), 0, 0}, is);
          RC_ASSERT(c2.ok());
          RC_ASSERT(*c2 == walked);
        }
        // Alignment (SPEC 2): every row starts on 16 bytes.
        RC_ASSERT(walked % kRowAlignBytes == 0);
      }
    }
  }
}

RC_GTEST_PROP(ByteLawProps, RowsNeverOverlapAndStayInsideThePool, ()) {
  const ValidCase c = *valid_case();
  const Planned p = plan_or_fail(c);
  std::vector<std::uint64_t> entries;
  for (const DenseEntryLayout& l : p.layouts) entries.push_back(l.entry_bytes);
  const std::uint64_t max_entry = *std::max_element(entries.begin(), entries.end());
  const std::uint64_t total =
      pool_bytes_for(max_entry, c.page_size, *rc::gen::inRange<std::uint64_t>(0, 20), *rc::gen::inRange<std::uint64_t>(0, 4096));
  auto geometry = size_pool(p.layouts, c.page_size, total);
  RC_ASSERT(geometry.ok());
  for (std::size_t i = 0; i < p.layouts.size(); ++i) {
    const DenseEntryLayout& layout = p.layouts[i];
    const SubPoolGeometry& g = geometry->sub_pools[i];
    RC_ASSERT(layout.entry_bytes % kEntryAlignBytes == 0);
    RC_ASSERT(g.page_bytes % kEntryAlignBytes == 0);
    RC_ASSERT(g.max_slots * layout.entry_bytes <= total);  // views end at the last slot, inside the buffer
    RC_ASSERT(g.num_pages > g.min_page_index);
    // Every row of one entry, at the first, a random and the last slot: disjoint, inside the slot.
    for (std::uint64_t pt : {std::uint64_t{0}, *rc::gen::inRange<std::uint64_t>(0, g.max_slots), g.max_slots - 1}) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
      for (const DensePart& part : layout.parts) {
        for (std::uint32_t l = 0; l < part.layer_num; ++l) {
          auto a = row_byte_address(layout, PhysicalTokenId{static_cast<std::int64_t>(pt)}, part, l);
          RC_ASSERT(a.ok());
          RC_ASSERT(*a % kRowAlignBytes == 0);
          spans.emplace_back(*a, *a + part.row_bytes());
        }
      }
      std::sort(spans.begin(), spans.end());
      RC_ASSERT(spans.front().first >= pt * layout.entry_bytes);
      RC_ASSERT(spans.back().second <= (pt + 1) * layout.entry_bytes);
      RC_ASSERT(spans.back().second <= total);
      for (std::size_t k = 1; k < spans.size(); ++k) RC_ASSERT(spans[k - 1].second <= spans[k].first);
    }
  }
}

// A whole small pool, every row of every slot, sorted: no overlap anywhere, all inside.
RC_GTEST_PROP(ByteLawProps, EveryRowOfASmallPoolIsDisjoint, ()) {
  ValidCase c = *valid_case();
  // Keep the pool small enough to enumerate: few layers, small pages.
  c.page_size = *rc::gen::inRange<std::uint64_t>(1, 9);
  const std::uint32_t layers = *rc::gen::inRange<std::uint32_t>(1, 5);
  c.shape.layers.resize(layers, c.shape.attention == AttentionKind::mla ? LayerKind::mla : LayerKind::full);
  c.shape.swa_num_kv_heads = 0;  // entries of both sides within a factor of 4: the pool stays small
  if (c.shape.attention == AttentionKind::mha) {
    c.shape.layers[0] = LayerKind::full;
    if (std::count(c.shape.layers.begin(), c.shape.layers.end(), LayerKind::swa) == 0) {
      c.shape.sliding_window_tokens = 0;
      c.shape.swa_num_kv_heads = 0;
    }
  }
  const Planned p = plan_or_fail(c);
  std::uint64_t max_entry = 0;
  for (const DenseEntryLayout& l : p.layouts) max_entry = std::max(max_entry, l.entry_bytes);
  const std::uint64_t total = pool_bytes_for(max_entry, c.page_size, *rc::gen::inRange<std::uint64_t>(0, 3), 16);
  auto geometry = size_pool(p.layouts, c.page_size, total);
  RC_ASSERT(geometry.ok());
  for (std::size_t i = 0; i < p.layouts.size(); ++i) {
    const DenseEntryLayout& layout = p.layouts[i];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    std::uint64_t row_bytes = 0;
    for (std::uint64_t pt = 0; pt < geometry->sub_pools[i].max_slots; ++pt)
      for (const DensePart& part : layout.parts)
        for (std::uint32_t l = 0; l < part.layer_num; ++l) {
          auto a = row_byte_address(layout, PhysicalTokenId{static_cast<std::int64_t>(pt)}, part, l);
          RC_ASSERT(a.ok());
          spans.emplace_back(*a, *a + part.row_bytes());
          row_bytes += part.row_bytes();
        }
    std::sort(spans.begin(), spans.end());
    for (std::size_t k = 1; k < spans.size(); ++k) RC_ASSERT(spans[k - 1].second <= spans[k].first);
    RC_ASSERT(spans.back().second <= total);
    RC_ASSERT(row_bytes == geometry->sub_pools[i].max_slots * (layout.entry_bytes - layout.padding_bytes()));
  }
}

// One page's rows under a law: sorted spans relative to the page's first byte.
std::vector<std::pair<std::uint64_t, std::uint64_t>> page_spans(
    const std::vector<std::uint64_t>& starts, std::uint64_t row, std::uint64_t page_base) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  spans.reserve(starts.size());
  for (std::uint64_t s : starts) spans.emplace_back(s - page_base, s - page_base + row);
  std::sort(spans.begin(), spans.end());
  return spans;
}

RC_GTEST_PROP(ByteLawProps, BothLawsMapAPageBijectivelyIntoItsEnvelope, ()) {
  ValidCase c = *valid_case();
  // The page-major law needs equal K and V rows (MLA has one row).
  if (c.shape.attention == AttentionKind::mha) c.shape.v_head_dim = c.shape.k_head_dim;
  const Planned p = plan_or_fail(c);
  const DenseEntryLayout& layout = p.layouts[0];
  const std::uint64_t ps = c.page_size;
  auto law = PageMajorLaw::from_layout(layout, ps);
  RC_ASSERT(law.ok());
  const std::uint64_t row = layout.parts[0].row_bytes();
  const std::uint64_t page = *rc::gen::inRange<std::uint64_t>(0, 1000);
  const std::uint64_t tm_envelope = ps * layout.entry_bytes, pm_envelope = law->page_bytes();
  std::vector<std::uint64_t> tm, pm;
  bool same_order = true;
  for (std::uint64_t slot = 0; slot < ps; ++slot) {
    const PhysicalTokenId pt{static_cast<std::int64_t>(page * ps + slot)};
    for (std::size_t part = 0; part < layout.parts.size(); ++part) {
      for (std::uint32_t l = 0; l < layout.parts[part].layer_num; ++l) {
        auto a = row_byte_address(layout, pt, layout.parts[part], l);
        auto b = law->row_byte_address(pt, part, l);
        RC_ASSERT(a.ok() && b.ok());
        tm.push_back(*a);
        pm.push_back(*b);
        same_order &= (*a - page * tm_envelope) == (*b - page * pm_envelope);
      }
    }
  }
  // Each law: rows pairwise disjoint and inside its page envelope.
  for (const auto& [spans, envelope] : {std::pair{page_spans(tm, row, page * tm_envelope), tm_envelope},
                                        std::pair{page_spans(pm, row, page * pm_envelope), pm_envelope}}) {
    RC_ASSERT(spans.back().second <= envelope);
    for (std::size_t k = 1; k < spans.size(); ++k) RC_ASSERT(spans[k - 1].second <= spans[k].first);
  }
  // Page-major leaves no gap; token-major leaves exactly the entries' padding.
  RC_ASSERT(pm_envelope == ps * layout.parts.size() * layout.parts[0].layer_num * row);
  RC_ASSERT(tm_envelope == pm_envelope + ps * layout.padding_bytes());
  if (layout.padding_bytes() == 0) RC_ASSERT(tm_envelope == pm_envelope);  // the same envelope
  // Same bytes in the same order exactly when a page is one slot or one block.
  if (layout.padding_bytes() == 0) RC_ASSERT(same_order == (ps == 1 || law->blocks_per_page == 1));
}

// ---------------------------------------------------------------- properties: invalid input

// Random part layouts: validate() must agree with a brute-force reading of SPEC 2's rules. Most
// fields are drawn valid (aligned, distinct, in bounds) so that the rare defect, alone, decides.
RC_GTEST_PROP(ByteLawProps, ValidateAgreesWithABruteForceChecker, ()) {
  const auto usually = [](int percent) { return *rc::gen::inRange(0, 100) < percent; };
  DenseEntryLayout layout;
  layout.sub_pool = "random";
  const int parts = *rc::gen::inRange(1, 4);
  std::uint64_t extent = 0;
  for (int i = 0; i < parts; ++i) {
    DensePart part;
    part.name = usually(95) ? "p" + std::to_string(i) : "p0";
    part.dtype = *rc::gen::elementOf(std::vector<DType>(std::begin(kDtypes), std::end(kDtypes)));
    const std::uint32_t heads = *rc::gen::inRange<std::uint32_t>(usually(97) ? 1 : 0, 4);
    const std::uint32_t quantum = heads == 0 ? 1 : 16 / std::gcd(16u, heads * dtype_size_bytes(part.dtype));
    part.row_shape = {heads, usually(90) ? quantum * *rc::gen::inRange<std::uint32_t>(1, 5)
                                         : *rc::gen::inRange<std::uint32_t>(0, 17)};
    part.offset_bytes = (usually(90) ? 16 : 8) * *rc::gen::inRange<std::uint64_t>(0, 16);
    part.layer_stride_bytes = (usually(90) ? 16 : 8) * *rc::gen::inRange<std::uint64_t>(0, 16);
    part.layer_num = *rc::gen::inRange<std::uint32_t>(usually(95) ? 1 : 0, 5);
    const std::uint64_t row = std::uint64_t{part.row_shape[0]} * part.row_shape[1] * dtype_size_bytes(part.dtype);
    if (part.layer_num > 0)
      extent = std::max(extent, part.offset_bytes + (part.layer_num - 1) * part.layer_stride_bytes + row);
    layout.parts.push_back(part);
  }
  const std::uint64_t fitting = (extent + 31) / 32 * 32 + 32 * *rc::gen::inRange<std::uint64_t>(0, 2);
  layout.entry_bytes = usually(80) ? fitting : 16 * *rc::gen::inRange<std::uint64_t>(0, 2 * fitting / 16 + 2);

  // SPEC 2, read literally.
  bool valid = layout.entry_bytes > 0 && layout.entry_bytes % 32 == 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (std::size_t i = 0; i < layout.parts.size(); ++i) {
    const DensePart& part = layout.parts[i];
    const std::uint64_t row = std::uint64_t{part.row_shape[0]} * part.row_shape[1] * dtype_size_bytes(part.dtype);
    valid = valid && part.layer_num > 0 && row > 0 && row % 16 == 0 && part.offset_bytes % 16 == 0 &&
            part.layer_stride_bytes % 16 == 0;
    for (std::size_t j = 0; j < i; ++j) valid = valid && layout.parts[j].name != part.name;
    for (std::uint32_t l = 0; l < part.layer_num; ++l) {
      const std::uint64_t begin = part.offset_bytes + l * part.layer_stride_bytes;
      valid = valid && begin + row <= layout.entry_bytes;
      spans.emplace_back(begin, begin + row);
    }
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t k = 1; k < spans.size(); ++k) valid = valid && spans[k - 1].second <= spans[k].first;

  const Status s = layout.validate();
  RC_ASSERT(s.ok() == valid);
  if (!s.ok()) {
    RC_ASSERT(s.error().kind == ErrorKind::layout);
    RC_ASSERT(s.error().message.find("'random'") != std::string::npos);
  }
}

// Valid specs with one known defect put in: each is an error of its kind, with its words.
RC_GTEST_PROP(ByteLawProps, KnownDefectsAreReportedAsSuch, ()) {
  const ValidCase c = *valid_case();
  // Zero layers.
  {
    ModelShape s = c.shape;
    s.layers.clear();
    auto plan = plan_sub_pools(s, c.tp);
    RC_ASSERT(!plan.ok());
    RC_ASSERT(plan.error().message.find("0 layers") != std::string::npos);
  }
  if (c.shape.attention == AttentionKind::mha) {
    const std::uint32_t heads = c.shape.num_kv_heads;
    // An uneven TP size, when one exists in 1..16.
    std::vector<std::uint32_t> uneven;
    for (std::uint32_t tp = 1; tp <= 16; ++tp)
      if (!((heads >= tp && heads % tp == 0) || (heads < tp && tp % heads == 0))) uneven.push_back(tp);
    if (!uneven.empty()) {
      ModelShape s = c.shape;
      s.swa_num_kv_heads = 0;
      const std::uint32_t tp = *rc::gen::elementOf(uneven);
      auto plan = plan_sub_pools(s, tp);
      RC_ASSERT(!plan.ok());
      RC_ASSERT(plan.error().kind == ErrorKind::invalid_argument);
      RC_ASSERT(plan.error().message.find("tensor-parallel ranks") != std::string::npos);
    }
    // A per-rank K row that is not a multiple of 16 bytes, when the head count allows one.
    const std::uint32_t is = dtype_size_bytes(c.shape.dtype);
    const std::uint32_t h = heads_per_rank(heads, c.tp);
    if ((h * is) % 16 != 0) {
      ModelShape s = c.shape;
      s.swa_num_kv_heads = 0;
      const std::uint32_t quantum = 16 / std::gcd(16u, h * is);
      s.k_head_dim = quantum * *rc::gen::inRange<std::uint32_t>(0, 576 / quantum) + *rc::gen::inRange<std::uint32_t>(1, quantum);
      auto plan = plan_sub_pools(s, c.tp);
      RC_ASSERT(!plan.ok());
      RC_ASSERT(plan.error().kind == ErrorKind::layout);
      RC_ASSERT(plan.error().message.find("not a multiple of 16") != std::string::npos);
      RC_ASSERT(plan.error().message.find("sub-pool '") != std::string::npos);
      RC_ASSERT(plan.error().message.find("part 'k'") != std::string::npos);
    }
  }
  const Planned p = plan_or_fail(c);
  // Page size 0.
  RC_ASSERT(size_pool(p.layouts, 0, 1ULL << 40).error().kind == ErrorKind::invalid_argument);
  // One byte short of the smallest pool of a single sub-pool: two pages of its entry.
  const DenseEntryLayout& first = p.layouts[0];
  auto short_pool = size_pool({first}, c.page_size, 2 * c.page_size * first.entry_bytes - 1);
  RC_ASSERT(!short_pool.ok());
  RC_ASSERT(short_pool.error().kind == ErrorKind::sizing);
  RC_ASSERT(short_pool.error().message.find("increase total_bytes") != std::string::npos);
  RC_ASSERT(size_pool({first}, c.page_size, 2 * c.page_size * first.entry_bytes).ok());
}

// Random shapes, valid or not, through the whole pipeline: an error value or a consistent pool.
RC_GTEST_PROP(ByteLawProps, AnyShapeIsAnErrorOrAConsistentPool, ()) {
  ModelShape s;
  s.name = "fuzzed";
  s.attention = *rc::gen::elementOf(std::vector<AttentionKind>{AttentionKind::mha, AttentionKind::mla});
  const auto u32 = rc::gen::oneOf(rc::gen::inRange<std::uint32_t>(0, 9), rc::gen::inRange<std::uint32_t>(0, 700),
                                  rc::gen::elementOf(std::vector<std::uint32_t>{0xffffffffu, 0x80000000u, 65536u}));
  s.layers = *rc::gen::container<std::vector<LayerKind>>(
      *rc::gen::inRange<std::size_t>(0, 6),
      rc::gen::elementOf(std::vector<LayerKind>{LayerKind::full, LayerKind::swa, LayerKind::cross, LayerKind::mla}));
  s.num_kv_heads = *u32;
  s.swa_num_kv_heads = *rc::gen::oneOf(rc::gen::just(0u), u32);
  s.k_head_dim = *u32;
  s.v_head_dim = *u32;
  s.sliding_window_tokens = *rc::gen::oneOf(rc::gen::just(0u), u32);
  s.kv_lora_rank = *rc::gen::oneOf(rc::gen::just(0u), u32);
  s.qk_rope_head_dim = *rc::gen::oneOf(rc::gen::just(0u), u32);
  s.dtype = *rc::gen::elementOf(std::vector<DType>(std::begin(kDtypes), std::end(kDtypes)));
  const std::uint32_t tp = *rc::gen::inRange<std::uint32_t>(0, 20);
  const std::uint64_t ps = *rc::gen::oneOf(rc::gen::inRange<std::uint64_t>(0, 600),
                                           rc::gen::just(std::uint64_t{1} << 40), rc::gen::just(UINT64_MAX));
  const std::uint64_t total = *rc::gen::oneOf(rc::gen::inRange<std::uint64_t>(0, 1 << 20),
                                              rc::gen::just(std::uint64_t{1} << 34), rc::gen::just(UINT64_MAX));

  auto plan = plan_sub_pools(s, tp);
  if (!plan.ok()) {
    RC_ASSERT(!plan.error().message.empty());
    RC_ASSERT(plan.error().message.find("model 'fuzzed'") != std::string::npos ||
              plan.error().message.find("tensor-parallel size is 0") != std::string::npos);
    return;
  }
  std::vector<DenseEntryLayout> layouts;
  for (const SubPoolSpec& spec : plan->sub_pools) {
    auto layout = spec.layout();
    RC_ASSERT(layout.ok());  // plan_sub_pools already built every layout
    RC_ASSERT(layout->validate().ok());
    RC_ASSERT(layout->entry_bytes % 32 == 0);
    for (const DensePart& part : layout->parts) RC_ASSERT(part.row_bytes() % 16 == 0);
    layouts.push_back(*layout);
  }
  auto geometry = size_pool(layouts, ps, total);
  if (!geometry.ok()) {
    RC_ASSERT(geometry.error().kind == ErrorKind::sizing || geometry.error().kind == ErrorKind::overflow ||
              geometry.error().kind == ErrorKind::invalid_argument);
    return;
  }
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const SubPoolGeometry& g = geometry->sub_pools[i];
    RC_ASSERT(g.num_pages > g.min_page_index);
    RC_ASSERT(static_cast<u128>(g.max_slots) * layouts[i].entry_bytes <= total);
    auto view = paged_view(layouts[i], layouts[i].parts[0], 0, g.num_pages, ps);
    // Not RC_ASSERT(a || b): RapidCheck's captor evaluates both sides, and error() of a good view throws.
    if (!view.ok()) RC_ASSERT(view.error().kind == ErrorKind::overflow);
  }
}

// Spec files built from random JSON values: never a crash, never an exception.
RC_GTEST_PROP(ByteLawProps, AnySpecJsonIsAnErrorOrAValidShape, ()) {
  using nlohmann::json;
  const std::vector<std::string> keys = {"name",           "source",           "attention",    "num_layers",
                                         "layer_types",    "num_kv_heads",     "head_dim",     "v_head_dim",
                                         "sliding_window", "swa_num_kv_heads", "kv_lora_rank", "qk_rope_head_dim",
                                         "dtype",          "bogus"};
  const auto value = rc::gen::oneOf(
      rc::gen::map(rc::gen::inRange<std::int64_t>(-3, 700), [](std::int64_t v) { return json(v); }),
      rc::gen::map(rc::gen::elementOf(std::vector<std::string>{"mha", "mla", "bf16", "fp8", "x", "full", ""}),
                   [](const std::string& v) { return json(v); }),
      rc::gen::just(json(4294967296ULL)), rc::gen::just(json(1.5)), rc::gen::just(json(nullptr)),
      rc::gen::just(json::array({"full", "swa"})), rc::gen::just(json::array({"mla", 3})),
      rc::gen::just(json::object()));
  json j = json::object();
  const std::size_t n = *rc::gen::inRange<std::size_t>(0, 9);
  for (std::size_t k = 0; k < n; ++k) j[*rc::gen::elementOf(keys)] = *value;
  if (*rc::gen::arbitrary<bool>()) j["name"] = "fuzz";
  Result<ModelShape> s = shape_from_json(j, "fuzz.json");
  if (!s.ok()) {
    RC_ASSERT(s.error().message.find("fuzz.json") != std::string::npos);
    return;
  }
  RC_ASSERT(validate_shape(*s).ok());
  // A valid shape round-trips.
  auto back = shape_from_json(shape_to_json(*s), "fuzz.json");
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == *s);
}

// ---------------------------------------------------------------- properties: big offsets

// A token id near an edge: the last ids below and the first above 2^31, 2^32, 2^63, 2^64 bytes.
rc::Gen<std::uint64_t> token_near_edges(std::uint64_t entry) {
  std::vector<std::uint64_t> ids;
  for (int bit : {31, 32, 62, 63, 64}) {
    const u128 edge = static_cast<u128>(1) << bit;
    const u128 base = edge / entry;
    for (int d = -2; d <= 2; ++d) {
      const u128 t = base + static_cast<u128>(static_cast<std::int64_t>(d) + 2) - 2;
      if (t <= static_cast<u128>(INT64_MAX)) ids.push_back(static_cast<std::uint64_t>(t));
    }
  }
  ids.push_back(static_cast<std::uint64_t>(INT64_MAX));
  return rc::gen::oneOf(rc::gen::elementOf(ids), rc::gen::inRange<std::uint64_t>(0, static_cast<std::uint64_t>(INT64_MAX)));
}

RC_GTEST_PROP(ByteLawProps, BigOffsetsAreExactOrOverflowErrors, ()) {
  const ValidCase c = *valid_case();
  const Planned p = plan_or_fail(c);
  const DenseEntryLayout& layout = p.layouts[0];
  const std::uint64_t pt = *token_near_edges(layout.entry_bytes);
  const DensePart& part = *rc::gen::elementOf(layout.parts);
  const std::uint32_t l = *rc::gen::inRange<std::uint32_t>(0, part.layer_num);
  const u128 exact = static_cast<u128>(pt) * layout.entry_bytes + part.offset_bytes +
                     static_cast<u128>(l) * part.layer_stride_bytes;
  auto a = row_byte_address(layout, PhysicalTokenId{static_cast<std::int64_t>(pt)}, part, l);
  if (exact <= UINT64_MAX) {
    RC_ASSERT(a.ok());
    RC_ASSERT(static_cast<u128>(*a) == exact);
  } else {
    RC_ASSERT(!a.ok());
    RC_ASSERT(a.error().kind == ErrorKind::overflow);
  }
  // The same through a view spanning that token: the element strides and offsets are int64.
  if (pt < static_cast<std::uint64_t>(INT64_MAX)) {
    auto view = per_layer_view(layout, part, l, pt + 1);
    RC_ASSERT(view.ok());
    auto e = view_element_byte(*view, {static_cast<std::int64_t>(pt), 0, 0}, dtype_size_bytes(part.dtype));
    if (exact <= UINT64_MAX) {
      RC_ASSERT(e.ok());
      RC_ASSERT(static_cast<u128>(*e) == exact);
    } else {
      RC_ASSERT(!e.ok());
    }
  }
  // The page-major law too, when it applies.
  auto law = PageMajorLaw::from_layout(layout, c.page_size);
  if (law.ok()) {
    const std::size_t part_index = *layout.part_index(part.name);
    const u128 kid = static_cast<u128>(pt / c.page_size) * (c.page_size * law->blocks_per_page) + pt % c.page_size;
    const u128 pm = kid * law->row_bytes + static_cast<u128>(law->block_index(part_index, l)) * c.page_size * law->row_bytes;
    auto b = law->row_byte_address(PhysicalTokenId{static_cast<std::int64_t>(pt)}, part_index, l);
    if (kid <= UINT64_MAX && kid * law->row_bytes <= UINT64_MAX && pm <= UINT64_MAX) {
      RC_ASSERT(b.ok());
      RC_ASSERT(static_cast<u128>(*b) == pm);
    } else {
      RC_ASSERT(!b.ok());
    }
  }
}

}  // namespace
}  // namespace kvtwin
