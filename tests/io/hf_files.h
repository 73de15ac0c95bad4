// Hugging Face style files written the way other tools write them, for the loading tests:
// safetensors in F32, BF16 or F16 without memo's checksum, and a shard index written as raw
// text, so that a test can also write what nlohmann::json would never emit (a repeated key).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memo/io/atomic_file.h"

namespace memo::test {

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // exactly representable in `dtype`
  std::string dtype = "F32";  // F32, BF16 or F16
};

// The 2-byte pattern of v in BF16 or F16; the test fails unless the conversion is exact (the
// helpers pick values of at most 8 significant bits in the normal range, so every one is).
inline uint16_t half_bits(float v, const std::string& dtype) {
  uint32_t f;
  std::memcpy(&f, &v, 4);
  if (dtype == "BF16") {
    EXPECT_EQ(f & 0xffffu, 0u) << v << " is not a bf16 value";
    return uint16_t(f >> 16);
  }
  if (v == 0.0f) return uint16_t((f >> 16) & 0x8000u);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const int32_t exp = int32_t((f >> 23) & 0xff) - 127 + 15;
  EXPECT_TRUE(exp > 0 && exp < 31 && (f & 0x1fffu) == 0) << v << " is not a normal f16 value";
  return uint16_t(sign | uint32_t(exp) << 10 | ((f >> 13) & 0x3ffu));
}

// A safetensors file of `tensors` in their dtypes, with no memo checksum (as transformers writes).
inline void write_hf_safetensors(const std::filesystem::path& path,
                                 const std::vector<HfTensor>& tensors) {
  nlohmann::ordered_json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const HfTensor& t : tensors) {
    const size_t begin = data.size();
    for (float v : t.values) {
      if (t.dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else {
        const uint16_t h = half_bits(v, t.dtype);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  write_file_atomic(path, bytes + text + data);
}

// model.safetensors.index.json from (tensor, shard) pairs in the given order, repeats kept.
inline void write_hf_index(const std::filesystem::path& path,
                           const std::vector<std::pair<std::string, std::string>>& weight_map) {
  std::string text = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (size_t i = 0; i < weight_map.size(); ++i)
    text += (i ? ", " : "") + nlohmann::json(weight_map[i].first).dump() + ": " +
            nlohmann::json(weight_map[i].second).dump();
  write_file_atomic(path, text + "}}");
}

// `n` values k / 32 for k in [-64, 64]: at most 7 significant bits, exact in BF16 and F16.
inline std::vector<float> small_values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = float(int32_t((x >> 24) % 129) - 64) / 32.0f;
  }
  return v;
}

}  // namespace memo::test
