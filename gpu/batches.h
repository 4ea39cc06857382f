// The pool's forward batches and their write locs (SPEC.md section 6, docs/decisions.md "Write
// locs"): each batch's out_cache_loc (and encoder_out_cache_loc) lives on the device, its mark on
// the host, so that the write door's mark check is a flag read with no device synchronization.
// Per lane the batch also keeps the virtual token whose rows it writes (the oracle's rows of those
// tokens are what a write stores), and the encoder tokens.
//
// rebind translates the loc on the device through the owner side's v2p and marks it (the loc's
// ids come back: the host keeps them beside the device's); split copies lanes on the device (and
// on the host) and the parent's mark; for_layer() is what a write door
// writes through. Fault switches that live here: skip_rebind (1), split_drops_mark (3),
// cross_gets_batch_loc (4); rebind's translate also carries negative_wraps (9) and tombstone_live
// (10).
//
// What it does not cover: the write itself (doors.h), translation ops other than rebind
// (translation.h).
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/op.h"
#include "core/pool_config.h"
#include "gpu/device_buffer.h"
#include "gpu/device_side.h"
#include "gpu/faults.h"

namespace kvtwin::gpu {

// The loc one write to one layer goes through (for_layer, SPEC 6).
struct LayerLoc {
  const std::int64_t* loc = nullptr;                // device, `lanes` ids
  std::int64_t lanes = 0;
  bool physical = false;                            // the mark
  const std::vector<std::int64_t>* tokens = nullptr;  // per lane the virtual token whose rows land there (-1: padding)
  // The same ids on the host, lane for lane (the batch's: as its make uploaded them or its rebind
  // brought them back; an explicit loc's: as given), and which version of a batch's loc they are
  // (unique to each make, rebind and split; 0 for an explicit loc), so that a door can judge a
  // batch's loc once for all its layers.
  const std::vector<std::int64_t>* ids = nullptr;
  std::uint64_t version = 0;
};

class Batches {
 public:
  // The most lanes one batch, loc or replay may have (a bound against runaway widths in traces).
  static constexpr std::uint64_t kMaxLanes = std::uint64_t{1} << 20;

  Status make(const MakeBatch& op, cudaStream_t stream);
  // Translates the batch's tokens through `owner`'s v2p into a loc of out_width lanes (the tail
  // the sink) and marks it physical; returns the new loc (synchronizes: the answer is the host's).
  Result<std::vector<std::int64_t>> rebind(const Rebind& op, const DeviceSide& owner, std::int64_t page_size,
                                           const Faults& faults, cudaStream_t stream);
  Result<Marks> split(const Split& op, const Faults& faults, cudaStream_t stream);
  Status drop(const DropBatch& op);
  void clear() { batches_.clear(); }

  // for_layer (SPEC 6): the batch's loc with its mark, or for a cross-attention layer (`cross`)
  // its encoder loc, which nothing translates and so is never marked.
  Result<LayerLoc> for_layer(std::uint32_t batch, std::uint32_t layer, bool cross, const Faults& faults) const;

 private:
  struct Batch {
    DeviceBuffer<std::int64_t> loc;          // out_cache_loc, `width` lanes
    std::int64_t width = 0;
    std::vector<std::int64_t> tokens;        // width lanes (-1: padding)
    DeviceBuffer<std::int64_t> encoder_loc;  // encoder_out_cache_loc: empty or width lanes, never translated
    std::vector<std::int64_t> encoder_host;  // the same ids (the rows a cross layer writes are theirs)
    bool physical = false;                   // the mark (SPEC 6)
    std::vector<std::int64_t> loc_host;      // the loc's ids, as the device holds them
    std::uint64_t loc_version = 0;           // LayerLoc::version of loc (the encoder loc's is its + 1)
  };
  Result<const Batch*> find(std::uint32_t id, std::string_view what) const;
  Result<Batch*> find(std::uint32_t id, std::string_view what);
  // A device buffer of at least `lanes` ids (none for 0), a spare one when one is large enough.
  Result<DeviceBuffer<std::int64_t>> take(std::size_t lanes);
  Result<DeviceBuffer<std::int64_t>> take_copy(const std::vector<std::int64_t>& values, cudaStream_t stream);
  void give_back(DeviceBuffer<std::int64_t>&& buffer);

  std::map<std::uint32_t, Batch> batches_;
  std::uint64_t next_version_ = 2;  // loc versions, two a batch loc (its own, its encoder loc's)
  DeviceBuffer<std::int64_t> rebind_tokens_;  // rebind: the batch's virtual tokens, the translate's input
  // Locs of dropped batches and locs a rebind replaced, kept for the next batch: freeing device
  // memory (cudaFree) waits for the whole device, which a drop or a rebind otherwise need not do.
  // Stream order makes the reuse safe: the next user's work runs after the last reader's.
  static constexpr std::size_t kMaxSpareBuffers = 64;
  std::vector<DeviceBuffer<std::int64_t>> spare_;
};

}  // namespace kvtwin::gpu
