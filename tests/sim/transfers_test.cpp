// The model's book of transfers in flight (sim/transfers.h): streams are first in, first out,
// events capture what their stream has in flight and what that is ordered after, and a transfer
// lands after the closed set it started with, in submission order.
#include <gtest/gtest.h>

#include "sim/transfers.h"

namespace kvtwin::sim {
namespace {

// Starts a transfer as the model does: its order closed over what is in flight now.
void start_on(TransferBook& book, std::uint32_t id, std::uint32_t stream, const std::vector<std::uint64_t>& waits = {}) {
  Transfer t;
  t.id = id;
  t.stream = stream;
  t.after = book.closed_after(stream, waits);
  book.start(std::move(t));
}

using Ids = std::vector<std::uint32_t>;

TEST(Transfers, AStreamLandsInSubmissionOrder) {
  TransferBook book;
  start_on(book, 5, 1);
  start_on(book, 3, 2);
  start_on(book, 9, 1);
  EXPECT_EQ(book.landing_order(9, true), (Ids{5, 9}));
  EXPECT_EQ(book.landing_order(3, true), (Ids{3}));
  book.mark_landed(5);
  EXPECT_EQ(book.landing_order(9, true), (Ids{9}));
  EXPECT_EQ(book.unlanded(), (Ids{3, 9}));
}

TEST(Transfers, AnEventCapturesItsStreamAndAWaitLandsWhatItCaptured) {
  TransferBook book;
  start_on(book, 1, 1);  // sequence 1
  book.record_event(7, 1);
  book.record_event(8, 0);  // the compute stream: nothing in flight there
  EXPECT_EQ(*book.event(7), (std::vector<std::uint64_t>{1}));
  EXPECT_TRUE(book.event(8)->empty());
  EXPECT_EQ(book.event(9), nullptr);
  start_on(book, 2, 2, *book.event(7));
  book.record_event(6, 2);  // captures 2 and what 2 is ordered after: 1
  EXPECT_EQ(*book.event(6), (std::vector<std::uint64_t>{1, 2}));
  start_on(book, 3, 3, *book.event(6));
  EXPECT_EQ(book.landing_order(3, true), (Ids{1, 2, 3}));
  // Without following the waits (SPEC 10.13 planted) only the stream's order counts.
  EXPECT_EQ(book.landing_order(3, false), (Ids{3}));
  EXPECT_EQ(book.in_flight_among(book.closed_after(2, {})), (Ids{1, 2}));
  // Re-recording replaces what the event captured.
  book.record_event(7, 3);
  EXPECT_EQ(*book.event(7), (std::vector<std::uint64_t>{1, 2, 3}));
}

TEST(Transfers, AFinishedTransferLeavesNoTraceAndItsIdMayStartAgain) {
  TransferBook book;
  start_on(book, 4, 1);
  book.record_event(1, 1);
  book.mark_landed(4);
  const Transfer done = book.finish(4);
  EXPECT_EQ(done.sequence, 1u);
  EXPECT_TRUE(book.empty());
  start_on(book, 4, 2, *book.event(1));  // waits for a sequence no longer in flight
  EXPECT_EQ(book.landing_order(4, true), (Ids{4}));
  EXPECT_EQ(book.find(4)->sequence, 2u);
  // The event captured the first transfer 4 (sequence 1), not the one under its id now.
  EXPECT_TRUE(book.in_flight_among(*book.event(1)).empty());
}

TEST(Transfers, AnOrderHoldsThroughATransferCompletedSince) {
  // 2 (stream 2) waits for 1 (stream 1); 3 follows 2 on stream 2. 2 completes (its wait lands 1
  // too, and 1 stays in flight): 3 still lands after 1, as a CUDA stream orders it.
  TransferBook book;
  start_on(book, 1, 1);
  book.record_event(1, 1);
  start_on(book, 2, 2, *book.event(1));
  start_on(book, 3, 2);
  for (std::uint32_t id : book.landing_order(2, true)) book.mark_landed(id);
  book.finish(2);
  start_on(book, 4, 2);  // after 3, so after 1 through 2 as well
  EXPECT_EQ(book.in_flight_among(book.find(4)->after), (Ids{1, 3}));
  EXPECT_EQ(book.landing_order(4, true), (Ids{3, 4}));  // 1 landed with 2
}

}  // namespace
}  // namespace kvtwin::sim
