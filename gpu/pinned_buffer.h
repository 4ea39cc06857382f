// An owned pinned host allocation (cudaHostAlloc / cudaFreeHost, through kept_memory.h), move-only,
// as DeviceBuffer is for device memory. Pinned memory is what an asynchronous device-to-host copy
// may land in without the runtime synchronizing the stream (a copy into pageable memory waits for
// itself), and what a copy kernel may read through its device pointer when allocated mapped.
//
// Allocation reports errors as values; the destructor frees and reports (never aborts).
#pragma once

#include <cstddef>
#include <utility>

#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#include "gpu/kept_memory.h"

namespace kvtwin::gpu {

template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), flags_(other.flags_) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      flags_ = other.flags_;
    }
    return *this;
  }

  // Frees what it held and allocates `count` elements (uninitialized); `flags` as cudaHostAlloc's
  // (cudaHostAllocMapped for memory a kernel reads through its device pointer).
  Status allocate(std::size_t count, unsigned flags = cudaHostAllocDefault) {
    reset();
    if (count == 0) return ok_status();
    KVTWIN_TRY(void* p, take_memory(kind_of(flags), count * sizeof(T)));
    data_ = static_cast<T*>(p);
    flags_ = flags;
    size_ = count;
    return ok_status();
  }

  // Allocates at least `count` elements, keeping the current allocation when it is big enough.
  Status reserve(std::size_t count, unsigned flags = cudaHostAllocDefault) {
    if (count <= size_) return ok_status();
    return allocate(count, flags);
  }

  void reset() {
    if (data_ != nullptr) release_memory(kind_of(flags_), data_, size_ * sizeof(T));
    data_ = nullptr;
    size_ = 0;
  }

  T* get() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  // The two kinds of pinned memory gpu/ allocates (kept_memory.h keeps them apart).
  static MemoryKind kind_of(unsigned flags) {
    KVTWIN_CHECK(flags == cudaHostAllocDefault || flags == cudaHostAllocMapped,
                 "PinnedBuffer allocates cudaHostAllocDefault or cudaHostAllocMapped memory");
    return flags == cudaHostAllocMapped ? MemoryKind::pinned_mapped : MemoryKind::pinned;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  unsigned flags_ = cudaHostAllocDefault;
};

}  // namespace kvtwin::gpu
