#include "memo/core/dtype.h"

namespace memo {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kF8E4M3:
      return "f8e4m3";
  }
  return "?";
}

const char* space_name(MemSpace s) {
  switch (s) {
    case MemSpace::kHost:
      return "host";
    case MemSpace::kPinnedHost:
      return "pinned host";
    case MemSpace::kDevice:
      return "device";
    case MemSpace::kMeta:
      return "meta";
  }
  return "?";
}

}  // namespace memo
