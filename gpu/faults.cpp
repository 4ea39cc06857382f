// Fault switches by name, with their catalogue (faults.h). One table is the single source: the
// names, the struct members they set, their SPEC 10 classes and descriptions.
#include "gpu/faults.h"

#include <array>

namespace kvtwin::gpu {
namespace {

using Member = bool Faults::*;

struct Entry {
  FaultInfo info;
  Member member;
};

constexpr std::size_t kSwitches = 29;
// Every member of Faults is one switch of the table (a member added without a row fails here;
// faults_test checks that the rows set distinct members).
static_assert(sizeof(Faults) == kSwitches * sizeof(bool), "every fault switch needs a row in table()");

const std::array<Entry, kSwitches>& table() {
  static const std::array<Entry, kSwitches> kTable{{
      {{"skip_rebind", 1, "rebind marks the batch loc physical but leaves the virtual ids in it",
        "Batches::rebind (batches.cpp); seen by write"},
       &Faults::skip_rebind},
      {{"no_mark_check", 2, "the unified pool's write door accepts an unmarked (possibly virtual) loc",
        "Doors::write (doors.cpp)"},
       &Faults::no_mark_check},
      {{"split_drops_mark", 3, "a split's children fall back to \"virtual\" instead of the parent's mark",
        "Batches::split (batches.cpp); seen by split's answer and write"},
       &Faults::split_drops_mark},
      {{"cross_gets_batch_loc", 4, "a cross-attention layer writes through the batch's marked loc, not its encoder loc",
        "Batches::for_layer (batches.cpp); seen by write on a cross layer"},
       &Faults::cross_gets_batch_loc},
      {{"stale_loc_tail", 5, "the decode loc refill leaves lanes past the live batch as an earlier replay left them",
        "DecodeStep::replay (translate kernel's out_width)"},
       &Faults::stale_loc_tail},
      {{"stale_table_lengths", 6, "the page-table refill is bounded by the graph's lengths (the previous replay's)",
        "DecodeStep::replay (page-table kernel's seq_lens)"},
       &Faults::stale_table_lengths},
      {{"remap_stale_bound", 6,
        "the in-place index remap is bounded by kv_indptr's last entry (a stale, larger batch), not kv_indptr[bs], so "
        "the stale tail of kv_indices is remapped too",
        "remap_indices kernel; seen by remap_indices"},
       &Faults::remap_stale_bound},
      {{"remap_fresh_buffer", 7, "the index remap writes a fresh buffer; the capture-stable one keeps virtual ids",
        "Translation::remap_indices (translation.cpp)"},
       &Faults::remap_fresh_buffer},
      {{"stride_from_shape", 8, "the decode attention's in-page token stride is heads * head_dim, not the entry",
        "DecodeStep (attention views); seen by replay"},
       &Faults::stride_from_shape},
      {{"move_stride_from_shape", 8,
        "the page-move kernel sees a page as page_size rows of the first part's shape, not page_size entries: it "
        "copies the wrong bytes from and to the wrong places",
        "DevicePoolBytes::move_pages (pool_bytes.cpp, page-move kernel); seen by free, free_swa, flush and move_pages"},
       &Faults::move_stride_from_shape},
      {{"negative_wraps", 9, "a negative id indexes v2p from its end (Python style) instead of going to the sink",
        "translate kernel; seen by translate, rebind and replay"},
       &Faults::negative_wraps},
      {{"tombstone_live", 10, "a tombstone (-1) in v2p or the SWA v2p is not clamped to the sink",
        "translate and SWA-translate kernels; seen by translate, swa_translate, rebind, write and replay"},
       &Faults::tombstone_live},
      {{"page_table_tombstone_live", 10,
        "the page-table kernel writes v2p's -1 (an unbound page or the sentinel row) into the block table instead of "
        "the sink page 0",
        "page-table kernel; seen by page_table (replay's refill uses it on allocated tokens only)"},
       &Faults::page_table_tombstone_live},
      {{"graph_swa_tombstone_live", 10,
        "the decode graph's SWA translate does not route a tombstoned page to the sink; the negative loc indexes the "
        "SWA view from its end (as a PyTorch index would), so the rows land on the top SWA page",
        "DecodeStep's captured SWA translate; seen by replay on a full+SWA pool"},
       &Faults::graph_swa_tombstone_live},
      {{"sink_counts_as_allocated", 10,
        "the decode step's allocated-token check takes virtual page v >= 0 where v > 0 is meant, so a token of the "
        "sink page (whose v2p row is 0, not -1) passes as allocated and the replay is not refused",
        "DecodeStep::replay's validation; seen by replay"},
       &Faults::sink_counts_as_allocated},
      {{"pairing_out_of_order", 11, "compaction pairs survivors with holes in reverse order",
        "DeviceAllocator::plan_compaction (device_allocator.cpp); seen by free, free_swa and flush"},
       &Faults::pairing_out_of_order},
      {{"move_under_reader", 12, "a move runs while a reader holds the physical address of a page it moves",
        "Readers::check_moves (readers.cpp); seen by free, free_swa, flush and move_pages"},
       &Faults::move_under_reader},
      {{"transfer_before_producer_event", 13,
        "a host transfer resolves its ids and copies on its copy stream before it waits for its producers (the "
        "compute work, its wait_event, its stream's last transfer): the seed's index preparation ahead of the "
        "producer-event wait, so the copy reads what the producer has not written yet (with the switch on, a "
        "transfer that waits for no event is slowed by 20 ms on its copy stream, so the race shows every time)",
        "HostTransfers::submit (transfers.cpp); seen by offload and load_back, in the bytes a later read returns"},
       &Faults::transfer_before_producer_event},
      {{"alloc_many_partial", 14, "alloc_many is not all-or-nothing: earlier grants stay behind on \"no room\"",
        "GpuPool::alloc_many (gpu_pool.cpp)"},
       &Faults::alloc_many_partial},
      {{"row_misaligned_accepted", 17, "a row that is not a multiple of 16 bytes is accepted and stored misaligned",
        "GpuPool::build (fault_layout.cpp)"},
       &Faults::row_misaligned_accepted},
      {{"int32_offsets", 18, "the write and read doors compute a row's byte offset in int32 (wraps past 2^31)",
        "row-copy kernel; seen by write, read and replay's in-graph write on pools past 2 GiB"},
       &Faults::int32_offsets},
      {{"int32_offsets_move", 18, "the page-move kernel computes a page's byte offset in int32 (wraps past 2^31)",
        "page-move kernel; seen by free, free_swa, flush and move_pages on pools past 2 GiB"},
       &Faults::int32_offsets_move},
      {{"int32_offsets_attention", 18,
        "the decode attention computes K/V element offsets in int32 (wraps past 2^31 elements: 2 GiB of fp8, 4 GiB "
        "of bf16)",
        "decode attention kernel; seen by replay on pools past 2^31 elements"},
       &Faults::int32_offsets_attention},
      {{"transfer_logical_as_physical", 19,
        "a host transfer hands the host pool its logical (cache) ids as physical pages, without resolving them "
        "through the arena's map: once the arena has holes or has compacted, the copy lands on another page",
        "resolve_transfer kernel (transfer_kernels.cu); seen by offload and load_back, in the bytes read back"},
       &Faults::transfer_logical_as_physical},
      {{"compaction_ignores_transfers", 20,
        "device and host compaction are not gated on asynchronous copies in flight: eager free's compaction, "
        "flush and move_pages move pages a transfer copies, and host compaction neither refuses nor synchronizes "
        "the transfers' events and moves pinned pages under a copy",
        "GpuPool::check_moves and move_pages (gpu_pool.cpp), PinnedHostArena::gate_compaction (host_arena.cpp); "
        "seen by free, flush, move_pages and host_alloc while a transfer is in flight"},
       &Faults::compaction_ignores_transfers},
      {{"swa_offload_token_filter", 21,
        "a sliding-window offload filters single bound tokens instead of whole pages, so a partly listed page is "
        "taken and the length need not be a multiple of the page size (refused then, as the seed's assert)",
        "HostTransfers::offload (transfers.cpp) on the SWA side with token ids; seen by offload"},
       &Faults::swa_offload_token_filter},
      {{"state_reused_under_reader", 22,
        "a state slot that compaction moved away from while a forward still read it is not quarantined from reuse: "
        "the next state_alloc takes it, so the new request's state overwrites what the reader reads",
        "DeviceStatePool and GpuPool::state_alloc (state_pool.cpp, gpu_pool.cpp); seen by state_alloc after a "
        "state_free or flush moved a slot an open state reader holds"},
       &Faults::state_reused_under_reader},
      {{"state_entry_padded", 23,
        "the state sub-pool's slot addresses use the entry padded to 32 bytes, as a token entry is, while the "
        "byte budget charges E_state: the views and the budget disagree and slots land past their bytes",
        "DeviceStatePool::slot_byte (state_pool.cpp); seen by state_write, state_read and the state's compaction "
        "on a state entry that is not a multiple of 32 bytes"},
       &Faults::state_entry_padded},
      {{"float_relocation_source_order", 0,
        "the tri-pool float's make_room copies its page envelopes in source order (a plain loop over the span), so "
        "a page moving up by less than the span's length is overwritten by the page below before it has left",
        "DeviceAllocator::relocate_float (device_allocator.cpp); seen by alloc and state_alloc on a tri-pool whose "
        "float is relocated up"},
       &Faults::float_relocation_source_order},
  }};
  return kTable;
}

}  // namespace

bool Faults::any() const {
  for (const Entry& e : table())
    if (this->*e.member) return true;
  return false;
}

const std::vector<FaultInfo>& fault_catalogue() {
  static const std::vector<FaultInfo> kCatalogue = [] {
    std::vector<FaultInfo> out;
    for (const Entry& e : table()) out.push_back(e.info);
    return out;
  }();
  return kCatalogue;
}

const std::vector<std::string_view>& fault_names() {
  static const std::vector<std::string_view> kNames = [] {
    std::vector<std::string_view> names;
    for (const Entry& e : table()) names.push_back(e.info.name);
    return names;
  }();
  return kNames;
}

Status set_fault(Faults& faults, std::string_view name) {
  for (const Entry& e : table()) {
    if (e.info.name == name) {
      faults.*e.member = true;
      return ok_status();
    }
  }
  std::string known;
  for (std::string_view n : fault_names()) known += (known.empty() ? "" : ", ") + std::string(n);
  return make_error(ErrorKind::invalid_argument,
                    "unknown GPU fault switch '" + std::string(name) + "'; known switches: " + known);
}

Result<Faults> parse_faults(std::string_view list) {
  Faults faults;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    if (!name.empty()) KVTWIN_TRY_STATUS(set_fault(faults, name));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return faults;
}

std::string to_string(const Faults& faults) {
  std::string out;
  for (const Entry& e : table())
    if (faults.*e.member) out += (out.empty() ? "" : ",") + std::string(e.info.name);
  return out;
}

}  // namespace kvtwin::gpu
