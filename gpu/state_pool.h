// The state sub-pool of a hybrid chain on the device (SPEC.md section 11): one slot per request
// (page size 1) at the low end of [state up | owner down], its bytes in the pool's one buffer.
//
// How it works: the slots are an ordinary grow-up DeviceSide (device_side.h) whose pages are
// single slots of E_state bytes, with its own free queue of virtual slot ids, so binding, holes
// and the tables' device rows are SPEC 4's with page size 1. Around it, on the host: the request
// -> virtual slot table (requests are host numbers), and the quarantine of SPEC 10.22: a slot that
// compaction moved away from while a reader (the forward that read it) still held it keeps its
// old bytes for that reader, so it is neither reused nor covered by the owner's growth until every
// such reader is done. A slot's allocation and compaction are planned on the host from the host
// copy of the tables the token sides keep too (side_copy.h; eager: at most the band's last slot
// moves into the freed one; a flush: the band's top slots into its lowest holes, paired in order)
// and committed on the device: the tables by apply_compaction, the bytes as one envelope copy
// (E_state bytes, tens of MiB for a real model) per move.
//
// State writes come from the content oracle (core/oracle.h): every block's every layer made on
// the host into pinned staging laid out as the entry, then one copy of the whole entry.
//
// Fault switches that live here (faults.h): state_reused_under_reader (class 22: a quarantined
// slot is taken by the next state_alloc) and state_entry_padded (class 23: slot addresses use the
// entry padded to 32 bytes as a token entry is, while the budget charges E_state).
//
// What it does not cover: the float middle of the tri-pool (refused at build, gpu_pool.cpp), the
// owner's pages (device_allocator.h), which readers hold what (readers.h: the pool asks).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"
#include "core/state_layout.h"
#include "gpu/device_buffer.h"
#include "gpu/device_side.h"
#include "gpu/faults.h"
#include "gpu/pinned_buffer.h"
#include "gpu/pool_bytes.h"
#include "gpu/side_copy.h"

namespace kvtwin::gpu {

// The state side's place in the tables digest (core/tables_digest.cpp: side 15, its request table
// and quarantine as side 16).
inline constexpr std::uint64_t kStateDigestSide = 15;

class DeviceStatePool {
 public:
  // One planned slot compaction (SideCopy's plan): sources[i] -> destinations[i], then the watermark.
  struct Moves : SideMoves {
    std::int64_t freed = -1;  // a free: the physical slot it frees
  };
  // Whether an open reader holds a physical slot.
  using Held = std::function<bool(std::int64_t)>;

  // The slots of `derived` (it has a state sub-pool). `config` and `derived` outlive the pool.
  Status init(const PoolConfig& config, const PoolDerived& derived, cudaStream_t stream);
  void reset();
  bool built() const { return derived_ != nullptr; }

  const std::string& name() const { return derived_->state_layout->sub_pool; }
  const DeviceSide& slots() const { return slots_; }
  std::int64_t num_slots() const { return slots_.num_pages(); }
  std::uint64_t entry_bytes() const { return derived_->state_layout->entry_bytes; }

  // The virtual slot of a request, or -1.
  std::int64_t slot_of(std::uint64_t request) const;
  // The physical slot of a virtual one (-1: unbound).
  std::int64_t physical_of(std::int64_t vslot) const { return copy_.physical_of(vslot); }
  // The physical slot the next allocation takes (the lowest hole, else the watermark), or -1 when
  // no virtual id or usable slot is left.
  std::int64_t next_physical() const;
  // One past the highest byte the state sub-pool may not give away: its band's end, or past its
  // highest quarantined slot (SPEC 10.22).
  std::uint64_t frontier_bytes() const;
  bool quarantined(std::int64_t slot) const { return quarantine_.count(slot) != 0; }

  // Binds the front virtual id to next_physical() for `request` (the caller checked room and
  // quarantine); returns the virtual slot.
  Result<std::int64_t> alloc(std::uint64_t request, cudaStream_t stream);
  // The moves a free of `request`'s slot makes (eager: SPEC 4.1 with page size 1; lazy: none),
  // and a flush's (every hole). Nothing changes.
  Moves plan_free(std::uint64_t request) const;
  Moves plan_flush() const;
  // Commits a plan made just before: unbinds (a free), moves the tables and the envelopes, puts
  // the freed id at the queue's back; sources a reader holds enter the quarantine.
  Status commit_free(std::uint64_t request, const Moves& moves, const Held& held, const DevicePoolBytes& bytes,
                     const Faults& faults, cudaStream_t stream);
  Status commit_flush(const Moves& moves, const Held& held, const DevicePoolBytes& bytes, const Faults& faults,
                      cudaStream_t stream);
  // A state reader ended: slots no reader holds any more leave the quarantine.
  void release_quarantine(const Held& held);

  // The request's whole state (every block, every layer) with the oracle's bytes of `write_number`.
  Status write(std::int64_t vslot, std::uint64_t request, std::uint64_t write_number, const DevicePoolBytes& bytes,
               const Faults& faults, cudaStream_t stream);
  // One block of one layer at physical slots (the sink's slots read as zeros); the caller checked
  // the slots' range.
  Result<std::vector<std::uint8_t>> read(const std::vector<std::int64_t>& slots, const StateBlock& block,
                                         std::uint32_t layer, const DevicePoolBytes& bytes, const Faults& faults,
                                         cudaStream_t stream) const;

  // What a checker compares: the slot tables, the request table, the quarantine.
  Status add_tables(PoolTables& out, cudaStream_t stream) const;
  // This sub-pool's digest terms (core/tables_digest.h): what launch_tables_digest reads of its
  // device rows, and the host terms (counters, the request table, the quarantine).
  DigestRanges digest_ranges() const;
  std::uint64_t digest_host_terms() const;
  // The device tables against the host counters and each other, the request table against v2p,
  // every quarantined slot held by a reader, the frontier below `owner_begin_byte`.
  // With `tables_read`, what add_tables adds is added to it from the same download.
  Status verify(const Held& held, std::uint64_t owner_begin_byte, cudaStream_t stream,
                PoolTables* tables_read = nullptr) const;

 private:
  // add_tables from a snapshot of the slots already read (its tables moved out).
  void add_tables_of(PoolTables& out, SideSnapshot&& slots) const;
  // Where physical slot `slot` starts (fault state_entry_padded: the entry padded to 32 bytes).
  std::uint64_t slot_byte(std::int64_t slot, const Faults& faults) const;
  Status move_envelopes(const Moves& moves, const DevicePoolBytes& bytes, const Faults& faults,
                        cudaStream_t stream) const;
  Status apply_moves(const Moves& moves, bool clears_holes, const Held& held, const DevicePoolBytes& bytes,
                     const Faults& faults, cudaStream_t stream);

  const PoolConfig* config_ = nullptr;
  const PoolDerived* derived_ = nullptr;
  DeviceSide slots_;
  mutable DeviceBuffer<std::int64_t> scratch_a_, scratch_b_;  // one operation's device id lists
  // The host's copy of the slot tables (a few hundred slots at most: E_state is tens of MiB), kept
  // with every device change so that no state operation waits for the device to learn an id;
  // verify() holds it against the device tables (check_side_copy), and tables() reports the
  // device's own.
  SideCopy copy_;
  std::map<std::uint64_t, std::int64_t> requests_;           // request -> virtual slot
  std::set<std::int64_t> quarantine_;                        // physical slots (SPEC 10.22)
  PinnedBuffer<std::uint8_t> staging_;                       // one entry, made by the oracle
};

}  // namespace kvtwin::gpu
