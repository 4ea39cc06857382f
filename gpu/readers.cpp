// The open readers and the move gate (readers.h).
#include "gpu/readers.h"

namespace kvtwin::gpu {
namespace {
Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
}  // namespace

Status Readers::require_new(const BeginRead& op) const {
  if (open_.count(op.reader) != 0)
    return invalid("begin_read: reader " + std::to_string(op.reader) + " is already open; end it first or use another id");
  return ok_status();
}

Status Readers::begin(const BeginRead& op, std::size_t side, std::int64_t num_pages) {
  Reader reader;
  reader.side = side;
  for (std::int64_t page : op.pages) {
    if (page < 0 || page >= num_pages)
      return make_error(ErrorKind::out_of_range, "begin_read: page " + std::to_string(page) + " is outside sub-pool '" +
                                                     op.sub_pool + "''s pages [0, " + std::to_string(num_pages) + ")");
    reader.pages.insert(page);
  }
  open_[op.reader] = std::move(reader);
  return ok_status();
}

Status Readers::end(const EndRead& op) {
  if (open_.erase(op.reader) == 0) return invalid("end_read: reader " + std::to_string(op.reader) + " is not open");
  return ok_status();
}

std::optional<std::size_t> Readers::side_of(std::uint32_t reader) const {
  const auto it = open_.find(reader);
  if (it == open_.end()) return std::nullopt;
  return it->second.side;
}

bool Readers::holds(std::size_t side, std::int64_t page) const {
  for (const auto& [id, reader] : open_)
    if (reader.side == side && reader.pages.count(page) != 0) return true;
  return false;
}

Status Readers::check_moves(std::size_t side, const std::string& sub_pool, const std::vector<std::int64_t>& src,
                            const std::vector<std::int64_t>& dst, const Faults& faults) const {
  if (faults.move_under_reader) return ok_status();  // fault 12
  for (std::size_t i = 0; i < src.size(); ++i) {
    for (const auto& [id, reader] : open_) {
      if (reader.side != side) continue;
      for (std::int64_t page : {src[i], dst[i]})
        if (reader.pages.count(page) != 0)
          return make_error(ErrorKind::reader_conflict,
                            "moving page " + std::to_string(src[i]) + " -> " + std::to_string(dst[i]) + " of sub-pool '" +
                                sub_pool + "' while reader " + std::to_string(id) + " holds page " +
                                std::to_string(page) + "; end the read (end_read) before anything moves its pages");
    }
  }
  return ok_status();
}

}  // namespace kvtwin::gpu
