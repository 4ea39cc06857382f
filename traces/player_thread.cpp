// A backend's calls on a thread of its own (player_thread.h).
#include "traces/player_thread.h"

#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "core/check.h"
#include "core/planted_sizing.h"

namespace kvtwin::traces {
namespace {

// The thread's scheduling policy set to `policy` (a refusal leaves it as it is).
void set_policy([[maybe_unused]] std::thread& thread, [[maybe_unused]] int policy) {
#if defined(__linux__)
  sched_param param{};
  (void)pthread_setschedparam(thread.native_handle(), policy, &param);
#endif
}

}  // namespace

PlayerThread::PriorityBoost::PriorityBoost(std::thread& thread) : thread_(thread) {
#if defined(__linux__)
  set_policy(thread_, SCHED_OTHER);
#endif
}

PlayerThread::PriorityBoost::~PriorityBoost() {
#if defined(__linux__)
  set_policy(thread_, SCHED_BATCH);
#endif
}

PlayerThread::PlayerThread() {
  std::string context = failure_context();
  const PlantedSizingBug bug = planted_sizing_bug();
  thread_ = std::thread([this, context = std::move(context), bug] {
    set_failure_context(context);
#if defined(__linux__)
    // SCHED_BATCH: a wake-up of this thread never preempts the thread that posted (on a machine
    // whose cores are all busy, as the gate's are, the poster would otherwise lose its core to
    // every batch it wakes); it still runs at once on an idle core. Nothing it answers depends on
    // when it runs. A refusal leaves the default policy.
    sched_param param{};
    (void)sched_setscheduler(0, SCHED_BATCH, &param);
#endif
    std::optional<PlantedSizingHold> hold;
    if (bug != PlantedSizingBug::none) hold.emplace(bug);
    loop();
  });
}

PlayerThread::~PlayerThread() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

std::uint64_t PlayerThread::post(std::function<void()> task) {
  bool wake = false;
  std::uint64_t ticket = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    ticket = ++posted_;
    wake = idle_ && queue_.size() >= kWakeBatch;
  }
  if (wake) work_.notify_one();
  return ticket;
}

void PlayerThread::drain() {
  std::uint64_t all = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    all = posted_;
  }
  wait_for(all);
}

void PlayerThread::wait_for(std::uint64_t ticket) {
  // The caller runs what the thread has not started, in order, rather than wait for the thread
  // to be scheduled (a core may be a while coming on a busy machine); one task runs at a time.
  InvariantScope scope;  // as on the thread: a broken invariant is the task's failure
  std::unique_lock<std::mutex> lock(mutex_);
  KVTWIN_CHECK(ticket <= posted_, "a wait for a task never posted");
  while (finished_ < ticket) {
    if (busy_) {
      // The thread runs a task this caller now waits for: while it does, the thread runs at the
      // caller's priority (a SCHED_BATCH thread preempted mid-task on a busy machine kept its
      // poster waiting for milliseconds at every window's end).
      const PriorityBoost boost(thread_);
      done_.wait(lock, [this] { return !busy_; });
      continue;
    }
    run_next(lock);
  }
}

void PlayerThread::run_and_wait(std::function<void()> task) { wait_for(post(std::move(task))); }

void PlayerThread::run_next(std::unique_lock<std::mutex>& lock) {
  std::function<void()> task = std::move(queue_.front());
  queue_.pop_front();
  busy_ = true;
  lock.unlock();
  task();
  lock.lock();
  busy_ = false;
  ++finished_;
  done_.notify_all();
}

void PlayerThread::loop() {
  InvariantScope scope;  // a broken invariant is the task's failure, not the process's end
  std::unique_lock<std::mutex> lock(mutex_);
  bool awake = false;  // woken for a batch: runs until the queue is empty
  while (true) {
    if (busy_) {  // a caller of drain() runs one
      done_.wait(lock, [this] { return !busy_; });
      continue;
    }
    if (!queue_.empty() && (awake || stop_ || queue_.size() >= kWakeBatch)) {
      awake = true;
      run_next(lock);
      continue;
    }
    awake = false;
    if (stop_) return;  // everything posted has run
    idle_ = true;
    work_.wait(lock, [this] { return stop_ || queue_.size() >= kWakeBatch; });
    idle_ = false;
  }
}

}  // namespace kvtwin::traces
