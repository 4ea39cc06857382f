// Choices drawn from RapidCheck: each decision is one `*gen` pick, so a failing case shrinks
// decision by decision toward 0. Only valid inside a RapidCheck property (or gen::exec).
//
// The range is drawn at full size whatever the case's size: RapidCheck scales integer ranges
// with the size, which would make small cases always choose option 0. Cases still grow with
// the size through the number of commands.
#pragma once

#include <rapidcheck.h>

#include "props/choices.h"

namespace kvtwin::props {

class RapidCheckChoices : public Choices {
 public:
  std::uint64_t below(std::uint64_t n) override {
    if (n <= 1) return 0;
    return *rc::gen::resize(rc::kNominalSize, rc::gen::inRange<std::uint64_t>(0, n));
  }
};

}  // namespace kvtwin::props
