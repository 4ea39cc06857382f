// Operations and outcomes in trace syntax (JSON), both ways. docs/traces.md documents every field.
#include "core/op.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/json_fields.h"
#include "core/printable.h"
#include "core/reasons.h"
#include "core/oracle.h"

namespace kvtwin {
namespace {

using nlohmann::json;

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Result<std::uint64_t> parse_hex64(const std::string& s, const JsonFields& f, const char* field) {
  if (s.empty() || s.size() > 16) return f.error(std::string("field '") + field + "' must be 1-16 hex digits");
  std::uint64_t v = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return f.error(std::string("field '") + field + "' must be hex digits, got '" + printable(s) + "'");
    v = v * 16 + static_cast<std::uint64_t>(d);
  }
  return v;
}

Result<std::uint32_t> u32_field(const JsonFields& f, const char* key, std::optional<std::uint32_t> fallback) {
  Result<std::uint64_t> v = fallback ? f.u64(key, *fallback) : f.u64_required(key);
  if (!v.ok()) return v.error();
  if (*v > 0xffffffffULL) return f.error(std::string("field '") + key + "' = " + std::to_string(*v) + " is too big (at most 2^32-1)");
  return static_cast<std::uint32_t>(*v);
}

std::string_view index_dtype_name(IndexDtype d) { return d == IndexDtype::int32 ? "int32" : "int64"; }

Result<IndexDtype> index_dtype_field(const JsonFields& f, const char* key) {
  KVTWIN_TRY(std::string name, f.string(key, "int64"));
  if (name == "int32") return IndexDtype::int32;
  if (name == "int64") return IndexDtype::int64;
  return f.error(std::string("field '") + key + "' is '" + printable(name) + "'; use \"int32\" or \"int64\"");
}

std::string_view placement_name(OutPlacement p) {
  switch (p) {
    case OutPlacement::fresh:
      return "fresh";
    case OutPlacement::alias:
      return "alias";
    case OutPlacement::strided:
      return "strided";
  }
  return "fresh";
}

// Ids given as {"tokens": [...]} or {"pages": [...]}.
Status read_ids(const JsonFields& f, IdUnit& unit, std::vector<std::int64_t>& ids) {
  const bool has_tokens = f.has("tokens"), has_pages = f.has("pages");
  if (has_tokens == has_pages) return f.error("give exactly one of 'tokens' or 'pages'");
  unit = has_tokens ? IdUnit::tokens : IdUnit::pages;
  KVTWIN_TRY(ids, f.i64_array(has_tokens ? "tokens" : "pages"));
  return ok_status();
}

void write_ids(json& j, IdUnit unit, const std::vector<std::int64_t>& ids) {
  j[unit == IdUnit::tokens ? "tokens" : "pages"] = ids;
}

json moves_json(const std::vector<PageMove>& moves) {
  json out = json::array();
  for (const PageMove& m : moves) out.push_back(json::array({m.sub_pool, m.src, m.dst}));
  return out;
}

// [[sub_pool, src, dst], ...] with 64-bit page ids.
Result<std::vector<PageMove>> moves_from(const JsonFields& f, const json& m, const char* field) {
  if (!m.is_array()) return f.error(std::string("field '") + field + "' must be an array of [sub_pool, src, dst]");
  std::vector<PageMove> out;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const json& e = m[i];
    const auto is_i64 = [](const json& v) {
      return v.is_number_integer() && !(v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX);
    };
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !is_i64(e[1]) || !is_i64(e[2]))
      return f.error(std::string(field) + "[" + std::to_string(i) + "] must be [sub_pool, src, dst] with 64-bit page ids");
    out.push_back(PageMove{e[0].get<std::string>(), e[1].get<std::int64_t>(), e[2].get<std::int64_t>()});
  }
  return out;
}

json bytes_json(const Bytes& b) { return json{{"bytes", b.size}, {"digest", hex64(b.digest)}}; }

Result<Bytes> bytes_from(const json& j, std::string_view where) {
  JsonFields f(j, where);
  KVTWIN_TRY_STATUS(f.only({"bytes", "digest"}));
  Bytes b;
  KVTWIN_TRY(b.size, f.u64_required("bytes"));
  KVTWIN_TRY(std::string digest, f.string_required("digest"));
  KVTWIN_TRY(b.digest, parse_hex64(digest, f, "digest"));
  return b;
}

}  // namespace

Bytes Bytes::of(std::vector<std::uint8_t> data) {
  Bytes b;
  b.size = data.size();
  b.digest = digest_bytes(data);
  b.bytes = std::move(data);
  return b;
}

std::string_view op_name(const Op& op) {
  return std::visit(Overloaded{
                        [](const BuildPool&) { return std::string_view("build"); },
                        [](const Alloc&) { return std::string_view("alloc"); },
                        [](const AllocMany&) { return std::string_view("alloc_many"); },
                        [](const Free&) { return std::string_view("free"); },
                        [](const FreeSwa&) { return std::string_view("free_swa"); },
                        [](const Flush&) { return std::string_view("flush"); },
                        [](const MovePages&) { return std::string_view("move_pages"); },
                        [](const BeginRead&) { return std::string_view("begin_read"); },
                        [](const EndRead&) { return std::string_view("end_read"); },
                        [](const MakeBatch&) { return std::string_view("batch"); },
                        [](const Rebind&) { return std::string_view("rebind"); },
                        [](const Split&) { return std::string_view("split"); },
                        [](const DropBatch&) { return std::string_view("drop_batch"); },
                        [](const Write&) { return std::string_view("write"); },
                        [](const Read&) { return std::string_view("read"); },
                        [](const Translate&) { return std::string_view("translate"); },
                        [](const SwaTranslate&) { return std::string_view("swa_translate"); },
                        [](const PageTable&) { return std::string_view("page_table"); },
                        [](const RemapIndices&) { return std::string_view("remap_indices"); },
                        [](const Capture&) { return std::string_view("capture"); },
                        [](const Replay&) { return std::string_view("replay"); },
                        [](const Checkpoint&) { return std::string_view("checkpoint"); },
                        [](const HostAlloc&) { return std::string_view("host_alloc"); },
                        [](const HostFree&) { return std::string_view("host_free"); },
                        [](const LeaseAcquire&) { return std::string_view("lease_acquire"); },
                        [](const LeaseRelease&) { return std::string_view("lease_release"); },
                        [](const RecordEvent&) { return std::string_view("record_event"); },
                        [](const Offload&) { return std::string_view("offload"); },
                        [](const LoadBack&) { return std::string_view("load_back"); },
                        [](const TransferWait&) { return std::string_view("transfer_wait"); },
                        [](const StorePages&) { return std::string_view("store_pages"); },
                        [](const LoadStored&) { return std::string_view("load_stored"); },
                        // the state sub-pool (SPEC 11)
                        [](const StateAlloc&) { return std::string_view("state_alloc"); },
                        [](const StateFree&) { return std::string_view("state_free"); },
                        [](const StateWrite&) { return std::string_view("state_write"); },
                        [](const StateRead&) { return std::string_view("state_read"); },
                        [](const StateSlots&) { return std::string_view("state_slots"); },
                    },
                    op);
}

bool is_host_op(const Op& op) {
  return std::holds_alternative<HostAlloc>(op) || std::holds_alternative<HostFree>(op) ||
         std::holds_alternative<LeaseAcquire>(op) || std::holds_alternative<LeaseRelease>(op) ||
         std::holds_alternative<RecordEvent>(op) || std::holds_alternative<Offload>(op) ||
         std::holds_alternative<LoadBack>(op) || std::holds_alternative<TransferWait>(op) ||
         std::holds_alternative<StorePages>(op) || std::holds_alternative<LoadStored>(op);
}

namespace {

// ---------------------------------------------------------------- the state sub-pool's ops (SPEC 11)

void state_op_to_json(const Op& op, json& j) {
  std::visit(Overloaded{
                 [&](const StateAlloc& o) { j["request"] = o.request; },
                 [&](const StateFree& o) { j["request"] = o.request; },
                 [&](const StateWrite& o) {
                   j["request"] = o.request;
                   j["write_number"] = o.write_number;
                 },
                 [&](const StateRead& o) {
                   j["slots"] = o.slots;
                   j["block"] = o.block;
                   j["layer"] = o.layer;
                 },
                 [&](const StateSlots& o) { j["requests"] = o.requests; },
                 [&](const auto&) {},
             },
             op);
}

// The state ops by name; nullopt for any other name.
std::optional<Result<Op>> state_op_from_json(const std::string& name, JsonFields& f) {
  auto parse = [&]() -> Result<Op> {
    if (name == "state_alloc" || name == "state_free") {
      KVTWIN_TRY_STATUS(f.only({"op", "request", "expect"}));
      KVTWIN_TRY(std::uint64_t request, f.u64_required("request"));
      if (name == "state_alloc") return Op(StateAlloc{request});
      return Op(StateFree{request});
    }
    if (name == "state_write") {
      KVTWIN_TRY_STATUS(f.only({"op", "request", "write_number", "expect"}));
      StateWrite o;
      KVTWIN_TRY(o.request, f.u64_required("request"));
      KVTWIN_TRY(o.write_number, f.u64_required("write_number"));
      return Op(o);
    }
    if (name == "state_read") {
      KVTWIN_TRY_STATUS(f.only({"op", "slots", "block", "layer", "expect"}));
      StateRead o;
      KVTWIN_TRY(o.slots, f.i64_array("slots"));
      KVTWIN_TRY(o.block, f.string_required("block"));
      KVTWIN_TRY(o.layer, u32_field(f, "layer", std::nullopt));
      return Op(std::move(o));
    }
    KVTWIN_TRY_STATUS(f.only({"op", "requests", "expect"}));
    KVTWIN_TRY(std::vector<std::uint64_t> requests, f.u64_array("requests"));
    return Op(StateSlots{std::move(requests)});
  };
  if (name != "state_alloc" && name != "state_free" && name != "state_write" && name != "state_read" &&
      name != "state_slots")
    return std::nullopt;
  return parse();
}

}  // namespace

json op_to_json(const Op& op) {
  json j;
  j["op"] = std::string(op_name(op));
  std::visit(Overloaded{
                 [&](const BuildPool& o) { j["config"] = pool_config_to_json(o.config); },
                 [&](const Alloc& o) { j["tokens"] = o.tokens; },
                 [&](const AllocMany& o) { j["tokens"] = o.tokens; },
                 [&](const Free& o) { write_ids(j, o.unit, o.ids); },
                 [&](const FreeSwa& o) { write_ids(j, o.unit, o.ids); },
                 [&](const Flush&) {},
                 [&](const MovePages& o) {
                   j["sub_pool"] = o.sub_pool;
                   j["dst"] = o.dst;
                   j["src"] = o.src;
                 },
                 [&](const BeginRead& o) {
                   j["reader"] = o.reader;
                   j["sub_pool"] = o.sub_pool;
                   j["pages"] = o.pages;
                 },
                 [&](const EndRead& o) { j["reader"] = o.reader; },
                 [&](const MakeBatch& o) {
                   j["batch"] = o.batch;
                   j["tokens"] = o.tokens;
                   if (!o.encoder_tokens.empty()) j["encoder_tokens"] = o.encoder_tokens;
                 },
                 [&](const Rebind& o) {
                   j["batch"] = o.batch;
                   if (o.out_width != 0) j["out_width"] = o.out_width;
                 },
                 [&](const Split& o) {
                   j["batch"] = o.batch;
                   j["at"] = o.at;
                   j["into"] = json::array({o.left, o.right});
                 },
                 [&](const DropBatch& o) { j["batch"] = o.batch; },
                 [&](const Write& o) {
                   j["layer"] = o.layer;
                   j["write_number"] = o.write_number;
                   if (o.batch) {
                     j["batch"] = *o.batch;
                   } else {
                     j["loc"] = o.loc;
                     j["physical"] = o.physical;
                     j["tokens"] = o.tokens;
                   }
                   if (o.checked) j["checked"] = true;
                 },
                 [&](const Read& o) {
                   j["layer"] = o.layer;
                   j["part"] = o.part;
                   j["ids"] = o.ids;
                 },
                 [&](const Translate& o) {
                   j["ids"] = o.ids;
                   j["shape"] = o.shape;
                   if (o.index_dtype != IndexDtype::int64) j["index_dtype"] = std::string(index_dtype_name(o.index_dtype));
                   if (o.input_stride != 0) j["input_stride"] = o.input_stride;
                   if (o.out != OutPlacement::fresh) j["out"] = std::string(placement_name(o.out));
                   if (o.out_stride != 0) j["out_stride"] = o.out_stride;
                   if (o.out_dtype != IndexDtype::int64) j["out_dtype"] = std::string(index_dtype_name(o.out_dtype));
                   if (o.out_width != 0) j["out_width"] = o.out_width;
                 },
                 [&](const SwaTranslate& o) { j["ids"] = o.ids; },
                 [&](const PageTable& o) {
                   j["req_to_token"] = o.req_to_token;
                   j["req"] = o.req;
                   j["seq_len"] = o.seq_len;
                   j["prior"] = o.prior;
                 },
                 [&](const RemapIndices& o) {
                   j["kv_indptr"] = o.kv_indptr;
                   j["kv_indices"] = o.kv_indices;
                   j["bs"] = o.bs;
                 },
                 [&](const Capture& o) {
                   j["graph"] = o.graph;
                   j["max_batch"] = o.max_batch;
                   j["max_pages"] = o.max_pages;
                   j["layer"] = o.layer;
                   j["query_heads"] = o.query_heads;
                 },
                 [&](const Replay& o) {
                   j["graph"] = o.graph;
                   j["requests"] = o.requests;
                   j["write_number"] = o.write_number;
                   j["query_seed"] = o.query_seed;
                 },
                 [&](const Checkpoint&) {},
                 [&](const HostAlloc& o) {
                   j["thread"] = o.thread;
                   j["pages"] = o.pages;
                 },
                 [&](const HostFree& o) {
                   j["side"] = o.side;
                   j["pages"] = o.pages;
                 },
                 [&](const LeaseAcquire& o) { j["thread"] = o.thread; },
                 [&](const LeaseRelease& o) { j["thread"] = o.thread; },
                 [&](const RecordEvent& o) {
                   j["event"] = o.event;
                   j["stream"] = o.stream;
                 },
                 [&](const Offload& o) {
                   j["transfer"] = o.transfer;
                   j["thread"] = o.thread;
                   j["stream"] = o.stream;
                   if (o.wait_event) j["wait_event"] = *o.wait_event;
                   j["side"] = o.side;
                   write_ids(j, o.unit, o.ids);
                   j["host"] = o.host;
                 },
                 [&](const LoadBack& o) {
                   j["transfer"] = o.transfer;
                   j["thread"] = o.thread;
                   j["stream"] = o.stream;
                   if (o.wait_event) j["wait_event"] = *o.wait_event;
                   j["host"] = o.host;
                 },
                 [&](const TransferWait& o) { j["transfer"] = o.transfer; },
                 [&](const StorePages& o) {
                   j["thread"] = o.thread;
                   j["side"] = o.side;
                   j["host"] = o.host;
                   j["hashes"] = o.hashes;
                   j["page_count"] = o.page_count;
                   if (!o.layout.empty()) j["layout"] = o.layout;
                 },
                 [&](const LoadStored& o) {
                   j["thread"] = o.thread;
                   j["side"] = o.side;
                   j["host"] = o.host;
                   j["hashes"] = o.hashes;
                 },
                 [&](const auto&) { state_op_to_json(op, j); },
             },
             op);
  return j;
}

Result<Op> op_from_json(const json& j, std::string_view where) {
  JsonFields f(j, where);
  if (!j.is_object()) return f.error("an operation must be a JSON object");
  if (!j.contains("op") || !j.at("op").is_string()) return f.error("missing string field 'op'");
  const std::string name = j.at("op").get<std::string>();
  // "expect" belongs to the trace line around the op; the reader strips it, we tolerate it here.
  if (name == "build") {
    KVTWIN_TRY_STATUS(f.only({"op", "config", "expect"}));
    if (!j.contains("config")) return f.error("missing field 'config'");
    KVTWIN_TRY(PoolConfig config, pool_config_from_json(j.at("config"), std::string(where) + " config"));
    return Op(BuildPool{std::move(config)});
  }
  if (name == "alloc") {
    KVTWIN_TRY_STATUS(f.only({"op", "tokens", "expect"}));
    KVTWIN_TRY(std::uint64_t tokens, f.u64_required("tokens"));
    return Op(Alloc{tokens});
  }
  if (name == "alloc_many") {
    KVTWIN_TRY_STATUS(f.only({"op", "tokens", "expect"}));
    KVTWIN_TRY(std::vector<std::uint64_t> tokens, f.u64_array("tokens"));
    return Op(AllocMany{std::move(tokens)});
  }
  if (name == "free" || name == "free_swa") {
    KVTWIN_TRY_STATUS(f.only({"op", "tokens", "pages", "expect"}));
    IdUnit unit{};
    std::vector<std::int64_t> ids;
    KVTWIN_TRY_STATUS(read_ids(f, unit, ids));
    if (name == "free") return Op(Free{unit, std::move(ids)});
    return Op(FreeSwa{unit, std::move(ids)});
  }
  if (name == "flush") {
    KVTWIN_TRY_STATUS(f.only({"op", "expect"}));
    return Op(Flush{});
  }
  if (name == "move_pages") {
    KVTWIN_TRY_STATUS(f.only({"op", "sub_pool", "dst", "src", "expect"}));
    MovePages o;
    KVTWIN_TRY(o.sub_pool, f.string_required("sub_pool"));
    KVTWIN_TRY(o.dst, f.i64_array("dst"));
    KVTWIN_TRY(o.src, f.i64_array("src"));
    return Op(std::move(o));
  }
  if (name == "begin_read") {
    KVTWIN_TRY_STATUS(f.only({"op", "reader", "sub_pool", "pages", "expect"}));
    BeginRead o;
    KVTWIN_TRY(o.reader, u32_field(f, "reader", std::nullopt));
    KVTWIN_TRY(o.sub_pool, f.string_required("sub_pool"));
    KVTWIN_TRY(o.pages, f.i64_array("pages"));
    return Op(std::move(o));
  }
  if (name == "end_read") {
    KVTWIN_TRY_STATUS(f.only({"op", "reader", "expect"}));
    KVTWIN_TRY(std::uint32_t reader, u32_field(f, "reader", std::nullopt));
    return Op(EndRead{reader});
  }
  if (name == "batch") {
    KVTWIN_TRY_STATUS(f.only({"op", "batch", "tokens", "encoder_tokens", "expect"}));
    MakeBatch o;
    KVTWIN_TRY(o.batch, u32_field(f, "batch", std::nullopt));
    KVTWIN_TRY(o.tokens, f.i64_array("tokens"));
    if (f.has("encoder_tokens")) {
      KVTWIN_TRY(o.encoder_tokens, f.i64_array("encoder_tokens"));
    }
    return Op(std::move(o));
  }
  if (name == "rebind") {
    KVTWIN_TRY_STATUS(f.only({"op", "batch", "out_width", "expect"}));
    Rebind o;
    KVTWIN_TRY(o.batch, u32_field(f, "batch", std::nullopt));
    KVTWIN_TRY(o.out_width, f.u64("out_width", 0));
    return Op(o);
  }
  if (name == "split") {
    KVTWIN_TRY_STATUS(f.only({"op", "batch", "at", "into", "expect"}));
    Split o;
    KVTWIN_TRY(o.batch, u32_field(f, "batch", std::nullopt));
    KVTWIN_TRY(o.at, f.u64_required("at"));
    KVTWIN_TRY(std::vector<std::uint64_t> into, f.u64_array("into"));
    if (into.size() != 2 || into[0] > 0xffffffffULL || into[1] > 0xffffffffULL)
      return f.error("field 'into' must name two batch ids, [left, right]");
    o.left = static_cast<std::uint32_t>(into[0]);
    o.right = static_cast<std::uint32_t>(into[1]);
    return Op(o);
  }
  if (name == "drop_batch") {
    KVTWIN_TRY_STATUS(f.only({"op", "batch", "expect"}));
    KVTWIN_TRY(std::uint32_t batch, u32_field(f, "batch", std::nullopt));
    return Op(DropBatch{batch});
  }
  if (name == "write") {
    KVTWIN_TRY_STATUS(f.only({"op", "layer", "write_number", "batch", "loc", "physical", "tokens", "checked", "expect"}));
    Write o;
    KVTWIN_TRY(o.layer, u32_field(f, "layer", std::nullopt));
    KVTWIN_TRY(o.write_number, f.u64_required("write_number"));
    KVTWIN_TRY(o.checked, f.boolean("checked", false));
    if (f.has("batch")) {
      if (f.has("loc") || f.has("tokens") || f.has("physical"))
        return f.error("give either 'batch' or an explicit 'loc' with 'physical' and 'tokens', not both");
      KVTWIN_TRY(std::uint32_t batch, u32_field(f, "batch", std::nullopt));
      o.batch = batch;
    } else {
      KVTWIN_TRY(o.loc, f.i64_array("loc"));
      KVTWIN_TRY(o.tokens, f.i64_array("tokens"));
      KVTWIN_TRY(o.physical, f.boolean("physical", false));
    }
    return Op(std::move(o));
  }
  if (name == "read") {
    KVTWIN_TRY_STATUS(f.only({"op", "layer", "part", "ids", "expect"}));
    Read o;
    KVTWIN_TRY(o.layer, u32_field(f, "layer", std::nullopt));
    KVTWIN_TRY(o.part, f.string_required("part"));
    KVTWIN_TRY(o.ids, f.i64_array("ids"));
    return Op(std::move(o));
  }
  if (name == "translate") {
    KVTWIN_TRY_STATUS(f.only({"op", "ids", "shape", "index_dtype", "input_stride", "out", "out_stride", "out_dtype",
                              "out_width", "expect"}));
    Translate o;
    KVTWIN_TRY(o.ids, f.i64_array("ids"));
    if (f.has("shape")) {
      KVTWIN_TRY(o.shape, f.i64_array("shape"));
    } else {
      o.shape = {static_cast<std::int64_t>(o.ids.size())};
    }
    KVTWIN_TRY(o.index_dtype, index_dtype_field(f, "index_dtype"));
    KVTWIN_TRY(o.input_stride, f.i64("input_stride", 0));
    KVTWIN_TRY(std::string out, f.string("out", "fresh"));
    if (out == "fresh") {
      o.out = OutPlacement::fresh;
    } else if (out == "alias") {
      o.out = OutPlacement::alias;
    } else if (out == "strided") {
      o.out = OutPlacement::strided;
    } else {
      return f.error("field 'out' is '" + printable(out) + "'; use \"fresh\", \"alias\" or \"strided\"");
    }
    KVTWIN_TRY(o.out_stride, f.i64("out_stride", 0));
    KVTWIN_TRY(o.out_dtype, index_dtype_field(f, "out_dtype"));
    KVTWIN_TRY(o.out_width, f.u64("out_width", 0));
    return Op(std::move(o));
  }
  if (name == "swa_translate") {
    KVTWIN_TRY_STATUS(f.only({"op", "ids", "expect"}));
    KVTWIN_TRY(std::vector<std::int64_t> ids, f.i64_array("ids"));
    return Op(SwaTranslate{std::move(ids)});
  }
  if (name == "page_table") {
    KVTWIN_TRY_STATUS(f.only({"op", "req_to_token", "req", "seq_len", "prior", "expect"}));
    PageTable o;
    KVTWIN_TRY(o.req_to_token, f.i64_matrix("req_to_token"));
    KVTWIN_TRY(o.req, f.i64_array("req"));
    KVTWIN_TRY(o.seq_len, f.i64_array("seq_len"));
    KVTWIN_TRY(o.prior, f.i64_matrix("prior"));
    return Op(std::move(o));
  }
  if (name == "remap_indices") {
    KVTWIN_TRY_STATUS(f.only({"op", "kv_indptr", "kv_indices", "bs", "expect"}));
    RemapIndices o;
    KVTWIN_TRY(o.kv_indptr, f.i64_array("kv_indptr"));
    KVTWIN_TRY(o.kv_indices, f.i64_array("kv_indices"));
    KVTWIN_TRY(o.bs, f.u64_required("bs"));
    return Op(std::move(o));
  }
  if (name == "capture") {
    KVTWIN_TRY_STATUS(f.only({"op", "graph", "max_batch", "max_pages", "layer", "query_heads", "expect"}));
    Capture o;
    KVTWIN_TRY(o.graph, u32_field(f, "graph", std::nullopt));
    KVTWIN_TRY(o.max_batch, u32_field(f, "max_batch", std::nullopt));
    KVTWIN_TRY(o.max_pages, u32_field(f, "max_pages", std::nullopt));
    KVTWIN_TRY(o.layer, u32_field(f, "layer", std::nullopt));
    KVTWIN_TRY(o.query_heads, u32_field(f, "query_heads", std::nullopt));
    return Op(o);
  }
  if (name == "replay") {
    KVTWIN_TRY_STATUS(f.only({"op", "graph", "requests", "write_number", "query_seed", "expect"}));
    Replay o;
    KVTWIN_TRY(o.graph, u32_field(f, "graph", std::nullopt));
    KVTWIN_TRY(o.requests, f.i64_matrix("requests"));
    KVTWIN_TRY(o.write_number, f.u64_required("write_number"));
    KVTWIN_TRY(o.query_seed, f.u64("query_seed", 0));
    return Op(std::move(o));
  }
  if (name == "checkpoint") {
    KVTWIN_TRY_STATUS(f.only({"op", "expect"}));
    return Op(Checkpoint{});
  }
  if (name == "host_alloc") {
    KVTWIN_TRY_STATUS(f.only({"op", "thread", "pages", "expect"}));
    HostAlloc o;
    KVTWIN_TRY(o.thread, u32_field(f, "thread", std::nullopt));
    KVTWIN_TRY(o.pages, f.u64_array("pages"));
    return Op(std::move(o));
  }
  if (name == "host_free") {
    KVTWIN_TRY_STATUS(f.only({"op", "side", "pages", "expect"}));
    HostFree o;
    KVTWIN_TRY(o.side, f.string_required("side"));
    KVTWIN_TRY(o.pages, f.i64_array("pages"));
    return Op(std::move(o));
  }
  if (name == "lease_acquire" || name == "lease_release") {
    KVTWIN_TRY_STATUS(f.only({"op", "thread", "expect"}));
    KVTWIN_TRY(std::uint32_t thread, u32_field(f, "thread", std::nullopt));
    if (name == "lease_acquire") return Op(LeaseAcquire{thread});
    return Op(LeaseRelease{thread});
  }
  if (name == "record_event") {
    KVTWIN_TRY_STATUS(f.only({"op", "event", "stream", "expect"}));
    RecordEvent o;
    KVTWIN_TRY(o.event, u32_field(f, "event", std::nullopt));
    KVTWIN_TRY(o.stream, u32_field(f, "stream", std::nullopt));
    return Op(o);
  }
  if (name == "offload") {
    KVTWIN_TRY_STATUS(
        f.only({"op", "transfer", "thread", "stream", "wait_event", "side", "tokens", "pages", "host", "expect"}));
    Offload o;
    KVTWIN_TRY(o.transfer, u32_field(f, "transfer", std::nullopt));
    KVTWIN_TRY(o.thread, u32_field(f, "thread", std::nullopt));
    KVTWIN_TRY(o.stream, u32_field(f, "stream", std::nullopt));
    if (f.has("wait_event")) {
      KVTWIN_TRY(std::uint32_t event, u32_field(f, "wait_event", std::nullopt));
      o.wait_event = event;
    }
    KVTWIN_TRY(o.side, f.string_required("side"));
    KVTWIN_TRY_STATUS(read_ids(f, o.unit, o.ids));
    KVTWIN_TRY(o.host, f.i64_array("host"));
    return Op(std::move(o));
  }
  if (name == "load_back") {
    KVTWIN_TRY_STATUS(f.only({"op", "transfer", "thread", "stream", "wait_event", "host", "expect"}));
    LoadBack o;
    KVTWIN_TRY(o.transfer, u32_field(f, "transfer", std::nullopt));
    KVTWIN_TRY(o.thread, u32_field(f, "thread", std::nullopt));
    KVTWIN_TRY(o.stream, u32_field(f, "stream", std::nullopt));
    if (f.has("wait_event")) {
      KVTWIN_TRY(std::uint32_t event, u32_field(f, "wait_event", std::nullopt));
      o.wait_event = event;
    }
    KVTWIN_TRY(o.host, f.i64_matrix("host"));
    return Op(std::move(o));
  }
  if (name == "transfer_wait") {
    KVTWIN_TRY_STATUS(f.only({"op", "transfer", "expect"}));
    KVTWIN_TRY(std::uint32_t transfer, u32_field(f, "transfer", std::nullopt));
    return Op(TransferWait{transfer});
  }
  if (name == "store_pages" || name == "load_stored") {
    const bool store = name == "store_pages";
    if (store) {
      KVTWIN_TRY_STATUS(f.only({"op", "thread", "side", "host", "hashes", "page_count", "layout", "expect"}));
    } else {
      KVTWIN_TRY_STATUS(f.only({"op", "thread", "side", "host", "hashes", "expect"}));
    }
    KVTWIN_TRY(std::uint32_t thread, u32_field(f, "thread", std::nullopt));
    KVTWIN_TRY(std::string side, f.string_required("side"));
    KVTWIN_TRY(std::vector<std::int64_t> host, f.i64_array("host"));
    KVTWIN_TRY(std::vector<std::uint64_t> hashes, f.u64_array("hashes"));
    if (!store) return Op(LoadStored{thread, std::move(side), std::move(host), std::move(hashes)});
    StorePages o{thread, std::move(side), std::move(host), std::move(hashes), 0, ""};
    KVTWIN_TRY(o.page_count, f.u64_required("page_count"));
    KVTWIN_TRY(o.layout, f.string("layout", ""));
    if (!o.layout.empty() && o.layout != "page_major" && o.layout != "untagged")
      return f.error("field 'layout' is '" + printable(o.layout) +
                     "'; leave it out (this pool's layout) or use \"page_major\" or \"untagged\"");
    return Op(std::move(o));
  }
  if (auto state_op = state_op_from_json(name, f)) return std::move(*state_op);
  return f.error("unknown operation '" + printable(name) +
                 "'; known: build, alloc, alloc_many, free, free_swa, flush, move_pages, begin_read, end_read, batch, "
                 "rebind, split, drop_batch, write, read, translate, swa_translate, page_table, remap_indices, capture, "
                 "replay, checkpoint, host_alloc, host_free, lease_acquire, lease_release, record_event, offload, "
                 "load_back, transfer_wait, store_pages, load_stored, state_alloc, state_free, state_write, state_read, state_slots");
}


json result_to_json(const OpResult& r) {
  if (!r.ok()) {
    json e{{"error", std::string(error_kind_name(r.error().kind))}};
    if (!r.error().reason.empty()) e["reason"] = r.error().reason;
    e["message"] = r.error().message;
    return e;
  }
  json j = json::object();
  std::visit(Overloaded{
                 [&](const Done&) { j["ok"] = true; },
                 [&](const NoRoom&) { j["no_room"] = true; },
                 [&](const Allocated& o) {
                   j["pages"] = o.pages;
                   if (!o.moves.empty()) j["moves"] = moves_json(o.moves);
                 },
                 [&](const AllocatedMany& o) {
                   j["pages"] = o.pages;
                   // An empty list would read back as Allocated{}: say which it is.
                   if (o.pages.empty()) j["many"] = true;
                 },
                 [&](const Compaction& o) { j["moves"] = moves_json(o.moves); },
                 [&](const Ids& o) { j["ids"] = o.values; },
                 [&](const Table& o) { j["table"] = o.rows; },
                 [&](const Bytes& o) { j = bytes_json(o); },
                 [&](const Marks& o) { j["marks"] = json::array({o.left_physical, o.right_physical}); },
                 [&](const Decode& o) {
                   j["loc"] = o.loc;
                   j["table"] = o.table;
                   j["attention"] = bytes_json(o.attention);
                 },
                 [&](const HostAllocated& o) {
                   j["host_pages"] = o.logical;
                   j["host_physical"] = o.physical;
                   if (!o.moves.empty()) j["host_moves"] = moves_json(o.moves);
                 },
                 [&](const TransferStarted& o) {
                   j["transfer"] = o.transfer;
                   j["device_pages"] = o.pages;
                 },
             },
             r.value());
  return j;
}

Result<OpResult> result_from_json(const json& j, std::string_view where) {
  JsonFields f(j, where);
  if (!j.is_object()) return f.error("an expected result must be a JSON object");
  if (f.has("error")) {
    KVTWIN_TRY_STATUS(f.only({"error", "reason", "message"}));
    KVTWIN_TRY(std::string kind_name, f.string_required("error"));
    ErrorKind kind{};
    if (!parse_error_kind(kind_name, kind)) return f.error("unknown error kind '" + printable(kind_name) + "'");
    KVTWIN_TRY(std::string reason_code, f.string("reason", ""));
    if (!reason::known(kind, reason_code))
      return f.error("unknown reason '" + printable(reason_code) + "' for error kind '" + kind_name +
                     "' (docs/traces.md lists the codes)");
    KVTWIN_TRY(std::string message, f.string("message", ""));
    return OpResult(Error{kind, message, reason_code});
  }
  if (f.has("ok")) {
    KVTWIN_TRY_STATUS(f.only({"ok"}));
    return OpResult(Outcome(Done{}));
  }
  if (f.has("no_room")) {
    KVTWIN_TRY_STATUS(f.only({"no_room"}));
    return OpResult(Outcome(NoRoom{}));
  }
  if (f.has("pages")) {
    KVTWIN_TRY_STATUS(f.only({"pages", "many", "moves"}));
    KVTWIN_TRY(bool many, f.boolean("many", false));
    const json& p = j.at("pages");
    if (many || (p.is_array() && !p.empty() && p.front().is_array())) {
      KVTWIN_TRY(auto pages, f.i64_matrix("pages"));
      return OpResult(Outcome(AllocatedMany{std::move(pages)}));
    }
    KVTWIN_TRY(auto pages, f.i64_array("pages"));
    Allocated a{std::move(pages), {}};
    if (f.has("moves")) {
      KVTWIN_TRY(a.moves, moves_from(f, j.at("moves"), "moves"));
    }
    return OpResult(Outcome(std::move(a)));
  }
  if (f.has("moves")) {
    KVTWIN_TRY_STATUS(f.only({"moves"}));
    Compaction c;
    KVTWIN_TRY(c.moves, moves_from(f, j.at("moves"), "moves"));
    return OpResult(Outcome(std::move(c)));
  }
  if (f.has("host_pages")) {
    KVTWIN_TRY_STATUS(f.only({"host_pages", "host_physical", "host_moves"}));
    HostAllocated h;
    KVTWIN_TRY(h.logical, f.i64_matrix("host_pages"));
    KVTWIN_TRY(h.physical, f.i64_matrix("host_physical"));
    if (f.has("host_moves")) {
      KVTWIN_TRY(h.moves, moves_from(f, j.at("host_moves"), "host_moves"));
    }
    return OpResult(Outcome(std::move(h)));
  }
  if (f.has("transfer")) {
    KVTWIN_TRY_STATUS(f.only({"transfer", "device_pages"}));
    TransferStarted t;
    KVTWIN_TRY(t.transfer, u32_field(f, "transfer", std::nullopt));
    KVTWIN_TRY(t.pages, f.i64_array("device_pages"));
    return OpResult(Outcome(std::move(t)));
  }
  if (f.has("loc")) {
    KVTWIN_TRY_STATUS(f.only({"loc", "table", "attention"}));
    Decode d;
    KVTWIN_TRY(d.loc, f.i64_array("loc"));
    KVTWIN_TRY(d.table, f.i64_matrix("table"));
    if (!f.has("attention")) return f.error("missing field 'attention'");
    KVTWIN_TRY(d.attention, bytes_from(j.at("attention"), std::string(where) + " attention"));
    return OpResult(Outcome(std::move(d)));
  }
  if (f.has("ids")) {
    KVTWIN_TRY_STATUS(f.only({"ids"}));
    KVTWIN_TRY(auto ids, f.i64_array("ids"));
    return OpResult(Outcome(Ids{std::move(ids)}));
  }
  if (f.has("table")) {
    KVTWIN_TRY_STATUS(f.only({"table"}));
    KVTWIN_TRY(auto rows, f.i64_matrix("table"));
    return OpResult(Outcome(Table{std::move(rows)}));
  }
  if (f.has("digest")) {
    KVTWIN_TRY(Bytes b, bytes_from(j, where));
    return OpResult(Outcome(std::move(b)));
  }
  if (f.has("marks")) {
    KVTWIN_TRY_STATUS(f.only({"marks"}));
    const json& m = j.at("marks");
    if (!m.is_array() || m.size() != 2 || !m[0].is_boolean() || !m[1].is_boolean())
      return f.error("field 'marks' must be [left_physical, right_physical]");
    return OpResult(Outcome(Marks{m[0].get<bool>(), m[1].get<bool>()}));
  }
  return f.error("unrecognized result; expected one of ok, no_room, pages, moves, ids, table, bytes/digest, marks, "
                 "loc/table/attention, host_pages/host_physical, transfer/device_pages, error");
}

bool same_result(const OpResult& a, const OpResult& b) {
  if (a.ok() != b.ok()) return false;
  if (!a.ok()) return a.error().kind == b.error().kind && a.error().reason == b.error().reason;
  return a.value() == b.value();
}

bool meets_expectation(const OpResult& actual, const OpResult& expected) {
  if (!expected.ok() && expected.error().reason.empty())
    return !actual.ok() && actual.error().kind == expected.error().kind;
  return same_result(actual, expected);
}

std::string to_string(const Op& op) { return op_to_json(op).dump(); }
std::string to_string(const OpResult& r) { return result_to_json(r).dump(); }

}  // namespace kvtwin
