// The model's transfers in flight. See transfers.h; docs/host_arena.md has the rules.
#include "sim/transfers.h"

#include <algorithm>
#include <set>

#include "core/check.h"

namespace kvtwin::sim {

const Transfer* TransferBook::find(std::uint32_t id) const {
  const auto it = transfers_.find(id);
  return it == transfers_.end() ? nullptr : &it->second;
}

Transfer* TransferBook::find_for_test(std::uint32_t id) {
  const auto it = transfers_.find(id);
  return it == transfers_.end() ? nullptr : &it->second;
}

const std::vector<std::uint64_t>* TransferBook::event(std::uint32_t id) const {
  const auto it = events_.find(id);
  return it == events_.end() ? nullptr : &it->second;
}

void TransferBook::record_event(std::uint32_t id, std::uint32_t stream) {
  // A later record under the same id replaces the earlier one (cudaEventRecord). Stream 0 runs
  // synchronously here: it has no transfer in flight, so it captures none.
  events_[id] = stream == 0 ? std::vector<std::uint64_t>{} : closed_after(stream, {});
}

std::vector<std::uint64_t> TransferBook::closed_after(std::uint32_t stream,
                                                      const std::vector<std::uint64_t>& waits_for) const {
  std::set<std::uint64_t> out(waits_for.begin(), waits_for.end());
  for (const auto& [sequence, id] : by_sequence_) {
    const Transfer& t = transfers_.at(id);
    if (t.stream != stream) continue;
    out.insert(sequence);
    out.insert(t.after.begin(), t.after.end());
  }
  return std::vector<std::uint64_t>(out.begin(), out.end());
}

std::vector<std::uint32_t> TransferBook::in_flight_among(const std::vector<std::uint64_t>& after) const {
  std::vector<std::uint32_t> out;
  for (std::uint64_t sequence : after)  // ascending
    if (const auto it = by_sequence_.find(sequence); it != by_sequence_.end()) out.push_back(it->second);
  return out;
}

std::vector<std::uint32_t> TransferBook::landing_order(std::uint32_t id, bool follow_waits) const {
  const Transfer* t = find(id);
  KVTWIN_CHECK(t != nullptr, "landing a transfer in flight");
  std::vector<std::uint32_t> out;
  if (follow_waits) {
    for (std::uint32_t before : in_flight_among(t->after))
      if (!transfers_.at(before).landed) out.push_back(before);
  } else {
    for (const auto& [sequence, before] : by_sequence_) {
      if (sequence >= t->sequence) break;
      const Transfer& b = transfers_.at(before);
      if (b.stream == t->stream && !b.landed) out.push_back(before);
    }
  }
  if (!t->landed) out.push_back(id);
  return out;
}

std::vector<std::uint32_t> TransferBook::unlanded() const {
  std::vector<std::uint32_t> out;
  for (const auto& [sequence, id] : by_sequence_)
    if (!transfers_.at(id).landed) out.push_back(id);
  return out;
}

void TransferBook::start(Transfer t) {
  KVTWIN_CHECK(transfers_.count(t.id) == 0, "a new transfer's id is not in flight");
  t.sequence = next_sequence_++;
  by_sequence_[t.sequence] = t.id;
  transfers_.emplace(t.id, std::move(t));
}

void TransferBook::mark_landed(std::uint32_t id) {
  const auto it = transfers_.find(id);
  KVTWIN_CHECK(it != transfers_.end(), "landing a transfer in flight");
  it->second.landed = true;
}

Transfer TransferBook::finish(std::uint32_t id) {
  const auto it = transfers_.find(id);
  KVTWIN_CHECK(it != transfers_.end() && it->second.landed, "a transfer completes after its copy landed");
  Transfer t = std::move(it->second);
  by_sequence_.erase(t.sequence);
  transfers_.erase(it);
  return t;
}

}  // namespace kvtwin::sim
