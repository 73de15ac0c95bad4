// A reader of TensorBoard event files for the tests, written from the published formats alone
// (TFRecord framing, protobuf wire format, event.proto / summary.proto) and sharing no code with
// io/tensorboard.cc: its CRC-32C is the bit-at-a-time definition, not memo's table or SSE4.2.
// It checks every length and both CRCs of each record, and decodes the Event fields memo writes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memo::test {

struct TfEvent {
  double wall_time = 0.0;
  int64_t step = 0;
  std::optional<std::string> file_version;             // field 3
  std::vector<std::pair<std::string, float>> scalars;  // field 5: (tag, simple_value)
  std::optional<int64_t> session_status;               // field 7: SessionLog.status
};

// CRC-32C by its definition: reflected polynomial 0x82F63B78, one bit at a time.
inline uint32_t tfevents_crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline uint32_t tfevents_masked_crc(std::string_view bytes) {
  const uint32_t crc = tfevents_crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline uint64_t tfevents_le(std::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes.size(); ++i) v |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  return v;
}

// One protobuf field: its number, wire type, and value (varint or fixed bits, or bytes).
struct TfField {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t bits = 0;
  std::string_view bytes;
};

inline std::vector<TfField> tfevents_fields(std::string_view msg) {
  size_t pos = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= msg.size() || shift > 63) throw std::runtime_error("truncated varint");
      const uint8_t b = uint8_t(msg[pos++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  auto take = [&](uint64_t n) {
    if (n > msg.size() - pos) throw std::runtime_error("field runs past its message");
    std::string_view out = msg.substr(pos, size_t(n));
    pos += size_t(n);
    return out;
  };
  std::vector<TfField> fields;
  while (pos < msg.size()) {
    const uint64_t key = varint();
    TfField f;
    f.number = uint32_t(key >> 3);
    f.wire_type = uint32_t(key & 7);
    if (f.wire_type == 0)
      f.bits = varint();
    else if (f.wire_type == 1)
      f.bits = tfevents_le(take(8));
    else if (f.wire_type == 5)
      f.bits = tfevents_le(take(4));
    else if (f.wire_type == 2)
      f.bytes = take(varint());
    else
      throw std::runtime_error("wire type " + std::to_string(f.wire_type));
    fields.push_back(f);
  }
  return fields;
}

inline TfEvent tfevents_decode(std::string_view data) {
  TfEvent e;
  for (const TfField& f : tfevents_fields(data)) {
    if (f.number == 1 && f.wire_type == 1) {
      std::memcpy(&e.wall_time, &f.bits, 8);
    } else if (f.number == 2 && f.wire_type == 0) {
      e.step = int64_t(f.bits);
    } else if (f.number == 3 && f.wire_type == 2) {
      e.file_version = std::string(f.bytes);
    } else if (f.number == 5 && f.wire_type == 2) {
      for (const TfField& v : tfevents_fields(f.bytes)) {
        if (v.number != 1 || v.wire_type != 2) continue;
        std::string tag;
        std::optional<float> value;
        for (const TfField& x : tfevents_fields(v.bytes)) {
          if (x.number == 1 && x.wire_type == 2) tag = std::string(x.bytes);
          if (x.number == 2 && x.wire_type == 5) {
            const uint32_t bits = uint32_t(x.bits);
            float fv;
            std::memcpy(&fv, &bits, 4);
            value = fv;
          }
        }
        if (!value) throw std::runtime_error("summary value " + tag + " has no simple_value");
        e.scalars.emplace_back(tag, *value);
      }
    } else if (f.number == 7 && f.wire_type == 2) {
      e.session_status = 0;
      for (const TfField& x : tfevents_fields(f.bytes))
        if (x.number == 1 && x.wire_type == 0) e.session_status = int64_t(x.bits);
    } else {
      throw std::runtime_error("unexpected event field " + std::to_string(f.number));
    }
  }
  return e;
}

// Every event of a file; throws std::runtime_error naming the offset of a bad record.
inline std::vector<TfEvent> read_tfevents(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  const std::string file = s.str();
  std::string_view rest = file;
  std::vector<TfEvent> events;
  while (!rest.empty()) {
    const std::string at = " at offset " + std::to_string(file.size() - rest.size());
    if (rest.size() < 16) throw std::runtime_error("truncated record" + at);
    const uint64_t length = tfevents_le(rest.substr(0, 8));
    if (uint32_t(tfevents_le(rest.substr(8, 4))) != tfevents_masked_crc(rest.substr(0, 8)))
      throw std::runtime_error("bad length CRC" + at);
    if (length > rest.size() - 16) throw std::runtime_error("truncated record" + at);
    const std::string_view data = rest.substr(12, size_t(length));
    if (uint32_t(tfevents_le(rest.substr(12 + length, 4))) != tfevents_masked_crc(data))
      throw std::runtime_error("bad data CRC" + at);
    events.push_back(tfevents_decode(data));
    rest.remove_prefix(16 + size_t(length));
  }
  return events;
}

// The event files of a directory (names holding "tfevents"), sorted by name as TensorBoard does.
inline std::vector<std::filesystem::path> tfevents_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().find("tfevents") != std::string::npos)
      out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace memo::test
