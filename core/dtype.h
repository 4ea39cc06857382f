// Element types a KV row can hold, with their sizes. fp8 is e4m3 (what serving engines store).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/result.h"

namespace kvtwin {

enum class DType : std::uint8_t { bf16, fp16, fp8_e4m3, fp32 };

constexpr std::uint32_t dtype_size_bytes(DType d) {
  switch (d) {
    case DType::bf16:
    case DType::fp16:
      return 2;
    case DType::fp8_e4m3:
      return 1;
    case DType::fp32:
      return 4;
  }
  return 0;
}

// "bf16", "fp16", "fp8", "fp32".
std::string_view dtype_name(DType d);
// Accepts the names above (and "fp8_e4m3"); an error lists the known ones.
Result<DType> parse_dtype(std::string_view name);

}  // namespace kvtwin
