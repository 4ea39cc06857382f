// Fault switches by name (faults.h).
#include "gpu/faults.h"

#include <array>
#include <utility>

namespace kvtwin::gpu {
namespace {

using Member = bool Faults::*;

const std::array<std::pair<std::string_view, Member>, 15>& table() {
  static const std::array<std::pair<std::string_view, Member>, 15> kTable{{
      {"skip_rebind", &Faults::skip_rebind},
      {"no_mark_check", &Faults::no_mark_check},
      {"split_drops_mark", &Faults::split_drops_mark},
      {"cross_gets_batch_loc", &Faults::cross_gets_batch_loc},
      {"stale_loc_tail", &Faults::stale_loc_tail},
      {"stale_table_lengths", &Faults::stale_table_lengths},
      {"remap_fresh_buffer", &Faults::remap_fresh_buffer},
      {"stride_from_shape", &Faults::stride_from_shape},
      {"negative_wraps", &Faults::negative_wraps},
      {"tombstone_live", &Faults::tombstone_live},
      {"pairing_out_of_order", &Faults::pairing_out_of_order},
      {"move_under_reader", &Faults::move_under_reader},
      {"alloc_many_partial", &Faults::alloc_many_partial},
      {"row_misaligned_accepted", &Faults::row_misaligned_accepted},
      {"int32_offsets", &Faults::int32_offsets},
  }};
  return kTable;
}

}  // namespace

bool Faults::any() const {
  for (const auto& [name, member] : table())
    if (this->*member) return true;
  return false;
}

const std::vector<std::string_view>& fault_names() {
  static const std::vector<std::string_view> kNames = [] {
    std::vector<std::string_view> names;
    for (const auto& [name, member] : table()) names.push_back(name);
    return names;
  }();
  return kNames;
}

Status set_fault(Faults& faults, std::string_view name) {
  for (const auto& [known, member] : table()) {
    if (known == name) {
      faults.*member = true;
      return ok_status();
    }
  }
  std::string known;
  for (std::string_view n : fault_names()) known += (known.empty() ? "" : ", ") + std::string(n);
  return make_error(ErrorKind::invalid_argument,
                    "unknown GPU fault switch '" + std::string(name) + "'; known switches: " + known);
}

Result<Faults> parse_faults(std::string_view list) {
  Faults faults;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    if (!name.empty()) KVTWIN_TRY_STATUS(set_fault(faults, name));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return faults;
}

std::string to_string(const Faults& faults) {
  std::string out;
  for (const auto& [name, member] : table())
    if (faults.*member) out += (out.empty() ? "" : ",") + std::string(name);
  return out;
}

}  // namespace kvtwin::gpu
