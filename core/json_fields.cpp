// JsonFields: checked reads of JSON fields.
#include "core/json_fields.h"

#include <cmath>

#include "core/printable.h"

namespace kvtwin {
namespace {

// A value as a message shows it: compact, escaped, and cut to a readable length.
std::string shown(const nlohmann::json& v) {
  return printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

Error JsonFields::error(const std::string& message) const {
  return make_error(ErrorKind::malformed, where_.empty() ? message : where_ + ": " + message);
}

Status JsonFields::only(std::initializer_list<std::string_view> keys) const {
  if (!j_.is_object()) return error("expected a JSON object, got " + std::string(j_.type_name()));
  for (const auto& [key, value] : j_.items()) {
    (void)value;
    bool known = false;
    for (std::string_view k : keys) known |= (k == key);
    if (!known) {
      std::string list;
      for (std::string_view k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
      return error("unknown field '" + printable(key) + "'; known fields: " + list);
    }
  }
  return ok_status();
}

Result<std::int64_t> JsonFields::as_i64(const nlohmann::json& v, const std::string& field) const {
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      return error("field '" + field + "' = " + shown(v) + " is too big for a signed 64-bit integer");
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::fabs(v.get<double>()) >= 9.2e18)
    return error("field '" + field + "' = " + shown(v) + " is a number too big for 64 bits");
  return error("field '" + field + "' must be an integer, got " + (v.is_string() ? shown(v) : std::string(v.type_name()) + " " + shown(v)));
}

Result<std::uint64_t> JsonFields::as_u64(const nlohmann::json& v, const std::string& field) const {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer())
    return error("field '" + field + "' = " + shown(v) + " must not be negative");
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::fabs(v.get<double>()) >= 1.8e19)
    return error("field '" + field + "' = " + shown(v) + " is a number too big for 64 bits");
  return error("field '" + field + "' must be a non-negative integer, got " + std::string(v.type_name()) + " " + shown(v));
}

Result<std::uint64_t> JsonFields::u64(const char* key, std::uint64_t fallback) const {
  if (!has(key)) return fallback;
  return as_u64(j_.at(key), key);
}

Result<std::uint64_t> JsonFields::u64_required(const char* key) const {
  if (!has(key)) return error(std::string("missing field '") + key + "'");
  return as_u64(j_.at(key), key);
}

Result<std::int64_t> JsonFields::i64(const char* key, std::int64_t fallback) const {
  if (!has(key)) return fallback;
  return as_i64(j_.at(key), key);
}

Result<std::int64_t> JsonFields::i64_required(const char* key) const {
  if (!has(key)) return error(std::string("missing field '") + key + "'");
  return as_i64(j_.at(key), key);
}

Result<bool> JsonFields::boolean(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = j_.at(key);
  if (!v.is_boolean()) return error(std::string("field '") + key + "' must be true or false, got " + shown(v));
  return v.get<bool>();
}

Result<std::string> JsonFields::string(const char* key, std::string fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = j_.at(key);
  if (!v.is_string()) return error(std::string("field '") + key + "' must be a string, got " + shown(v));
  return v.get<std::string>();
}

Result<std::string> JsonFields::string_required(const char* key) const {
  if (!has(key)) return error(std::string("missing field '") + key + "'");
  return string(key, "");
}

Result<std::vector<std::int64_t>> JsonFields::i64_array(const char* key) const {
  if (!has(key)) return error(std::string("missing field '") + key + "'");
  const nlohmann::json& v = j_.at(key);
  if (!v.is_array()) return error(std::string("field '") + key + "' must be an array of integers");
  std::vector<std::int64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    KVTWIN_TRY(std::int64_t x, as_i64(v[i], std::string(key) + "[" + std::to_string(i) + "]"));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<std::uint64_t>> JsonFields::u64_array(const char* key) const {
  if (!has(key)) return error(std::string("missing field '") + key + "'");
  const nlohmann::json& v = j_.at(key);
  if (!v.is_array()) return error(std::string("field '") + key + "' must be an array of non-negative integers");
  std::vector<std::uint64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    KVTWIN_TRY(std::uint64_t x, as_u64(v[i], std::string(key) + "[" + std::to_string(i) + "]"));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<std::vector<std::int64_t>>> JsonFields::i64_matrix(const char* key) const {
  if (!has(key)) return error(std::string("missing field '") + key + "'");
  const nlohmann::json& v = j_.at(key);
  if (!v.is_array()) return error(std::string("field '") + key + "' must be an array of arrays of integers");
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t r = 0; r < v.size(); ++r) {
    if (!v[r].is_array())
      return error(std::string("field '") + key + "[" + std::to_string(r) + "]' must be an array of integers");
    std::vector<std::int64_t> row;
    for (std::size_t c = 0; c < v[r].size(); ++c) {
      KVTWIN_TRY(std::int64_t x,
                 as_i64(v[r][c], std::string(key) + "[" + std::to_string(r) + "][" + std::to_string(c) + "]"));
      row.push_back(x);
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace kvtwin
