// The one source of randomness: a seeded 64-bit generator (SplitMix64) with sub-seeds derived
// by name, so that adding a new random choice in one place never shifts the draws of another.
// Nothing here reads a clock.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvtwin {

constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Combines a seed with further values into a new well-mixed seed.
constexpr std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t value) {
  return splitmix64_mix(seed ^ splitmix64_mix(value + 0x9e3779b97f4a7c15ULL));
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return splitmix64_mix(state_);
  }
  // Uniform in [0, bound) for bound > 0 (rejection sampling: no modulo bias).
  std::uint64_t below(std::uint64_t bound) {
    if (bound <= 1) return 0;
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    std::uint64_t v = 0;
    do v = next_u64();
    while (v >= limit);
    return v % bound;
  }
  // Uniform in [lo, hi], inclusive.
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
  }
  bool chance(std::uint32_t numerator, std::uint32_t denominator) { return below(denominator) < numerator; }

  // A child generator for a named purpose; independent of how many draws this one made.
  Rng derive(std::string_view name) const { return Rng(mix_seed(origin_seed(), fnv1a64(name))); }
  std::uint64_t origin_seed() const { return origin_; }

 private:
  std::uint64_t state_;
  std::uint64_t origin_ = state_;
};

}  // namespace kvtwin
