// Test backends that stand in for the GPU beside the model: a backend passed through
// (Forwarding), one whose digests are far away as the GPU's are (FarAway), and a first player that
// counts what it applied (CountingApplies), so that a test can see a second played ahead.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "core/backend.h"

namespace kvtwin::traces::testing {

// Another backend's answers, passed through (what the test backends below do not change).
class Forwarding : public Backend {
 public:
  explicit Forwarding(Backend& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  OpResult apply(const Op& op) override { return inner_.apply(op); }
  Result<PoolTables> tables() const override { return inner_.tables(); }
  Result<std::uint64_t> tables_digest() const override { return inner_.tables_digest(); }
  Result<std::vector<std::uint8_t>> raw_bytes(std::uint64_t offset, std::uint64_t length) const override {
    return inner_.raw_bytes(offset, length);
  }
  Result<std::uint64_t> bytes_digest(std::span<const ByteRange> ranges) const override {
    return inner_.bytes_digest(ranges);
  }

 private:
  Backend& inner_;
};

// A backend that says its digests are far away (as the GPU's are), so that the runner defers them
// (CheckCadence::compare_window); everything else is the model's it wraps, planted or not.
class FarAway final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  bool digests_are_far() const override { return true; }
  OpResult apply(const Op& op) override {
    ++applied;
    if (first_applied != nullptr && first_applied->load() > applied) {
      ++applied_late;
      if (late_total != nullptr) ++*late_total;
    }
    if (fail_checkpoints && std::holds_alternative<Checkpoint>(op))
      return make_error(ErrorKind::environment, "the machine failed (a test's far backend)");
    if (std::holds_alternative<BuildPool>(op)) {
      build_thread = std::this_thread::get_id();
      if (build_waits_for_first != 0 && first_applied != nullptr) {
        // Played in step, the first cannot go on while this waits: the bound only keeps such a
        // test from hanging.
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (first_applied->load() < build_waits_for_first && std::chrono::steady_clock::now() < give_up)
          std::this_thread::yield();
        build_saw_first_go_on = first_applied->load() >= build_waits_for_first;
      }
      if (fail_builds) return make_error(ErrorKind::environment, "the machine failed to build (a test's far backend)");
    }
    return Forwarding::apply(op);
  }
  bool fail_checkpoints = false;  // every checkpoint answers as a machine failure
  bool fail_builds = false;       // every build answers as a machine failure
  std::thread::id build_thread;   // the thread that played its last build
  // With first_applied: a build waits until the first has applied this many ops, which it can only
  // do while the build is played ahead; build_saw_first_go_on says whether it did.
  std::uint64_t build_waits_for_first = 0;
  bool build_saw_first_go_on = false;
  // With first_applied (the first player's count of ops applied): the ops this one applied after
  // the first had applied a later one, as a second player ahead of the checks does.
  const std::atomic<std::uint64_t>* first_applied = nullptr;
  std::uint64_t applied = 0;
  std::uint64_t applied_late = 0;
  std::atomic<std::uint64_t>* late_total = nullptr;  // applied_late counted here too (it outlives the backend)
  std::uint64_t queued = 0;  // digests queued (the default queue computes them at once)
  Status queue_tables_digest() override {
    ++queued;
    return Backend::queue_tables_digest();
  }
  Status queue_bytes_digest(std::span<const ByteRange> ranges) override {
    ++queued;
    return Backend::queue_bytes_digest(ranges);
  }
};

// The first player's backend, counting the ops it applied (for FarAway::applied_late).
class CountingApplies final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  OpResult apply(const Op& op) override {
    ++applied;
    return Forwarding::apply(op);
  }
  std::atomic<std::uint64_t> applied{0};
};

}  // namespace kvtwin::traces::testing
