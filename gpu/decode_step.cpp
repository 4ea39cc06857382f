// The captured decode step (decode_step.h).
#include "gpu/decode_step.h"

#include <algorithm>
#include <span>

#include "core/oracle.h"
#include "gpu/kept_memory.h"

namespace kvtwin::gpu {
namespace {

Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }

// The most entries a captured page table may have (a bound against runaway shapes in traces).
constexpr std::uint64_t kMaxTableEntries = std::uint64_t{1} << 20;

template <class T>
Status upload(DeviceBuffer<T>& to, const std::vector<T>& from, cudaStream_t stream, std::size_t offset = 0) {
  if (from.empty()) return ok_status();
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(to.get() + offset, from.data(), from.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  return ok_status();
}

}  // namespace

DecodeStep::~DecodeStep() {
  release_graph_exec(exec_, exec_key_);  // kept for the next capture of this topology when quiet
  if (graph_ != nullptr) KVTWIN_CUDA_WARN(cudaGraphDestroy(graph_));
}

Result<std::unique_ptr<DecodeStep>> DecodeStep::create(const Capture& op, const PoolDeviceView& pool,
                                                       const Faults& faults, cudaStream_t stream) {
  const PoolDerived& derived = *pool.derived;
  const std::int64_t ps = static_cast<std::int64_t>(pool.config->page_size);
  if (op.max_batch == 0 || op.max_pages == 0)
    return invalid("capture: max_batch and max_pages must be at least 1 (got " + std::to_string(op.max_batch) + " and " +
                   std::to_string(op.max_pages) + ")");
  if (std::uint64_t{op.max_batch} * op.max_pages > kMaxTableEntries)
    return invalid("capture: a page table of " + std::to_string(op.max_batch) + " x " + std::to_string(op.max_pages) +
                   " exceeds " + std::to_string(kMaxTableEntries) + " entries");
  if (op.layer >= derived.plan.layer_map.size())
    return make_error(ErrorKind::out_of_range, "capture: layer " + std::to_string(op.layer) + " is outside the model's " +
                                                   std::to_string(derived.plan.layer_map.size()) + " layers");
  const LayerPlacement attended = derived.plan.layer_map[op.layer];
  if (attended.kind == LayerKind::swa || attended.kind == LayerKind::cross)
    return invalid("capture: layer " + std::to_string(op.layer) + " is a '" +
                   std::string(layer_kind_name(attended.kind)) +
                   "' layer; the decode attention reads a full or MLA layer through the full page table");
  const SubPoolSpec& spec = derived.plan.sub_pools[attended.sub_pool];
  if (op.query_heads == 0 || op.query_heads % spec.heads_per_rank != 0)
    return invalid("capture: query_heads " + std::to_string(op.query_heads) +
                   " must be a positive multiple of the layer's " + std::to_string(spec.heads_per_rank) +
                   " KV heads per rank");

  std::unique_ptr<DecodeStep> step(new DecodeStep());
  step->shape_ = op;
  step->pool_ = pool;
  step->max_batch_ = op.max_batch;
  step->max_pages_ = op.max_pages;
  step->max_tokens_ = static_cast<std::int64_t>(op.max_pages) * ps;

  // Every layer's rows for one lane, back to back: segment (layer, part) in model order.
  // docs/decisions.md: cross-attention layers take no decoder rows.
  for (std::uint32_t l = 0; l < derived.plan.layer_map.size(); ++l) {
    const LayerPlacement& placement = derived.plan.layer_map[l];
    if (placement.kind == LayerKind::cross) continue;
    step->writes_full_layer = step->writes_full_layer || placement.kind != LayerKind::swa;
    step->writes_swa_layer = step->writes_swa_layer || placement.kind == LayerKind::swa;
    const DenseEntryLayout& layout = derived.layouts[placement.sub_pool];
    for (std::size_t pi = 0; pi < layout.parts.size(); ++pi) {
      const DensePart& part = layout.parts[pi];
      RowSegment seg;
      seg.pool_offset_bytes = part.offset_bytes + std::uint64_t{placement.local_layer} * part.layer_stride_bytes;
      seg.entry_bytes = layout.entry_bytes;
      seg.staging_offset_bytes = step->lane_row_bytes_;
      seg.row_bytes = static_cast<std::uint32_t>(part.row_bytes());
      seg.loc_set = placement.kind == LayerKind::swa ? 1 : 0;  // SWA layers write at the SWA loc
      seg.first_slot = static_cast<std::int64_t>(derived.geometry.sub_pools[placement.sub_pool].min_page_index) * ps;
      step->host_segments_.push_back(seg);
      step->segment_rows_.push_back(RowIdentity{0, static_cast<std::uint32_t>(placement.sub_pool),
                                                placement.local_layer, static_cast<std::uint32_t>(pi), 0});
      step->segment_dtypes_.push_back(part.dtype);
      step->lane_row_bytes_ += part.row_bytes();
    }
  }

  // The attention's views: the paged view of the layer's K and V parts (SPEC 2); MLA reads K as
  // the whole latent row and V as its first kv_lora_rank elements.
  const DenseEntryLayout& layout = derived.layouts[attended.sub_pool];
  const DensePart& k_part = layout.parts[0];
  const DensePart& v_part = layout.parts.size() > 1 ? layout.parts[1] : layout.parts[0];
  const std::int64_t itemsize = dtype_size_bytes(k_part.dtype);
  auto view = [&](const DensePart& part) {
    PagedView v;
    v.base = pool.pool;
    v.dtype = part.dtype;
    v.storage_offset = static_cast<std::int64_t>(part.offset_bytes + std::uint64_t{attended.local_layer} * part.layer_stride_bytes) / itemsize;
    v.token_stride = static_cast<std::int64_t>(layout.entry_bytes) / itemsize;  // the whole entry
    if (faults.stride_from_shape) v.token_stride = static_cast<std::int64_t>(part.heads()) * part.head_dim();  // fault 8
    v.page_stride = ps * v.token_stride;
    v.head_stride = part.head_dim();
    v.dim_stride = 1;
    v.limit_elements = pool.pool_bytes / static_cast<std::uint64_t>(itemsize);
    return v;
  };
  step->k_dim_ = spec.k_head_dim;
  step->v_dim_ = spec.v_head_dim;
  AttentionParams& a = step->attention_;
  a.k = view(k_part);
  a.v = view(v_part);
  a.page_size = ps;
  a.max_tokens = step->max_tokens_;
  a.query_heads = op.query_heads;
  a.kv_heads = spec.heads_per_rank;
  a.k_dim = step->k_dim_;
  a.v_dim = step->v_dim_;
  a.rows = step->max_batch_;
  a.table_row_stride = step->max_pages_;
  a.int32_offsets = faults.int32_offsets_attention;

  // Capture-stable buffers, zero-filled (the sink).
  const std::size_t mb = static_cast<std::size_t>(step->max_batch_);
  KVTWIN_TRY_STATUS(step->new_tokens_.allocate(mb));
  KVTWIN_TRY_STATUS(step->loc_.allocate(mb));
  KVTWIN_TRY_STATUS(step->swa_loc_.allocate(mb));
  KVTWIN_TRY_STATUS(step->req_to_token_.allocate(mb * static_cast<std::size_t>(step->max_tokens_)));
  KVTWIN_TRY_STATUS(step->next_lens_.allocate(mb));
  KVTWIN_TRY_STATUS(step->graph_lens_.allocate(mb));
  KVTWIN_TRY_STATUS(step->table_.allocate(mb * static_cast<std::size_t>(step->max_pages_)));
  KVTWIN_TRY_STATUS(step->rows_.allocate(mb * step->lane_row_bytes_));
  KVTWIN_TRY_STATUS(step->segments_.allocate(step->host_segments_.size()));
  KVTWIN_TRY_STATUS(step->q_.allocate(mb * op.query_heads * step->k_dim_));
  KVTWIN_TRY_STATUS(step->scores_.allocate(mb * op.query_heads * static_cast<std::size_t>(step->max_tokens_)));
  KVTWIN_TRY_STATUS(step->out_.allocate(mb * op.query_heads * step->v_dim_));
  KVTWIN_TRY_STATUS(step->flags_.allocate(mb));
  KVTWIN_TRY_STATUS(step->check_loc_.allocate(mb));
  KVTWIN_TRY_STATUS(step->check_a_.allocate(mb));
  KVTWIN_TRY_STATUS(step->check_b_.allocate(mb));
  KVTWIN_TRY_STATUS(step->status_.allocate(1));
  for (auto* buffer : {&step->new_tokens_, &step->loc_, &step->swa_loc_, &step->req_to_token_, &step->next_lens_,
                       &step->graph_lens_, &step->table_})
    KVTWIN_CUDA_TRY(cudaMemsetAsync(buffer->get(), 0, buffer->bytes(), stream));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(step->rows_.get(), 0, step->rows_.bytes(), stream));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(step->q_.get(), 0, step->q_.bytes(), stream));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(step->scores_.get(), 0, step->scores_.bytes(), stream));
  KVTWIN_CUDA_TRY(cudaMemsetAsync(step->out_.get(), 0, step->out_.bytes(), stream));
  KVTWIN_TRY_STATUS(upload(step->segments_, step->host_segments_, stream));
  a.page_table = step->table_.get();
  a.seq_lens = step->graph_lens_.get();
  a.q = step->q_.get();
  a.scores = step->scores_.get();
  a.out = step->out_.get();
  KVTWIN_TRY_STATUS(step->record(faults));  // launched after the fills on the same stream, no synchronization
  return step;
}

Status DecodeStep::record(const Faults& faults) {
  const std::size_t lens_bytes = static_cast<std::size_t>(max_batch_) * sizeof(std::int64_t);
  // Built node by node, each after the one before, as a captured stream would record them, but
  // without a capture (whose begin waits on every other thread's driver calls). Everything is
  // recorded at max_batch, not run. An error destroys the graph before returning.
  GraphChain chain;
  KVTWIN_CUDA_TRY(cudaGraphCreate(&chain.graph, 0));
  // 1. The graph keeps its own copy of this replay's lengths (what the attention reads).
  cudaError_t err = add_copy_node(chain, graph_lens_.get(), next_lens_.get(), lens_bytes, cudaMemcpyDeviceToDevice);
  // 2. Composite: the SWA loc from the full physical loc (SPEC 4.3).
  if (err == cudaSuccess && pool_.swa != nullptr) {
    SwaTranslateParams p;
    p.in = loc_.get();
    p.out = swa_loc_.get();
    p.n = max_batch_;
    p.full_p2v = pool_.full->p2v();
    p.full_p2v_len = pool_.full->p2v_len();
    p.swa_v2p = pool_.swa->v2p();
    p.swa_v2p_len = pool_.swa->v2p_len();
    p.page_size = static_cast<std::int64_t>(pool_.config->page_size);
    // SPEC 4.3: a tombstoned page goes to the sink. The fault leaves its negative loc unclamped,
    // and the write then indexes the SWA view (max_slots rows) from its end, as PyTorch would.
    if (faults.graph_swa_tombstone_live)
      p.tombstone_wrap_slots = static_cast<std::int64_t>(pool_.derived->geometry.sub_pools[1].max_slots);
    err = launch_swa_translate(p, chain);
  }
  // 3. The write door for every layer at once; sink lanes write nothing. (A tables-only pool has
  //    no bytes: no rows, no attention.)
  if (err == cudaSuccess && pool_.pool != nullptr) {
    RowCopyParams p;
    p.pool = pool_.pool;
    p.pool_bytes = pool_.pool_bytes;
    p.staging = rows_.get();
    p.staging_lane_stride_bytes = lane_row_bytes_;
    p.segments = segments_.get();
    p.num_segments = static_cast<std::uint32_t>(host_segments_.size());
    for (const RowSegment& s : host_segments_) p.max_row_bytes = std::max(p.max_row_bytes, s.row_bytes);
    p.locs[0] = loc_.get();
    p.locs[1] = swa_loc_.get();
    p.lanes = max_batch_;
    p.vector16 = rows_vector16(p.pool, p.staging, lane_row_bytes_, host_segments_.data(), p.num_segments);
    p.int32_offsets = faults.int32_offsets;  // the write door's kernel, inside the graph
    err = launch_scatter_rows(p, chain);
  }
  // 4. The reference attention through the page table.
  if (err == cudaSuccess && pool_.pool != nullptr) err = launch_decode_attention(attention_, chain);
  if (err != cudaSuccess) {
    KVTWIN_CUDA_WARN(cudaGraphDestroy(chain.graph));
    KVTWIN_CUDA_TRY(err);
  }
  graph_ = chain.graph;
  KVTWIN_TRY(exec_key_, graph_exec_key(graph_));
  KVTWIN_TRY(exec_, take_graph_exec(graph_, exec_key_));
  return ok_status();
}

Result<bool> DecodeStep::duplicate_lanes(std::int64_t bs, cudaStream_t stream) {
  if (bs < 2) return false;
  const std::int64_t ps = static_cast<std::int64_t>(pool_.config->page_size);
  // Every layer that takes rows writes at the batch's loc (full and MLA layers) or at the SWA
  // loc derived from it; duplicates count on the final loc, sink lanes aside (docs/decisions.md).
  TranslateParams t;
  t.in = new_tokens_.get();
  t.cols = bs;
  t.out = check_loc_.get();
  t.out_cols = bs;
  t.v2p = pool_.full->v2p();
  t.v2p_len = pool_.full->v2p_len();
  t.page_size = ps;
  KVTWIN_CUDA_TRY(launch_translate(t, stream));
  if (writes_full_layer) {
    KVTWIN_TRY_STATUS(sink_to_zero(check_loc_.get(), bs, pool_.full->min_page() * ps, check_a_.get(), stream));
    KVTWIN_TRY(bool duplicate, has_nonzero_duplicate(check_a_.get(), bs, check_b_.get(), sort_temp_, status_.get(), stream));
    if (duplicate) return true;
  }
  if (writes_swa_layer && pool_.swa != nullptr) {
    SwaTranslateParams p;
    p.in = check_loc_.get();
    p.out = check_a_.get();
    p.n = bs;
    p.full_p2v = pool_.full->p2v();
    p.full_p2v_len = pool_.full->p2v_len();
    p.swa_v2p = pool_.swa->v2p();
    p.swa_v2p_len = pool_.swa->v2p_len();
    p.page_size = ps;
    KVTWIN_CUDA_TRY(launch_swa_translate(p, stream));
    KVTWIN_TRY_STATUS(sink_to_zero(check_a_.get(), bs, pool_.swa->min_page() * ps, check_a_.get(), stream));
    KVTWIN_TRY(bool duplicate, has_nonzero_duplicate(check_a_.get(), bs, check_b_.get(), sort_temp_, status_.get(), stream));
    if (duplicate) return true;
  }
  return false;
}

Result<Decode> DecodeStep::replay(const Replay& op, const Faults& faults, cudaStream_t stream,
                                  const ReplayChecks& checks) {
  const std::int64_t bs = static_cast<std::int64_t>(op.requests.size());
  const std::int64_t ps = static_cast<std::int64_t>(pool_.config->page_size);
  if (bs > max_batch_)
    return make_error(ErrorKind::out_of_range, "replay: " + std::to_string(bs) + " requests exceed graph " +
                                                   std::to_string(shape_.graph) + "'s max_batch " +
                                                   std::to_string(max_batch_) + "; capture a larger graph");
  // Requests in order: empty, then wider than the page table (host checks on the operation), then
  // a token that is not allocated (a device check against v2p). The first failing request decides.
  std::int64_t host_bad = bs;
  Error host_error = invalid("");
  for (std::int64_t b = 0; b < bs && host_bad == bs; ++b) {
    const auto& tokens = op.requests[static_cast<std::size_t>(b)];
    if (tokens.empty()) {
      host_bad = b;
      host_error = invalid("replay: request " + std::to_string(b) + " has no tokens; give its tokens, the new one last");
    } else if (static_cast<std::int64_t>(tokens.size() + static_cast<std::size_t>(ps) - 1) / ps > max_pages_) {
      host_bad = b;
      host_error = make_error(ErrorKind::out_of_range,
                              "replay: request " + std::to_string(b) + " spans more than graph " +
                                  std::to_string(shape_.graph) + "'s max_pages " + std::to_string(max_pages_) +
                                  "; capture a wider page table");
    }
  }
  const std::size_t checked = static_cast<std::size_t>(host_bad);  // requests that fit the buffers

  // ---- out of graph: refill every capture-stable input from this batch alone (SPEC 7).
  std::vector<std::int64_t> new_tokens(checked), lens(static_cast<std::size_t>(max_batch_), 0);
  std::vector<std::int64_t> rt(checked * static_cast<std::size_t>(max_tokens_), 0);
  for (std::size_t b = 0; b < checked; ++b) {
    new_tokens[b] = op.requests[b].back();
    lens[b] = static_cast<std::int64_t>(op.requests[b].size());
    std::copy(op.requests[b].begin(), op.requests[b].end(),
              rt.begin() + static_cast<std::ptrdiff_t>(b * static_cast<std::size_t>(max_tokens_)));
  }
  KVTWIN_TRY_STATUS(upload(next_lens_, lens, stream));
  KVTWIN_TRY_STATUS(upload(req_to_token_, rt, stream));
  if (checked > 0) {
    std::vector<std::uint32_t> flags(checked);
    KVTWIN_TRY_STATUS(flag_unallocated_rows(req_to_token_.get(), max_tokens_, next_lens_.get(),
                                            static_cast<std::int64_t>(checked), pool_.full->v2p(),
                                            pool_.full->v2p_len(), ps, faults.sink_counts_as_allocated, flags_.get(),
                                            stream));
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(flags.data(), flags_.get(), checked * sizeof(std::uint32_t),
                                    cudaMemcpyDeviceToHost, stream));
    KVTWIN_CUDA_SYNC(stream);
    for (std::size_t b = 0; b < checked; ++b)
      if (flags[b] != 0)
        return invalid("replay: request " + std::to_string(b) +
                       " holds a virtual token that is not allocated; a decode step reads and writes allocated "
                       "tokens only");
  }
  if (host_bad < bs) return host_error;
  if (checks.after_allocated) KVTWIN_TRY_STATUS(checks.after_allocated());
  KVTWIN_TRY_STATUS(upload(new_tokens_, new_tokens, stream));
  KVTWIN_TRY(bool duplicate, duplicate_lanes(bs, stream));
  if (duplicate)
    return make_error(ErrorKind::duplicate_loc,
                      "replay: two requests write one slot (a shared new token); give each request its own new token");
  if (checks.after_duplicates) KVTWIN_TRY_STATUS(checks.after_duplicates());
  const std::size_t ubs = static_cast<std::size_t>(bs);

  // 1. The loc buffer: lane b < bs gets translate(new token of b), every lane past it the sink
  //    (fault 5 leaves the tail as an earlier replay left it).
  TranslateParams t;
  t.in = new_tokens_.get();
  t.cols = bs;
  t.out = loc_.get();
  t.out_cols = faults.stale_loc_tail ? bs : max_batch_;
  t.v2p = pool_.full->v2p();
  t.v2p_len = pool_.full->v2p_len();
  t.page_size = ps;
  t.negative_wraps = faults.negative_wraps;
  t.tombstone_live = faults.tombstone_live;
  KVTWIN_CUDA_TRY(launch_translate(t, stream));
  // 2. This replay's lengths, then the live prefix of each page-table row bounded by them (fault
  //    6 bounds it by the lengths the graph holds: the previous replay's).
  PageTableParams pt;
  pt.req_to_token = req_to_token_.get();
  pt.rt_rows = max_batch_;
  pt.rt_cols = max_tokens_;
  pt.rt_row_stride = max_tokens_;
  pt.seq_lens = faults.stale_table_lengths ? graph_lens_.get() : next_lens_.get();
  pt.bs = bs;
  pt.table = table_.get();
  pt.table_cols = max_pages_;
  pt.table_row_stride = max_pages_;
  pt.v2p = pool_.full->v2p();
  pt.v2p_len = pool_.full->v2p_len();
  pt.page_size = ps;
  pt.tombstone_live = faults.page_table_tombstone_live;  // the page-table kernel's fault, wherever it runs
  KVTWIN_CUDA_TRY(launch_page_table(pt, stream));
  // 3. The rows every layer writes for each lane's new token, and the queries.
  std::vector<std::uint8_t> rows(ubs * lane_row_bytes_);
  for (std::size_t b = 0; b < ubs; ++b) {
    for (std::size_t s = 0; s < host_segments_.size(); ++s) {
      RowIdentity id = segment_rows_[s];
      id.source_token = new_tokens[b];
      id.write_number = op.write_number;
      fill_oracle_row(pool_.config->seed, id, segment_dtypes_[s],
                      std::span<std::uint8_t>(rows.data() + b * lane_row_bytes_ + host_segments_[s].staging_offset_bytes,
                                              host_segments_[s].row_bytes));
    }
  }
  KVTWIN_TRY_STATUS(upload(rows_, rows, stream));
  std::vector<float> q(ubs * shape_.query_heads * k_dim_);
  for (std::size_t b = 0; b < ubs; ++b)
    for (std::uint32_t h = 0; h < shape_.query_heads; ++h)
      for (std::uint32_t d = 0; d < k_dim_; ++d)
        q[(b * shape_.query_heads + h) * k_dim_ + d] =
            oracle_query_value(op.query_seed, static_cast<std::uint32_t>(b), h, d);
  KVTWIN_TRY_STATUS(upload(q_, q, stream));

  // ---- the graph.
  KVTWIN_CUDA_TRY(cudaGraphLaunch(exec_, stream));

  Decode out;
  out.loc.resize(static_cast<std::size_t>(max_batch_));
  std::vector<std::int64_t> table(static_cast<std::size_t>(max_batch_ * max_pages_));
  // fp32 [bs, query_heads, v_head_dim]; empty for a tables-only pool (no bytes to attend over).
  std::vector<std::uint8_t> attention(pool_.pool == nullptr ? 0 : ubs * shape_.query_heads * v_dim_ * sizeof(float));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.loc.data(), loc_.get(), loc_.bytes(), cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(table.data(), table_.get(), table_.bytes(), cudaMemcpyDeviceToHost, stream));
  if (!attention.empty())
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(attention.data(), out_.get(), attention.size(), cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_SYNC(stream);
  for (std::int64_t b = 0; b < max_batch_; ++b)
    out.table.emplace_back(table.begin() + b * max_pages_, table.begin() + (b + 1) * max_pages_);
  out.attention = Bytes::of(std::move(attention));
  return out;
}

Status DecodeGraphs::capture(const Capture& op, const PoolDeviceView& pool, const Faults& faults, cudaStream_t stream) {
  if (steps_.count(op.graph) != 0)
    return invalid("capture: graph " + std::to_string(op.graph) + " is already captured; use another id");
  KVTWIN_TRY(std::unique_ptr<DecodeStep> step, DecodeStep::create(op, pool, faults, stream));
  steps_[op.graph] = std::move(step);
  return ok_status();
}

Result<Decode> DecodeGraphs::replay(const Replay& op, const Faults& faults, cudaStream_t stream,
                                    const ReplayChecks& checks) {
  auto it = steps_.find(op.graph);
  if (it == steps_.end())
    return invalid("replay: graph " + std::to_string(op.graph) + " was never captured; capture it first");
  return it->second->replay(op, faults, stream, checks);
}

}  // namespace kvtwin::gpu
