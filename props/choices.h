// Where a generator's decisions come from. The configuration and operation generators are
// written against this small interface, so the same generator runs under RapidCheck (whose
// draws shrink toward 0, which is why every generator puts its simplest option at 0) and under
// a plain seeded fuzzer (RngChoices over kvtwin::Rng; no RapidCheck involved).
#pragma once

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/rng.h"

namespace kvtwin::props {

class Choices {
 public:
  virtual ~Choices() = default;

  // A value in [0, n) for n >= 1; 0 when n <= 1.
  virtual std::uint64_t below(std::uint64_t n) = 0;

  // A value in [lo, hi], inclusive (lo <= hi).
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    KVTWIN_CHECK(lo <= hi, "between() needs lo <= hi");
    return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
  }
  // True with probability numerator / denominator; shrinks toward false.
  bool chance(std::uint32_t numerator, std::uint32_t denominator) {
    return below(denominator) >= denominator - numerator;
  }
  // An element of a non-empty vector; shrinks toward the first.
  template <class T>
  const T& pick(const std::vector<T>& items) {
    KVTWIN_CHECK(!items.empty(), "pick() from an empty list");
    return items[below(items.size())];
  }
  // An index whose weight is non-zero, with probability proportional to its weight; shrinks
  // toward the first index with a non-zero weight.
  std::size_t weighted(const std::vector<std::uint32_t>& weights);
};

// Decisions from kvtwin::Rng: what `kvtwin fuzz` and other non-RapidCheck drivers use.
class RngChoices : public Choices {
 public:
  explicit RngChoices(std::uint64_t seed) : rng_(seed) {}
  explicit RngChoices(Rng rng) : rng_(rng) {}
  std::uint64_t below(std::uint64_t n) override { return n <= 1 ? 0 : rng_.below(n); }

 private:
  Rng rng_;
};

}  // namespace kvtwin::props
