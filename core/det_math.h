// Bit-reproducible float arithmetic shared by the reference model (CPU) and the CUDA kernels.
//
// The reference decode attention must give bit-identical output on the CPU and the GPU, so
// every operation it uses is spelled out here with its rounding: separate multiply and add (no
// fused multiply-add: the project builds host code with -ffp-contract=off, and device code uses
// the _rn intrinsics), IEEE division and square root, and an exp built only from those.
// This header includes no CUDA header; under nvcc its functions are __host__ __device__.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVTWIN_HOST_DEVICE __host__ __device__
#else
#define KVTWIN_HOST_DEVICE
#endif

namespace kvtwin::det {

KVTWIN_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

KVTWIN_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

KVTWIN_HOST_DEVICE inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

KVTWIN_HOST_DEVICE inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

KVTWIN_HOST_DEVICE inline float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

KVTWIN_HOST_DEVICE inline float from_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// exp(x) for x <= 0 (softmax after subtracting the max), deterministic to the bit:
// x = n*ln2 + r with n = floor(x*log2(e) + 1/2), r by a two-part ln2, then a degree-6 Taylor
// polynomial in Horner form, scaled by 2^n built from its bits. Returns 0 below 2^-125.
KVTWIN_HOST_DEVICE inline float exp_nonpositive(float x) {
  if (!(x > -86.0f)) return 0.0f;  // also maps NaN to 0: scores are finite by construction
  if (x > 0.0f) x = 0.0f;
  const float log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693145751953125f;     // exactly representable, few mantissa bits
  const float ln2_lo = 1.42860682030941723e-6f;
  const float nf = std::floor(add(mul(x, log2e), 0.5f));
  const int n = static_cast<int>(nf);
  if (n < -125) return 0.0f;
  const float r = sub(sub(x, mul(nf, ln2_hi)), mul(nf, ln2_lo));
  float p = 1.0f / 720.0f;
  p = add(mul(p, r), 1.0f / 120.0f);
  p = add(mul(p, r), 1.0f / 24.0f);
  p = add(mul(p, r), 1.0f / 6.0f);
  p = add(mul(p, r), 0.5f);
  p = add(mul(p, r), 1.0f);
  p = add(mul(p, r), 1.0f);
  const float scale = from_bits(static_cast<std::uint32_t>(n + 127) << 23);
  return mul(p, scale);
}

// bf16 / fp16 / fp8 e4m3 / fp32 element -> float, exactly.
KVTWIN_HOST_DEVICE inline float bf16_to_float(std::uint16_t v) { return from_bits(std::uint32_t{v} << 16); }

KVTWIN_HOST_DEVICE inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // subnormal: mantissa * 2^-24, exact in float
    const float m = static_cast<float>(mantissa);
    const float v = mul(m, 5.9604644775390625e-8f);
    return sign ? -v : v;
  }
  if (exponent == 31) return from_bits((sign << 31) | 0x7f800000u | (mantissa << 13));
  return from_bits((sign << 31) | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

KVTWIN_HOST_DEVICE inline float fp8e4m3_to_float(std::uint8_t b) {
  const std::uint32_t sign = (b >> 7) & 1u, exponent = (b >> 3) & 0xfu, mantissa = b & 0x7u;
  if (exponent == 0) {
    const float v = mul(static_cast<float>(mantissa), 0.001953125f);  // 2^-9
    return sign ? -v : v;
  }
  return from_bits((sign << 31) | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

}  // namespace kvtwin::det
