// An owned device allocation, move-only. The memory comes from kept_memory.h (a cudaMalloc, or a
// block an earlier pool left after synchronizing its streams) and goes back there (kept, or
// cudaFree'd). Allocation reports errors as values; the destructor releases and reports (never
// aborts: it may run after a sticky error).
// No managed memory anywhere in gpu/ (it can hang a shared GPU when over-asked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#include "gpu/kept_memory.h"

namespace kvtwin::gpu {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }

  // Frees what it held and allocates `count` elements (uninitialized; 0 elements holds nothing).
  Status allocate(std::size_t count) {
    reset();
    if (count == 0) return ok_status();
    KVTWIN_TRY(void* p, take_memory(MemoryKind::device, count * sizeof(T)));
    data_ = static_cast<T*>(p);
    size_ = count;
    return ok_status();
  }

  // Allocates at least `count` elements, keeping the current allocation when it is big enough.
  Status reserve(std::size_t count) {
    if (count <= size_) return ok_status();
    return allocate(count);
  }

  void reset() {
    if (data_ != nullptr) release_memory(MemoryKind::device, data_, size_ * sizeof(T));
    data_ = nullptr;
    size_ = 0;
  }

  T* get() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvtwin::gpu
