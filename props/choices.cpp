// Choices helpers. See choices.h.
#include "props/choices.h"

namespace kvtwin::props {

std::size_t Choices::weighted(const std::vector<std::uint32_t>& weights) {
  std::uint64_t total = 0;
  for (std::uint32_t w : weights) total += w;
  KVTWIN_CHECK(total > 0, "weighted() needs a non-zero weight");
  std::uint64_t draw = below(total);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (draw < weights[i]) return i;
    draw -= weights[i];
  }
  KVTWIN_CHECK(false, "weighted() draw inside the total");
  return 0;
}

}  // namespace kvtwin::props
