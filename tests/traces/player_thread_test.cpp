// The second player's thread: tasks run in the order posted, on its thread (or on a caller that
// waits for them); call() answers after everything posted before it and rethrows what its task threw; a
// broken invariant there is an InvariantFailure, not an abort; the thread ends after running what
// is still posted.
#include "traces/player_thread.h"

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/check.h"

namespace kvtwin::traces {
namespace {

TEST(PlayerThread, RunsTasksInOrderOnItsThreadOrTheWaitingCaller) {
  std::vector<int> seen;
  std::atomic<int> ran{0};
  std::thread::id ran_on;
  {
    PlayerThread thread;
    for (int i = 0; i < 1000; ++i)
      thread.post([&seen, &ran, &ran_on, i] {
        seen.push_back(i);
        ran_on = std::this_thread::get_id();
        ++ran;
      });
    // Nobody waits: the thread, woken by the batch, runs every one.
    while (ran.load() < 1000) std::this_thread::yield();
    EXPECT_NE(ran_on, std::this_thread::get_id());
    // call() comes after every post before it (here the caller runs it: the thread is idle).
    for (int i = 1000; i < 1003; ++i) thread.post([&seen, i] { seen.push_back(i); });
    EXPECT_EQ(thread.call([&seen] { return seen.size(); }), 1003u);
    for (int i = 1003; i < 1020; ++i) thread.post([&seen, i] { seen.push_back(i); });
    thread.drain();
    EXPECT_EQ(seen.size(), 1020u);
    for (int i = 1020; i < 1022; ++i) thread.post([&seen, i] { seen.push_back(i); });
  }  // fewer than a wake batch still posted: the end runs them
  ASSERT_EQ(seen.size(), 1022u);
  for (int i = 0; i < 1022; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
}

// wait_for(ticket) returns once that task and those before it have run, and leaves the tasks posted
// after it alone (the runner compares a closed window while the second plays the next one).
TEST(PlayerThread, WaitForATicketRunsUpToItAndNoFurther) {
  PlayerThread thread;
  std::vector<int> seen;
  std::atomic<bool> release{false};
  std::atomic<bool> later_ran{false};
  std::uint64_t first = 0, third = 0;
  for (int i = 0; i < 3; ++i) {
    const std::uint64_t ticket = thread.post([&seen, i] { seen.push_back(i); });
    if (i == 0) first = ticket;
    if (i == 2) third = ticket;
  }
  EXPECT_EQ(third, first + 2) << "tickets count the posts";
  // Held until the caller has seen wait_for return: a wait_for that ran it would never return.
  const std::uint64_t held = thread.post([&release, &later_ran] {
    while (!release.load()) std::this_thread::yield();
    later_ran = true;
  });
  thread.wait_for(third);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(later_ran.load());
  release = true;
  thread.wait_for(held);
  EXPECT_TRUE(later_ran.load());
  thread.wait_for(first);  // long done: returns at once
  EXPECT_THROW(thread.wait_for(held + 1), InvariantFailure) << "a ticket never posted";
}

TEST(PlayerThread, CallRethrowsWhatItsTaskThrew) {
  PlayerThread thread;
  EXPECT_THROW(thread.call([]() -> int { throw std::out_of_range("no such key"); }), std::out_of_range);
  // A broken invariant on the thread is thrown as an InvariantFailure (the task's scope), whose
  // text names the condition, and the thread goes on.
  try {
    thread.call([] { KVTWIN_CHECK(1 + 1 == 3, "arithmetic"); });
    ADD_FAILURE() << "no throw";
  } catch (const InvariantFailure& e) {
    EXPECT_NE(std::string(e.what()).find("arithmetic"), std::string::npos);
  }
  EXPECT_EQ(thread.call([] { return 7; }), 7);
}

TEST(PlayerThread, CarriesItsCreatorsFailureContext) {
  set_failure_context("seed 42; reproduce with: kvtwin fuzz --seed 42");
  PlayerThread thread;
  EXPECT_EQ(thread.call([] { return failure_context(); }), "seed 42; reproduce with: kvtwin fuzz --seed 42");
  set_failure_context("");
}

}  // namespace
}  // namespace kvtwin::traces
