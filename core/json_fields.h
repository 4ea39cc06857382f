// Field-by-field reading of JSON objects with errors that name the field and what was wrong.
// Used by every reader of user input (spec files, trace lines, operations): a missing or
// mistyped field, an unknown key, or a number too big for 64 bits is an ErrorKind::malformed
// whose message begins with `where` (a file and line, for instance).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace kvtwin {

class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string_view where) : j_(object), where_(where) {}

  // Every key of the object must be one of `keys`.
  Status only(std::initializer_list<std::string_view> keys) const;
  Error error(const std::string& message) const;
  bool has(const char* key) const { return j_.is_object() && j_.contains(key); }

  Result<std::uint64_t> u64(const char* key, std::uint64_t fallback) const;
  Result<std::uint64_t> u64_required(const char* key) const;
  Result<std::int64_t> i64(const char* key, std::int64_t fallback) const;
  Result<std::int64_t> i64_required(const char* key) const;
  Result<bool> boolean(const char* key, bool fallback) const;
  Result<std::string> string(const char* key, std::string fallback) const;
  Result<std::string> string_required(const char* key) const;
  Result<std::vector<std::int64_t>> i64_array(const char* key) const;           // required
  Result<std::vector<std::uint64_t>> u64_array(const char* key) const;          // required
  Result<std::vector<std::vector<std::int64_t>>> i64_matrix(const char* key) const;  // required

 private:
  Result<std::int64_t> as_i64(const nlohmann::json& v, const std::string& field) const;
  Result<std::uint64_t> as_u64(const nlohmann::json& v, const std::string& field) const;

  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace kvtwin
