// The built-in catalogue of real public model shapes, and custom shapes from JSON files.
//
// Each entry cites the public config its numbers come from. Only what the KV cache needs is
// recorded: per-layer attention kind, KV heads, head dims, the sliding window and the latent
// shape. A custom shape comes from a JSON file in the same vocabulary (docs/spec-files.md),
// validated field by field: a typo in a key is an error, not a silent default.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/model.h"
#include "core/result.h"

namespace kvtwin {

const std::vector<ModelShape>& model_catalogue();

// Case-insensitive lookup; an unknown name is an error listing the catalogue.
Result<ModelShape> find_model(std::string_view name);

// JSON in the spec-file vocabulary, both ways. `where` prefixes error messages (a file name).
Result<ModelShape> shape_from_json(const nlohmann::json& j, std::string_view where);
nlohmann::json shape_to_json(const ModelShape& shape);
// A hybrid model's "state" object (SPEC 11): {"layers": L, "conv": [{"shape": [...], "dtype":
// "bf16"}, ...], "temporal": {"shape": [...], "dtype": "fp32"}} (conv dtypes default to bf16,
// the temporal one to fp32).
Result<StateShape> state_shape_from_json(const nlohmann::json& j, std::string_view where);
nlohmann::json state_shape_to_json(const StateShape& state);

// Reads and validates a spec file.
// The longest model name a spec may give (it appears in every message about the model).
inline constexpr std::size_t kMaxModelNameChars = 256;
// The largest spec file read (docs/spec-files.md); a larger one is refused unread.
inline constexpr std::size_t kMaxSpecFileBytes = std::size_t{1} << 20;
Result<ModelShape> load_shape_file(const std::string& path);
// The same for a spec file's text; `name` names it in errors.
Result<ModelShape> parse_shape_text(std::string_view text, const std::string& name);

}  // namespace kvtwin
