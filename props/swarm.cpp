// Swarm weights. See swarm.h.
#include "props/swarm.h"

namespace kvtwin::props {

std::string_view op_kind_name(OpKind kind) {
  static constexpr std::array<std::string_view, kOpKinds> names = {
      "alloc",      "free",     "alloc_many",    "free_swa",   "flush",         "translate",   "batch",
      "rebind",     "write",    "read",          "split",      "drop_batch",    "begin_read",  "end_read",
      "move_pages", "swa_translate", "page_table", "remap_indices", "capture",   "replay",      "checkpoint", "rebuild",
      "host_alloc", "host_free", "lease_acquire", "lease_release", "record_event", "offload", "load_back", "transfer_wait"};
  return names[static_cast<std::size_t>(kind)];
}

std::string SwarmWeights::describe() const {
  std::string out;
  for (std::size_t i = 0; i < kOpKinds; ++i) {
    out += (i ? " " : "") + std::string(op_kind_name(static_cast<OpKind>(i))) + ":";
    out += weight[i] == 0 ? "off" : std::to_string(weight[i]);
  }
  return out;
}

SwarmWeights SwarmWeights::uniform() {
  SwarmWeights w;
  w.weight.fill(1);
  return w;
}

SwarmWeights draw_swarm(Choices& choices, bool host_ops) {
  SwarmWeights w;
  for (std::size_t i = 0; i < kOpKinds; ++i) {
    if (is_host_kind(static_cast<OpKind>(i)) && !host_ops) continue;  // off, and nothing drawn
    if (static_cast<OpKind>(i) == OpKind::alloc) {
      w.weight[i] = static_cast<std::uint32_t>(choices.between(1, 16));
      continue;
    }
    if (static_cast<OpKind>(i) == OpKind::rebuild) {
      w.weight[i] = choices.chance(1, 3) ? 1 : 0;
      continue;
    }
    // The host kinds: the allocation, the transfers and their waits are always on (a run that
    // never waits keeps every transfer in flight); the rest as any other kind.
    if (static_cast<OpKind>(i) == OpKind::host_alloc || static_cast<OpKind>(i) == OpKind::offload ||
        static_cast<OpKind>(i) == OpKind::load_back || static_cast<OpKind>(i) == OpKind::transfer_wait) {
      w.weight[i] = static_cast<std::uint32_t>(choices.between(2, 16));
      continue;
    }
    // Off with probability 1/3 (the draw shrinks toward off), else 1..16.
    const std::uint64_t draw = choices.below(48);
    w.weight[i] = draw < 16 ? 0 : static_cast<std::uint32_t>(draw % 16 + 1);
  }
  return w;
}

SwarmWeights swarm_from_seed(std::uint64_t seed, bool host_ops) {
  RngChoices choices(Rng(seed).derive("swarm"));
  return draw_swarm(choices, host_ops);
}

}  // namespace kvtwin::props
