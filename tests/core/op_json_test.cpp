// Operations and outcomes in trace syntax (core/op.h): every op and every outcome survives
// to_json -> from_json (and to_string -> parse), and a malformed field is an error that names it.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/catalogue.h"
#include "core/op.h"
#include "core/reasons.h"

namespace kvtwin {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

// One instance of every op, each field set to something other than its default.
std::vector<Op> every_op() {
  PoolConfig config;
  config.shape = *find_model("gpt-oss-20b");
  config.tp = 2;
  config.page_size = 16;
  config.total_bytes = 1ULL << 33;
  config.mode = CompactionMode::lazy;
  config.tables_only = true;
  config.seed = 0xfeedfacecafebeefULL;
  config.host_bytes = 1ULL << 30;

  PoolConfig custom;
  custom.shape = *find_model("mimo-v2-flash");
  custom.shape.name = "custom-mimo";
  custom.shape.dtype = DType::fp8_e4m3;
  custom.page_size = 1;
  custom.total_bytes = 123456789;

  Write batch_write;
  batch_write.layer = 5;
  batch_write.write_number = 9;
  batch_write.batch = 3;
  batch_write.checked = true;
  Write explicit_write;
  explicit_write.layer = 1;
  explicit_write.write_number = 2;
  explicit_write.loc = {64, 0, 65};
  explicit_write.physical = true;
  explicit_write.tokens = {128, -1, 129};

  Translate translate;
  translate.ids = {1, -2, 3, 4, 5, 6};
  translate.shape = {2, 3};
  translate.index_dtype = IndexDtype::int32;
  translate.input_stride = 4;
  translate.out = OutPlacement::strided;
  translate.out_stride = 5;
  translate.out_dtype = IndexDtype::int32;
  translate.out_width = 8;
  Translate alias;
  alias.ids = {7};
  alias.shape = {1};
  alias.out = OutPlacement::alias;

  return {
      Op(BuildPool{config}),
      Op(BuildPool{custom}),
      Op(Alloc{128}),
      Op(AllocMany{{64, 0, 128}}),
      Op(Free{IdUnit::pages, {5, 6, 5}}),
      Op(Free{IdUnit::tokens, {320, 321}}),
      Op(FreeSwa{IdUnit::tokens, {64}}),
      Op(FreeSwa{IdUnit::pages, {2}}),
      Op(Flush{}),
      Op(MovePages{"swa", {9, 10}, {3, 4}}),
      Op(BeginRead{7, "full", {1, 2, 3}}),
      Op(EndRead{7}),
      Op(MakeBatch{4, {64, 65, -1}, {}}),
      Op(MakeBatch{5, {64}, {200}}),
      Op(Rebind{4, 16}),
      Op(Split{4, 2, 8, 9}),
      Op(DropBatch{9}),
      Op(batch_write),
      Op(explicit_write),
      Op(Read{3, "v", {64, 65}}),
      Op(translate),
      Op(alias),
      Op(SwaTranslate{{64, 0, 130}}),
      Op(PageTable{{{64, 65, 66}, {128, 129, 130}}, {1, 0}, {3, 2}, {{0, 0}, {7, 7}}}),
      Op(RemapIndices{{0, 2, 3}, {64, 65, 128, 999}, 2}),
      Op(Capture{1, 8, 4, 3, 16}),
      Op(Replay{1, {{64, 65}, {128}}, 11, 77}),
      Op(Checkpoint{}),
      Op(HostAlloc{3, {2, 0}}),
      Op(HostFree{"swa", {0, 4}}),
      Op(LeaseAcquire{2}),
      Op(LeaseRelease{2}),
      Op(RecordEvent{5, 1}),
      Op(Offload{7, 1, 2, 5, "swa", IdUnit::tokens, {64, 65, 66, 67}, {3}}),
      Op(Offload{8, 0, 1, std::nullopt, "full", IdUnit::pages, {4, 6}, {0, 1}}),
      Op(LoadBack{9, 2, 3, 6, {{0, 1}, {-1, 1}}}),
      Op(LoadBack{10, 0, 1, std::nullopt, {{4}}}),
      Op(TransferWait{9}),
      // the storage tier
      Op(StorePages{1, "full", {0, 1, 2}, {11, 0xffffffffffffffffULL, 13}, 2, ""}),
      Op(StorePages{0, "swa", {4}, {7}, 0, "page_major"}),
      Op(StorePages{0, "full", {4}, {7}, 1, "untagged"}),
      Op(LoadStored{2, "full", {3, 1}, {11, 13}}),
      // the state sub-pool (SPEC 11)
      Op(StateAlloc{7}),
      Op(StateFree{7}),
      Op(StateWrite{7, 12}),
      Op(StateRead{{1, 2, 0}, "temporal", 3}),
      Op(StateSlots{{7, 8}}),
  };
}

TEST(OpJson, EveryOpKindIsCovered) {
  std::vector<bool> seen(std::variant_size_v<Op>, false);
  for (const Op& op : every_op()) seen[op.index()] = true;
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "op alternative " << i << " untested";
}

TEST(OpJson, EveryOpRoundTrips) {
  for (const Op& op : every_op()) {
    const json j = op_to_json(op);
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j.at("op").get<std::string>(), op_name(op));
    auto back = op_from_json(j, "test");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->index(), op.index());
    EXPECT_TRUE(*back == op);
    // The one-line trace syntax parses back to the same op.
    auto reparsed = op_from_json(json::parse(to_string(op)), "test");
    ASSERT_TRUE(reparsed.ok());
    EXPECT_TRUE(*reparsed == op);
  }
}

// One instance of every outcome and a few errors.
std::vector<OpResult> every_result() {
  std::vector<std::uint8_t> data(100);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return {
      OpResult(Outcome(Done{})),
      OpResult(Outcome(NoRoom{})),
      OpResult(Outcome(Allocated{{5, 6, 7}})),
      OpResult(Outcome(Allocated{{}})),
      OpResult(Outcome(Allocated{{4}, {PageMove{"swa", 14, 2}, PageMove{"swa", 15, 3}}})),  // a float's make_room
      OpResult(Outcome(AllocatedMany{{{5}, {}, {6, 7}}})),
      OpResult(Outcome(AllocatedMany{{}})),
      OpResult(Outcome(Compaction{{PageMove{"swa", 9, 3}, PageMove{"full", 12, 4}}})),
      OpResult(Outcome(Compaction{{}})),
      OpResult(Outcome(Ids{{0, 64, -1}})),
      OpResult(Outcome(Table{{{1, 2}, {0, 0}}})),
      OpResult(Outcome(Bytes::of(data))),
      OpResult(Outcome(Marks{true, false})),
      OpResult(Outcome(Decode{{64, 0}, {{1, 2}, {0, 0}}, Bytes::of(data)})),
      OpResult(Outcome(HostAllocated{{{0, 2}, {1}}, {{0, 2}, {8}}, {PageMove{"full", 3, 1}, PageMove{"swa", 6, 8}}})),
      OpResult(Outcome(HostAllocated{{{}}, {{}}, {}})),
      OpResult(Outcome(TransferStarted{7, {5, 6}})),
      OpResult(Outcome(TransferStarted{8, {}})),
      OpResult(make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight, "page 5 is in flight")),
      OpResult(make_refusal(ErrorKind::double_free, reason::not_allocated, "double free of page 5")),
      OpResult(make_error(ErrorKind::unmarked_loc, "the loc is not marked physical")),
  };
}

TEST(ResultJson, EveryOutcomeKindIsCovered) {
  std::vector<bool> seen(std::variant_size_v<Outcome>, false);
  for (const OpResult& r : every_result())
    if (r.ok()) seen[r.value().index()] = true;
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "outcome alternative " << i << " untested";
}

TEST(ResultJson, EveryOutcomeRoundTrips) {
  for (const OpResult& r : every_result()) {
    const json j = result_to_json(r);
    SCOPED_TRACE(j.dump());
    auto back = result_from_json(j, "test");
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_EQ(back->ok(), r.ok());
    if (r.ok()) {
      EXPECT_EQ(back->value().index(), r.value().index());
      EXPECT_TRUE(back->value() == r.value());
    } else {
      EXPECT_EQ(back->error().kind, r.error().kind);
      EXPECT_EQ(back->error().message, r.error().message);
    }
    EXPECT_TRUE(same_result(*back, r));
  }
}

TEST(ResultJson, BytesCompareBySizeAndDigest) {
  std::vector<std::uint8_t> a(32, 1), b(32, 1);
  b[31] = 2;
  EXPECT_FALSE(Bytes::of(a) == Bytes::of(b));
  EXPECT_TRUE(Bytes::of(a) == Bytes::of(a));
  // Errors compare by kind and reason code, never by message.
  const auto error = [](ErrorKind kind, std::string_view why, std::string message) {
    return OpResult(make_refusal(kind, why, std::move(message)));
  };
  EXPECT_TRUE(same_result(error(ErrorKind::double_free, "", "x"), error(ErrorKind::double_free, "", "y")));
  EXPECT_FALSE(same_result(error(ErrorKind::double_free, "", "x"), error(ErrorKind::out_of_range, "", "x")));
  EXPECT_FALSE(same_result(OpResult(Outcome(Done{})), error(ErrorKind::internal, "", "")));
  EXPECT_TRUE(same_result(error(ErrorKind::double_free, reason::not_allocated, "x"),
                          error(ErrorKind::double_free, reason::not_allocated, "y")));
  // The same kind for another reason is another answer: a tombstone freed again is not a page
  // never allocated.
  EXPECT_FALSE(same_result(error(ErrorKind::double_free, reason::left_window, "x"),
                           error(ErrorKind::double_free, reason::not_allocated, "x")));
  EXPECT_FALSE(same_result(error(ErrorKind::out_of_range, reason::reserved_page, "x"),
                           error(ErrorKind::out_of_range, "", "x")));
  // A trace's expectation without a reason (written before the codes) matches any reason; one
  // with a reason matches only it.
  EXPECT_TRUE(meets_expectation(error(ErrorKind::double_free, reason::left_window, "x"),
                                error(ErrorKind::double_free, "", "")));
  EXPECT_FALSE(meets_expectation(error(ErrorKind::double_free, reason::left_window, "x"),
                                 error(ErrorKind::double_free, reason::not_allocated, "")));
  EXPECT_FALSE(meets_expectation(error(ErrorKind::out_of_range, "", "x"), error(ErrorKind::double_free, "", "")));
}

struct BadOp {
  std::string text;
  std::vector<std::string> must_mention;
};

TEST(OpJson, MalformedFieldsAreErrorsNamingTheField) {
  const std::vector<BadOp> cases = {
      {R"({"tokens": 64})", {"missing string field 'op'"}},
      {R"({"op": "allocate", "tokens": 64})", {"unknown operation 'allocate'", "alloc"}},
      {R"({"op": "alloc"})", {"missing field 'tokens'"}},
      {R"({"op": "alloc", "tokens": -64})", {"'tokens'", "negative"}},
      {R"({"op": "alloc", "tokens": "64"})", {"'tokens'"}},
      {R"({"op": "alloc", "tokens": 64, "pages": 1})", {"unknown field 'pages'"}},
      {R"({"op": "alloc_many", "tokens": [64, -1]})", {"'tokens[1]'"}},
      {R"({"op": "free", "pages": [1], "tokens": [64]})", {"exactly one of 'tokens' or 'pages'"}},
      {R"({"op": "free", "pages": [1.5]})", {"'pages[0]'"}},
      {R"({"op": "free_swa", "tokens": 64})", {"'tokens'", "array"}},
      {R"({"op": "move_pages", "dst": [1], "src": [2]})", {"missing field 'sub_pool'"}},
      {R"({"op": "begin_read", "reader": 4294967296, "sub_pool": "full", "pages": []})", {"'reader'", "too big"}},
      {R"({"op": "end_read"})", {"missing field 'reader'"}},
      {R"({"op": "store_pages", "thread": 0, "side": "full", "host": [0], "hashes": [1]})", {"missing field 'page_count'"}},
      {R"({"op": "store_pages", "thread": 0, "side": "full", "host": [0], "hashes": [1], "page_count": 1,
           "layout": "pm1"})", {"'layout'", "page_major"}},
      {R"({"op": "load_stored", "thread": 0, "side": "full", "host": [0], "hashes": [-1]})", {"'hashes[0]'"}},
      {R"({"op": "load_stored", "thread": 0, "side": "full", "host": [0], "hashes": [1], "page_count": 1})",
       {"unknown field 'page_count'"}},
      {R"({"op": "batch", "batch": 0, "tokens": [1], "encoder_tokens": ["a"]})", {"'encoder_tokens[0]'"}},
      {R"({"op": "rebind", "batch": 0, "out_width": -3})", {"'out_width'"}},
      {R"({"op": "split", "batch": 0, "at": 1, "into": [1]})", {"'into'", "two batch ids"}},
      {R"({"op": "drop_batch", "batch": true})", {"'batch'"}},
      {R"({"op": "write", "layer": 0, "write_number": 1, "batch": 0, "loc": [1]})", {"either 'batch' or an explicit 'loc'"}},
      {R"({"op": "write", "layer": 0, "write_number": 1, "loc": [1], "tokens": [1], "physical": "yes"})",
       {"'physical'", "true or false"}},
      {R"({"op": "read", "layer": 0, "ids": [1]})", {"missing field 'part'"}},
      {R"({"op": "translate", "ids": [1], "out": "elsewhere"})", {"'out'", "fresh"}},
      {R"({"op": "translate", "ids": [1], "index_dtype": "int16"})", {"'index_dtype'", "int32"}},
      {R"({"op": "translate", "ids": [99999999999999999999]})", {"'ids[0]'", "too big"}},
      {R"({"op": "swa_translate", "ids": {}})", {"'ids'"}},
      {R"({"op": "page_table", "req_to_token": [[1], 2], "req": [0], "seq_len": [1], "prior": [[0]]})",
       {"'req_to_token[1]'"}},
      {R"({"op": "remap_indices", "kv_indptr": [0, 1], "kv_indices": [5]})", {"missing field 'bs'"}},
      {R"({"op": "capture", "graph": 0, "max_batch": 8, "max_pages": 4, "layer": 0})", {"missing field 'query_heads'"}},
      {R"({"op": "replay", "graph": 0, "requests": [[1]], "write_number": "x"})", {"'write_number'"}},
      {R"({"op": "checkpoint", "now": true})", {"unknown field 'now'"}},
      {R"({"op": "host_alloc", "pages": [1]})", {"missing field 'thread'"}},
      {R"({"op": "host_alloc", "thread": 0, "pages": [-1]})", {"'pages[0]'"}},
      {R"({"op": "host_free", "pages": [1]})", {"missing field 'side'"}},
      {R"({"op": "lease_acquire", "thread": -1})", {"'thread'"}},
      {R"({"op": "lease_release"})", {"missing field 'thread'"}},
      {R"({"op": "record_event", "event": 1})", {"missing field 'stream'"}},
      {R"({"op": "offload", "transfer": 1, "thread": 0, "stream": 1, "side": "full", "pages": [1], "tokens": [4], "host": [0]})",
       {"exactly one of 'tokens' or 'pages'"}},
      {R"({"op": "offload", "transfer": 1, "thread": 0, "stream": 1, "side": "full", "pages": [1]})", {"missing field 'host'"}},
      {R"({"op": "offload", "transfer": 1, "thread": 0, "stream": 1, "wait_event": "e", "side": "full", "pages": [1], "host": [0]})",
       {"'wait_event'"}},
      {R"({"op": "load_back", "transfer": 1, "thread": 0, "stream": 1, "host": [0]})", {"'host"}},
      {R"({"op": "load_back", "transfer": 1, "thread": 0, "host": [[0]]})", {"missing field 'stream'"}},
      {R"({"op": "transfer_wait", "transfer": 4294967296})", {"'transfer'", "too big"}},
      {R"({"op": "build", "config": {"model": "llama-3.1-8b", "page_size": 64, "total_bytes": 1, "host_bytes": -1}})",
       {"'host_bytes'"}},
      {R"({"op": "build", "config": {"model": "llama-3.1-8b", "page_size": 64}})", {"missing field 'total_bytes'"}},
      {R"({"op": "build", "config": {"model": "llama-3.1-8b", "page_size": 64, "total_bytes": 1, "tp": 0}})",
       {"'tp'", "out of range"}},
      {R"({"op": "build", "config": {"model": "llama-9", "page_size": 64, "total_bytes": 1}})", {"unknown model 'llama-9'"}},
      {R"({"op": "build", "config": {"model": {"name": "x", "num_layers": 1}, "page_size": 1, "total_bytes": 1}})",
       {"missing field 'num_kv_heads'"}},
  };
  for (const BadOp& c : cases) {
    SCOPED_TRACE(c.text);
    auto op = op_from_json(json::parse(c.text), "trace.jsonl:7");
    ASSERT_FALSE(op.ok());
    EXPECT_THAT(op.error().message, HasSubstr("trace.jsonl:7"));
    for (const std::string& word : c.must_mention) EXPECT_THAT(op.error().message, HasSubstr(word));
  }
}

TEST(ResultJson, MalformedResultsAreErrors) {
  const std::vector<BadOp> cases = {
      {R"([1])", {"must be a JSON object"}},
      {R"({"error": "no_such_kind"})", {"unknown error kind 'no_such_kind'"}},
      {R"({"pages": [1, "x"]})", {"'pages[1]'"}},
      {R"({"moves": [["full", 1]]})", {"moves[0]", "[sub_pool, src, dst]"}},
      {R"({"moves": [["full", 18446744073709551615, 1]]})", {"moves[0]", "64-bit page ids"}},
      {R"({"pages": [], "many": "yes"})", {"'many'"}},
      {R"({"marks": [true]})", {"'marks'"}},
      {R"({"bytes": 4, "digest": "xyz"})", {"'digest'", "hex"}},
      {R"({"loc": [0], "table": [[0]]})", {"missing field 'attention'"}},
      {R"({"host_pages": [[0]]})", {"missing field 'host_physical'"}},
      {R"({"host_pages": [[0]], "host_physical": [[0]], "host_moves": [["full", 1]]})", {"host_moves[0]"}},
      {R"({"transfer": 1})", {"missing field 'device_pages'"}},
      {R"({"surprise": 1})", {"unrecognized result"}},
  };
  for (const BadOp& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = result_from_json(json::parse(c.text), "expect");
    ASSERT_FALSE(r.ok());
    for (const std::string& word : c.must_mention) EXPECT_THAT(r.error().message, HasSubstr(word));
  }
}

// Traces written before the host arena read as they did: a configuration without host_bytes
// has none (and writes none back), and every earlier op and result reads unchanged.
TEST(OpJson, ConfigurationsBeforeTheHostArenaReadWithoutOne) {
  const json old = json::parse(R"({"model": "llama-3.1-8b", "tp": 8, "page_size": 4, "total_bytes": 1048576, "seed": 3})");
  Result<PoolConfig> c = pool_config_from_json(old, "header");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->host_bytes, 0u);
  EXPECT_FALSE(pool_config_to_json(*c).contains("host_bytes"));
  PoolConfig with = *c;
  with.host_bytes = 65536;
  const json j = pool_config_to_json(with);
  EXPECT_EQ(j.at("host_bytes").get<std::uint64_t>(), 65536u);
  Result<PoolConfig> back = pool_config_from_json(j, "header");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, with);
  // The storage tier below it: written only when configured, and only with a host arena.
  EXPECT_FALSE(j.contains("storage_bytes"));
  with.storage_bytes = 1 << 20;
  Result<PoolConfig> stored = pool_config_from_json(pool_config_to_json(with), "header");
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  EXPECT_EQ(*stored, with);
  json no_host = pool_config_to_json(with);
  no_host.erase("host_bytes");
  Result<PoolConfig> refused = pool_config_from_json(no_host, "header");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message, HasSubstr("'storage_bytes'"));
  EXPECT_THAT(refused.error().message, HasSubstr("host_bytes"));
  // Old op lines and results are untouched by the new vocabulary.
  for (const char* line : {R"({"op":"free","pages":[1]})", R"({"op":"checkpoint"})", R"({"op":"flush"})"}) {
    Result<Op> op = op_from_json(json::parse(line), "old");
    ASSERT_TRUE(op.ok()) << line;
    EXPECT_FALSE(is_host_op(*op));
    EXPECT_EQ(to_string(*op), json::parse(line).dump());
  }
  Result<OpResult> moves = result_from_json(json::parse(R"({"moves":[["full",3,1]]})"), "old");
  ASSERT_TRUE(moves.ok());
  EXPECT_TRUE(std::holds_alternative<Compaction>(moves->value()));
}

TEST(OpJson, HostOpsAreNamedAndMarked) {
  std::size_t host = 0;
  for (const Op& op : every_op()) host += is_host_op(op) ? 1 : 0;
  EXPECT_EQ(host, 14u);  // with the storage tier's store_pages and load_stored
  EXPECT_EQ(to_string(Op(TransferWait{3})), R"({"op":"transfer_wait","transfer":3})");
  EXPECT_EQ(to_string(Op(Offload{1, 2, 3, std::nullopt, "full", IdUnit::pages, {5}, {0}})),
            R"({"host":[0],"op":"offload","pages":[5],"side":"full","stream":3,"thread":2,"transfer":1})");
}

}  // namespace
// A reason code travels in traces beside the kind; an unknown code, or a code of another kind, is
// refused with its place.
TEST(OpJson, AnErrorsReasonRoundTripsAndAnUnknownOneIsRefused) {
  const OpResult r = make_refusal(ErrorKind::double_free, reason::left_window, "again");
  const nlohmann::json j = result_to_json(r);
  EXPECT_EQ(j.dump(), R"({"error":"double_free","message":"again","reason":"already_left_window"})");
  Result<OpResult> back = result_from_json(j, "t.jsonl:3");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(same_result(*back, r));
  Result<OpResult> unknown = result_from_json(nlohmann::json::parse(R"({"error":"double_free","reason":"nope"})"), "t.jsonl:4");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message, ::testing::HasSubstr("t.jsonl:4"));
  EXPECT_THAT(unknown.error().message, ::testing::HasSubstr("unknown reason 'nope'"));
  Result<OpResult> other_kind =
      result_from_json(nlohmann::json::parse(R"({"error":"out_of_range","reason":"already_left_window"})"), "t.jsonl:5");
  EXPECT_FALSE(other_kind.ok());
}

}  // namespace kvtwin
