// Swarm testing: each run switches some operations off and weights the rest differently, so
// that runs differ in kind and not only in detail (a run without frees fills the pool; a run of
// mostly frees and flushes compacts all the time). One SwarmWeights per run, drawn first from
// the run's choices, so a seed fixes it and a shrinking RapidCheck case can switch operations
// off on its way to a short counterexample.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "props/choices.h"

namespace kvtwin::props {

// The operations a generator emits (every Op but build). The order is the shrink order: the
// simplest operations first.
enum class OpKind : std::uint8_t {
  alloc,
  free,
  alloc_many,
  free_swa,
  flush,
  translate,
  batch,
  rebind,
  write,
  read,
  split,
  drop_batch,
  begin_read,
  end_read,
  move_pages,
  swa_translate,
  page_table,
  remap_indices,
  capture,
  replay,
  checkpoint,
  rebuild,  // a build op mid-run (rare: on in one run of three, at weight 1)
  // SPEC 8: the host arena and transfers, drawn only where every backend of the run has one
  // (OpGenOptions::host_ops). Last, so that adding them left every earlier run's draws as they were.
  host_alloc,
  host_free,
  lease_acquire,
  lease_release,
  record_event,
  offload,
  load_back,
  transfer_wait,
};
inline constexpr std::size_t kOpKinds = 30;

// Whether a kind is one of the host arena's.
inline bool is_host_kind(OpKind kind) { return kind >= OpKind::host_alloc; }

std::string_view op_kind_name(OpKind kind);

struct SwarmWeights {
  std::array<std::uint32_t, kOpKinds> weight{};  // 0: switched off for the run

  std::uint32_t of(OpKind kind) const { return weight[static_cast<std::size_t>(kind)]; }
  bool enabled(OpKind kind) const { return of(kind) > 0; }
  // "alloc:9 free:3 flush:off ..." in kind order.
  std::string describe() const;

  // Every operation on, with equal weight.
  static SwarmWeights uniform();
};

// Draws a run's weights: alloc is always on (weight 1..16, without it a run has nothing to
// work on); rebuild is on in one run of three at weight 1 (a rebuild resets what the run built
// up); every other operation is off with probability 1/3, else weighted 1..16.
// With host_ops the host kinds are drawn after the others (host_alloc, offload, load_back and
// transfer_wait always on, 2..16; the rest as any kind); without, they are off and nothing more
// is drawn, so a run without host operations draws exactly what it did before they existed.
SwarmWeights draw_swarm(Choices& choices, bool host_ops = false);

// The same from a seed (for drivers without RapidCheck).
SwarmWeights swarm_from_seed(std::uint64_t seed, bool host_ops = false);

}  // namespace kvtwin::props
