// The byte law (SPEC.md section 2) with worked numbers: entries, parts, views, the page-major
// law, and every validation error (each must name the sub-pool, the part, the numbers and the
// way out).
//
// Expected sizes are computed here from the model's own numbers (layers, heads, head dims,
// itemsize) with SPEC's formulas, never read back from the code under test. The seeds' published
// figures (32 layers, 4 KV heads, head dim 128: (1024, 4, 128) / (32768, 128, 1) and
// (4, 256, 4, 128) / (8388608, 32768, 128, 1)) are checked as well, literally.
#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/layout.h"
#include "core/model.h"

namespace kvtwin {
namespace {

using ::testing::HasSubstr;

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

// SPEC 2: E = align_up(L * (k_row + v_row), 32) with rows = heads * dim * itemsize.
std::uint64_t mha_entry(std::uint64_t layers, std::uint64_t heads, std::uint64_t k_dim, std::uint64_t v_dim,
                        std::uint64_t itemsize) {
  return align_up(layers * (heads * k_dim * itemsize + heads * v_dim * itemsize), 32);
}

DenseEntryLayout mha_layout(std::uint32_t layers, std::uint32_t heads, std::uint32_t k_dim, std::uint32_t v_dim,
                            DType dtype) {
  auto l = SubPoolSpec{"full", SubPoolKind::full, layers, heads, k_dim, v_dim, dtype}.layout();
  EXPECT_TRUE(l.ok()) << (l.ok() ? "" : l.error().message);
  return *l;
}

TEST(ByteLaw, SeedsWorkedExampleViews) {
  // 32 layers, 4 KV heads, head dim 128, bf16.
  const DenseEntryLayout layout = mha_layout(32, 4, 128, 128, DType::bf16);
  const std::uint64_t entry = mha_entry(32, 4, 128, 128, 2);
  ASSERT_EQ(layout.entry_bytes, entry);
  const std::int64_t entry_elems = static_cast<std::int64_t>(entry / 2);  // 32 * 2 * 4 * 128
  ASSERT_EQ(entry_elems, 32 * 2 * 4 * 128);

  auto k = layout.part("k");
  ASSERT_TRUE(k.ok());
  auto flat = per_layer_view(layout, **k, 0, 1024);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->shape, (std::vector<std::int64_t>{1024, 4, 128}));
  EXPECT_EQ(flat->strides, (std::vector<std::int64_t>{entry_elems, 128, 1}));
  EXPECT_EQ(flat->strides, (std::vector<std::int64_t>{32768, 128, 1}));  // the seeds' figure
  EXPECT_EQ(flat->storage_offset, 0);

  auto paged = paged_view(layout, **k, 0, 4, 256);
  ASSERT_TRUE(paged.ok());
  EXPECT_EQ(paged->shape, (std::vector<std::int64_t>{4, 256, 4, 128}));
  EXPECT_EQ(paged->strides, (std::vector<std::int64_t>{256 * entry_elems, entry_elems, 128, 1}));
  EXPECT_EQ(paged->strides, (std::vector<std::int64_t>{8388608, 32768, 128, 1}));  // the seeds' figure

  // The in-page token stride is the entry, 2 * layers = 64 times heads * head_dim.
  EXPECT_EQ(paged->strides[1], 64 * 4 * 128);
}

TEST(ByteLaw, Llama31_8bAtPageSize64) {
  // 32 layers, 8 KV heads, head dim 128, bf16 (meta-llama/Llama-3.1-8B config.json).
  const DenseEntryLayout layout = mha_layout(32, 8, 128, 128, DType::bf16);
  const std::uint64_t entry = 32 * (8 * 128 * 2 + 8 * 128 * 2);
  EXPECT_EQ(entry, 131072u);
  EXPECT_EQ(layout.entry_bytes, entry);
  EXPECT_EQ(64 * layout.entry_bytes, 8388608u);
  EXPECT_EQ(layout.padding_bytes(), 0u);
}

TEST(ByteLaw, MhaPartsInterleaveKAndVPerLayer) {
  // Unequal K and V (MiMo-V2-Flash's full layers: 4 heads, K 192, V 128).
  const DenseEntryLayout layout = mha_layout(9, 4, 192, 128, DType::bf16);
  const std::uint64_t k_row = 4 * 192 * 2, v_row = 4 * 128 * 2;
  ASSERT_EQ(layout.parts.size(), 2u);
  const DensePart& k = layout.parts[0];
  const DensePart& v = layout.parts[1];
  EXPECT_EQ(k.name, "k");
  EXPECT_EQ(v.name, "v");
  EXPECT_EQ(k.offset_bytes, 0u);
  EXPECT_EQ(v.offset_bytes, k_row);
  EXPECT_EQ(k.layer_stride_bytes, k_row + v_row);
  EXPECT_EQ(v.layer_stride_bytes, k_row + v_row);
  EXPECT_EQ(k.row_bytes(), k_row);
  EXPECT_EQ(v.row_bytes(), v_row);
  EXPECT_EQ(layout.entry_bytes, mha_entry(9, 4, 192, 128, 2));
  // [K_0 | V_0 | K_1 | V_1 | ...]: walk it.
  std::uint64_t cursor = 0;
  for (std::uint32_t l = 0; l < 9; ++l) {
    auto ka = row_byte_address(layout, PhysicalTokenId{0}, k, l);
    auto va = row_byte_address(layout, PhysicalTokenId{0}, v, l);
    ASSERT_TRUE(ka.ok() && va.ok());
    EXPECT_EQ(*ka, cursor);
    cursor += k_row;
    EXPECT_EQ(*va, cursor);
    cursor += v_row;
  }
  EXPECT_EQ(cursor, layout.entry_bytes);  // 9 * 2560 = 23040, already a multiple of 32
}

TEST(ByteLaw, MlaEntryAndPadding) {
  // DeepSeek-V2-Lite: 27 layers, latent 512 + rope 64, bf16.
  auto layout = SubPoolSpec{"mla", SubPoolKind::mla, 27, 1, 512 + 64, 512, DType::bf16}.layout();
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->parts.size(), 1u);
  EXPECT_EQ(layout->parts[0].name, "kv");
  EXPECT_EQ(layout->parts[0].row_bytes(), 576u * 2);
  EXPECT_EQ(layout->parts[0].layer_stride_bytes, 576u * 2);
  EXPECT_EQ(layout->entry_bytes, align_up(27 * 576 * 2, 32));

  // A 16-byte row over 3 layers: 48 bytes of rows, padded to 64.
  auto padded = SubPoolSpec{"mla", SubPoolKind::mla, 3, 1, 8, 8, DType::bf16}.layout();
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->entry_bytes, 64u);
  EXPECT_EQ(padded->padding_bytes(), 64u - 48u);
}

TEST(ByteLaw, RowAddressFollowsTheFormula) {
  const DenseEntryLayout layout = mha_layout(32, 8, 128, 128, DType::bf16);
  const DensePart& v = layout.parts[1];
  for (std::int64_t pt : {std::int64_t{0}, std::int64_t{1}, std::int64_t{63}, std::int64_t{32767}}) {
    for (std::uint32_t l : {0u, 1u, 31u}) {
      auto a = row_byte_address(layout, PhysicalTokenId{pt}, v, l);
      ASSERT_TRUE(a.ok());
      EXPECT_EQ(*a, static_cast<std::uint64_t>(pt) * 131072 + 2048 + l * 4096);
    }
  }
  auto negative = row_byte_address(layout, PhysicalTokenId{-1}, v, 0);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.error().kind, ErrorKind::out_of_range);
  auto bad_layer = row_byte_address(layout, PhysicalTokenId{0}, v, 32);
  ASSERT_FALSE(bad_layer.ok());
  EXPECT_THAT(bad_layer.error().message, HasSubstr("layer 32"));
  EXPECT_THAT(bad_layer.error().message, HasSubstr("32 layers"));
}

TEST(ByteLaw, ViewsAddressTheSameBytesAsTheFormula) {
  const DenseEntryLayout layout = mha_layout(5, 2, 64, 32, DType::fp32);
  const std::uint64_t ps = 16, pages = 10;
  for (const DensePart& part : layout.parts) {
    for (std::uint32_t l = 0; l < part.layer_num; ++l) {
      auto flat = per_layer_view(layout, part, l, ps * pages);
      auto paged = paged_view(layout, part, l, pages, ps);
      ASSERT_TRUE(flat.ok() && paged.ok());
      for (std::int64_t pt : {0, 1, 15, 16, 17, 159}) {
        auto row = row_byte_address(layout, PhysicalTokenId{pt}, part, l);
        ASSERT_TRUE(row.ok());
        for (std::int64_t h : {0, 1}) {
          for (std::int64_t d : {std::int64_t{0}, std::int64_t{part.head_dim() - 1}}) {
            const std::uint64_t want = *row + static_cast<std::uint64_t>(h * part.head_dim() + d) * 4;
            auto a = view_element_byte(*flat, {pt, h, d}, 4);
            auto b = view_element_byte(*paged, {pt / 16, pt % 16, h, d}, 4);
            ASSERT_TRUE(a.ok() && b.ok());
            EXPECT_EQ(*a, want);
            EXPECT_EQ(*b, want);
          }
        }
      }
    }
  }
  // Indices outside the view are errors.
  auto flat = per_layer_view(layout, layout.parts[0], 0, 4);
  ASSERT_TRUE(flat.ok());
  EXPECT_FALSE(view_element_byte(*flat, {4, 0, 0}, 4).ok());
  EXPECT_FALSE(view_element_byte(*flat, {0, 0}, 4).ok());
  EXPECT_FALSE(paged_view(layout, layout.parts[0], 0, 4, 0).ok());
  EXPECT_FALSE(per_layer_view(layout, layout.parts[0], 5, 4).ok());
}

// ---------------------------------------------------------------- validation errors

DenseEntryLayout two_part_layout() {
  DenseEntryLayout l;
  l.sub_pool = "custom";
  l.parts.push_back(DensePart{"k", 0, 64, 2, {2, 16}, DType::bf16});   // rows of 64 bytes at 0, 64
  l.parts.push_back(DensePart{"v", 128, 64, 2, {2, 16}, DType::bf16});  // rows at 128, 192
  l.entry_bytes = 256;
  return l;
}

TEST(ByteLawValidation, AcceptsAWellFormedLayout) {
  EXPECT_TRUE(two_part_layout().validate().ok());
}

struct BadLayoutCase {
  std::string what;
  DenseEntryLayout layout;
  std::vector<std::string> must_mention;
};

std::vector<BadLayoutCase> bad_layouts() {
  std::vector<BadLayoutCase> cases;
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[1].row_shape = {3, 4};  // 24 bytes
    cases.push_back({"misaligned row", l, {"'custom'", "part 'v'", "24 bytes", "multiple of 16", "unified pool"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[1].offset_bytes = 136;
    cases.push_back({"misaligned offset", l, {"'custom'", "part 'v'", "offset 136", "multiple of 16"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[0].layer_stride_bytes = 72;
    cases.push_back({"misaligned stride", l, {"part 'k'", "stride 72", "multiple of 16"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.entry_bytes = 272;  // 16 more than needed, not a multiple of 32
    cases.push_back({"misaligned entry", l, {"'custom'", "272", "multiple of 32", "288"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.entry_bytes = 224;
    cases.push_back({"part outside the entry", l, {"part 'v'", "ends at byte 256", "224"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[1].offset_bytes = 64;  // v layer 0 on top of k layer 1
    cases.push_back({"overlap", l, {"'custom'", "part 'k' layer 1", "part 'v' layer 0", "[64, 128)"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[0].layer_stride_bytes = 32;  // k's own layers overlap
    cases.push_back({"stride below the row", l, {"part 'k'", "stride 32", "row of 64"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[1].name = "k";
    cases.push_back({"duplicate names", l, {"two parts named 'k'"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[0].layer_num = 0;
    cases.push_back({"zero layers", l, {"part 'k'", "0 layers"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[0].row_shape = {0, 16};
    cases.push_back({"empty row", l, {"part 'k'", "empty row shape"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[0].layer_num = kMaxLayers + 1;
    cases.push_back({"too many layers", l, {"part 'k'", std::to_string(kMaxLayers + 1)}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts[0].row_shape = {0xffffffffu, 0xffffffffu};  // (2^32-1)^2 * 2 bytes: past 2^64
    cases.push_back({"row overflow", l, {"part 'k'", "does not fit in 64 bits"}});
  }
  {
    DenseEntryLayout l = two_part_layout();
    l.parts.clear();
    cases.push_back({"no parts", l, {"'custom'", "no parts"}});
  }
  return cases;
}

TEST(ByteLawValidation, EveryFailureIsAnErrorNamingTheNumbers) {
  for (const BadLayoutCase& c : bad_layouts()) {
    SCOPED_TRACE(c.what);
    const Status s = c.layout.validate();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.error().kind == ErrorKind::layout || s.error().kind == ErrorKind::overflow);
    for (const std::string& word : c.must_mention) EXPECT_THAT(s.error().message, HasSubstr(word));
  }
}

TEST(ByteLawValidation, UnknownPartListsTheKnownOnes) {
  const DenseEntryLayout l = two_part_layout();
  auto p = l.part("kv");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.error().message, HasSubstr("'custom'"));
  EXPECT_THAT(p.error().message, HasSubstr("'kv'"));
  EXPECT_THAT(p.error().message, HasSubstr("known parts: k, v"));
  EXPECT_EQ(l.part_index("v"), std::optional<std::size_t>(1));
  EXPECT_EQ(l.part_index("q"), std::nullopt);
}

TEST(ByteLawValidation, MisalignedPerRankRowIsRefusedWhenThePoolIsBuilt) {
  // 1 head of 4 fp8 elements: a 4-byte row.
  auto l = SubPoolSpec{"full", SubPoolKind::full, 2, 1, 4, 4, DType::fp8_e4m3}.layout();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().kind, ErrorKind::layout);
  EXPECT_THAT(l.error().message, HasSubstr("sub-pool 'full'"));
  EXPECT_THAT(l.error().message, HasSubstr("row of 4 bytes"));
  EXPECT_THAT(l.error().message, HasSubstr("cannot use the unified pool"));
}

TEST(ByteLawValidation, SubPoolRowOverflowIsAnError) {
  auto l = SubPoolSpec{"full", SubPoolKind::full, 1, 0xffffffffu, 0xffffffffu, 16, DType::fp32}.layout();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().kind, ErrorKind::overflow);
  EXPECT_THAT(l.error().message, HasSubstr("sub-pool 'full'"));
}

// ---------------------------------------------------------------- the page-major law

TEST(PageMajorLaw, KernelIdAndAddressesOfTheSeeds) {
  // 2 layers, 1 head of 8 bf16: rows of 16 bytes; blocks_per_page = 2L = 4.
  const DenseEntryLayout layout = mha_layout(2, 1, 8, 8, DType::bf16);
  const std::uint64_t ps = 4, row = 16;
  auto law = PageMajorLaw::from_layout(layout, ps);
  ASSERT_TRUE(law.ok());
  EXPECT_FALSE(law->is_mla);
  EXPECT_EQ(law->blocks_per_page, 4u);
  EXPECT_EQ(law->row_bytes, row);
  EXPECT_EQ(law->page_bytes(), ps * 4 * row);
  EXPECT_EQ(law->page_bytes(), ps * layout.entry_bytes);  // same envelope: no padding here
  for (std::int64_t pt : {0, 1, 3, 4, 5, 11}) {
    auto kid = law->kernel_id(PhysicalTokenId{pt});
    ASSERT_TRUE(kid.ok());
    EXPECT_EQ(*kid, static_cast<std::uint64_t>((pt / 4) * (4 * 4) + pt % 4));
    for (std::size_t side : {0u, 1u}) {
      for (std::uint32_t l : {0u, 1u}) {
        auto a = law->row_byte_address(PhysicalTokenId{pt}, side, l);
        ASSERT_TRUE(a.ok());
        // Block b = 2l + side; its view starts at b * ps * row and is indexed by the kernel id.
        EXPECT_EQ(*a, (2 * l + side) * ps * row + *kid * row);
      }
    }
  }
  // Token 1, layer 0, K: token-major puts it at E; page-major at 16. Same page, other bytes.
  auto tm = row_byte_address(layout, PhysicalTokenId{1}, layout.parts[0], 0);
  auto pm = law->row_byte_address(PhysicalTokenId{1}, 0, 0);
  ASSERT_TRUE(tm.ok() && pm.ok());
  EXPECT_NE(*tm, *pm);
  EXPECT_NE(kTokenMajorFormatTag, kPageMajorFormatTag);
}

TEST(PageMajorLaw, NeedsEqualRowsAndAKnownEntry) {
  const DenseEntryLayout unequal = mha_layout(9, 4, 192, 128, DType::bf16);
  auto law = PageMajorLaw::from_layout(unequal, 64);
  ASSERT_FALSE(law.ok());
  EXPECT_THAT(law.error().message, HasSubstr("equal rows"));
  EXPECT_THAT(law.error().message, HasSubstr("1536"));
  EXPECT_THAT(law.error().message, HasSubstr("1024"));

  DenseEntryLayout empty;
  empty.sub_pool = "empty";
  EXPECT_FALSE(PageMajorLaw::from_layout(empty, 64).ok());
  EXPECT_FALSE(PageMajorLaw::from_layout(two_part_layout(), 0).ok());

  auto mla = SubPoolSpec{"mla", SubPoolKind::mla, 3, 1, 576, 512, DType::bf16}.layout();
  ASSERT_TRUE(mla.ok());
  auto mla_law = PageMajorLaw::from_layout(*mla, 8);
  ASSERT_TRUE(mla_law.ok());
  EXPECT_TRUE(mla_law->is_mla);
  EXPECT_EQ(mla_law->blocks_per_page, 3u);
  EXPECT_FALSE(mla_law->row_byte_address(PhysicalTokenId{0}, 1, 0).ok());  // MLA has one part
  EXPECT_FALSE(mla_law->row_byte_address(PhysicalTokenId{0}, 0, 3).ok());  // and 3 layers
}

}  // namespace
}  // namespace kvtwin
