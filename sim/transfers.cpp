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
  // A later record under the same id replaces the earlier one (cudaEventRecord).
  std::vector<std::uint64_t> captured;
  for (const auto& [sequence, transfer] : by_sequence_)
    if (transfers_.at(transfer).stream == stream) captured.push_back(sequence);
  events_[id] = std::move(captured);
}

std::vector<std::uint32_t> TransferBook::ordered_before(std::uint32_t stream, const std::vector<std::uint64_t>& waits_for,
                                                        std::optional<std::uint64_t> before_sequence,
                                                        bool follow_waits) const {
  // Breadth first over "lands before": the stream's earlier transfers (FIFO), and what it waits
  // for; each member adds its own. Bounded: every step adds an in-flight transfer not seen yet.
  std::set<std::uint64_t> seen;
  std::vector<std::uint64_t> frontier;
  const auto add_stream = [&](std::uint32_t s, std::optional<std::uint64_t> below) {
    for (const auto& [sequence, transfer] : by_sequence_) {
      if (below && sequence >= *below) break;
      if (transfers_.at(transfer).stream == s && seen.insert(sequence).second) frontier.push_back(sequence);
    }
  };
  const auto add_waits = [&](const std::vector<std::uint64_t>& waits) {
    if (!follow_waits) return;
    for (std::uint64_t sequence : waits)
      if (by_sequence_.count(sequence) != 0 && seen.insert(sequence).second) frontier.push_back(sequence);
  };
  add_stream(stream, before_sequence);
  add_waits(waits_for);
  while (!frontier.empty()) {
    const std::uint64_t sequence = frontier.back();
    frontier.pop_back();
    const Transfer& t = transfers_.at(by_sequence_.at(sequence));
    add_stream(t.stream, t.sequence);
    add_waits(t.waits_for);
  }
  std::vector<std::uint32_t> out;
  for (std::uint64_t sequence : seen) out.push_back(by_sequence_.at(sequence));  // ascending sequence
  return out;
}

std::vector<std::uint32_t> TransferBook::landing_order(std::uint32_t id, bool follow_waits) const {
  const Transfer* t = find(id);
  KVTWIN_CHECK(t != nullptr, "landing a transfer in flight");
  std::vector<std::uint32_t> out;
  for (std::uint32_t before : ordered_before(t->stream, t->waits_for, t->sequence, follow_waits))
    if (!transfers_.at(before).landed) out.push_back(before);
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
