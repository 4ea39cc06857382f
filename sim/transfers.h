// The model's transfers in flight (SPEC.md section 8): offloads and load-backs that started and
// have not completed, the events recorded on streams, and the order in which their copies land.
//
// How it works: streams are simulated. Stream 0 is the compute stream, where every other
// operation runs, synchronously; transfers run on copy streams 1 and up, first in, first out per
// stream. Each transfer gets a submission sequence number (unique for the pool's life), resolves
// its ids when it starts (the model keeps the resolved pages here) and lands its copy later: at
// the latest at its transfer_wait, after every transfer it is ordered after. That set is closed
// when the transfer starts, by sequence number: the transfers of its stream still in flight and
// what each of those is ordered after, and what its wait_event captured. An event captures, when
// it is recorded, the transfers of its stream still in flight and what each is ordered after (a
// CUDA event orders after everything its stream waited for). Closing the sets when they are made
// keeps an order that runs through a transfer completed since (transfer_wait) and never confuses
// a transfer id used again with the one before it. Landing in ascending sequence is a valid
// order: whatever a transfer is ordered after was submitted before it. The GPU (gpu/transfers.h)
// and the shadow (props/shadow_host.cpp) keep the same sets.
//
// What it does not cover: the pages and bytes themselves (sim/model.cpp copies them and holds
// the pages), leases (sim/host_arena.h), real threads. docs/host_arena.md has the rules.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace kvtwin::sim {

enum class TransferDirection : std::uint8_t { offload, load_back };

// One page a transfer copies: its device page (virtual and the physical page it resolved) and
// its host page (logical and the physical host page it resolved inside its lease).
struct PageCopy {
  std::size_t side = 0;
  std::int64_t virtual_page = 0;
  std::int64_t device_page = 0;
  std::int64_t host_logical = 0;
  std::int64_t host_page = 0;
  bool operator==(const PageCopy&) const = default;
};

struct Transfer {
  std::uint32_t id = 0;
  TransferDirection direction = TransferDirection::offload;
  std::uint32_t thread = 0;
  std::uint32_t stream = 1;
  std::uint64_t sequence = 0;               // submission order
  std::vector<std::uint64_t> after;         // sequences it lands after, closed when it started (ascending)
  std::vector<PageCopy> copies;
  std::vector<std::int64_t> pages;          // device virtual pages (what the start answered)
  bool landed = false;                      // its copy is done (its bytes are where it put them)
  bool operator==(const Transfer&) const = default;
};

class TransferBook {
 public:
  const std::map<std::uint32_t, Transfer>& in_flight() const { return transfers_; }
  const Transfer* find(std::uint32_t id) const;
  bool empty() const { return transfers_.empty(); }
  std::uint64_t next_sequence() const { return next_sequence_; }

  // The sequences an event captured when it was last recorded; nullptr when never recorded.
  const std::vector<std::uint64_t>* event(std::uint32_t id) const;
  const std::map<std::uint32_t, std::vector<std::uint64_t>>& events() const { return events_; }
  // cudaEventRecord: captures the transfers of `stream` in flight now and what each is ordered
  // after (stream 0: none).
  void record_event(std::uint32_t id, std::uint32_t stream);

  // The closed set (sequences, ascending) a transfer submitted now on `stream` after the event
  // that captured `waits_for` is ordered after: every in-flight transfer of its stream and what
  // each is ordered after, and `waits_for`.
  std::vector<std::uint64_t> closed_after(std::uint32_t stream, const std::vector<std::uint64_t>& waits_for) const;
  // The in-flight transfers among `after` (sequences), ascending sequence.
  std::vector<std::uint32_t> in_flight_among(const std::vector<std::uint64_t>& after) const;
  // Every transfer that must land for `id` to land, `id` last, not yet landed, ascending sequence.
  // With follow_waits false only the stream's order counts (a transfer that does not wait for its
  // producer's event: SPEC 10.13, planted by traces/backends.cpp).
  std::vector<std::uint32_t> landing_order(std::uint32_t id, bool follow_waits) const;
  // Every transfer not yet landed, ascending sequence.
  std::vector<std::uint32_t> unlanded() const;

  // Adds a transfer (its sequence is assigned here); its id must not be in flight.
  void start(Transfer t);
  void mark_landed(std::uint32_t id);
  // Removes a completed transfer and returns it.
  Transfer finish(std::uint32_t id);

  // Test seam (state_digest coverage): a writable transfer.
  Transfer* find_for_test(std::uint32_t id);

 private:
  std::map<std::uint32_t, Transfer> transfers_;
  std::map<std::uint64_t, std::uint32_t> by_sequence_;  // in flight only
  std::map<std::uint32_t, std::vector<std::uint64_t>> events_;
  std::uint64_t next_sequence_ = 1;
};

}  // namespace kvtwin::sim
