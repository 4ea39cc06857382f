// Host transfers (transfers.h). Comments cite SPEC.md section 8 and the vocabulary's rules
// (core/op.h, docs/host_arena.md).
#include "gpu/transfers.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/reasons.h"
#include "gpu/device_io.h"
#include "gpu/device_side.h"
#include "gpu/kept_memory.h"
#include "gpu/transfer_kernels.cuh"

namespace kvtwin::gpu {

// Fault 13's slow producer (submit): long against a host op's submission, short against a test.
constexpr std::uint32_t kFault13ProducerDelayUs = 20000;
namespace {

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

Error in_flight(std::string message) {
  return make_refusal(ErrorKind::reader_conflict, reason::transfer_in_flight, std::move(message));
}

std::string name_of(std::uint32_t transfer) { return "transfer " + std::to_string(transfer); }

}  // namespace

// Host ids of one side checked: inside the arena (out_of_range), distinct and allocated
// (invalid_argument); -1 allowed where `allow_absent` (a load-back's SWA half not loaded).
Status check_host_ids(const PinnedHostArena& arena, std::size_t side, const std::vector<std::int64_t>& ids,
                      bool allow_absent, std::string_view what) {
  // Id by id: inside the arena (out_of_range), named once (invalid_argument); then every one
  // allocated (invalid_argument).
  std::set<std::int64_t> seen;
  for (std::int64_t id : ids) {
    if (allow_absent && id == -1) continue;
    if (id < 0 || id >= arena.page_num())
      return make_error(ErrorKind::out_of_range, std::string(what) + ": host page " + std::to_string(id) + " of side '" +
                                                     arena.side_name(side) + "' is outside the arena's " +
                                                     std::to_string(arena.page_num()) + " pages");
    if (!seen.insert(id).second)
      return invalid(std::string(what) + ": host page " + std::to_string(id) + " of side '" + arena.side_name(side) +
                     "' is named twice; give one host page per device page");
  }
  for (std::int64_t id : seen)
    if (!arena.allocated(side, id))
      return invalid(std::string(what) + ": host page " + std::to_string(id) + " of side '" + arena.side_name(side) +
                     "' is not allocated; allocate it with host_alloc first");
  return ok_status();
}

CopyMechanism copy_mechanism_from_environment() {
  const char* env = std::getenv("KVTWIN_GPU_COPY");
  return env != nullptr && std::string_view(env) == "batch" ? CopyMechanism::memcpy_batch : CopyMechanism::copy_kernel;
}

HostTransfers::~HostTransfers() { reset(); }

Status HostTransfers::init(const PoolConfig& config, const PoolDerived& derived) {
  reset();
  config_ = &config;
  derived_ = &derived;
  KVTWIN_CUDA_TRY(preload_transfer_kernels());
  return ok_status();
}

void HostTransfers::reset() {
  // Every copy lands before its buffers and events go (a rebuild, or the pool's end).
  for (auto& [id, t] : in_flight_) {
    if (t.finish != nullptr) {
      KVTWIN_CUDA_WARN(cudaEventSynchronize(t.finish));
      release_event(t.finish);
    }
  }
  in_flight_.clear();
  for (auto& [id, r] : recorded_)
    for (cudaEvent_t e : r.events) release_event(e);
  recorded_.clear();
  for (auto& [to_host, to_device] : copy_streams_) {
    for (cudaStream_t st : {to_host, to_device}) {
      if (st == nullptr) continue;
      KVTWIN_CUDA_WARN(cudaStreamSynchronize(st));
      release_stream(st);  // kept for the next pool when synchronized (kept_memory.h)
    }
  }
  copy_streams_.clear();
  lanes_.clear();
}

Result<HostTransfers::Lane*> HostTransfers::lane(std::uint32_t stream) {
  if (auto it = lanes_.find(stream); it != lanes_.end()) return &it->second;
  if (copy_streams_.size() < kCopyStreamPairs) {
    copy_streams_.emplace_back(nullptr, nullptr);  // reset() destroys what was made, if this fails halfway
    KVTWIN_TRY(copy_streams_.back().first, take_stream());
    KVTWIN_TRY(copy_streams_.back().second, take_stream());
  }
  // The trace streams in order of first use take the pairs in turn.
  const auto& [to_host, to_device] = copy_streams_[lanes_.size() % kCopyStreamPairs];
  Lane& l = lanes_[stream];
  l.to_host = to_host;
  l.to_device = to_device;
  return &l;
}

// ---------------------------------------------------------------- ordering (rules 3, 4, 7)

std::set<std::uint64_t> HostTransfers::ordered_after(std::uint32_t stream,
                                                     const std::optional<std::uint32_t>& wait_event) const {
  // A transfer lands after every earlier transfer of its stream (FIFO) and after everything its
  // wait_event captured, transitively.
  std::set<std::uint64_t> after;
  for (const auto& [id, t] : in_flight_) {
    if (t.stream != stream) continue;
    after.insert(t.sequence);
    after.insert(t.after.begin(), t.after.end());
  }
  if (wait_event.has_value()) {
    const auto it = recorded_.find(*wait_event);
    if (it != recorded_.end()) after.insert(it->second.captured.begin(), it->second.captured.end());
  }
  return after;
}

Status HostTransfers::check_start(std::uint32_t transfer, std::uint32_t stream,
                                  const std::optional<std::uint32_t>& wait_event) const {
  if (stream == 0)
    return invalid(name_of(transfer) + ": transfers run on a copy stream (1 and up); stream 0 is the compute stream");
  if (in_flight_.count(transfer) != 0)
    return invalid(name_of(transfer) + " is already in flight; wait for it (transfer_wait) or use another id");
  if (wait_event.has_value() && recorded_.count(*wait_event) == 0)
    return invalid(name_of(transfer) + " waits for event " + std::to_string(*wait_event) +
                   ", which was never recorded; record it first (record_event)");
  return ok_status();
}

Status HostTransfers::check_races(bool offload, const std::vector<std::vector<std::int64_t>>& host, std::uint32_t stream,
                                  const std::set<std::uint64_t>& after) const {
  for (const auto& [id, t] : in_flight_) {
    if (after.count(t.sequence) != 0) continue;  // ordered before this one: no race
    if (!offload && !t.offload) continue;  // two readers of host pages do not race
    for (std::size_t s = 0; s < host.size() && s < t.host.size(); ++s)
      for (std::int64_t page : host[s]) {
        if (page < 0) continue;
        if (std::find(t.host[s].begin(), t.host[s].end(), page) != t.host[s].end())
          return in_flight("a transfer on stream " + std::to_string(stream) + " touches host page " +
                           std::to_string(page) + " of side '" + derived_->layouts[s].sub_pool + "', which in-flight " +
                           name_of(id) + " (stream " + std::to_string(t.stream) + ") " +
                           (t.offload ? "writes" : "reads") +
                           "; put it on that stream or wait for an event recorded after it");
      }
  }
  return ok_status();
}

Status HostTransfers::record_event(const RecordEvent& op, cudaStream_t compute) {
  Recorded r;
  if (op.stream == 0) {
    // The compute stream: synchronous in the model, so it captures no transfer; on the device it
    // is the compute work so far.
    KVTWIN_TRY(cudaEvent_t e, take_event());
    r.events.push_back(e);
    KVTWIN_CUDA_TRY(cudaEventRecord(e, compute));
  } else {
    // Every transfer submitted on that stream and not yet complete, and what they wait for.
    for (const auto& [id, t] : in_flight_) {
      if (t.stream != op.stream) continue;
      r.captured.insert(t.sequence);
      r.captured.insert(t.after.begin(), t.after.end());
    }
    KVTWIN_TRY(Lane * l, lane(op.stream));
    for (cudaStream_t s : {l->to_host, l->to_device}) {
      KVTWIN_TRY(cudaEvent_t e, take_event());
      r.events.push_back(e);
      KVTWIN_CUDA_TRY(cudaEventRecord(e, s));
    }
  }
  // Recording an id again replaces what it captured.
  if (auto old = recorded_.find(op.event); old != recorded_.end()) {
    for (cudaEvent_t e : old->second.events) release_event(e);
    recorded_.erase(old);
  }
  recorded_[op.event] = std::move(r);
  return ok_status();
}

// ---------------------------------------------------------------- submission (SPEC 8 order)

Status HostTransfers::copy_side(Transfer& t, std::size_t side, cudaStream_t copy, const DeviceAllocator& allocator,
                                const DevicePoolBytes& bytes, PinnedHostArena& arena, const Faults& faults,
                                bool slow_producer) {
  std::vector<std::int64_t> virtual_pages, host_logical;
  for (std::size_t i = 0; i < t.virtual_pages.size() && i < t.host[side].size(); ++i) {
    if (t.host[side][i] < 0) continue;  // a load-back's SWA half not loaded
    virtual_pages.push_back(t.virtual_pages[i]);
    host_logical.push_back(t.host[side][i]);
  }
  const std::int64_t n = static_cast<std::int64_t>(virtual_pages.size());
  if (n == 0) return ok_status();
  // The lists live with the transfer until it is waited for: [virtual | host logical | device | host].
  if (t.lists.size() < t.host.size()) t.lists.resize(t.host.size());
  KVTWIN_TRY(t.lists[side], take_lists(static_cast<std::size_t>(4 * n)));
  std::int64_t* dv = t.lists[side].get();
  std::int64_t* hl = dv + n;
  std::int64_t* dp = hl + n;
  std::int64_t* hp = dp + n;
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(dv, virtual_pages.data(), static_cast<std::size_t>(n) * sizeof(std::int64_t),
                                  cudaMemcpyHostToDevice, copy));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(hl, host_logical.data(), static_cast<std::size_t>(n) * sizeof(std::int64_t),
                                  cudaMemcpyHostToDevice, copy));
  // (3) ids resolved on the device, on the copy stream (after its producers: see submit).
  ResolveTransferParams r;
  r.virtual_pages = dv;
  r.host_logical = hl;
  r.pages = n;
  r.v2p = allocator.side(side).v2p();
  r.v2p_len = allocator.side(side).v2p_len();
  r.host_map = arena.device_logical_to_physical(side);
  r.host_pages = arena.page_num();
  r.device_physical = dp;
  r.host_physical = hp;
  r.logical_as_physical = faults.transfer_logical_as_physical;  // fault 19
  if (r.host_map == nullptr && !r.logical_as_physical) return ok_status();  // a tables-only arena copies nothing
  KVTWIN_CUDA_TRY(launch_resolve_transfer(r, copy));
  if (!bytes.holds_bytes() || arena.device_bytes() == nullptr) return ok_status();
  const std::uint64_t page_bytes = allocator.side(side).geometry().page_bytes;
  // (4) the copy.
  if (mechanism_ == CopyMechanism::copy_kernel) {
    CopyPagesParams c;
    c.device_base = bytes.data();
    c.device_bytes = bytes.size_bytes();
    c.host_base = arena.device_bytes();
    c.host_bytes = static_cast<std::uint64_t>(arena.page_num()) * arena.page_bytes(side);
    c.page_bytes = page_bytes;
    c.device_physical = dp;
    c.host_physical = hp;
    c.pages = n;
    c.to_host = t.offload;
    if (slow_producer) KVTWIN_CUDA_TRY(launch_spin(kFault13ProducerDelayUs, copy));
    KVTWIN_CUDA_TRY(launch_copy_pages(c, copy));
    return ok_status();
  }
  // memcpy_batch: the resolved ids back to the host (the copy stream waited for the producers),
  // runs of pages contiguous on both sides coalesced, one batched copy.
  KVTWIN_TRY_STATUS(batch_lists_.reserve(static_cast<std::size_t>(2 * n)));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(batch_lists_.get(), dp, static_cast<std::size_t>(2 * n) * sizeof(std::int64_t),
                                  cudaMemcpyDeviceToHost, copy));
  KVTWIN_CUDA_SYNC(copy);
  const std::int64_t* device_pages = batch_lists_.get();
  const std::int64_t* host_pages = device_pages + n;
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<std::size_t> sizes;
  for (std::int64_t i = 0; i < n;) {
    if (device_pages[i] < 0 || host_pages[i] < 0) {
      ++i;
      continue;
    }
    std::int64_t j = i + 1;
    while (j < n && device_pages[j] == device_pages[j - 1] + 1 && host_pages[j] == host_pages[j - 1] + 1) ++j;
    std::uint8_t* device = bytes.data() + static_cast<std::uint64_t>(device_pages[i]) * page_bytes;
    std::uint8_t* host = arena.host_bytes() + static_cast<std::uint64_t>(host_pages[i]) * page_bytes;
    dsts.push_back(t.offload ? static_cast<void*>(host) : static_cast<void*>(device));
    srcs.push_back(t.offload ? static_cast<const void*>(device) : static_cast<const void*>(host));
    sizes.push_back(static_cast<std::size_t>(j - i) * page_bytes);
    i = j;
  }
  if (dsts.empty()) return ok_status();
  // The delay goes after the host's wait above, right before the copy: a delay ahead of that wait
  // would hold the host instead, and the consumer would be submitted after the copy had landed.
  if (slow_producer) KVTWIN_CUDA_TRY(launch_spin(kFault13ProducerDelayUs, copy));
  cudaMemcpyAttributes attributes{};
  attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t attribute_index = 0;
  KVTWIN_CUDA_TRY(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attributes,
                                       &attribute_index, 1, copy));
  return ok_status();
}

Status HostTransfers::submit(Transfer& t, const std::optional<std::uint32_t>& wait_event, std::uint32_t thread,
                             const DeviceAllocator& allocator, const DevicePoolBytes& bytes, PinnedHostArena& arena,
                             const Faults& faults, cudaStream_t compute) {
  KVTWIN_TRY(Lane * l, lane(t.stream));
  const cudaStream_t copy = t.offload ? l->to_host : l->to_device;
  // (1) The producers: the compute work so far, the named event, the stream's last transfer.
  KVTWIN_TRY(cudaEvent_t compute_done, take_event());
  KVTWIN_CUDA_TRY(cudaEventRecord(compute_done, compute));
  std::vector<cudaEvent_t> producers = {compute_done};
  if (wait_event.has_value())
    for (cudaEvent_t e : recorded_.at(*wait_event).events) producers.push_back(e);
  if (l->last != nullptr) producers.push_back(l->last);
  // (2) The lease of the host layout, on the transfer's thread.
  arena.acquire(thread);
  // (3) On the copy stream: wait for the producers, then resolve ids; (4) copy. Fault 13 resolves
  // and copies before the waits (the seed's index preparation ahead of its producer-event wait).
  if (!faults.transfer_before_producer_event)
    for (cudaEvent_t e : producers) KVTWIN_CUDA_TRY(cudaStreamWaitEvent(copy, e, 0));
  // Under fault 13 a transfer that names no event to wait for (a producer, as the offload a later
  // load-back reads) has its copy slowed by kFault13ProducerDelayUs on its own copy stream, so that
  // a consumer that skips its wait (the fault) copies before its producer has, every time: a race
  // the fault plants must show on a fast device, not once in a while. Without the fault nothing spins.
  const bool slow_producer = faults.transfer_before_producer_event && !wait_event.has_value();
  for (std::size_t side = 0; side < t.host.size(); ++side)
    KVTWIN_TRY_STATUS(copy_side(t, side, copy, allocator, bytes, arena, faults, slow_producer));
  if (faults.transfer_before_producer_event)
    for (cudaEvent_t e : producers) KVTWIN_CUDA_TRY(cudaStreamWaitEvent(copy, e, 0));
  release_event(compute_done);  // the waits on it keep what it captured (kept_memory.h)
  // (5) The finish event, and the lease handed to it.
  KVTWIN_TRY(t.finish, take_event());
  KVTWIN_CUDA_TRY(cudaEventRecord(t.finish, copy));
  l->last = t.finish;
  return arena.hand_lease_to_event(thread, t.finish);
}

// ---------------------------------------------------------------- offload, load-back, wait

Result<Outcome> HostTransfers::offload(const Offload& op, const DeviceAllocator& allocator, const DevicePoolBytes& bytes,
                                       PinnedHostArena& arena, const Faults& faults, cudaStream_t compute) {
  KVTWIN_TRY_STATUS(check_start(op.transfer, op.stream, op.wait_event));
  const auto side_index = derived_->sub_pool_index(op.side);
  if (!side_index.has_value())
    return invalid("offload: this pool has no sub-pool '" + op.side + "'");
  const std::size_t side = *side_index;
  const std::int64_t ps = static_cast<std::int64_t>(config_->page_size);
  // The selection (rule 6): the pages the ids touch, range-checked as free's (docs/decisions.md);
  // the whole ones (with tokens, a page counts only when every one of its tokens is listed);
  // allocated; not being loaded back; bound on the side (an SWA tombstone is skipped whole).
  KVTWIN_TRY(std::vector<std::int64_t> touched, allocator.virtual_pages_of(op.unit, op.ids, "offload"));
  std::vector<std::int64_t> whole;
  if (op.unit == IdUnit::pages) {
    whole = touched;
  } else {
    const std::set<std::int64_t> tokens(op.ids.begin(), op.ids.end());
    for (std::int64_t v : touched) {
      std::int64_t listed = 0;
      for (std::int64_t t = v * ps; t < (v + 1) * ps; ++t) listed += static_cast<std::int64_t>(tokens.count(t));
      if (listed == ps) whole.push_back(v);
    }
  }
  const DeviceSide& owner = allocator.owner();
  std::vector<std::int64_t> owner_rows, side_rows;
  if (!whole.empty()) {
    KVTWIN_TRY(std::int64_t * dv, upload_ids(selection_pages_, whole, compute));
    KVTWIN_TRY_STATUS(selection_rows_.reserve(2 * whole.size()));
    std::int64_t* rows = selection_rows_.get();
    const std::int64_t n = static_cast<std::int64_t>(whole.size());
    KVTWIN_TRY_STATUS(gather_values(owner.v2p(), dv, n, rows, compute));
    KVTWIN_TRY_STATUS(gather_values(allocator.side(side).v2p(), dv, n, rows + n, compute));
    KVTWIN_TRY(std::vector<std::int64_t> both, download_ids(rows, 2 * n, compute));
    owner_rows.assign(both.begin(), both.begin() + n);
    side_rows.assign(both.begin() + n, both.end());
  }
  std::vector<std::int64_t> unallocated;
  for (std::size_t i = 0; i < whole.size(); ++i)
    if (owner_rows[i] < 0) unallocated.push_back(whole[i]);
  if (!unallocated.empty())
    return invalid("offload: virtual pages " + std::to_string(unallocated.front()) +
                   (unallocated.size() > 1 ? " and others" : "") + " are not allocated; offload only pages of live allocations");
  for (std::int64_t v : whole)
    if (const auto t = loading_virtual(v))
      return in_flight("offload: virtual page " + std::to_string(v) + " is being loaded back by " + name_of(*t) +
                       "; it is not visible until its transfer_wait");
  const std::int64_t min_page = allocator.side(side).min_page();
  std::vector<std::int64_t> selected, physical;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    if (side_rows[i] < min_page) continue;  // an SWA tombstone is skipped as a whole page
    selected.push_back(whole[i]);
    physical.push_back(side_rows[i]);
  }
  if (faults.swa_offload_token_filter && side == 1 && op.unit == IdUnit::tokens) {
    // Fault 21: single bound tokens filtered (swa_indices[swa_indices > 0]) instead of whole
    // pages: a page partly listed is kept, and a length that is no multiple of the page size is
    // refused, as the seed's host allocation refused it.
    std::set<std::int64_t> tokens(op.ids.begin(), op.ids.end());
    std::vector<std::int64_t> pages(tokens.size());
    std::transform(tokens.begin(), tokens.end(), pages.begin(), [&](std::int64_t t) { return t / ps; });
    std::vector<std::int64_t> unique_pages = pages;
    unique_pages.erase(std::unique(unique_pages.begin(), unique_pages.end()), unique_pages.end());
    KVTWIN_TRY(std::int64_t * dv, upload_ids(selection_pages_, unique_pages, compute));
    KVTWIN_TRY_STATUS(selection_rows_.reserve(unique_pages.size()));
    KVTWIN_TRY_STATUS(gather_values(allocator.side(side).v2p(), dv, static_cast<std::int64_t>(unique_pages.size()),
                                    selection_rows_.get(), compute));
    KVTWIN_TRY(std::vector<std::int64_t> rows,
               download_ids(selection_rows_.get(), static_cast<std::int64_t>(unique_pages.size()), compute));
    std::uint64_t kept = 0;
    selected.clear();
    physical.clear();
    for (std::size_t i = 0; i < unique_pages.size(); ++i) {
      if (rows[i] <= 0) continue;  // the seed's > 0 test
      kept += static_cast<std::uint64_t>(std::count(pages.begin(), pages.end(), unique_pages[i]));
      selected.push_back(unique_pages[i]);
      physical.push_back(rows[i]);
    }
    if (kept % static_cast<std::uint64_t>(ps) != 0)
      return invalid("offload: " + std::to_string(kept) +
                     " window tokens mapped; the requested size should be a multiple of the page size " +
                     std::to_string(ps));
  }
  if (op.host.size() != selected.size())
    return invalid("offload selects " + std::to_string(selected.size()) + " page(s) but names " +
                   std::to_string(op.host.size()) + " host page(s); give one host page per selected page");
  KVTWIN_TRY_STATUS(check_host_ids(arena, side, op.host, false, "offload"));
  std::vector<std::vector<std::int64_t>> host(allocator.side_count());
  host[side] = op.host;
  const std::set<std::uint64_t> after = ordered_after(op.stream, op.wait_event);
  KVTWIN_TRY_STATUS(check_races(true, host, op.stream, after));

  Transfer t;
  t.id = op.transfer;
  t.offload = true;
  t.stream = op.stream;
  t.virtual_pages = selected;
  t.physical.assign(allocator.side_count(), {});
  t.physical[side] = physical;
  t.host = std::move(host);
  t.sequence = next_sequence_++;
  t.after = after;
  KVTWIN_TRY_STATUS(submit(t, op.wait_event, op.thread, allocator, bytes, arena, faults, compute));
  in_flight_[op.transfer] = std::move(t);
  return Outcome(TransferStarted{op.transfer, selected});
}

Result<Outcome> HostTransfers::load_back(const LoadBack& op, DeviceAllocator& allocator, const DevicePoolBytes& bytes,
                                         PinnedHostArena& arena, const Faults& faults, cudaStream_t compute) {
  KVTWIN_TRY_STATUS(check_start(op.transfer, op.stream, op.wait_event));
  const std::size_t sides = allocator.side_count();
  if (op.host.empty() || op.host.size() > sides)
    return invalid("load_back names host pages for " + std::to_string(op.host.size()) + " side(s); this pool has " +
                   std::to_string(sides));
  const std::size_t k = op.host[0].size();
  if (op.host.size() == 2 && !op.host[1].empty() && op.host[1].size() != k)
    return invalid("load_back: " + std::to_string(op.host[1].size()) + " SWA host pages for " + std::to_string(k) +
                   " pages; give none, or one per page (-1 where the SWA half is not loaded)");
  KVTWIN_TRY_STATUS(check_host_ids(arena, 0, op.host[0], false, "load_back"));
  if (op.host.size() == 2) KVTWIN_TRY_STATUS(check_host_ids(arena, 1, op.host[1], true, "load_back"));
  std::vector<std::vector<std::int64_t>> host(sides);
  for (std::size_t s = 0; s < op.host.size(); ++s) host[s] = op.host[s];
  const std::set<std::uint64_t> after = ordered_after(op.stream, op.wait_event);
  KVTWIN_TRY_STATUS(check_races(false, host, op.stream, after));
  // Allocate the device pages first, as alloc does (SPEC 8); no room changes nothing.
  const std::int64_t pages = static_cast<std::int64_t>(k);
  if (pages > allocator.owner().queue_count() || !allocator.fits(pages)) return Outcome(NoRoom{});
  std::vector<std::int64_t> vpages;
  if (pages > 0) {
    KVTWIN_TRY(vpages, allocator.alloc(pages, compute));
  }
  Transfer t;
  t.id = op.transfer;
  t.offload = false;
  t.stream = op.stream;
  t.virtual_pages = vpages;
  t.physical.assign(sides, {});
  if (pages > 0) {
    KVTWIN_TRY(std::int64_t * dv, upload_ids(selection_pages_, vpages, compute));
    KVTWIN_TRY_STATUS(selection_rows_.reserve(sides * k));
    std::int64_t* rows = selection_rows_.get();
    for (std::size_t s = 0; s < sides; ++s)
      KVTWIN_TRY_STATUS(gather_values(allocator.side(s).v2p(), dv, pages, rows + s * k, compute));
    KVTWIN_TRY(std::vector<std::int64_t> all, download_ids(rows, static_cast<std::int64_t>(sides * k), compute));
    for (std::size_t s = 0; s < sides; ++s)
      t.physical[s].assign(all.begin() + static_cast<std::ptrdiff_t>(s * k),
                           all.begin() + static_cast<std::ptrdiff_t>((s + 1) * k));
  }
  for (std::size_t s = 0; s < sides; ++s)
    if (host[s].empty()) host[s].assign(k, -1);  // a side not loaded
  t.host = std::move(host);
  t.sequence = next_sequence_++;
  t.after = after;
  KVTWIN_TRY_STATUS(submit(t, op.wait_event, op.thread, allocator, bytes, arena, faults, compute));
  in_flight_[op.transfer] = std::move(t);
  return Outcome(TransferStarted{op.transfer, vpages});
}

Status HostTransfers::wait(const TransferWait& op, PinnedHostArena& arena) {
  auto it = in_flight_.find(op.transfer);
  if (it == in_flight_.end())
    return invalid("transfer_wait: " + name_of(op.transfer) + " is not in flight; start it with offload or load_back");
  Transfer& t = it->second;
  KVTWIN_CUDA_TRY(cudaEventSynchronize(t.finish));
  KVTWIN_TRY_STATUS(arena.settle(t.finish));
  for (auto& [id, lane] : lanes_)
    if (lane.last == t.finish) lane.last = nullptr;
  release_event(t.finish);
  t.finish = nullptr;
  for (DeviceBuffer<std::int64_t>& lists : t.lists)
    if (lists.size() > 0 && spare_lists_.size() < 64) spare_lists_.push_back(std::move(lists));
  in_flight_.erase(it);
  return ok_status();
}

Result<DeviceBuffer<std::int64_t>> HostTransfers::take_lists(std::size_t count) {
  for (std::size_t i = 0; i < spare_lists_.size(); ++i)
    if (spare_lists_[i].size() >= count) {
      DeviceBuffer<std::int64_t> out = std::move(spare_lists_[i]);
      spare_lists_.erase(spare_lists_.begin() + static_cast<std::ptrdiff_t>(i));
      return out;
    }
  DeviceBuffer<std::int64_t> out;
  KVTWIN_TRY_STATUS(out.allocate(count));
  return out;
}

Status HostTransfers::land_all() {
  for (const auto& [to_host, to_device] : copy_streams_) {
    KVTWIN_CUDA_SYNC(to_host);
    KVTWIN_CUDA_SYNC(to_device);
  }
  return ok_status();
}

// ---------------------------------------------------------------- what in-flight transfers hold

std::optional<std::uint32_t> HostTransfers::holding_virtual(std::int64_t vpage) const {
  for (const auto& [id, t] : in_flight_)
    if (std::find(t.virtual_pages.begin(), t.virtual_pages.end(), vpage) != t.virtual_pages.end()) return id;
  return std::nullopt;
}

std::optional<std::uint32_t> HostTransfers::holding_virtual_on(std::size_t side, std::int64_t vpage) const {
  for (const auto& [id, t] : in_flight_)
    for (std::size_t i = 0; i < t.virtual_pages.size(); ++i)
      if (t.virtual_pages[i] == vpage && side < t.physical.size() && i < t.physical[side].size() &&
          t.physical[side][i] >= 0)
        return id;
  return std::nullopt;
}

std::optional<std::uint32_t> HostTransfers::offloading_virtual_on(std::size_t side, std::int64_t vpage) const {
  for (const auto& [id, t] : in_flight_)
    if (t.offload) {
      const auto at = std::find(t.virtual_pages.begin(), t.virtual_pages.end(), vpage);
      if (at != t.virtual_pages.end() && side < t.physical.size() &&
          static_cast<std::size_t>(at - t.virtual_pages.begin()) < t.physical[side].size())
        return id;
    }
  return std::nullopt;
}

std::optional<std::uint32_t> HostTransfers::loading_virtual(std::int64_t vpage) const {
  for (const auto& [id, t] : in_flight_)
    if (!t.offload && std::find(t.virtual_pages.begin(), t.virtual_pages.end(), vpage) != t.virtual_pages.end()) return id;
  return std::nullopt;
}

std::optional<std::uint32_t> HostTransfers::holding_physical(std::size_t side, std::int64_t ppage) const {
  for (const auto& [id, t] : in_flight_)
    if (side < t.physical.size() && std::find(t.physical[side].begin(), t.physical[side].end(), ppage) != t.physical[side].end())
      return id;
  return std::nullopt;
}

std::optional<std::uint32_t> HostTransfers::covering_physical(std::size_t side, std::int64_t ppage,
                                                             bool load_backs_only) const {
  const auto& sub_pools = derived_->geometry.sub_pools;
  const std::uint64_t begin = static_cast<std::uint64_t>(ppage) * sub_pools[side].page_bytes;
  const std::uint64_t end = begin + sub_pools[side].page_bytes;
  for (const auto& [id, t] : in_flight_) {
    if (load_backs_only && t.offload) continue;
    for (std::size_t s = 0; s < t.physical.size() && s < t.host.size(); ++s)
      for (std::size_t i = 0; i < t.physical[s].size() && i < t.host[s].size(); ++i) {
        if (t.host[s][i] < 0) continue;  // a side the load-back does not load copies nothing
        const std::uint64_t copy_begin = static_cast<std::uint64_t>(t.physical[s][i]) * sub_pools[s].page_bytes;
        if (copy_begin < end && begin < copy_begin + sub_pools[s].page_bytes) return id;
      }
  }
  return std::nullopt;
}

bool HostTransfers::is_load_back(std::uint32_t transfer) const {
  const auto it = in_flight_.find(transfer);
  return it != in_flight_.end() && !it->second.offload;
}

std::optional<std::uint32_t> HostTransfers::holding_host(std::size_t side, std::int64_t logical) const {
  // A -1 in a transfer's host list is a load-back's side it does not load, never a page it holds
  // (the model's rule: a negative id is out of range for host_free, not in flight).
  if (logical < 0) return std::nullopt;
  for (const auto& [id, t] : in_flight_)
    if (side < t.host.size() && std::find(t.host[side].begin(), t.host[side].end(), logical) != t.host[side].end())
      return id;
  return std::nullopt;
}

}  // namespace kvtwin::gpu
