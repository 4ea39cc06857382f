// Fault switches: real bugs from the seeds and peer projects (SPEC.md section 10), planted in the
// CUDA implementation behind named, off-by-default switches, so the harness can show that its
// default check catches each one. A switch changes exactly one decision in gpu/; everything else
// runs as usual. Bugs 15 and 16 (stored-page keys) live outside gpu/.
//
// Every switch has an entry in fault_catalogue(): its name, the SPEC 10 class it reproduces, what
// it does and where in gpu/ it lives, so the harness can list the GPU's faults without knowing
// them. tests/gpu/differential_test.cpp holds one reproducer per switch (FaultSwitch.*).
//
// This header includes no CUDA header: harness code (traces, CLI) sets faults by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace kvtwin::gpu {

struct Faults {
  bool skip_rebind = false;                // 1: rebind marks the loc physical but does not translate it
  bool no_mark_check = false;              // 2: the write door accepts an unmarked loc
  bool split_drops_mark = false;           // 3: a split's children fall back to "virtual"
  bool cross_gets_batch_loc = false;       // 4: a cross-attention layer writes through the batch loc
  bool stale_loc_tail = false;             // 5: the decode loc refill leaves lanes past the batch stale
  bool stale_table_lengths = false;        // 6: the page-table refill uses the previous replay's lengths
  bool remap_stale_bound = false;          // 6: the index remap is bounded by kv_indptr's last entry, not kv_indptr[bs]
  bool remap_fresh_buffer = false;         // 7: the index remap writes a fresh buffer, not in place
  bool stride_from_shape = false;          // 8: attention derives the in-page token stride from the shape
  bool move_stride_from_shape = false;     // 8: the page-move kernel derives the page envelope from the row shape
  bool negative_wraps = false;             // 9: a negative id indexes v2p from the end instead of the sink
  bool tombstone_live = false;             // 10: a tombstone (-1) is not clamped to the sink
  bool page_table_tombstone_live = false;  // 10: the page-table kernel does not clamp a -1 entry to the sink
  bool graph_swa_tombstone_live = false;   // 10: the in-graph SWA translate does not route a tombstone to the sink
  bool sink_counts_as_allocated = false;   // 10: the decode step takes page v >= 0 as allocatable (> 0 is meant)
  bool pairing_out_of_order = false;       // 11: compaction pairs survivors with holes in reverse order
  bool move_under_reader = false;          // 12: a move ignores the readers holding its pages
  bool transfer_before_producer_event = false;  // 13: a host transfer resolves ids and copies before waiting for its producers
  bool alloc_many_partial = false;         // 14: alloc_many leaves earlier grants behind on "no room"
  bool row_misaligned_accepted = false;    // 17: a row that is not a multiple of 16 bytes is accepted
  bool int32_offsets = false;              // 18: the write and read doors compute byte offsets in int32
  bool int32_offsets_move = false;         // 18: the page-move kernel computes page offsets in int32
  bool int32_offsets_attention = false;    // 18: the decode attention computes K/V element offsets in int32
  bool transfer_logical_as_physical = false;   // 19: a host transfer takes host logical ids as physical pages
  bool compaction_ignores_transfers = false;   // 20: device and host compaction run with transfers in flight
  bool swa_offload_token_filter = false;       // 21: an SWA offload filters single tokens, not whole pages
  bool state_reused_under_reader = false;      // 22: state_alloc takes a slot a reader still reads (moved away by compaction)
  bool state_entry_padded = false;             // 23: state slot addresses use the entry padded to 32 bytes, the budget E_state
  bool float_relocation_source_order = false;  // SPEC 11: make_room copies the float's pages in source order

  bool any() const;
  bool operator==(const Faults&) const = default;
};

// One switch, described for people and for the harness's fault listing.
struct FaultInfo {
  std::string_view name;   // as set_fault() takes it
  int spec_class = 0;      // the SPEC.md section 10 item it reproduces (1 .. 23); 0: a SPEC 11 rule of its own
  std::string_view what;   // one line: the bug, as it behaves
  std::string_view where;  // the code it lives in, and the operations that reach it
};

// Every switch, in the order of the struct above.
const std::vector<FaultInfo>& fault_catalogue();

// Every switch's name, in the same order.
const std::vector<std::string_view>& fault_names();

// Turns one switch on by name; an unknown name is an error listing the known ones.
Status set_fault(Faults& faults, std::string_view name);

// "a,b,c" -> those switches on; "" -> none.
Result<Faults> parse_faults(std::string_view comma_separated);

// The names of the switches that are on, comma-separated ("" when none).
std::string to_string(const Faults& faults);

}  // namespace kvtwin::gpu
