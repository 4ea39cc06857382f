// The state sub-pool of a hybrid chain on the device (state_pool.h). Comments cite the SPEC.md
// rule each step implements.
#include "gpu/state_pool.h"

#include <algorithm>
#include <cstring>

#include "core/oracle.h"
#include "core/tables_digest.h"
#include "gpu/cuda_check.h"
#include "gpu/device_invariants.h"
#include "gpu/device_io.h"

namespace kvtwin::gpu {
namespace {
// The oracle identity of state bytes names this sub-pool index (token sub-pools are 0 and 1), as
// the model's does: both backends write the same state for the same (request, write number).
constexpr std::uint32_t kStateOracleSubPool = 7;

Error broken(std::string message) {
  return make_error(ErrorKind::internal, "gpu invariant broken: " + std::move(message));
}
}  // namespace

Status DeviceStatePool::init(const PoolConfig& config, const PoolDerived& derived, cudaStream_t stream) {
  reset();
  KVTWIN_CHECK(derived.has_state() && derived.geometry.state.has_value(), "DeviceStatePool on a chain with a state sub-pool");
  const SubPoolGeometry& g = *derived.geometry.state;
  KVTWIN_CHECK(g.page_size == 1 && g.direction == GrowDirection::up, "the state sub-pool is slot-granular and grows up");
  // SPEC 11: its own v2p / p2v and FIFO queue of virtual slot ids, min_slot .. num_slots - 1.
  KVTWIN_TRY_STATUS(slots_.init(g, static_cast<std::int64_t>(g.num_pages), true, stream));
  KVTWIN_TRY_STATUS(scratch_a_.reserve(static_cast<std::size_t>(slots_.p2v_len())));
  KVTWIN_TRY_STATUS(scratch_b_.reserve(static_cast<std::size_t>(slots_.p2v_len())));
  if (!config.tables_only) KVTWIN_TRY_STATUS(staging_.allocate(derived.state_layout->entry_bytes));
  // The host's copy, as DeviceSide::init leaves the device tables.
  copy_.init(g, static_cast<std::int64_t>(g.num_pages), true);
  config_ = &config;
  derived_ = &derived;
  return ok_status();
}

void DeviceStatePool::reset() {
  config_ = nullptr;
  derived_ = nullptr;
  requests_.clear();
  quarantine_.clear();
  copy_ = SideCopy();
}

std::int64_t DeviceStatePool::slot_of(std::uint64_t request) const {
  const auto it = requests_.find(request);
  return it == requests_.end() ? -1 : it->second;
}

std::int64_t DeviceStatePool::next_physical() const {
  if (copy_.queue().empty() || slots_.remaining() == 0) return -1;
  // SPEC 4 with page size 1: the lowest hole first (lazy mode), else the watermark.
  return copy_.pages_for(1).front();
}

std::uint64_t DeviceStatePool::frontier_bytes() const {
  std::int64_t end = slots_.watermark();
  if (!quarantine_.empty()) end = std::max(end, *quarantine_.rbegin() + 1);
  return static_cast<std::uint64_t>(end) * entry_bytes();
}

Result<std::int64_t> DeviceStatePool::alloc(std::uint64_t request, cudaStream_t stream) {
  KVTWIN_CHECK(!copy_.queue().empty() && slot_of(request) < 0, "a state alloc takes a free id for a request without one");
  // The device binds the queue's front to the lowest hole or the watermark; the host's copy the same.
  const std::int64_t v = copy_.queue().front(), p = next_physical();
  std::int64_t* dv = scratch_a_.get();
  KVTWIN_TRY_STATUS(slots_.take_virtual(1, dv, stream));
  // The hole the host chose, uploaded; the watermark the device knows.
  const bool hole = copy_.holes().count(p) != 0;
  const std::int64_t* holes = nullptr;
  if (hole) {
    KVTWIN_TRY(holes, upload_ids(scratch_b_, {p}, stream));
  }
  KVTWIN_TRY_STATUS(slots_.bind(dv, 1, holes, hole ? 1 : 0, stream));
  copy_.take_virtual(1);
  copy_.bind({v}, {p});
  requests_.emplace(request, v);
  return v;
}

DeviceStatePool::Moves DeviceStatePool::plan_free(std::uint64_t request) const {
  const std::int64_t v = slot_of(request);
  KVTWIN_CHECK(v >= 0, "a state free names a request that holds a slot");
  Moves moves;
  moves.new_watermark = copy_.watermark();
  moves.freed = physical_of(v);
  if (config_->mode == CompactionMode::lazy) return moves;  // SPEC 4.2: a hole, nothing moves
  // SPEC 4.1 with page size 1: new_wm = wm - 1; the survivor in [new_wm, wm) (the band's last slot,
  // every band slot being bound in eager mode) moves into the freed slot when that lies below.
  static_cast<SideMoves&>(moves) = copy_.plan_compaction({moves.freed});
  return moves;
}

DeviceStatePool::Moves DeviceStatePool::plan_flush() const {
  // SPEC 4.2 as 4.1: K holes, new_wm = wm - K; the bound slots in [new_wm, wm) ascending fill the
  // holes below new_wm ascending, paired by position.
  Moves moves;
  static_cast<SideMoves&>(moves) = copy_.plan_flush();
  return moves;
}

std::uint64_t DeviceStatePool::slot_byte(std::int64_t slot, const Faults& faults) const {
  // Fault 23 (state_entry_padded): the slot stride rounded up to 32 bytes, as a token entry's.
  const std::uint64_t stride = faults.state_entry_padded ? (entry_bytes() + 31) / 32 * 32 : entry_bytes();
  return static_cast<std::uint64_t>(slot) * stride;
}

Status DeviceStatePool::move_envelopes(const Moves& moves, const DevicePoolBytes& bytes, const Faults& faults,
                                       cudaStream_t stream) const {
  if (!bytes.holds_bytes()) return ok_status();
  // A move copies the slot's whole envelope (E_state bytes); sources and destinations are
  // distinct slots, so no copy overlaps another's.
  const std::uint64_t e = entry_bytes();
  for (std::size_t i = 0; i < moves.sources.size(); ++i) {
    const std::uint64_t from = slot_byte(moves.sources[i], faults), to = slot_byte(moves.destinations[i], faults);
    if (std::max(from, to) + e > bytes.size_bytes()) continue;  // (the padded fault's slot past the buffer)
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(bytes.data() + to, bytes.data() + from, e, cudaMemcpyDeviceToDevice, stream));
  }
  return ok_status();
}

Status DeviceStatePool::apply_moves(const Moves& moves, bool clears_holes, const Held& held, const DevicePoolBytes& bytes,
                                    const Faults& faults, cudaStream_t stream) {
  // SPEC 10.22: a source a reader still holds keeps its old bytes for that reader: quarantined.
  for (std::int64_t s : moves.sources)
    if (held(s)) quarantine_.insert(s);
  KVTWIN_TRY_STATUS(move_envelopes(moves, bytes, faults, stream));
  const std::int64_t n = static_cast<std::int64_t>(moves.sources.size());
  const std::int64_t* src = nullptr;
  const std::int64_t* dst = nullptr;
  if (n > 0) {
    KVTWIN_TRY(src, upload_ids(scratch_a_, moves.sources, stream));
    KVTWIN_TRY(dst, upload_ids(scratch_b_, moves.destinations, stream));
  }
  KVTWIN_TRY_STATUS(slots_.apply_compaction(src, dst, n, moves.new_watermark, clears_holes, stream));
  copy_.apply(moves, clears_holes);
  return ok_status();
}

Status DeviceStatePool::commit_free(std::uint64_t request, const Moves& moves, const Held& held,
                                    const DevicePoolBytes& bytes, const Faults& faults, cudaStream_t stream) {
  const std::int64_t v = slot_of(request);
  KVTWIN_CHECK(v >= 0 && moves.freed >= 0, "a state free names a request that holds a slot, planned");
  const std::int64_t freed = moves.freed;
  KVTWIN_TRY(std::int64_t * dv, upload_ids(scratch_a_, {v}, stream));
  KVTWIN_TRY_STATUS(slots_.unbind(dv, 1, false, 1, stream));
  copy_.unbind({v}, false);
  if (config_->mode == CompactionMode::lazy) {
    KVTWIN_TRY(std::int64_t * dp, upload_ids(scratch_b_, {freed}, stream));
    KVTWIN_TRY_STATUS(slots_.add_holes(dp, 1, stream));
    copy_.add_holes({freed});
  } else {
    KVTWIN_TRY_STATUS(apply_moves(moves, false, held, bytes, faults, stream));
  }
  requests_.erase(request);
  // SPEC 4: a freed id goes to the queue's back.
  KVTWIN_TRY(dv, upload_ids(scratch_a_, {v}, stream));
  KVTWIN_TRY_STATUS(slots_.put_virtual(dv, 1, stream));
  copy_.put_virtual({v});
  return ok_status();
}

Status DeviceStatePool::commit_flush(const Moves& moves, const Held& held, const DevicePoolBytes& bytes,
                                     const Faults& faults, cudaStream_t stream) {
  if (copy_.holes().empty()) return ok_status();
  return apply_moves(moves, true, held, bytes, faults, stream);
}

void DeviceStatePool::release_quarantine(const Held& held) {
  for (auto it = quarantine_.begin(); it != quarantine_.end();) it = held(*it) ? std::next(it) : quarantine_.erase(it);
}

Status DeviceStatePool::write(std::int64_t vslot, std::uint64_t request, std::uint64_t write_number,
                              const DevicePoolBytes& bytes, const Faults& faults, cudaStream_t stream) {
  if (!bytes.holds_bytes()) return ok_status();
  const StateEntryLayout& layout = *derived_->state_layout;
  const std::int64_t slot = physical_of(vslot);
  // The entry made on the host block by block, layer by layer (the blocks tile it, SPEC 11), then
  // copied whole; the staging is reused only once the copy has landed.
  std::uint8_t* entry = staging_.get();
  for (std::size_t b = 0; b < layout.blocks.size(); ++b) {
    const StateBlock& block = layout.blocks[b];
    for (std::uint32_t l = 0; l < block.layer_num; ++l) {
      const RowIdentity id{static_cast<std::int64_t>(request), kStateOracleSubPool, l, static_cast<std::uint32_t>(b),
                           write_number};
      fill_oracle_row(config_->seed, id, block.dtype,
                      std::span<std::uint8_t>(entry + block.offset_bytes + l * block.layer_stride_bytes,
                                              block.layer_stride_bytes));
    }
  }
  const std::uint64_t at = slot_byte(slot, faults);
  if (at + layout.entry_bytes > bytes.size_bytes()) return ok_status();  // (the padded fault's slot past the buffer)
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(bytes.data() + at, entry, layout.entry_bytes, cudaMemcpyHostToDevice, stream));
  KVTWIN_CUDA_SYNC(stream);
  return ok_status();
}

Result<std::vector<std::uint8_t>> DeviceStatePool::read(const std::vector<std::int64_t>& slots, const StateBlock& block,
                                                        std::uint32_t layer, const DevicePoolBytes& bytes,
                                                        const Faults& faults, cudaStream_t stream) const {
  const std::uint64_t row = block.layer_stride_bytes;
  std::vector<std::uint8_t> out(slots.size() * row, 0);  // the sink's slots read as zeros
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < slots_.min_page()) continue;
    const std::uint64_t at = slot_byte(slots[i], faults) + block.offset_bytes + layer * row;
    if (at + row > bytes.size_bytes()) continue;  // (the padded fault's slot past the buffer)
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.data() + i * row, bytes.data() + at, row, cudaMemcpyDeviceToHost, stream));
  }
  KVTWIN_CUDA_SYNC(stream);
  return out;
}

Status DeviceStatePool::add_tables(PoolTables& out, cudaStream_t stream) const {
  // The slots' device tables in one copy (DeviceSide::snapshot); the queue and holes read off them.
  KVTWIN_TRY(SideSnapshot s, slots_.snapshot(slots_.min_page(), stream));
  add_tables_of(out, std::move(s));
  return ok_status();
}

void DeviceStatePool::add_tables_of(PoolTables& out, SideSnapshot&& slots) const {
  out.state = side_tables_of(name(), std::move(slots));
  out.state_requests.assign(requests_.begin(), requests_.end());
  out.state_quarantine.assign(quarantine_.begin(), quarantine_.end());
}

DigestRanges DeviceStatePool::digest_ranges() const { return slots_.digest_ranges(kStateDigestSide); }

std::uint64_t DeviceStatePool::digest_host_terms() const {
  std::uint64_t host = slots_.digest_counter_terms(kStateDigestSide);
  for (const auto& [request, slot] : requests_)
    host += tables_digest_term(kStateDigestSide + 1, TablesDigestPart::v2p, request, slot);
  for (std::int64_t q : quarantine_)
    host += tables_digest_term(kStateDigestSide + 1, TablesDigestPart::hole, static_cast<std::uint64_t>(q), 1);
  return host;
}

Status DeviceStatePool::verify(const Held& held, std::uint64_t owner_begin_byte, cudaStream_t stream,
                               PoolTables* tables_read) const {
  KVTWIN_TRY(SideSnapshot snap, slots_.snapshot(slots_.min_page(), stream));
  KVTWIN_TRY_STATUS(check_device_sides({snap}, config_->mode == CompactionMode::lazy));
  // The host's copy is the device's tables.
  KVTWIN_TRY_STATUS(check_side_copy(copy_, snap));
  // The request table names bound slots, one request each, as many as are allocated.
  if (static_cast<std::int64_t>(requests_.size()) != slots_.allocated())
    return broken("the state sub-pool has " + std::to_string(slots_.allocated()) + " bound slots but " +
                  std::to_string(requests_.size()) + " requests hold one");
  for (const auto& [request, v] : requests_)
    if (v < slots_.min_page() || v >= slots_.num_pages() || snap.v2p[static_cast<std::size_t>(v)] < slots_.min_page())
      return broken("request " + std::to_string(request) + " holds state slot " + std::to_string(v) +
                    ", which is not bound");
  // SPEC 10.22: a quarantined slot is held by a reader still.
  for (std::int64_t q : quarantine_)
    if (!held(q))
      return broken("state slot " + std::to_string(q) + " is quarantined, but no reader holds it");
  // SPEC 11: the owner's band never reaches into the state's slots in use.
  if (frontier_bytes() > owner_begin_byte)
    return broken("the state sub-pool's frontier (byte " + std::to_string(frontier_bytes()) +
                  ") is past the owner's band (from byte " + std::to_string(owner_begin_byte) + ")");
  if (tables_read != nullptr) add_tables_of(*tables_read, std::move(snap));
  return ok_status();
}

}  // namespace kvtwin::gpu
