// Names of error kinds, as they appear in traces and reports.
#include "core/result.h"

#include <array>

namespace kvtwin {
namespace {
constexpr std::array<std::pair<ErrorKind, std::string_view>, 14> kErrorKindNames{{
    {ErrorKind::invalid_argument, "invalid_argument"},
    {ErrorKind::layout, "layout"},
    {ErrorKind::sizing, "sizing"},
    {ErrorKind::overflow, "overflow"},
    {ErrorKind::out_of_range, "out_of_range"},
    {ErrorKind::double_free, "double_free"},
    {ErrorKind::unmarked_loc, "unmarked_loc"},
    {ErrorKind::duplicate_loc, "duplicate_loc"},
    {ErrorKind::reader_conflict, "reader_conflict"},
    {ErrorKind::malformed, "malformed"},
    {ErrorKind::unsupported, "unsupported"},
    {ErrorKind::io, "io"},
    {ErrorKind::internal, "internal"},
    {ErrorKind::environment, "environment"},
}};
}  // namespace

std::string_view error_kind_name(ErrorKind kind) {
  for (const auto& [k, name] : kErrorKindNames)
    if (k == kind) return name;
  return "internal";
}

bool parse_error_kind(std::string_view name, ErrorKind& kind) {
  for (const auto& [k, n] : kErrorKindNames) {
    if (n == name) {
      kind = k;
      return true;
    }
  }
  return false;
}

}  // namespace kvtwin
