// Digests asked for now and answered later (deferred_digests.h).
#include "gpu/deferred_digests.h"

#include "core/check.h"
#include "gpu/cuda_check.h"

namespace kvtwin::gpu {

Result<unsigned long long*> DeferredDigests::next_slot(cudaStream_t stream) {
  if (slots_.size() == 0) {
    KVTWIN_TRY_STATUS(slots_.allocate(kSlots));
    KVTWIN_TRY_STATUS(landed_.reserve(kSlots));
  }
  if (host_terms_.size() == kSlots) KVTWIN_TRY_STATUS(land(stream));
  // A window opens: every slot zeroed at once (the reductions add into theirs).
  if (host_terms_.empty()) KVTWIN_CUDA_TRY(cudaMemsetAsync(slots_.get(), 0, slots_.bytes(), stream));
  host_terms_.push_back(0);
  return slots_.get() + (host_terms_.size() - 1);
}

void DeferredDigests::add_host_terms(std::uint64_t terms) {
  KVTWIN_CHECK(!host_terms_.empty(), "host terms added to no deferred digest");
  host_terms_.back() += terms;
}

Status DeferredDigests::land(cudaStream_t stream) {
  if (host_terms_.empty()) return ok_status();
  KVTWIN_CUDA_TRY(cudaMemcpyAsync(landed_.get(), slots_.get(), host_terms_.size() * sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, stream));
  KVTWIN_CUDA_SYNC(stream);
  for (std::size_t i = 0; i < host_terms_.size(); ++i)
    collected_.push_back(static_cast<std::uint64_t>(landed_.get()[i]) + host_terms_[i]);
  host_terms_.clear();
  return ok_status();
}

Result<std::vector<std::uint64_t>> DeferredDigests::collect(cudaStream_t stream) {
  const Status landed = land(stream);
  std::vector<std::uint64_t> out;
  out.swap(collected_);
  host_terms_.clear();
  if (!landed.ok()) return landed.error();
  return out;
}

}  // namespace kvtwin::gpu
