// What a buffer holds and where it lives: the element type (DType) and the memory space
// (MemSpace) of every tensor, allocator and planned request. Byte counts come from the dtype
// (dtype_bytes), never from a tensor's name.
#pragma once

#include <cstdint>
#include <cstring>

namespace memo {

enum class DType : uint8_t {
  kF32,     // IEEE binary32: memo's CPU compute type, statistics, gradients and optimiser state
  kBF16,    // bfloat16: GPU weights and activations in mixed precision
  kF16,     // IEEE binary16 (room for it; no kernel uses it yet)
  kF8E4M3,  // OCP FP8 E4M3 (room for it; no kernel uses it yet)
};

inline constexpr int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}
const char* dtype_name(DType t);  // "f32", "bf16", "f16", "f8e4m3"

// Where the bytes are. On the CPU backend the device is host memory (a budgeted arena in RAM) and
// pinned host memory is ordinary memory; meta memory is address ranges with nothing behind them
// (Note [Meta backend] in meta/meta_backend.h).
enum class MemSpace : uint8_t { kHost, kPinnedHost, kDevice, kMeta };
const char* space_name(MemSpace s);  // "host", "pinned host", "device", "meta"

// bfloat16 storage: the top 16 bits of a binary32, rounded to nearest even.
struct bf16 {
  uint16_t bits;
};
inline float bf16_to_float(bf16 x) {
  const uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)  // NaN stays a quiet NaN
    return bf16{uint16_t((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{uint16_t(u >> 16)};
}

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};

}  // namespace memo
