// The stateful properties' checks, as observers of the one runner (traces/runner.h): the
// RapidCheck properties, `kvtwin fuzz`, `kvtwin check` and `kvtwin selftest` all add these to a
// runner and play operations through it; there is no second interpreter.
//
//   ShadowObserver   predicts every answer with the shadow (props/shadow.h), an abstract model
//                    written apart from sim/, and compares the first backend's answer and tables
//                    with the prediction ("shadow");
//   PolicyObserver   the policy's postconditions on the first backend's tables before and after
//                    the step: an allocation binds queue-front virtual pages to the pages the
//                    policy names, a compaction's moves are ascending, distinct and cross the new
//                    watermark, carrying their virtual pages ("policy");
//   SizingObserver   at every pool the runner built (checked at the first step after the build, as
//                    the observers join a run after its build), core's derivation of it (the
//                    runner's derived(): entries, floor, slots, pages, row addresses) against the
//                    shadow's own derivation from SPEC 2 and 3 (props/shadow_sizing.h) ("sizing");
//   RefusalObserver  an operation the shadow expects to be refused leaves every backend's state
//                    exactly as it was: its state digest (the model's, or a digest of its tables
//                    for a backend without one) is equal before and after, and it wrote no byte
//                    of the pool ("refusal").
//
// Add them in this order (the refusal observer reads the shadow's prediction; sizing comes first,
// so that a pool sized wrong is named as such before anything played on it is compared). Each reads only
// what core/backend.h and the runner's Player expose.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "props/shadow.h"
#include "traces/replay.h"
#include "traces/runner.h"

namespace kvtwin::props {

class ShadowObserver : public traces::RunObserver {
 public:
  explicit ShadowObserver(const PoolConfig& config) : shadow_(config) {}
  void before(const traces::Runner& runner, const Op& op) override;
  std::optional<Finding> after(const traces::Runner& runner, const Op& op, const std::vector<OpResult>& results) override;
  // The first backend's answer and tables: the second is held to the first by the runner.
  bool reads_second(const traces::Runner&) const override { return false; }

  const PoolShadow& shadow() const { return shadow_; }
  // What the shadow predicted for the operation being played.
  const Expectation& expected() const { return expected_; }

 private:
  PoolShadow shadow_;
  Expectation expected_;
};

class SizingObserver : public traces::RunObserver {
 public:
  std::optional<Finding> after(const traces::Runner& runner, const Op& op, const std::vector<OpResult>& results) override;
  bool reads_second(const traces::Runner&) const override { return false; }  // core's derivation only

 private:
  std::optional<PoolConfig> checked_;  // the configuration whose derivation was compared last
};

class PolicyObserver : public traces::RunObserver {
 public:
  void before(const traces::Runner& runner, const Op& op) override;
  std::optional<Finding> after(const traces::Runner& runner, const Op& op, const std::vector<OpResult>& results) override;
  bool reads_second(const traces::Runner&) const override { return false; }  // the first backend's tables

 private:
  std::optional<PoolTables> before_;
};

class RefusalObserver : public traces::RunObserver {
 public:
  explicit RefusalObserver(const ShadowObserver& shadow) : shadow_(shadow) {}
  void before(const traces::Runner& runner, const Op& op) override;
  std::optional<Finding> after(const traces::Runner& runner, const Op& op, const std::vector<OpResult>& results) override;
  // The second's state digest, unless the runner compares the second's tables with the first's
  // after every op and the second has no state digest of its own (the GPU beside the model).
  bool reads_second(const traces::Runner& runner) const override { return digests_second(runner); }

 private:
  static bool digests_second(const traces::Runner& runner);
  const ShadowObserver& shadow_;
  std::vector<std::optional<std::uint64_t>> digests_;  // per player, taken when a refusal is expected
};

// The observers of the stateful properties, added to a runner in order.
struct PropertyObservers {
  explicit PropertyObservers(const PoolConfig& config) : shadow(config), refusal(shadow) {}
  void attach(traces::Runner& runner) {
    runner.add_observer(&sizing);
    runner.add_observer(&shadow);
    runner.add_observer(&policy);
    runner.add_observer(&refusal);
  }
  SizingObserver sizing;
  ShadowObserver shadow;
  PolicyObserver policy;
  RefusalObserver refusal;
};

// The same observers for a replay (traces/replay.h): kvtwin replay, the regression traces and
// failure traces are checked by the shadow too, not only by their expectations.
traces::ObserverFactory property_observer_factory();

// Checks the postconditions of the policy on one step of a backend (tables before and after,
// and the answer). Returns what is wrong, or an empty string.
std::string policy_violation(const Op& op, const PoolTables& before, const PoolTables& after, const OpResult& result,
                             CompactionMode mode);

// A digest of a backend's state as the runner sees it, without the pool's bytes (what a refused
// operation wrote shows in the Player's touched bytes): the Player's own state digest when it
// has one, else its tables.
std::optional<std::uint64_t> observable_digest(const traces::Player& player, const PoolConfig& config);

}  // namespace kvtwin::props
