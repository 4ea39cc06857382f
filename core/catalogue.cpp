// Catalogue entries and the spec-file reader.
#include "core/catalogue.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/printable.h"
#include "core/strict_json.h"

namespace kvtwin {
namespace {

std::vector<LayerKind> repeat(LayerKind kind, std::size_t n) { return std::vector<LayerKind>(n, kind); }

ModelShape mha(std::string name, std::string source, std::vector<LayerKind> layers, std::uint32_t kv_heads,
               std::uint32_t k_head_dim, std::uint32_t v_head_dim, std::uint32_t window = 0,
               std::uint32_t swa_kv_heads = 0) {
  ModelShape s;
  s.name = std::move(name);
  s.source = std::move(source);
  s.attention = AttentionKind::mha;
  s.layers = std::move(layers);
  s.num_kv_heads = kv_heads;
  s.swa_num_kv_heads = swa_kv_heads;
  s.k_head_dim = k_head_dim;
  s.v_head_dim = v_head_dim;
  s.sliding_window_tokens = window;
  s.dtype = DType::bf16;
  return s;
}

ModelShape mla(std::string name, std::string source, std::size_t layers, std::uint32_t kv_lora_rank,
               std::uint32_t qk_rope_head_dim) {
  ModelShape s;
  s.name = std::move(name);
  s.source = std::move(source);
  s.attention = AttentionKind::mla;
  s.layers = repeat(LayerKind::mla, layers);
  s.kv_lora_rank = kv_lora_rank;
  s.qk_rope_head_dim = qk_rope_head_dim;
  s.dtype = DType::bf16;
  return s;
}

// gpt-oss: layer_types alternate, starting with a sliding-window layer.
std::vector<LayerKind> alternating_swa_first(std::size_t n) {
  std::vector<LayerKind> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(i % 2 == 0 ? LayerKind::swa : LayerKind::full);
  return out;
}

// MiMo-V2-Flash: hybrid_layer_pattern has full attention at layers 0, 5, 11, 17, 23, 29, 35, 41, 47.
std::vector<LayerKind> mimo_v2_flash_layers() {
  std::vector<LayerKind> out = repeat(LayerKind::swa, 48);
  for (std::size_t i : {0, 5, 11, 17, 23, 29, 35, 41, 47}) out[i] = LayerKind::full;
  return out;
}

// SPEC 11: a hybrid model's state: `layers` state layers, each with the conv states `conv`
// (bf16) and one temporal state (fp32).
StateShape state(std::uint32_t layers, std::vector<std::vector<std::uint32_t>> conv, std::vector<std::uint32_t> temporal) {
  StateShape s;
  s.layers = layers;
  for (auto& shape : conv) s.conv.push_back(StateTensor{std::move(shape), DType::bf16});
  s.temporal = StateTensor{std::move(temporal), DType::fp32};
  return s;
}

ModelShape with_state(ModelShape shape, StateShape s) {
  shape.state = std::move(s);
  return shape;
}

// kvtwin's own tri-pool model (no public checkpoint): a small hybrid with state, sliding-window
// and full layers, so that the chain [state up | swa float | full down] has a catalogue entry.
std::vector<LayerKind> tripool_layers() {
  std::vector<LayerKind> out;
  for (int i = 0; i < 8; ++i) out.push_back(i % 4 == 3 ? LayerKind::full : LayerKind::swa);
  return out;
}

std::vector<ModelShape> build_catalogue() {
  return {
      // huggingface.co/meta-llama/Llama-3.1-8B config.json: num_hidden_layers 32,
      // num_key_value_heads 8, hidden_size 4096 / num_attention_heads 32 = head_dim 128, bf16.
      mha("llama-3.1-8b", "meta-llama/Llama-3.1-8B config.json", repeat(LayerKind::full, 32), 8, 128, 128),
      // huggingface.co/meta-llama/Llama-3.1-70B config.json: 80 layers, 8 KV heads,
      // 8192 / 64 = head_dim 128.
      mha("llama-3.1-70b", "meta-llama/Llama-3.1-70B config.json", repeat(LayerKind::full, 80), 8, 128, 128),
      // huggingface.co/Qwen/Qwen3-8B config.json: 36 layers, 8 KV heads, head_dim 128.
      mha("qwen3-8b", "Qwen/Qwen3-8B config.json", repeat(LayerKind::full, 36), 8, 128, 128),
      // huggingface.co/openai/gpt-oss-20b config.json: num_hidden_layers 24, layer_types alternating
      // sliding_attention / full_attention, sliding_window 128, num_key_value_heads 8, head_dim 64.
      mha("gpt-oss-20b", "openai/gpt-oss-20b config.json", alternating_swa_first(24), 8, 64, 64, 128),
      // huggingface.co/openai/gpt-oss-120b config.json: 36 layers, same attention as gpt-oss-20b.
      mha("gpt-oss-120b", "openai/gpt-oss-120b config.json", alternating_swa_first(36), 8, 64, 64, 128),
      // huggingface.co/XiaomiMiMo/MiMo-V2-Flash config.json: 48 layers, hybrid_layer_pattern with
      // full attention at 0, 5, 11, 17, 23, 29, 35, 41, 47; head_dim 192 but v_head_dim 128 (K and V
      // rows differ); num_key_value_heads 4 (full), swa_num_key_value_heads 8; sliding_window 128.
      mha("mimo-v2-flash", "XiaomiMiMo/MiMo-V2-Flash config.json", mimo_v2_flash_layers(), 4, 192, 128, 128, 8),
      // huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json: num_hidden_layers 27,
      // kv_lora_rank 512, qk_rope_head_dim 64.
      mla("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite config.json", 27, 512, 64),
      // huggingface.co/deepseek-ai/DeepSeek-V3 config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64.
      mla("deepseek-v3", "deepseek-ai/DeepSeek-V3 config.json", 61, 512, 64),
      // huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct config.json: num_hidden_layers 27, of
      // which linear_attn_config.full_attn_layers lists 7 MLA layers (kv_lora_rank 512,
      // qk_rope_head_dim 64) and kda_layers the other 20. A KDA layer's state (SPEC 11): three short
      // convolutions (q, k, v) of num_heads 32 * head_dim 128 = 4096 channels over
      // short_conv_kernel_size 4 - 1 = 3 steps, bf16, and a recurrent state of
      // (num_heads 32, head_dim 128, head_dim 128) fp32:
      // E_state = 20 * (3 * 4096 * 3 * 2 + 32 * 128 * 128 * 4) = 20 * (73,728 + 2,097,152) = 43,417,600 bytes.
      with_state(mla("kimi-linear-48b-a3b", "moonshotai/Kimi-Linear-48B-A3B-Instruct config.json", 7, 512, 64),
                 state(20, {{4096, 3}, {4096, 3}, {4096, 3}}, {32, 128, 128})),
      // huggingface.co/Qwen/Qwen3.5-9B config.json (text_config): num_hidden_layers 32, layer_types
      // three linear_attention then one full_attention (full_attention_interval 4): 24 gated-delta-net
      // layers and 8 full-attention layers with num_key_value_heads 4 and head_dim 256. A GDN layer's
      // state: one causal conv over key_dim * 2 + value_dim channels (linear_num_key_heads 16 *
      // linear_key_head_dim 128 * 2 + linear_num_value_heads 32 * linear_value_head_dim 128 = 8192)
      // and linear_conv_kernel_dim 4 - 1 = 3 steps, bf16; a recurrent state of (linear_num_value_heads
      // 32, linear_key_head_dim 128, linear_value_head_dim 128), fp32 (mamba_ssm_dtype float32):
      // E_state = 24 * (8192 * 3 * 2 + 32 * 128 * 128 * 4) = 24 * (49,152 + 2,097,152) = 51,511,296 bytes.
      with_state(mha("qwen3.5-9b", "Qwen/Qwen3.5-9B config.json", repeat(LayerKind::full, 8), 4, 256, 256),
                 state(24, {{8192, 3}}, {32, 128, 128})),
      // huggingface.co/tiiuae/Falcon-H1-7B-Base config.json: num_hidden_layers 44, every layer both
      // attention (num_key_value_heads 2, head_dim 128) and Mamba2 in parallel. A Mamba2 layer's
      // state: a conv over mamba_d_ssm 3072 + 2 * mamba_n_groups 1 * mamba_d_state 256 = 3584
      // channels and mamba_d_conv 4 - 1 = 3 steps, bf16; an SSM state of (mamba_n_heads 24,
      // mamba_d_head 128, mamba_d_state 256), fp32:
      // E_state = 44 * (3584 * 3 * 2 + 24 * 128 * 256 * 4) = 44 * (21,504 + 3,145,728) = 139,358,208 bytes.
      with_state(mha("falcon-h1-7b", "tiiuae/Falcon-H1-7B-Base config.json", repeat(LayerKind::full, 44), 2, 128, 128),
                 state(44, {{3584, 3}}, {24, 128, 256})),
      // kvtwin's own tri-pool model (not a public checkpoint): 16 state layers (a conv of 2048
      // channels over 3 steps, bf16; a temporal state of (16, 64, 64), fp32: E_state =
      // 16 * (12,288 + 262,144) = 4,390,912 bytes), 6 sliding-window layers (window 512) and 2 full
      // layers, 4 KV heads of 128: [state up | swa float | full down].
      with_state(mha("kvtwin-tripool-8l", "kvtwin's own tri-pool model (core/catalogue.cpp)", tripool_layers(), 4, 128,
                     128, 512),
                 state(16, {{2048, 3}}, {16, 64, 64})),
  };
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

Error spec_error(std::string_view where, const std::string& message) {
  return make_error(ErrorKind::malformed, std::string(where) + ": " + message);
}

// Reads an unsigned 32-bit field; absent -> fallback (or an error when required).
Result<std::uint32_t> read_u32(const nlohmann::json& j, const char* key, std::string_view where, bool required,
                               std::uint32_t fallback) {
  if (!j.contains(key)) {
    if (required) return spec_error(where, std::string("missing field '") + key + "'");
    return fallback;
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer())
    return spec_error(where, std::string("field '") + key + "' must be a whole number, got " + printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > 0xffffffffULL : v.get<std::int64_t>() < 0 ||
                                                                             v.get<std::int64_t>() > 0xffffffffLL)
    return spec_error(where, std::string("field '") + key + "' = " + printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) + " is out of range (0 .. 2^32-1)");
  return static_cast<std::uint32_t>(v.get<std::uint64_t>());
}

// One state tensor: {"shape": [...], "dtype": "..."}; the dtype defaults to `fallback`.
Result<StateTensor> state_tensor_from_json(const nlohmann::json& j, const std::string& where, DType fallback) {
  if (!j.is_object()) return spec_error(where, "a state tensor is an object {\"shape\": [...], \"dtype\": ...}");
  for (const auto& [key, value] : j.items()) {
    (void)value;
    if (key != "shape" && key != "dtype")
      return spec_error(where, "unknown field '" + printable(key) + "' of a state tensor; known fields: dtype, shape");
  }
  StateTensor t;
  t.dtype = fallback;
  if (!j.contains("shape") || !j.at("shape").is_array())
    return spec_error(where, "missing field 'shape' (an array of whole numbers)");
  if (j.at("shape").size() > 4) return spec_error(where, "field 'shape' has more than 4 dimensions");
  for (const nlohmann::json& d : j.at("shape")) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() == 0 || d.get<std::uint64_t>() > 0xffffffffULL)
      return spec_error(where, "field 'shape' must hold whole numbers 1 .. 2^32-1");
    t.shape.push_back(static_cast<std::uint32_t>(d.get<std::uint64_t>()));
  }
  if (j.contains("dtype")) {
    if (!j.at("dtype").is_string()) return spec_error(where, "field 'dtype' must be a string");
    auto d = parse_dtype(j.at("dtype").get<std::string>());
    if (!d.ok()) return spec_error(where, d.error().message);
    t.dtype = *d;
  }
  return t;
}

nlohmann::json state_tensor_to_json(const StateTensor& t) {
  nlohmann::json j;
  j["shape"] = t.shape;
  j["dtype"] = std::string(dtype_name(t.dtype));
  return j;
}

}  // namespace

Result<StateShape> state_shape_from_json(const nlohmann::json& j, std::string_view where_text) {
  const std::string where = std::string(where_text) + " state";
  if (!j.is_object()) return spec_error(where, "'state' must be an object {\"layers\", \"conv\", \"temporal\"}");
  for (const auto& [key, value] : j.items()) {
    (void)value;
    if (key != "layers" && key != "conv" && key != "temporal")
      return spec_error(where, "unknown field '" + printable(key) + "'; known fields: conv, layers, temporal");
  }
  StateShape s;
  KVTWIN_TRY(s.layers, read_u32(j, "layers", where, true, 0));
  if (j.contains("conv")) {
    const nlohmann::json& conv = j.at("conv");
    if (!conv.is_array() || conv.size() > 8) return spec_error(where, "field 'conv' must be an array of at most 8 state tensors");
    for (std::size_t i = 0; i < conv.size(); ++i) {
      KVTWIN_TRY(StateTensor t, state_tensor_from_json(conv[i], where + " conv[" + std::to_string(i) + "]", DType::bf16));
      s.conv.push_back(std::move(t));
    }
  }
  if (!j.contains("temporal")) return spec_error(where, "missing field 'temporal' (the SSM / recurrent state tensor)");
  KVTWIN_TRY(s.temporal, state_tensor_from_json(j.at("temporal"), where + " temporal", DType::fp32));
  return s;
}

nlohmann::json state_shape_to_json(const StateShape& s) {
  nlohmann::json j;
  j["layers"] = s.layers;
  nlohmann::json conv = nlohmann::json::array();
  for (const StateTensor& t : s.conv) conv.push_back(state_tensor_to_json(t));
  j["conv"] = conv;
  j["temporal"] = state_tensor_to_json(s.temporal);
  return j;
}

const std::vector<ModelShape>& model_catalogue() {
  static const std::vector<ModelShape> catalogue = build_catalogue();
  return catalogue;
}

Result<ModelShape> find_model(std::string_view name) {
  const std::string wanted = lower(name);
  for (const ModelShape& s : model_catalogue())
    if (s.name == wanted) return s;
  std::string known;
  for (const ModelShape& s : model_catalogue()) known += (known.empty() ? "" : ", ") + s.name;
  return make_error(ErrorKind::invalid_argument, "unknown model '" + printable(name) + "'; known models: " + known +
                                                     " (or give a shape with --spec FILE)");
}

Result<ModelShape> shape_from_json(const nlohmann::json& j, std::string_view where) {
  if (!j.is_object()) return spec_error(where, "a model spec must be a JSON object");
  static const std::set<std::string> known_keys = {
      "name",       "source",           "attention",    "num_layers",   "layer_types",      "num_kv_heads",
      "head_dim",   "v_head_dim",       "sliding_window", "swa_num_kv_heads", "kv_lora_rank", "qk_rope_head_dim",
      "dtype",      "state"};
  for (const auto& [key, value] : j.items()) {
    (void)value;
    if (!known_keys.count(key)) {
      std::string list;
      for (const std::string& k : known_keys) list += (list.empty() ? "" : ", ") + k;
      return spec_error(where, "unknown field '" + printable(key) + "'; known fields: " + list);
    }
  }
  ModelShape s;
  if (!j.contains("name") || !j.at("name").is_string()) return spec_error(where, "missing string field 'name'");
  s.name = j.at("name").get<std::string>();
  if (s.name.empty() || s.name.size() > kMaxModelNameChars)
    return spec_error(where, "field 'name' must be 1 to " + std::to_string(kMaxModelNameChars) + " characters, got " +
                                 std::to_string(s.name.size()));
  // The name and source appear in every message and report about the model: printable text only.
  if (printable(s.name, kMaxModelNameChars) != s.name)
    return spec_error(where, "field 'name' = '" + printable(s.name) + "' holds control characters; give printable text");
  if (j.contains("source")) {
    if (!j.at("source").is_string()) return spec_error(where, "field 'source' must be a string");
    s.source = j.at("source").get<std::string>();
    if (printable(s.source, s.source.size()) != s.source)
      return spec_error(where, "field 'source' = '" + printable(s.source) + "' holds control characters; give printable text");
  } else {
    s.source = std::string(where);
  }
  std::string attention = "mha";
  if (j.contains("attention")) {
    if (!j.at("attention").is_string()) return spec_error(where, "field 'attention' must be \"mha\" or \"mla\"");
    attention = j.at("attention").get<std::string>();
  }
  if (attention != "mha" && attention != "mla")
    return spec_error(where, "field 'attention' is '" + printable(attention) + "'; use \"mha\" or \"mla\"");
  s.attention = attention == "mla" ? AttentionKind::mla : AttentionKind::mha;
  auto layers = read_u32(j, "num_layers", where, !j.contains("layer_types"), 0);
  if (!layers.ok()) return layers.error();
  // Bound the layer count before anything is sized by it.
  if (*layers > kMaxLayers)
    return spec_error(where, "num_layers = " + std::to_string(*layers) + " is more than the " +
                                 std::to_string(kMaxLayers) + " layers kvtwin supports");
  if (j.contains("layer_types")) {
    const nlohmann::json& lt = j.at("layer_types");
    if (!lt.is_array()) return spec_error(where, "field 'layer_types' must be an array of strings");
    if (lt.size() > kMaxLayers)
      return spec_error(where, "layer_types lists " + std::to_string(lt.size()) + " layers, more than the " +
                                   std::to_string(kMaxLayers) + " kvtwin supports");
    for (std::size_t i = 0; i < lt.size(); ++i) {
      if (!lt[i].is_string())
        return spec_error(where, "layer_types[" + std::to_string(i) + "] must be a string (full, swa, cross, mla)");
      auto kind = parse_layer_kind(lt[i].get<std::string>());
      if (!kind.ok()) return spec_error(where, "layer_types[" + std::to_string(i) + "]: " + kind.error().message);
      s.layers.push_back(*kind);
    }
    if (j.contains("num_layers") && *layers != s.layers.size())
      return spec_error(where, "num_layers is " + std::to_string(*layers) + " but layer_types lists " +
                                   std::to_string(s.layers.size()) + " layers; make them agree");
  } else {
    s.layers = std::vector<LayerKind>(*layers, s.attention == AttentionKind::mla ? LayerKind::mla : LayerKind::full);
  }
  const bool is_mha = s.attention == AttentionKind::mha;
  KVTWIN_TRY(s.num_kv_heads, read_u32(j, "num_kv_heads", where, is_mha, 0));
  KVTWIN_TRY(s.swa_num_kv_heads, read_u32(j, "swa_num_kv_heads", where, false, 0));
  KVTWIN_TRY(s.k_head_dim, read_u32(j, "head_dim", where, is_mha, 0));
  KVTWIN_TRY(s.v_head_dim, read_u32(j, "v_head_dim", where, false, s.k_head_dim));
  KVTWIN_TRY(s.sliding_window_tokens, read_u32(j, "sliding_window", where, false, 0));
  KVTWIN_TRY(s.kv_lora_rank, read_u32(j, "kv_lora_rank", where, !is_mha, 0));
  KVTWIN_TRY(s.qk_rope_head_dim, read_u32(j, "qk_rope_head_dim", where, false, 0));
  if (j.contains("dtype")) {
    if (!j.at("dtype").is_string()) return spec_error(where, "field 'dtype' must be a string");
    auto d = parse_dtype(j.at("dtype").get<std::string>());
    if (!d.ok()) return spec_error(where, d.error().message);
    s.dtype = *d;
  }
  if (j.contains("state")) {
    KVTWIN_TRY(s.state, state_shape_from_json(j.at("state"), where));
  }
  auto valid = validate_shape(s);
  if (!valid.ok()) return valid.error().with_context(std::string(where) + ": ");
  return s;
}

nlohmann::json shape_to_json(const ModelShape& s) {
  nlohmann::json j;
  j["name"] = s.name;
  j["source"] = s.source;
  j["attention"] = s.attention == AttentionKind::mla ? "mla" : "mha";
  j["num_layers"] = s.layers.size();
  nlohmann::json types = nlohmann::json::array();
  for (LayerKind k : s.layers) types.push_back(std::string(layer_kind_name(k)));
  j["layer_types"] = types;
  if (s.attention == AttentionKind::mha) {
    j["num_kv_heads"] = s.num_kv_heads;
    if (s.swa_num_kv_heads != 0) j["swa_num_kv_heads"] = s.swa_num_kv_heads;
    j["head_dim"] = s.k_head_dim;
    j["v_head_dim"] = s.v_head_dim;
    if (s.sliding_window_tokens != 0) j["sliding_window"] = s.sliding_window_tokens;
  } else {
    j["kv_lora_rank"] = s.kv_lora_rank;
    j["qk_rope_head_dim"] = s.qk_rope_head_dim;
  }
  j["dtype"] = std::string(dtype_name(s.dtype));
  if (s.state) j["state"] = state_shape_to_json(*s.state);
  return j;
}

Result<ModelShape> load_shape_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error(ErrorKind::io, "spec file '" + printable(path, 400) + "' is a directory; give the path of a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorKind::io, "cannot read spec file '" + printable(path, 400) + "'; check the path and permissions");
  // A spec file is a small JSON object: read at most one byte past the cap, so that /dev/zero or a
  // multi-gigabyte file given by mistake is refused instead of read into memory.
  std::string text(kMaxSpecFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return make_error(ErrorKind::io, "cannot read spec file '" + printable(path, 400) + "'; check the path and permissions");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxSpecFileBytes)
    return make_error(ErrorKind::malformed, printable(path, 400) + ": a spec file is at most " +
                                                std::to_string(kMaxSpecFileBytes) +
                                                " bytes (one small JSON object, docs/spec-files.md); this one is larger");
  return parse_shape_text(text, path);
}

Result<ModelShape> parse_shape_text(std::string_view text, const std::string& name) {
  if (text.size() > kMaxSpecFileBytes)
    return make_error(ErrorKind::malformed, printable(name, 400) + ": a spec file is at most " +
                                                std::to_string(kMaxSpecFileBytes) + " bytes; this one is larger");
  Result<nlohmann::json> j = parse_json_strict(text, printable(name, 400), JsonText::document);
  if (!j.ok())
    return make_error(ErrorKind::malformed, j.error().message + "; a spec file is one JSON object (docs/spec-files.md)");
  return shape_from_json(*j, name);
}

}  // namespace kvtwin
