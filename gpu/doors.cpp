// The write and read doors (doors.h). Comments cite the SPEC.md rule (or docs/decisions.md
// entry) each branch implements.
#include "gpu/doors.h"

#include <algorithm>
#include <span>

#include "core/oracle.h"
#include "core/reasons.h"
#include "gpu/device_side.h"

namespace kvtwin::gpu {
namespace {
Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
Error out_of_range(std::string message) { return make_error(ErrorKind::out_of_range, std::move(message)); }
}  // namespace

Status Doors::init(const PoolConfig& config, const PoolDerived& derived) {
  config_ = &config;
  derived_ = &derived;
  patterns_.clear();  // another pool: another seed, other parts
  KVTWIN_TRY_STATUS(check_flags_.reserve(3));
  return check_flags_host_.reserve(3);
}

Status Doors::write(const Write& op, const Batches& batches, const DeviceAllocator& allocator,
                    const DevicePoolBytes& bytes, const HostTransfers& transfers, const Faults& faults,
                    cudaStream_t stream) {
  const std::size_t layers = derived_->plan.layer_map.size();
  if (op.layer >= layers)
    return out_of_range("write: layer " + std::to_string(op.layer) + " is outside the model's " +
                        std::to_string(layers) + " layers");
  const LayerPlacement placement = derived_->plan.layer_map[op.layer];
  const DenseEntryLayout& layout = derived_->layouts[placement.sub_pool];

  // The loc, its mark and the tokens whose rows the lanes carry.
  LayerLoc target;
  if (op.batch.has_value()) {
    if (!op.loc.empty() || !op.tokens.empty() || op.physical)
      return invalid("write: give either a batch or an explicit loc with its tokens, not both");
    KVTWIN_TRY(target, batches.for_layer(*op.batch, op.layer, placement.kind == LayerKind::cross, faults));
  } else {
    if (op.loc.size() != op.tokens.size())
      return invalid("write: " + std::to_string(op.loc.size()) + " locs but " + std::to_string(op.tokens.size()) +
                     " tokens; give the virtual token of every lane");
    if (op.loc.size() > Batches::kMaxLanes)
      return invalid("write: more than " + std::to_string(Batches::kMaxLanes) + " lanes");
    KVTWIN_TRY(target.loc, upload_ids(explicit_loc_, op.loc, stream));
    target.lanes = static_cast<std::int64_t>(op.loc.size());
    target.physical = op.physical;  // a loc translated elsewhere states its own mark
    target.tokens = &op.tokens;
    target.ids = &op.loc;  // as given (version 0: judged at every write)
  }
  const std::int64_t* loc = target.loc;
  const std::int64_t lanes = target.lanes;
  const std::vector<std::int64_t>* tokens = target.tokens;
  // SPEC 6: the unified pool's door checks the mark first, on every call: a host flag read, no
  // device sync (fault 2 skips it).
  if (!target.physical && !faults.no_mark_check)
    return make_error(ErrorKind::unmarked_loc,
                      "write to layer " + std::to_string(op.layer) +
                          ": the unified pool refuses an unmarked loc (its ids may be virtual); rebind the batch first "
                          "(a rebind op translates it and marks it physical), or, for ids already translated "
                          "elsewhere, give the explicit loc with physical: true");
  // The loc is in the owner's physical id space; an SWA layer derives its own (SPEC 4.3).
  const bool swa_layer = placement.kind == LayerKind::swa;
  const std::size_t loc_side = swa_layer ? 0 : placement.sub_pool;
  const bool writes_rows = !config_->tables_only && lanes > 0;

  // ---- the checks. Word 0: a loc outside its sub-pool; word 1: a negative SWA loc (fault 10);
  // word 2: two lanes on one non-sink slot; judged in that order, as if each had been read on its
  // own. A loc whose ids the host holds, on a layer that writes through it as it is (not an SWA
  // layer's derived loc), is judged from those ids; otherwise on the device, read back once
  // (docs/gpu.md "Synchronization").
  const std::int64_t sink = allocator.sink_end(placement.sub_pool);
  const bool judged_on_host = !swa_layer && target.ids != nullptr;
  // An SWA layer after another of the same batch loc, with nothing but writes between: its
  // derived loc and verdict are the last one's (SwaLocMemo).
  const std::int64_t loc_slots = allocator.slot_count(loc_side);
  const bool memo_hit = swa_layer && lanes > 0 && target.version != 0 && swa_memo_ &&
                        swa_memo_->version == target.version && swa_memo_->loc == loc && swa_memo_->lanes == lanes &&
                        swa_memo_->sub_pool == placement.sub_pool;
  std::uint32_t* flags = check_flags_.get();
  const std::int64_t* final_loc = loc;
  // Up to kWriteCheckMaxLanes lanes (every decode step, most prefill chunks) the three words come
  // from one launch (check_write_loc); longer locs sort.
  const bool device_checks = !judged_on_host && !memo_hit && lanes > 0;
  const bool one_launch = device_checks && lanes <= kWriteCheckMaxLanes;
  if (device_checks && !one_launch) {
    KVTWIN_CUDA_TRY(cudaMemsetAsync(flags, 0, check_flags_.bytes(), stream));
    KVTWIN_TRY_STATUS(flag_outside(loc, lanes, 0, loc_slots, flags + 0, stream));
  }
  if (memo_hit) final_loc = swa_loc_.get();
  if (swa_layer && lanes > 0 && !memo_hit) {
    swa_memo_.reset();  // swa_loc_ is about to hold another loc's
    // Out-of-range ids of the full loc read the -1 sentinel here (the kernel bounds every lookup);
    // such a write is refused by word 0 before the SWA loc matters.
    KVTWIN_TRY_STATUS(swa_loc_.reserve(static_cast<std::size_t>(lanes)));
    SwaTranslateParams p;
    p.in = loc;
    p.out = swa_loc_.get();
    p.n = lanes;
    p.full_p2v = allocator.side(0).p2v();
    p.full_p2v_len = allocator.side(0).p2v_len();
    p.swa_v2p = allocator.side(1).v2p();
    p.swa_v2p_len = allocator.side(1).v2p_len();
    p.page_size = static_cast<std::int64_t>(config_->page_size);
    p.tombstone_live = faults.tombstone_live;
    KVTWIN_CUDA_TRY(launch_swa_translate(p, stream));
    final_loc = swa_loc_.get();
  }
  // SPEC 6: two lanes with one non-sink loc would race, and are refused. The door detects them
  // itself, on the layer's final loc ignoring sink lanes (docs/decisions.md). This is the
  // `checked` mode of the door; the pool runs it on every write, whatever op.checked says,
  // because the contract refuses duplicates always (the model does) and a run must not depend on
  // a caller remembering to ask.
  if (one_launch)
    KVTWIN_TRY_STATUS(check_write_loc(loc, final_loc, lanes, loc_slots, sink, flags, stream));
  // With fault 10 a tombstone yields a negative id; the door refuses it instead of writing outside.
  if (swa_layer && device_checks && faults.tombstone_live)
    KVTWIN_TRY_STATUS(flag_outside(final_loc, lanes, 0, allocator.slot_count(placement.sub_pool), flags + 1, stream));
  if (device_checks && lanes > 1 && !one_launch) {
    // Sorted, then neighbours compared.
    KVTWIN_TRY_STATUS(duplicate_sorted_.reserve(static_cast<std::size_t>(lanes)));
    KVTWIN_TRY_STATUS(duplicate_keys_.reserve(static_cast<std::size_t>(lanes)));
    KVTWIN_TRY_STATUS(sink_to_zero(final_loc, lanes, sink, duplicate_keys_.get(), stream));
    KVTWIN_TRY_STATUS(
        flag_nonzero_duplicate(duplicate_keys_.get(), lanes, duplicate_sorted_.get(), sort_temp_, flags + 2, stream));
  }
  if (device_checks)
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(check_flags_host_.get(), flags, check_flags_.bytes(), cudaMemcpyDeviceToHost, stream));

  // ---- while the device checks, the host prepares the rows (docs/decisions.md): the oracle key
  // of each part for each lane's token, the rows themselves made on the device from the part's
  // pattern (uploaded once a pool); rows not a whole number of words are made here and staged.
  std::uint64_t lane_bytes = 0;
  bool words_only = true;
  for (const DensePart& part : layout.parts) {
    lane_bytes += part.row_bytes();
    words_only = words_only && (part.row_bytes() | part.offset_bytes | part.layer_stride_bytes | layout.entry_bytes) % 8 == 0;
  }
  const bool rows_on_device = writes_rows && words_only;
  std::vector<std::uint8_t> rows;
  std::vector<std::uint64_t> keys;
  std::vector<RowSegment> segments;
  if (writes_rows) {
    if (rows_on_device)
      keys.resize(static_cast<std::size_t>(lanes) * layout.parts.size());
    else
      rows.resize(static_cast<std::size_t>(lane_bytes * static_cast<std::uint64_t>(lanes)));
    std::uint64_t part_offset = 0;
    for (std::size_t pi = 0; pi < layout.parts.size(); ++pi) {
      const DensePart& part = layout.parts[pi];
      for (std::int64_t lane = 0; lane < lanes; ++lane) {
        const std::size_t at = static_cast<std::size_t>(lane);
        const RowIdentity id{at < tokens->size() ? (*tokens)[at] : -1, static_cast<std::uint32_t>(placement.sub_pool),
                             placement.local_layer, static_cast<std::uint32_t>(pi), op.write_number};
        if (rows_on_device)
          keys[at * layout.parts.size() + pi] = oracle_row_key(config_->seed, id);
        else
          fill_oracle_row(config_->seed, id, part.dtype,
                          std::span<std::uint8_t>(rows.data() + at * lane_bytes + part_offset, part.row_bytes()));
      }
      RowSegment seg;
      if (rows_on_device) {
        const RowIdentity pattern_of{0, static_cast<std::uint32_t>(placement.sub_pool), placement.local_layer,
                                     static_cast<std::uint32_t>(pi), 0};
        KVTWIN_TRY(seg.pattern, device_pattern(pattern_of, part.dtype, part.row_bytes(), stream));
        seg.mask = oracle_key_mask(part.dtype);
      }
      seg.pool_offset_bytes = part.offset_bytes + std::uint64_t{placement.local_layer} * part.layer_stride_bytes;
      seg.entry_bytes = layout.entry_bytes;
      seg.staging_offset_bytes = part_offset;
      seg.row_bytes = static_cast<std::uint32_t>(part.row_bytes());
      seg.loc_set = 0;
      seg.first_slot = allocator.sink_end(placement.sub_pool);  // SPEC 6: a lane at the sink is discarded
      segments.push_back(seg);
      part_offset += part.row_bytes();
    }
  }

  // ---- the answer: judged on the host, or the one synchronization a write then needs.
  if (lanes > 0) {
    std::uint32_t verdict[3] = {0, 0, 0};
    if (judged_on_host) {
      const LocVerdict v = judge_loc(target, loc_slots, sink);
      verdict[0] = v.outside ? 1 : 0;
      verdict[2] = v.duplicate ? 1 : 0;
    } else if (memo_hit) {
      std::copy(swa_memo_->verdict, swa_memo_->verdict + 3, verdict);
    } else {
      KVTWIN_CUDA_SYNC(stream);
      std::copy(check_flags_host_.get(), check_flags_host_.get() + 3, verdict);
      if (swa_layer && target.version != 0) {
        swa_memo_ = SwaLocMemo{target.version, loc, lanes, placement.sub_pool, {verdict[0], verdict[1], verdict[2]}};
      }
    }
    if (verdict[0] != 0)
      return out_of_range("write to layer " + std::to_string(op.layer) + ": a loc is negative or past sub-pool '" +
                          derived_->layouts[loc_side].sub_pool + "''s " + std::to_string(loc_slots) +
                          " slots; give physical token ids of the pool (0 is the sink)");
    if (verdict[1] != 0) return out_of_range("write: an SWA loc is negative (a tombstone taken as live)");
    if (verdict[2] != 0)
      return make_error(ErrorKind::duplicate_loc, "write to layer " + std::to_string(op.layer) +
                                                      ": two lanes write the same token of sub-pool '" + layout.sub_pool +
                                                      "' (last writer wins would race on a GPU); give each lane its "
                                                      "own loc or route padding lanes to the sink (0)");
  }
  if (lanes > 0 && transfers.any_in_flight()) {
    // SPEC 8: no lane writes a page an in-flight transfer holds (its final loc, read back only
    // while transfers are in flight).
    std::vector<std::int64_t> slots;
    if (judged_on_host) {
      slots.assign(target.ids->begin(), target.ids->begin() + lanes);
    } else {
      KVTWIN_TRY(slots, download_ids(final_loc, lanes, stream));
    }
    const std::int64_t ps = static_cast<std::int64_t>(config_->page_size);
    for (std::int64_t slot : slots) {
      if (slot < allocator.sink_end(placement.sub_pool)) continue;  // a sink lane writes nothing
      if (const auto t = transfers.holding_physical(placement.sub_pool, slot / ps))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "write to layer " + std::to_string(op.layer) + ": slot " + std::to_string(slot) +
                                " lies on a page transfer " + std::to_string(*t) +
                                " holds in flight; wait for it (transfer_wait) first");
      if (const auto t = transfers.covering_physical(placement.sub_pool, slot / ps, false))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "write to layer " + std::to_string(op.layer) + ": slot " + std::to_string(slot) +
                                " lies on a page whose bytes overlap a page transfer " + std::to_string(*t) +
                                " copies in flight; wait for it (transfer_wait) first");
    }
  }
  if (!writes_rows) return ok_status();

  // ---- the scatter, left running: nothing the host returns depends on it.
  const auto upload_segments = [&]() -> Status {
    KVTWIN_TRY_STATUS(row_segments_.reserve(segments.size()));
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(row_segments_.get(), segments.data(), segments.size() * sizeof(RowSegment),
                                    cudaMemcpyHostToDevice, stream));
    return ok_status();
  };
  if (rows_on_device) {
    RowCopyParams p;
    p.pool = bytes.data();
    p.pool_bytes = bytes.size_bytes();
    p.num_segments = static_cast<std::uint32_t>(segments.size());
    for (const RowSegment& s : segments) p.max_row_bytes = std::max(p.max_row_bytes, s.row_bytes);
    p.locs[0] = final_loc;
    p.lanes = lanes;
    // No staging: the patterns are device allocations (256-byte aligned), read at row offsets.
    p.vector16 = rows_vector16(p.pool, nullptr, 0, segments.data(), p.num_segments);
    p.int32_offsets = faults.int32_offsets;
    if (rows_fit_inline(segments.size(), keys.size())) {
      // A decode step's write: segments and keys travel in the launch (kernels.cuh InlineRows).
      InlineRows carried;
      std::copy(segments.begin(), segments.end(), carried.segments);
      std::copy(keys.begin(), keys.end(), carried.keys);
      KVTWIN_CUDA_TRY(launch_scatter_oracle_rows_inline(p, carried, stream));
      return ok_status();
    }
    KVTWIN_TRY_STATUS(upload_segments());
    KVTWIN_TRY_STATUS(row_keys_.reserve(keys.size()));
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(row_keys_.get(), keys.data(), keys.size() * sizeof(std::uint64_t),
                                    cudaMemcpyHostToDevice, stream));
    p.segments = row_segments_.get();
    p.keys = row_keys_.get();
    KVTWIN_CUDA_TRY(launch_scatter_oracle_rows(p, stream));
    return ok_status();
  }
  KVTWIN_TRY_STATUS(upload_segments());
  KVTWIN_TRY_STATUS(rows_staging_.reserve(rows.size()));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(rows_staging_.get(), rows.data(), rows.size(), cudaMemcpyHostToDevice, stream));
  RowCopyParams p;
  p.pool = bytes.data();
  p.pool_bytes = bytes.size_bytes();
  p.staging = rows_staging_.get();
  p.staging_lane_stride_bytes = lane_bytes;
  p.segments = row_segments_.get();
  p.num_segments = static_cast<std::uint32_t>(segments.size());
  for (const RowSegment& s : segments) p.max_row_bytes = std::max(p.max_row_bytes, s.row_bytes);
  p.locs[0] = final_loc;
  p.lanes = lanes;
  p.vector16 = rows_vector16(p.pool, p.staging, lane_bytes, segments.data(), p.num_segments);
  p.int32_offsets = faults.int32_offsets;
  KVTWIN_CUDA_TRY(launch_scatter_rows(p, stream));
  return ok_status();
}

Result<const std::uint8_t*> Doors::device_pattern(const RowIdentity& of, DType dtype, std::uint64_t row_bytes,
                                                  cudaStream_t stream) {
  const PatternKey key{of.sub_pool, of.layer, of.part, dtype, row_bytes};
  if (auto it = patterns_.find(key); it != patterns_.end()) return static_cast<const std::uint8_t*>(it->second.get());
  const std::vector<std::uint8_t>& pattern = oracle_pattern(config_->seed, of, dtype, row_bytes);
  DeviceBuffer<std::uint8_t> buffer;
  KVTWIN_TRY_STATUS(buffer.allocate(pattern.size()));
  // From pageable memory: the call returns once the bytes are staged (the cache may move on).
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(buffer.get(), pattern.data(), pattern.size(), cudaMemcpyHostToDevice, stream));
  const std::uint8_t* at = buffer.get();
  patterns_.emplace(key, std::move(buffer));
  return at;
}

Doors::LocVerdict Doors::judge_loc(const LayerLoc& target, std::int64_t slots, std::int64_t sink_end) {
  // A batch's loc is judged once per sub-pool for all the layers written through it.
  if (target.version != 0)
    for (const LocVerdict& v : verdicts_)
      if (v.version == target.version && v.slots == slots && v.sink_end == sink_end) return v;
  LocVerdict v{target.version, slots, sink_end, false, false};
  std::vector<std::int64_t> live;  // the lanes at or above the sink (a sink lane writes nothing)
  live.reserve(static_cast<std::size_t>(target.lanes));
  for (std::int64_t i = 0; i < target.lanes; ++i) {
    const std::int64_t id = (*target.ids)[static_cast<std::size_t>(i)];
    if (id < 0 || id >= slots) v.outside = true;
    if (id >= sink_end) live.push_back(id);
  }
  std::sort(live.begin(), live.end());
  v.duplicate = std::adjacent_find(live.begin(), live.end()) != live.end();
  if (target.version != 0) {
    constexpr std::size_t kKept = 16;
    if (verdicts_.size() == kKept) verdicts_.erase(verdicts_.begin());
    verdicts_.push_back(v);
  }
  return v;
}

Result<std::vector<std::uint8_t>> Doors::read(const Read& op, const DeviceAllocator& allocator,
                                              const DevicePoolBytes& bytes, const HostTransfers& transfers,
                                              const Faults& faults, cudaStream_t stream) {
  if (config_->tables_only)
    return make_error(ErrorKind::unsupported, "read: a tables-only pool has no bytes; build with tables_only: false to read rows");
  const std::size_t layers = derived_->plan.layer_map.size();
  if (op.layer >= layers)
    return out_of_range("read: layer " + std::to_string(op.layer) + " is outside the model's " +
                        std::to_string(layers) + " layers");
  const LayerPlacement placement = derived_->plan.layer_map[op.layer];
  const DenseEntryLayout& layout = derived_->layouts[placement.sub_pool];
  KVTWIN_TRY(const DensePart* part, layout.part(op.part));
  const std::int64_t slots = allocator.slot_count(placement.sub_pool);
  for (std::size_t i = 0; i < op.ids.size(); ++i)
    if (op.ids[i] < 0 || op.ids[i] >= slots)
      return out_of_range("read: id " + std::to_string(op.ids[i]) + " at position " + std::to_string(i) +
                          " is outside sub-pool '" + layout.sub_pool + "''s slots [0, " + std::to_string(slots) + ")");
  if (transfers.any_in_flight()) {
    const std::int64_t ps = static_cast<std::int64_t>(config_->page_size);
    for (std::int64_t id : op.ids) {
      if (id < allocator.sink_end(placement.sub_pool)) continue;
      const std::int64_t page = id / ps;
      // Only a load-back's pages are unreadable while it is in flight (an offload's read fine).
      if (const auto t = transfers.holding_physical(placement.sub_pool, page); t && transfers.is_load_back(*t))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "read: id " + std::to_string(id) + " lies on a page transfer " + std::to_string(*t) +
                                " is still loading back; wait for it (transfer_wait) first");
      if (const auto t = transfers.covering_physical(placement.sub_pool, page, true))
        return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight,
                            "read: id " + std::to_string(id) + " lies on a page whose bytes overlap a page transfer " +
                                std::to_string(*t) + " is still loading back; wait for it (transfer_wait) first");
    }
  }
  const std::int64_t lanes = static_cast<std::int64_t>(op.ids.size());
  const std::uint64_t row = part->row_bytes();
  std::vector<std::uint8_t> out(static_cast<std::size_t>(row * static_cast<std::uint64_t>(lanes)));
  if (lanes > 0) {
    KVTWIN_TRY(std::int64_t * ids, upload_ids(read_ids_, op.ids, stream));
    KVTWIN_TRY_STATUS(rows_staging_.reserve(out.size()));
    RowSegment seg;
    seg.pool_offset_bytes = part->offset_bytes + std::uint64_t{placement.local_layer} * part->layer_stride_bytes;
    seg.entry_bytes = layout.entry_bytes;
    seg.row_bytes = static_cast<std::uint32_t>(row);
    seg.first_slot = allocator.sink_end(placement.sub_pool);  // docs/decisions.md: a sink lane reads as zeros
    KVTWIN_TRY_STATUS(row_segments_.reserve(1));
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(row_segments_.get(), &seg, sizeof seg, cudaMemcpyHostToDevice, stream));
    RowCopyParams p;
    p.pool = bytes.data();
    p.pool_bytes = bytes.size_bytes();
    p.staging = rows_staging_.get();
    p.staging_lane_stride_bytes = row;
    p.segments = row_segments_.get();
    p.num_segments = 1;
    p.max_row_bytes = seg.row_bytes;
    p.locs[0] = ids;
    p.lanes = lanes;
    p.vector16 = rows_vector16(p.pool, p.staging, row, &seg, 1);
    p.int32_offsets = faults.int32_offsets;
    KVTWIN_CUDA_TRY(launch_gather_rows(p, stream));
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.data(), rows_staging_.get(), out.size(), cudaMemcpyDeviceToHost, stream));
    KVTWIN_CUDA_SYNC(stream);
  }
  return out;
}

}  // namespace kvtwin::gpu
