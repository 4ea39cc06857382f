// Names of element types.
#include "core/dtype.h"

#include <string>

#include "core/printable.h"

namespace kvtwin {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::bf16:
      return "bf16";
    case DType::fp16:
      return "fp16";
    case DType::fp8_e4m3:
      return "fp8";
    case DType::fp32:
      return "fp32";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "float16") return DType::fp16;
  if (name == "fp8" || name == "fp8_e4m3") return DType::fp8_e4m3;
  if (name == "fp32" || name == "float32") return DType::fp32;
  return make_error(ErrorKind::invalid_argument,
                    "unknown dtype '" + printable(name) + "'; known: bf16, fp16, fp8, fp32");
}

}  // namespace kvtwin
