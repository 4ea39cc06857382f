// The model's book of transfers in flight (sim/transfers.h): streams are first in, first out,
// events capture what their stream has in flight, and a transfer lands after what it waits for,
// transitively, in submission order.
#include <gtest/gtest.h>

#include "sim/transfers.h"

namespace kvtwin::sim {
namespace {

Transfer on_stream(std::uint32_t id, std::uint32_t stream, std::vector<std::uint64_t> waits = {}) {
  Transfer t;
  t.id = id;
  t.stream = stream;
  t.waits_for = std::move(waits);
  return t;
}

using Ids = std::vector<std::uint32_t>;

TEST(Transfers, AStreamLandsInSubmissionOrder) {
  TransferBook book;
  book.start(on_stream(5, 1));
  book.start(on_stream(3, 2));
  book.start(on_stream(9, 1));
  EXPECT_EQ(book.landing_order(9, true), (Ids{5, 9}));
  EXPECT_EQ(book.landing_order(3, true), (Ids{3}));
  book.mark_landed(5);
  EXPECT_EQ(book.landing_order(9, true), (Ids{9}));
  EXPECT_EQ(book.unlanded(), (Ids{3, 9}));
}

TEST(Transfers, AnEventCapturesItsStreamAndAWaitLandsWhatItCaptured) {
  TransferBook book;
  book.start(on_stream(1, 1));  // sequence 1
  book.record_event(7, 1);
  book.record_event(8, 0);  // the compute stream: nothing in flight there
  EXPECT_EQ(*book.event(7), (std::vector<std::uint64_t>{1}));
  EXPECT_TRUE(book.event(8)->empty());
  EXPECT_EQ(book.event(9), nullptr);
  book.start(on_stream(2, 2, *book.event(7)));
  book.start(on_stream(3, 3, {2}));  // waits for transfer 2's sequence: transitively for 1 too
  EXPECT_EQ(book.landing_order(3, true), (Ids{1, 2, 3}));
  // Without following the waits (SPEC 10.13 planted) only the stream's order counts.
  EXPECT_EQ(book.landing_order(3, false), (Ids{3}));
  EXPECT_EQ(book.ordered_before(2, {}, std::nullopt, true), (Ids{1, 2}));
  // Re-recording replaces what the event captured.
  book.record_event(7, 3);
  EXPECT_EQ(*book.event(7), (std::vector<std::uint64_t>{3}));
}

TEST(Transfers, AFinishedTransferLeavesNoTraceAndItsIdMayStartAgain) {
  TransferBook book;
  book.start(on_stream(4, 1));
  book.record_event(1, 1);
  book.mark_landed(4);
  const Transfer done = book.finish(4);
  EXPECT_EQ(done.sequence, 1u);
  EXPECT_TRUE(book.empty());
  book.start(on_stream(4, 2, *book.event(1)));  // waits for a sequence no longer in flight
  EXPECT_EQ(book.landing_order(4, true), (Ids{4}));
  EXPECT_EQ(book.find(4)->sequence, 2u);
}

}  // namespace
}  // namespace kvtwin::sim
