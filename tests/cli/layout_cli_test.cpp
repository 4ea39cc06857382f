// `kvtwin layout` end to end: runs the built binary ($KVTWIN_BINARY_DIR/tools/kvtwin) and checks
// its outputs against numbers this test computes itself from the models' public configs with
// SPEC.md's formulas (sections 2 and 3); the SVG is parsed as XML; every bad input must end with
// one message on stderr, nothing on stdout, and exit code 2 (never a crash).
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <expat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/catalogue.h"

namespace {

using ::testing::HasSubstr;
using nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------- running the binary

struct CliRun {
  int exit_code = -1;  // negative: killed by that signal
  std::string out;
  std::string err;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

fs::path scratch_dir() {
  const char* name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const fs::path dir = fs::temp_directory_path() / (std::string("kvtwin-cli-test-") + name);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

CliRun kvtwin(const std::vector<std::string>& args) {
  const char* bin_dir = std::getenv("KVTWIN_BINARY_DIR");
  EXPECT_NE(bin_dir, nullptr) << "KVTWIN_BINARY_DIR is not set; run through ctest";
  const std::string binary = std::string(bin_dir ? bin_dir : ".") + "/tools/kvtwin";
  const fs::path err_file = scratch_dir() / "stderr.txt";
  std::string cmd = shell_quote(binary);
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>" + shell_quote(err_file.string());
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  if (!pipe) return r;
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -(WIFSIGNALED(status) ? WTERMSIG(status) : 1000);
  r.err = read_file(err_file);
  return r;
}

std::string write_spec(const std::string& name, const std::string& text) {
  const fs::path p = scratch_dir() / name;
  std::ofstream(p) << text;
  return p.string();
}

// ---------------------------------------------------------------- the expected numbers

// One sub-pool, from a config's numbers with SPEC 2 and 3.
struct ExpectedSubPool {
  std::string name, direction;
  std::vector<std::uint32_t> model_layers;
  std::uint64_t layers = 0, heads = 0, k_dim = 0, v_dim = 0, itemsize = 0;
  bool mla = false;
  // derived
  std::uint64_t k_row = 0, v_row = 0, entry = 0, page = 0;
  std::uint64_t max_slots = 0, min_slot_index = 0, num_pages = 0, min_page_index = 0;
};

struct Expected {
  std::string model;
  std::uint64_t page_size = 64, total = 4294967296ULL, floor = 0;
  std::vector<ExpectedSubPool> pools;
};

std::uint64_t align32(std::uint64_t v) { return (v + 31) / 32 * 32; }
std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

void derive(Expected& e) {
  for (ExpectedSubPool& p : e.pools) {
    p.k_row = p.heads * p.k_dim * p.itemsize;
    p.v_row = p.heads * p.v_dim * p.itemsize;
    p.entry = p.mla ? align32(p.layers * p.k_row) : align32(p.layers * (p.k_row + p.v_row));
    p.page = e.page_size * p.entry;
    e.floor = std::max({e.floor, p.entry, p.page});
  }
  for (ExpectedSubPool& p : e.pools) {
    p.max_slots = e.total / p.entry;
    p.min_slot_index = ceil_div(e.floor, p.entry);
    p.num_pages = p.max_slots / e.page_size;
    p.min_page_index = ceil_div(p.min_slot_index, e.page_size);
  }
}

// meta-llama/Llama-3.1-8B config.json: 32 layers, 8 KV heads, head dim 128, bf16.
Expected llama() {
  Expected e;
  e.model = "llama-3.1-8b";
  ExpectedSubPool p;
  p.name = "full";
  p.direction = "up";
  for (std::uint32_t l = 0; l < 32; ++l) p.model_layers.push_back(l);
  p.layers = 32;
  p.heads = 8;
  p.k_dim = p.v_dim = 128;
  p.itemsize = 2;
  e.pools = {p};
  derive(e);
  return e;
}

// XiaomiMiMo/MiMo-V2-Flash config.json: 48 layers, full attention at 0 and every l with
// (l + 1) % 6 == 0; 4 KV heads on full layers, 8 on sliding ones; head dim 192, V 128; bf16.
Expected mimo() {
  Expected e;
  e.model = "mimo-v2-flash";
  ExpectedSubPool full, swa;
  full.name = "full";
  full.direction = "up";
  swa.name = "swa";
  swa.direction = "down";
  for (std::uint32_t l = 0; l < 48; ++l) (l == 0 || (l + 1) % 6 == 0 ? full : swa).model_layers.push_back(l);
  full.layers = full.model_layers.size();
  swa.layers = swa.model_layers.size();
  full.heads = 4;
  swa.heads = 8;
  full.k_dim = swa.k_dim = 192;
  full.v_dim = swa.v_dim = 128;
  full.itemsize = swa.itemsize = 2;
  e.pools = {full, swa};
  derive(e);
  return e;
}

// deepseek-ai/DeepSeek-V2-Lite config.json: 27 layers, kv_lora_rank 512, qk_rope_head_dim 64.
Expected deepseek_v2_lite(std::uint64_t page_size, std::uint64_t itemsize) {
  Expected e;
  e.model = "deepseek-v2-lite";
  e.page_size = page_size;
  ExpectedSubPool p;
  p.name = "mla";
  p.direction = "up";
  for (std::uint32_t l = 0; l < 27; ++l) p.model_layers.push_back(l);
  p.layers = 27;
  p.heads = 1;
  p.k_dim = 512 + 64;
  p.v_dim = 512;
  p.itemsize = itemsize;
  p.mla = true;
  e.pools = {p};
  derive(e);
  return e;
}

struct ExpectedPart {
  std::string name;
  std::uint64_t offset, stride, row, heads, dim;
};

std::vector<ExpectedPart> parts_of(const ExpectedSubPool& p) {
  if (p.mla) return {{"kv", 0, p.k_row, p.k_row, 1, p.k_dim}};
  return {{"k", 0, p.k_row + p.v_row, p.k_row, p.heads, p.k_dim},
          {"v", p.k_row, p.k_row + p.v_row, p.v_row, p.heads, p.v_dim}};
}

std::vector<std::int64_t> i64s(std::initializer_list<std::uint64_t> v) {
  std::vector<std::int64_t> out;
  for (std::uint64_t x : v) out.push_back(static_cast<std::int64_t>(x));
  return out;
}

void check_json(const json& j, const Expected& e) {
  EXPECT_EQ(j.at("kvtwin_layout"), 1);
  EXPECT_EQ(j.at("model"), e.model);
  EXPECT_EQ(j.at("page_size"), e.page_size);
  EXPECT_EQ(j.at("total_bytes"), e.total);
  EXPECT_EQ(j.at("reserved_floor_bytes"), e.floor);
  ASSERT_EQ(j.at("sub_pools").size(), e.pools.size());
  for (std::size_t i = 0; i < e.pools.size(); ++i) {
    const ExpectedSubPool& p = e.pools[i];
    const json& s = j.at("sub_pools")[i];
    SCOPED_TRACE(p.name);
    EXPECT_EQ(s.at("name"), p.name);
    EXPECT_EQ(s.at("direction"), p.direction);
    EXPECT_EQ(s.at("model_layers").get<std::vector<std::uint32_t>>(), p.model_layers);
    EXPECT_EQ(s.at("layers"), p.layers);
    EXPECT_EQ(s.at("heads_per_rank"), p.heads);
    EXPECT_EQ(s.at("entry_bytes"), p.entry);
    EXPECT_EQ(s.at("page_bytes"), p.page);
    const std::uint64_t used = p.mla ? p.layers * p.k_row : p.layers * (p.k_row + p.v_row);
    EXPECT_EQ(s.at("padding_bytes"), p.entry - used);
    const json& z = s.at("sizing");
    EXPECT_EQ(z.at("max_slots"), p.max_slots);
    EXPECT_EQ(z.at("min_slot_index"), p.min_slot_index);
    EXPECT_EQ(z.at("num_pages"), p.num_pages);
    EXPECT_EQ(z.at("min_page_index"), p.min_page_index);
    EXPECT_EQ(z.at("usable_pages"), p.num_pages - p.min_page_index);
    EXPECT_EQ(z.at("first_usable_byte"), p.min_page_index * p.page);
    const std::vector<ExpectedPart> parts = parts_of(p);
    ASSERT_EQ(s.at("parts").size(), parts.size());
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const ExpectedPart& x = parts[k];
      const json& pj = s.at("parts")[k];
      EXPECT_EQ(pj.at("name"), x.name);
      EXPECT_EQ(pj.at("offset_bytes"), x.offset);
      EXPECT_EQ(pj.at("layer_stride_bytes"), x.stride);
      EXPECT_EQ(pj.at("row_bytes"), x.row);
      EXPECT_EQ(pj.at("formula"), "byte(pt, " + x.name + ", l) = pt * " + std::to_string(p.entry) + " + " +
                                      std::to_string(x.offset) + " + l * " + std::to_string(x.stride));
      ASSERT_EQ(pj.at("views").size(), p.layers);
      const std::uint64_t is = p.itemsize, slot = p.entry / is;
      for (std::uint64_t l = 0; l < p.layers; ++l) {
        const json& v = pj.at("views")[l];
        const std::uint64_t offset = x.offset + l * x.stride;
        EXPECT_EQ(v.at("layer"), l);
        EXPECT_EQ(v.at("offset_bytes"), offset);
        EXPECT_EQ(v.at("per_layer").at("shape").get<std::vector<std::int64_t>>(), i64s({p.max_slots, x.heads, x.dim}));
        EXPECT_EQ(v.at("per_layer").at("strides").get<std::vector<std::int64_t>>(), i64s({slot, x.dim, 1}));
        EXPECT_EQ(v.at("per_layer").at("storage_offset"), offset / is);
        EXPECT_EQ(v.at("paged").at("shape").get<std::vector<std::int64_t>>(),
                  i64s({p.num_pages, e.page_size, x.heads, x.dim}));
        EXPECT_EQ(v.at("paged").at("strides").get<std::vector<std::int64_t>>(),
                  i64s({e.page_size * slot, slot, x.dim, 1}));
        EXPECT_EQ(v.at("paged").at("storage_offset"), offset / is);
      }
    }
  }
}

std::string tuple(std::initializer_list<std::uint64_t> v) {
  std::string s = "(";
  bool first = true;
  for (std::uint64_t x : v) {
    s += (first ? "" : ", ") + std::to_string(x);
    first = false;
  }
  return s + ")";
}

// The text report: the formulas with their numbers, the sizing, and every view's offset.
void check_text(const std::string& text, const Expected& e) {
  EXPECT_THAT(text, HasSubstr("kvtwin layout: " + e.model + "\n"));
  EXPECT_THAT(text, HasSubstr("= " + std::to_string(e.floor) + " bytes"));
  for (const ExpectedSubPool& p : e.pools) {
    SCOPED_TRACE(p.name);
    const std::size_t at = text.find("\nsub-pool " + p.name + " (");
    ASSERT_NE(at, std::string::npos);
    const std::size_t end = text.find("\nsub-pool ", at + 1);
    const std::string section = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    EXPECT_THAT(section, HasSubstr("grows " + p.direction));
    const std::string rows = p.mla ? std::to_string(p.layers) + " * " + std::to_string(p.k_row)
                                   : std::to_string(p.layers) + " * (" + std::to_string(p.k_row) + " + " +
                                         std::to_string(p.v_row) + ")";
    EXPECT_THAT(section, HasSubstr("E = align_up(" + rows + ", 32) = " + std::to_string(p.entry) + " bytes"));
    EXPECT_THAT(section, HasSubstr("page_bytes = " + std::to_string(e.page_size) + " * " + std::to_string(p.entry) +
                                   " = " + std::to_string(p.page) + " bytes"));
    EXPECT_THAT(section, HasSubstr("max_slots = " + std::to_string(e.total) + " // " + std::to_string(p.entry) + " = " +
                                   std::to_string(p.max_slots)));
    EXPECT_THAT(section, HasSubstr("min_slot_index = ceil(" + std::to_string(e.floor) + " / " + std::to_string(p.entry) +
                                   ") = " + std::to_string(p.min_slot_index)));
    EXPECT_THAT(section, HasSubstr("num_pages = " + std::to_string(p.max_slots) + " // " + std::to_string(e.page_size) +
                                   " = " + std::to_string(p.num_pages)));
    EXPECT_THAT(section, HasSubstr("min_page_index = ceil(" + std::to_string(p.min_slot_index) + " / " +
                                   std::to_string(e.page_size) + ") = " + std::to_string(p.min_page_index)));
    const std::uint64_t slot = p.entry / p.itemsize;
    for (const ExpectedPart& x : parts_of(p)) {
      SCOPED_TRACE(x.name);
      EXPECT_THAT(section, HasSubstr("byte(pt, " + x.name + ", l) = pt * " + std::to_string(p.entry) + " + " +
                                     std::to_string(x.offset) + " + l * " + std::to_string(x.stride)));
      const std::size_t views_at = section.find("views of " + x.name + " (");
      ASSERT_NE(views_at, std::string::npos);
      std::size_t views_end = section.find("views of ", views_at + 1);
      const std::string views = section.substr(views_at, views_end == std::string::npos ? std::string::npos : views_end - views_at);
      EXPECT_THAT(views, HasSubstr("per-layer  shape " + tuple({p.max_slots, x.heads, x.dim})));
      EXPECT_THAT(views, HasSubstr("strides " + tuple({slot, x.dim, 1})));
      EXPECT_THAT(views, HasSubstr("paged      shape " + tuple({p.num_pages, e.page_size, x.heads, x.dim})));
      EXPECT_THAT(views, HasSubstr("strides " + tuple({e.page_size * slot, slot, x.dim, 1})));
      // The offset table: triples (layer, byte offset, element offset), several per line.
      std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> table;
      std::istringstream lines(views);
      std::string line;
      while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::vector<std::uint64_t> nums;
        std::string w;
        bool all_numbers = true;
        while (words >> w) {
          if (w.find_first_not_of("0123456789") != std::string::npos) {
            all_numbers = false;
            break;
          }
          nums.push_back(std::stoull(w));
        }
        if (!all_numbers || nums.empty()) continue;
        ASSERT_EQ(nums.size() % 3, 0u) << line;
        for (std::size_t k = 0; k < nums.size(); k += 3) table[nums[k]] = {nums[k + 1], nums[k + 2]};
      }
      ASSERT_EQ(table.size(), p.layers);
      for (std::uint64_t l = 0; l < p.layers; ++l) {
        const std::uint64_t offset = x.offset + l * x.stride;
        EXPECT_EQ(table[l].first, offset) << "layer " << l;
        EXPECT_EQ(table[l].second, offset / p.itemsize) << "layer " << l;
      }
    }
  }
}

// ---------------------------------------------------------------- outputs

TEST(LayoutCli, LlamaJsonReportsTheDoneCriterion) {
  const CliRun r = kvtwin({"layout", "--model", "llama-3.1-8b", "--page-size", "64", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("sub_pools")[0].at("entry_bytes"), 131072);
  EXPECT_EQ(j.at("sub_pools")[0].at("page_bytes"), 8388608);
  check_json(j, llama());
}

// SPEC 11, numbers by hand (tests/core/state_layout_test.cpp derives them from the public
// config): Qwen3.5-9B's state entry, blocks, views and the chain, in JSON and text.
TEST(LayoutCli, HybridModelShowsItsStateEntryAndChain) {
  const CliRun js = kvtwin({"layout", "--model", "qwen3.5-9b", "--json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const json j = json::parse(js.out);
  EXPECT_EQ(j.at("chain"), json({"state", "full"}));
  const json& st = j.at("state");
  EXPECT_EQ(st.at("entry_bytes"), 24u * 49152 + 24u * 2097152);
  EXPECT_EQ(st.at("entry_formula"), "E_state = 24 * 49152 + 24 * 2097152 = 51511296");
  EXPECT_EQ(st.at("token_cost"), 1572u);
  EXPECT_EQ(st.at("sizing").at("max_slots"), 4294967296ULL / 51511296);
  EXPECT_EQ(st.at("sizing").at("min_slot_index"), 1u);
  EXPECT_EQ(j.at("reserved_floor_bytes"), 51511296u);  // charged once, never 64 * E_state
  const json& temporal = st.at("blocks").at(1);
  EXPECT_EQ(temporal.at("name"), "temporal");
  EXPECT_EQ(temporal.at("offset_bytes"), 24u * 49152);
  EXPECT_EQ(temporal.at("views").at(2).at("view").at("strides"), json({51511296 / 4, 128 * 128, 128, 1}));
  EXPECT_EQ(temporal.at("views").at(2).at("view").at("storage_offset"), (1179648 + 2 * 2097152) / 4);
  EXPECT_EQ(j.at("sub_pools").at(0).at("direction"), "down");
  const CliRun text = kvtwin({"layout", "--model", "qwen3.5-9b"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("E_state = 24 * 49152 + 24 * 2097152 = 51511296 bytes (no padding)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("chain        [state, full]"), std::string::npos) << text.out;
  // The tri-pool's float.
  const CliRun tri = kvtwin({"layout", "--model", "kvtwin-tripool-8l", "--json"});
  ASSERT_EQ(tri.exit_code, 0) << tri.err;
  const json t = json::parse(tri.out);
  EXPECT_EQ(t.at("chain"), json({"state", "swa", "full"}));
  EXPECT_EQ(t.at("sub_pools").at(1).at("direction"), "float");
  EXPECT_EQ(t.at("float_start_page"), 4294967296ULL / 2 / (64 * 12288));
}

TEST(LayoutCli, LlamaText) {
  const CliRun r = kvtwin({"layout", "--model", "llama-3.1-8b"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  check_text(r.out, llama());
}

TEST(LayoutCli, CompositeWithUnequalKAndVJsonAndText) {
  const CliRun js = kvtwin({"layout", "--model", "mimo-v2-flash", "--json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const json j = json::parse(js.out);
  const Expected e = mimo();
  check_json(j, e);
  // The composite's initial gap: from the up side's first usable page to the down side's top.
  EXPECT_EQ(j.at("initial_gap_bytes"), e.pools[1].num_pages * e.pools[1].page - e.pools[0].min_page_index * e.pools[0].page);
  EXPECT_TRUE(j.at("sub_pools")[0].at("page_major").at("blocks_per_page").is_null());
  const CliRun text = kvtwin({"layout", "--model", "mimo-v2-flash"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  check_text(text.out, e);
}

TEST(LayoutCli, MlaWithOptionsOverridesDtypeAndPageSize) {
  const CliRun r = kvtwin({"layout", "--model", "deepseek-v2-lite", "--page-size", "16", "--dtype", "fp8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  const Expected e = deepseek_v2_lite(16, 1);
  check_json(j, e);
  EXPECT_EQ(j.at("dtype"), "fp8");
  // No padding here, so the page-major envelope is the same size.
  EXPECT_EQ(j.at("sub_pools")[0].at("page_major").at("page_bytes"), e.pools[0].page);
  EXPECT_EQ(j.at("sub_pools")[0].at("page_major").at("blocks_per_page"), 27);
}

TEST(LayoutCli, TensorParallelAndTotalBytesSuffix) {
  const CliRun r = kvtwin({"layout", "--model", "llama-3.1-8b", "--tp", "4", "--total-bytes", "1GiB", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Expected e = llama();
  e.total = 1ULL << 30;
  e.pools[0].heads = 8 / 4;
  e.floor = 0;
  derive(e);
  check_json(json::parse(r.out), e);
  // 16 ranks over 8 heads: each rank holds one, replicated.
  const CliRun rep = kvtwin({"layout", "--model", "llama-3.1-8b", "--tp", "16", "--json"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_EQ(json::parse(rep.out).at("sub_pools")[0].at("heads_per_rank"), 1);
}

// ---------------------------------------------------------------- SVG

struct SvgStats {
  std::string root;
  std::size_t rects = 0, titles = 0;
  std::string text;
};

void XMLCALL on_start(void* data, const XML_Char* name, const XML_Char**) {
  auto* s = static_cast<SvgStats*>(data);
  if (s->root.empty()) s->root = name;
  s->rects += std::string(name) == "rect";
  s->titles += std::string(name) == "title";
}
void XMLCALL on_text(void* data, const XML_Char* text, int len) { static_cast<SvgStats*>(data)->text.append(text, len); }

// Parses the document; an XML error fails the test with expat's line and message.
SvgStats parse_svg(const std::string& doc) {
  SvgStats stats;
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &stats);
  XML_SetElementHandler(parser, on_start, nullptr);
  XML_SetCharacterDataHandler(parser, on_text);
  const XML_Status status = XML_Parse(parser, doc.data(), static_cast<int>(doc.size()), 1);
  EXPECT_EQ(status, XML_STATUS_OK) << "line " << XML_GetCurrentLineNumber(parser) << ": "
                                   << XML_ErrorString(XML_GetErrorCode(parser));
  XML_ParserFree(parser);
  return stats;
}

TEST(LayoutCli, SvgIsWellFormedXmlWithABandPerRow) {
  const fs::path svg = scratch_dir() / "mimo.svg";
  const CliRun r = kvtwin({"layout", "--model", "mimo-v2-flash", "--svg", svg.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SvgStats s = parse_svg(read_file(svg));
  EXPECT_EQ(s.root, "svg");
  // At least one band per (part, layer) row of both sub-pools, and one cell per slot of a page.
  const Expected e = mimo();
  const std::size_t rows = 2 * (e.pools[0].layers + e.pools[1].layers);
  EXPECT_GE(s.rects, rows + 2 * e.page_size);
  EXPECT_GE(s.titles, rows);
  EXPECT_THAT(s.text, HasSubstr("mimo-v2-flash"));
  EXPECT_THAT(s.text, HasSubstr("entry " + std::to_string(e.pools[0].entry) + " bytes"));
  EXPECT_THAT(s.text, HasSubstr("k layer 8: bytes ["));
  // The text report still goes to stdout.
  EXPECT_THAT(r.out, HasSubstr("kvtwin layout: mimo-v2-flash"));
}

TEST(LayoutCli, SvgEscapesNamesAndShowsPadding) {
  // A 16-byte latent row over 3 layers: 48 bytes of rows in a 64-byte entry.
  const std::string spec = write_spec("padded.json", R"({"name": "a<b>&\"c'", "attention": "mla", "num_layers": 3,
      "kv_lora_rank": 8, "dtype": "bf16"})");
  const fs::path svg = scratch_dir() / "padded.svg";
  const CliRun r = kvtwin({"layout", "--spec", spec, "--page-size", "4", "--svg", svg.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SvgStats s = parse_svg(read_file(svg));
  EXPECT_THAT(s.text, HasSubstr("a<b>&\"c'"));  // unescaped by the parser
  EXPECT_THAT(s.text, HasSubstr("padding: bytes [48, 64)"));
}

// ---------------------------------------------------------------- listing and --all

TEST(LayoutCli, ListAndAllCoverTheCatalogue) {
  const CliRun list = kvtwin({"layout", "--list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  const CliRun all = kvtwin({"layout", "--all"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  for (const kvtwin::ModelShape& m : kvtwin::model_catalogue()) {
    EXPECT_THAT(list.out, HasSubstr(m.name));
    EXPECT_THAT(all.out, HasSubstr(m.name));
  }
  // llama's line carries its entry, padding and page bytes, in that order.
  std::vector<std::string> llama_words;
  std::istringstream lines(all.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("llama-3.1-8b ", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) llama_words.push_back(w);
  }
  ASSERT_GE(llama_words.size(), 10u);
  EXPECT_EQ(llama_words[1], "full");
  const auto entry_at = std::find(llama_words.begin(), llama_words.end(), "131072");
  ASSERT_NE(entry_at, llama_words.end());
  ASSERT_LT(entry_at + 2, llama_words.end());
  EXPECT_EQ(*(entry_at + 1), "0");
  EXPECT_EQ(*(entry_at + 2), "8388608");
  const CliRun list_json = kvtwin({"layout", "--list", "--json"});
  ASSERT_EQ(list_json.exit_code, 0);
  EXPECT_EQ(json::parse(list_json.out).at("models").size(), kvtwin::model_catalogue().size());
  const CliRun all_json = kvtwin({"layout", "--all", "--json"});
  ASSERT_EQ(all_json.exit_code, 0);
  EXPECT_EQ(json::parse(all_json.out).at("models").size(), kvtwin::model_catalogue().size());
}

TEST(LayoutCli, ReportShapeIsAValidSpecFile) {
  const CliRun r = kvtwin({"layout", "--model", "gpt-oss-20b", "--json"});
  ASSERT_EQ(r.exit_code, 0);
  const std::string spec = write_spec("from-report.json", json::parse(r.out).at("shape").dump());
  const CliRun again = kvtwin({"layout", "--spec", spec, "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  json a = json::parse(r.out), b = json::parse(again.out);
  a.erase("source"), b.erase("source");
  a.erase("shape"), b.erase("shape");
  EXPECT_EQ(a, b);
}

TEST(LayoutCli, DocumentedSpecFileExamplesWork) {
  const char* src = std::getenv("KVTWIN_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  const std::string doc = read_file(fs::path(src) / "docs" / "spec-files.md");
  std::size_t n = 0;
  const std::string open = "```json\n", close = "```";
  for (std::size_t at = doc.find(open); at != std::string::npos; at = doc.find(open, at)) {
    const std::size_t body = at + open.size(), end = doc.find(close, body);
    ASSERT_NE(end, std::string::npos);
    const std::string example = doc.substr(body, end - body);
    const CliRun r = kvtwin({"layout", "--spec", write_spec("doc" + std::to_string(n++) + ".json", example)});
    EXPECT_EQ(r.exit_code, 0) << example << r.err;
    at = end + close.size();
  }
  EXPECT_GE(n, 3u);
}

TEST(LayoutCli, HelpAndVersion) {
  const CliRun help = kvtwin({"layout", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--model", "--tp", "--page-size", "--dtype", "--total-bytes", "--spec", "--json", "--svg",
                           "--list", "--all"})
    EXPECT_THAT(help.out, HasSubstr(flag));
  const CliRun top = kvtwin({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_THAT(top.out, HasSubstr("layout"));
  const CliRun version = kvtwin({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  ASSERT_EQ(version.out.rfind("kvtwin ", 0), 0u) << version.out;
  const std::string number = version.out.substr(7, version.out.find_first_of(" \n", 7) - 7);
  EXPECT_EQ(std::count(number.begin(), number.end(), '.'), 2) << number;
  EXPECT_EQ(number.find_first_not_of("0123456789."), std::string::npos) << number;
}

// ---------------------------------------------------------------- bad input: one message, exit 2

struct BadInput {
  std::string what;
  std::vector<std::string> args;
  std::vector<std::string> must_mention;
};

TEST(LayoutCli, EveryBadInputExitsTwoWithOneMessage) {
  const std::string misaligned =
      write_spec("misaligned.json", R"({"name": "mis", "num_layers": 2, "num_kv_heads": 1, "head_dim": 4, "dtype": "fp8"})");
  const std::string zero_layers =
      write_spec("zero.json", R"({"name": "zero", "num_layers": 0, "num_kv_heads": 8, "head_dim": 128})");
  const std::string malformed = write_spec("malformed.json", "{\"name\": \"x\",\n \"num_layers\": ");
  const std::string unknown_field =
      write_spec("unknown.json", R"({"name": "u", "num_layers": 2, "num_kv_heads": 8, "head_dim": 128, "heads": 2})");
  const std::string dir = scratch_dir().string();
  const std::vector<BadInput> cases = {
      {"unknown model", {"--model", "llama-9"}, {"unknown model 'llama-9'", "known models:", "llama-3.1-8b"}},
      {"misaligned row", {"--spec", misaligned}, {"model 'mis'", "part 'k'", "row of 4 bytes", "multiple of 16"}},
      {"uneven TP split", {"--model", "llama-3.1-8b", "--tp", "3"}, {"8 KV heads", "3 tensor-parallel ranks"}},
      {"uneven replication", {"--model", "llama-3.1-8b", "--tp", "12"}, {"12 tensor-parallel ranks", "multiple of 8"}},
      {"zero layers", {"--spec", zero_layers}, {"model 'zero' has 0 layers"}},
      {"page size 0", {"--model", "llama-3.1-8b", "--page-size", "0"}, {"--page-size 0"}},
      {"negative page size", {"--model", "llama-3.1-8b", "--page-size", "-64"}, {"--page-size '-64'", "whole number"}},
      {"tp 0", {"--model", "llama-3.1-8b", "--tp", "0"}, {"--tp 0"}},
      {"hex tp", {"--model", "llama-3.1-8b", "--tp", "0x2"}, {"--tp '0x2'"}},
      {"byte count past 2^64", {"--model", "llama-3.1-8b", "--total-bytes", "18446744073709551616"},
       {"--total-bytes", "does not fit in 64 bits"}},
      {"byte count overflowing its suffix", {"--model", "llama-3.1-8b", "--total-bytes", "17179869184GiB"},
       {"does not fit in 64 bits"}},
      {"page bytes past 2^64", {"--model", "llama-3.1-8b", "--page-size", "281474976710656"},
       {"page bytes of 'full'", "does not fit in 64 bits"}},
      {"pool too small", {"--model", "llama-3.1-8b", "--total-bytes", "16777215"},
       {"sub-pool 'full'", "increase total_bytes", "at least 16777216 bytes"}},
      {"unreadable spec", {"--spec", dir + "/absent.json"}, {"cannot read spec file", "absent.json"}},
      {"spec is a directory", {"--spec", dir}, {"is a directory"}},
      {"malformed spec", {"--spec", malformed}, {"malformed.json", "not valid JSON", "line 2"}},
      {"unknown spec field", {"--spec", unknown_field}, {"unknown field 'heads'", "known fields:"}},
      {"unknown dtype", {"--model", "llama-3.1-8b", "--dtype", "fp4"}, {"--dtype", "unknown dtype 'fp4'"}},
      {"no model", {}, {"--model NAME", "--spec FILE"}},
      {"two models", {"--model", "llama-3.1-8b", "--spec", unknown_field}, {"only one of"}},
      {"svg into a missing folder", {"--model", "llama-3.1-8b", "--svg", dir + "/no/such/dir/x.svg"}, {"--svg", "cannot write"}},
      {"svg with --all", {"--all", "--svg", dir + "/all.svg"}, {"--svg draws one model"}},
      {"unknown flag", {"--model", "llama-3.1-8b", "--bogus"}, {"--bogus"}},
      {"missing flag value", {"--model"}, {"--model"}},
  };
  for (const BadInput& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<std::string> args = {"layout"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliRun r = kvtwin(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    for (const std::string& word : c.must_mention) EXPECT_THAT(r.err, HasSubstr(word));
    // One message: our own errors are one line.
    if (c.what != "unknown flag" && c.what != "missing flag value") {
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
  }
}

}  // namespace
