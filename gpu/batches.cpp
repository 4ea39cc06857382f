// The pool's batches and write locs (batches.h).
#include "gpu/batches.h"

#include <utility>

#include "core/check.h"
#include "gpu/device_io.h"
#include "gpu/kernels.cuh"

namespace kvtwin::gpu {
namespace {
Error invalid(std::string message) { return make_error(ErrorKind::invalid_argument, std::move(message)); }
}  // namespace

Result<const Batches::Batch*> Batches::find(std::uint32_t id, std::string_view what) const {
  auto it = batches_.find(id);
  if (it == batches_.end())
    return invalid(std::string(what) + ": no batch " + std::to_string(id) + "; declare it with a batch op");
  return &it->second;
}

Result<Batches::Batch*> Batches::find(std::uint32_t id, std::string_view what) {
  KVTWIN_TRY_STATUS(std::as_const(*this).find(id, what));
  return &batches_.find(id)->second;
}

Result<DeviceBuffer<std::int64_t>> Batches::take(std::size_t lanes) {
  DeviceBuffer<std::int64_t> out;
  if (lanes == 0) return out;
  // The smallest spare buffer that holds `lanes` (the first of equals).
  std::size_t best = spare_.size();
  for (std::size_t i = 0; i < spare_.size(); ++i)
    if (spare_[i].size() >= lanes && (best == spare_.size() || spare_[i].size() < spare_[best].size())) best = i;
  if (best < spare_.size()) {
    out = std::move(spare_[best]);
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(best));
    return out;
  }
  KVTWIN_TRY_STATUS(out.allocate(lanes));
  return out;
}

Result<DeviceBuffer<std::int64_t>> Batches::take_copy(const std::vector<std::int64_t>& values, cudaStream_t stream) {
  KVTWIN_TRY(DeviceBuffer<std::int64_t> out, take(values.size()));
  if (!values.empty())
    KVTWIN_CUDA_TRY(cudaMemcpyAsync(out.get(), values.data(), values.size() * sizeof(std::int64_t),
                                    cudaMemcpyHostToDevice, stream));
  return out;
}

void Batches::give_back(DeviceBuffer<std::int64_t>&& buffer) {
  if (buffer.size() == 0) return;
  if (spare_.size() < kMaxSpareBuffers) spare_.push_back(std::move(buffer));
  // else: freed here (rare: more than kMaxSpareBuffers locs retired and none reused).
}

Status Batches::make(const MakeBatch& op, cudaStream_t stream) {
  if (batches_.count(op.batch) != 0)
    return invalid("batch " + std::to_string(op.batch) + " already exists; drop it first (drop_batch) or use another id");
  if (op.tokens.size() > kMaxLanes)
    return invalid("batch " + std::to_string(op.batch) + " has " + std::to_string(op.tokens.size()) +
                   " lanes; at most " + std::to_string(kMaxLanes) + " are allowed");
  if (!op.encoder_tokens.empty() && op.encoder_tokens.size() != op.tokens.size())
    return invalid("batch " + std::to_string(op.batch) + " has " + std::to_string(op.tokens.size()) + " tokens but " +
                   std::to_string(op.encoder_tokens.size()) + " encoder tokens; give one encoder token per lane, or none");
  Batch b;
  b.width = static_cast<std::int64_t>(op.tokens.size());
  b.tokens = op.tokens;
  b.encoder_host = op.encoder_tokens;
  // out_cache_loc starts as the virtual tokens, unmarked; the encoder loc is never translated.
  KVTWIN_TRY(b.loc, take_copy(op.tokens, stream));
  KVTWIN_TRY(b.encoder_loc, take_copy(op.encoder_tokens, stream));
  b.loc_host = op.tokens;
  b.loc_version = next_version_;
  next_version_ += 2;
  batches_[op.batch] = std::move(b);
  return ok_status();
}

Result<std::vector<std::int64_t>> Batches::rebind(const Rebind& op, const DeviceSide& owner, std::int64_t page_size,
                                                  const Faults& faults, cudaStream_t stream) {
  KVTWIN_TRY(Batch * b, find(op.batch, "rebind"));
  const std::int64_t n = static_cast<std::int64_t>(b->tokens.size());
  const std::uint64_t width = op.out_width == 0 ? static_cast<std::uint64_t>(n) : op.out_width;
  if (width < static_cast<std::uint64_t>(n))
    return invalid("rebind out_width " + std::to_string(op.out_width) + " is smaller than the batch's " +
                   std::to_string(n) + " lanes; give a width of at least " + std::to_string(n));
  if (width > kMaxLanes)
    return invalid("rebind out_width " + std::to_string(width) + " exceeds " + std::to_string(kMaxLanes) + " lanes");
  // SPEC 6: loc[i] = translate(tokens[i]) of the batch's lanes; lanes past them hold the sink.
  KVTWIN_TRY(std::int64_t * tokens, upload_ids(rebind_tokens_, b->tokens, stream));
  KVTWIN_TRY(DeviceBuffer<std::int64_t> loc, take(static_cast<std::size_t>(width)));
  if (width > 0) {
    if (faults.skip_rebind) {
      // Fault 1: the loc keeps the virtual ids (the tail still gets the sink), yet is marked.
      KVTWIN_CUDA_TRY(cudaMemsetAsync(loc.get(), 0, static_cast<std::size_t>(width) * sizeof(std::int64_t), stream));
      if (n > 0)
        KVTWIN_CUDA_TRY(cudaMemcpyAsync(loc.get(), tokens, static_cast<std::size_t>(n) * sizeof(std::int64_t),
                                        cudaMemcpyDeviceToDevice, stream));
    } else {
      TranslateParams p;
      p.in = tokens;
      p.cols = n;
      p.out = loc.get();
      p.out_cols = static_cast<std::int64_t>(width);
      p.v2p = owner.v2p();
      p.v2p_len = owner.v2p_len();
      p.page_size = page_size;
      p.negative_wraps = faults.negative_wraps;
      p.tombstone_live = faults.tombstone_live;
      KVTWIN_CUDA_TRY(launch_translate(p, stream));
    }
  }
  std::vector<std::int64_t> encoder = b->encoder_host;
  if (!encoder.empty()) encoder.resize(static_cast<std::size_t>(width), 0);
  KVTWIN_TRY(DeviceBuffer<std::int64_t> encoder_loc, take_copy(encoder, stream));
  KVTWIN_TRY(std::vector<std::int64_t> values, download_ids(loc.get(), static_cast<std::int64_t>(width), stream));
  give_back(std::move(b->loc));
  give_back(std::move(b->encoder_loc));
  b->loc = std::move(loc);
  b->width = static_cast<std::int64_t>(width);
  b->tokens.resize(static_cast<std::size_t>(width), -1);  // lanes past the batch are padding
  b->encoder_loc = std::move(encoder_loc);
  b->encoder_host = std::move(encoder);
  b->physical = true;  // SPEC 6: rebind sets the mark
  b->loc_host = values;  // what the device holds, read back
  b->loc_version = next_version_;
  next_version_ += 2;
  return values;
}

Result<Marks> Batches::split(const Split& op, const Faults& faults, cudaStream_t stream) {
  KVTWIN_TRY(const Batch* parent, find(op.batch, "split"));
  if (op.left == op.right)
    return invalid("split: both children are batch " + std::to_string(op.left) + "; give two different ids");
  for (std::uint32_t child : {op.left, op.right})
    if (batches_.count(child) != 0)
      return invalid("split: batch " + std::to_string(child) + " already exists; children need new ids (the parent stays)");
  if (op.at > static_cast<std::uint64_t>(parent->width))
    return make_error(ErrorKind::out_of_range, "split at lane " + std::to_string(op.at) + " is past the batch's " +
                                                   std::to_string(parent->width) + " lanes; split at 0 .. " +
                                                   std::to_string(parent->width));
  const std::int64_t at = static_cast<std::int64_t>(op.at);
  auto child = [&](std::int64_t begin, std::int64_t end) -> Result<Batch> {
    Batch c;
    c.width = end - begin;
    c.tokens.assign(parent->tokens.begin() + begin, parent->tokens.begin() + end);
    c.loc_host.assign(parent->loc_host.begin() + begin, parent->loc_host.begin() + end);
    c.loc_version = next_version_;
    next_version_ += 2;
    KVTWIN_TRY(c.loc, take(static_cast<std::size_t>(c.width)));
    if (c.width > 0)
      KVTWIN_CUDA_TRY(cudaMemcpyAsync(c.loc.get(), parent->loc.get() + begin,
                                      static_cast<std::size_t>(c.width) * sizeof(std::int64_t),
                                      cudaMemcpyDeviceToDevice, stream));
    if (!parent->encoder_host.empty()) {
      c.encoder_host.assign(parent->encoder_host.begin() + begin, parent->encoder_host.begin() + end);
      KVTWIN_TRY(c.encoder_loc, take_copy(c.encoder_host, stream));
    }
    // SPEC 6: a child copies the parent's mark, never the default (fault 3 drops it).
    c.physical = faults.split_drops_mark ? false : parent->physical;
    return c;
  };
  KVTWIN_TRY(Batch left, child(0, at));
  KVTWIN_TRY(Batch right, child(at, parent->width));
  const Marks marks{left.physical, right.physical};
  batches_[op.left] = std::move(left);
  batches_[op.right] = std::move(right);
  return marks;
}

Status Batches::drop(const DropBatch& op) {
  auto it = batches_.find(op.batch);
  if (it == batches_.end()) return invalid("drop_batch: no batch " + std::to_string(op.batch) + "; nothing to drop");
  give_back(std::move(it->second.loc));
  give_back(std::move(it->second.encoder_loc));
  batches_.erase(it);
  return ok_status();
}

Result<LayerLoc> Batches::for_layer(std::uint32_t batch, std::uint32_t layer, bool cross, const Faults& faults) const {
  KVTWIN_TRY(const Batch* b, find(batch, "write"));
  LayerLoc out;
  if (cross && !faults.cross_gets_batch_loc) {
    // for_layer (SPEC 6): a cross-attention layer writes through the encoder loc, which nothing
    // translates and so is never marked; its rows are the encoder tokens'. (Fault 4 hands it
    // the batch's marked loc.)
    if (b->encoder_host.empty())
      return invalid("layer " + std::to_string(layer) +
                     " is a cross-attention layer, which writes through the batch's encoder loc, but the batch has "
                     "none; declare the batch with encoder_tokens");
    out.loc = b->encoder_loc.get();
    out.lanes = static_cast<std::int64_t>(b->encoder_host.size());
    out.physical = false;
    out.tokens = &b->encoder_host;
    out.ids = &b->encoder_host;  // the encoder loc holds the encoder tokens, untranslated
    out.version = b->loc_version + 1;
  } else {
    out.loc = b->loc.get();
    out.lanes = b->width;
    out.physical = b->physical;
    out.tokens = &b->tokens;
    out.ids = &b->loc_host;
    out.version = b->loc_version;
  }
  KVTWIN_CHECK(out.ids->size() == static_cast<std::size_t>(out.lanes), "a batch's host ids are its loc's lanes");
  return out;
}

}  // namespace kvtwin::gpu
