// Digests asked for now and answered later (deferred_digests.h).
#include "gpu/deferred_digests.h"

#include "core/check.h"
#include "gpu/cuda_check.h"

namespace kvtwin::gpu {

Status DeferredDigests::make_room(cudaStream_t stream) {
  if (slots_.size() == 0) {
    KVTWIN_TRY_STATUS(slots_.allocate(kSlots));
    KVTWIN_TRY_STATUS(landed_.reserve(kSlots));
  }
  if (host_terms_.size() == kSlots) KVTWIN_TRY_STATUS(land(stream));
  // A window opens. The slots are zeroed only when what they hold is not known on the host (the
  // first window, or after a landing that failed); otherwise each keeps the value it landed with,
  // which is its base (deferred_digests.h).
  if (host_terms_.empty() && !bases_known_) {
    KVTWIN_CUDA_TRY(cudaMemsetAsync(slots_.get(), 0, slots_.bytes(), stream));
    bases_.assign(kSlots, 0);
    bases_known_ = true;
  }
  return ok_status();
}

Result<unsigned long long*> DeferredDigests::next_slot(cudaStream_t stream, Handle* handle) {
  KVTWIN_TRY_STATUS(make_room(stream));
  host_terms_.push_back(0);
  device_part_of_.push_back(kOwnSlot);
  if (handle != nullptr) *handle = Handle{window_, host_terms_.size() - 1};
  return slots_.get() + (host_terms_.size() - 1);
}

Result<bool> DeferredDigests::repeat(const Handle& earlier, cudaStream_t stream) {
  // Room first: a full window lands here, and `earlier` ages by one with it.
  KVTWIN_TRY_STATUS(make_room(stream));
  if (earlier.window + 1 < window_ || earlier.window > window_) return false;
  std::size_t source = 0;
  if (earlier.window == window_) {
    KVTWIN_CHECK(earlier.slot < device_part_of_.size(), "a repeat of a digest not queued");
    // A repeat of a repeat names the slot that was summed.
    source = device_part_of_[earlier.slot] == kOwnSlot ? earlier.slot : device_part_of_[earlier.slot];
  } else {
    KVTWIN_CHECK(earlier.slot < last_device_parts_.size(), "a repeat of a digest not landed");
    source = kFromLastWindow + earlier.slot;
  }
  // Its slot stays unused (zero); the device part comes from `source` when the window lands.
  host_terms_.push_back(0);
  device_part_of_.push_back(source);
  return true;
}

void DeferredDigests::add_host_terms(std::uint64_t terms) {
  KVTWIN_CHECK(!host_terms_.empty(), "host terms added to no deferred digest");
  host_terms_.back() += terms;
}

Status DeferredDigests::land(cudaStream_t stream) {
  if (host_terms_.empty()) return ok_status();
  bases_known_ = false;  // until the slots in use have landed
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(landed_.get(), slots_.get(), host_terms_.size() * sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_SYNC(stream);
  std::vector<std::uint64_t> device_parts(host_terms_.size());
  for (std::size_t i = 0; i < host_terms_.size(); ++i) {
    const std::size_t from = device_part_of_[i];
    if (from == kOwnSlot) {
      // What this window's reductions added (modulo 2^64, as they add): the slot's value now less
      // the value it opened with.
      const std::uint64_t now = static_cast<std::uint64_t>(landed_.get()[i]);
      device_parts[i] = now - bases_[i];
      bases_[i] = now;
    } else if (from >= kFromLastWindow) {
      device_parts[i] = last_device_parts_[from - kFromLastWindow];
    } else {
      device_parts[i] = device_parts[from];  // an earlier slot of this window
    }
    collected_.push_back(device_parts[i] + host_terms_[i]);
  }
  // A repeat's slot and the slots past the window's last were not added into: their bases hold.
  bases_known_ = true;
  last_device_parts_ = std::move(device_parts);
  host_terms_.clear();
  device_part_of_.clear();
  ++window_;
  return ok_status();
}

Result<std::vector<std::uint64_t>> DeferredDigests::collect(cudaStream_t stream) {
  const Status landed = land(stream);
  std::vector<std::uint64_t> out;
  out.swap(collected_);
  host_terms_.clear();
  device_part_of_.clear();
  if (!landed.ok()) {
    window_ += 2;  // nothing queued before is repeated
    last_device_parts_.clear();
    return landed.error();
  }
  return out;
}

}  // namespace kvtwin::gpu
