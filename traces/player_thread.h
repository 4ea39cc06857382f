// One backend's calls on a thread of its own, run in the order they were posted: the runner's
// second player (the GPU beside the model) plays ahead of its checks this way (runner.h,
// CheckCadence::second_ahead), so the device's work overlaps the model's instead of following it.
//
// post() queues a call and returns at once (with its ticket); call() runs one after everything
// posted before it and waits for its answer; wait_for(ticket) returns once the call of that ticket
// and everything before it has run; drain() returns once everything posted has run. A caller that waits
// (drain, call) runs what the thread has not started itself, in order, one task at a time, rather
// than wait for the thread to be given a core: a task runs on the thread or on the poster's (post
// and wait from the thread that made it). Every task runs inside an InvariantScope (core/check.h):
// a broken invariant is an InvariantFailure that a posted task's own handler sees, or that call()
// rethrows on the caller's thread. The thread carries its
// creator's failure context and planted sizing bug (core/planted_sizing.h), so an abort names
// the same case and a self-test's sizing bug reaches the backend as it would on the creator's
// thread. Nothing a run reports depends on when the thread runs: the runner compares what it
// answered in op order (runner.cpp).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace kvtwin::traces {

class PlayerThread {
 public:
  PlayerThread();
  ~PlayerThread();  // runs what is still posted, then joins
  PlayerThread(const PlayerThread&) = delete;
  PlayerThread& operator=(const PlayerThread&) = delete;

  // Queues `task`; it must not throw (a posted task records its own failure). Returns its ticket:
  // how many tasks have been posted, it included.
  std::uint64_t post(std::function<void()> task);

  // Runs `f` on the thread after everything posted so far, and returns its answer (or rethrows
  // what it threw).
  template <class F>
  std::invoke_result_t<F&> call(F&& f) {
    using R = std::invoke_result_t<F&>;
    std::exception_ptr thrown;
    if constexpr (std::is_void_v<R>) {
      run_and_wait([&] {
        try {
          f();
        } catch (...) {
          thrown = std::current_exception();
        }
      });
      if (thrown) std::rethrow_exception(thrown);
    } else {
      std::optional<R> answer;
      run_and_wait([&] {
        try {
          answer.emplace(f());
        } catch (...) {
          thrown = std::current_exception();
        }
      });
      if (thrown) std::rethrow_exception(thrown);
      return std::move(*answer);
    }
  }

  // Returns once everything posted so far has run.
  void drain();
  // Returns once the task of `ticket` (a post's answer) and everything posted before it have run;
  // what was posted after it may still be queued or running.
  void wait_for(std::uint64_t ticket);

 private:
  void run_and_wait(std::function<void()> task);
  // While it lives, the thread runs at the default policy instead of SCHED_BATCH.
  class PriorityBoost {
   public:
    explicit PriorityBoost(std::thread& thread);
    ~PriorityBoost();
    PriorityBoost(const PriorityBoost&) = delete;
    PriorityBoost& operator=(const PriorityBoost&) = delete;

   private:
    std::thread& thread_;
  };
  // Runs the queue's front task with the lock released (busy_ while it runs).
  void run_next(std::unique_lock<std::mutex>& lock);
  void loop();

  // Posted tasks wake an idle thread a batch at a time (a wake-up is a system call); a poster that
  // waits runs the rest itself.
  static constexpr std::size_t kWakeBatch = 8;

  std::mutex mutex_;
  std::condition_variable work_;  // the thread waits here for tasks
  std::condition_variable done_;  // a task ended (busy_ went false)
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;  // a task is running (on the thread or a drain()'s caller)
  bool idle_ = false;  // the thread waits for work
  bool stop_ = false;
  std::uint64_t posted_ = 0;    // tasks posted so far (the last one's ticket)
  std::uint64_t finished_ = 0;  // tasks run to their end, in ticket order
  std::thread thread_;
};

}  // namespace kvtwin::traces
