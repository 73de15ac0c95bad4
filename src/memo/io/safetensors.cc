// Implementation of io/safetensors.h. Every size is checked before it is used: a truncated or
// hostile file gives a FormatError, never a read past the buffer.
#include "memo/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <tuple>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/io/atomic_file.h"
#include "memo/io/crc32c.h"

namespace memo {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; memo copies it as-is");

constexpr int64_t kHeaderLengthBytes = 8;
constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

int64_t dtype_bytes(const std::string& dtype) {
  static constexpr std::pair<const char*, int64_t> kDtypes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [name, bytes] : kDtypes)
    if (dtype == name) return bytes;
  return 0;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Product of dims, or -1 on int64 overflow.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

std::string checksum_str(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "crc32c:%08x", crc);
  return buf;
}

std::string_view bytes_of(const NamedTensor& t, int64_t numel) {
  return {reinterpret_cast<const char*>(t.data), size_t(numel) * sizeof(float)};
}

// A tensor's values as they are stored in `dtype` (F32 or BF16), handed to `sink` in pieces:
// F32 in one piece, BF16 rounded kBf16PieceNumel values at a time into `scratch`, so that a
// write holds one piece beside the caller's fp32 tensors, not a bf16 copy of them all.
constexpr int64_t kBf16PieceNumel = int64_t(1) << 20;
template <class Sink>
void for_each_piece(const NamedTensor& t, int64_t numel, DType dtype,
                    std::vector<uint16_t>& scratch, Sink&& sink) {
  if (dtype == DType::kF32) return sink(bytes_of(t, numel));
  for (int64_t at = 0; at < numel; at += kBf16PieceNumel) {
    const int64_t n = std::min(kBf16PieceNumel, numel - at);
    scratch.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) scratch[size_t(i)] = float_to_bf16(t.data[at + i]).bits;
    sink(std::string_view(reinterpret_cast<const char*>(scratch.data()),
                          size_t(n) * sizeof(uint16_t)));
  }
}

// The header parsed as JSON; a FormatError names the file offset of a syntax error.
json parse_header_object(const std::string& p, std::string_view header) {
  if (header.empty() || header[0] != '{')
    throw FormatError(str(p, ": header at offset 8 does not start with '{'"));
  json j;
  try {
    j = json::parse(header);
  } catch (const json::parse_error& e) {
    throw FormatError(str(p, ": malformed JSON header at byte ", kHeaderLengthBytes + e.byte,
                          " of the file: ", e.what()));
  } catch (const json::exception& e) {  // a number past a double's range
    throw FormatError(str(p, ": header: ", e.what()));
  }
  if (!j.is_object()) throw FormatError(str(p, ": header is not a JSON object"));
  return j;
}

// __metadata__: an object of strings, copied into metadata.
void read_metadata(const std::string& p, const json& value,
                   std::map<std::string, std::string>& metadata) {
  if (!value.is_object())
    throw FormatError(str(p, ": __metadata__ is a ", value.type_name(), ", expected an object"));
  for (const auto& [k, v] : value.items()) {
    if (!v.is_string())
      throw FormatError(
          str(p, ": __metadata__ value for '", k, "' is ", json_excerpt(v), ", expected a string"));
    metadata[k] = v.get<std::string>();
  }
}

// Makes the error for a bad field of one tensor's header entry.
struct TensorError {
  const std::string& path;
  const std::string& name;
  FormatError operator()(const std::string& what) const {
    return FormatError(str(path, ": tensor '", name, "': ", what));
  }
};

// One tensor's header entry, checked.
struct TensorFields {
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
  int64_t end = 0;
};

std::string parse_dtype(const TensorError& bad, const json& dtype) {
  if (!dtype.is_string()) throw bad(str("dtype ", json_excerpt(dtype), " is not a string"));
  std::string name = dtype.get<std::string>();
  if (dtype_bytes(name) == 0)
    throw bad(str("unknown dtype ", name, "; allowed: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 ",
                  "BF16 I32 U32 F32 F64 I64 U64"));
  return name;
}

std::vector<int64_t> parse_shape(const TensorError& bad, const json& shape) {
  if (!shape.is_array()) throw bad(str("shape ", json_excerpt(shape), " is not an array"));
  std::vector<int64_t> dims;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw bad(str("shape ", json_excerpt(shape), " holds ", json_excerpt(d),
                    "; dims are integers >= 0"));
    dims.push_back(d.get<int64_t>());
  }
  return dims;
}

// data_offsets [begin, end) as int64 byte offsets.
std::pair<int64_t, int64_t> parse_offsets(const TensorError& bad, const json& offsets) {
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw bad(str("data_offsets ", json_excerpt(offsets), " is not [begin, end] of integers >= 0"));
  uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end || end > uint64_t(std::numeric_limits<int64_t>::max()))
    throw bad(str("data_offsets [", begin, ", ", end, "] are reversed or too large"));
  return {int64_t(begin), int64_t(end)};
}

// The fields in the order the checks read them, then the span the dtype and shape need.
TensorFields parse_tensor(const TensorError& bad, const json& value) {
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
      !value.contains("data_offsets"))
    throw bad(str(json_excerpt(value), " lacks dtype, shape or data_offsets"));
  TensorFields t;
  t.dtype = parse_dtype(bad, value["dtype"]);
  const int64_t elem_bytes = dtype_bytes(t.dtype);
  t.shape = parse_shape(bad, value["shape"]);
  std::tie(t.begin, t.end) = parse_offsets(bad, value["data_offsets"]);
  t.numel = checked_numel(t.shape);
  if (t.numel < 0 || t.numel > std::numeric_limits<int64_t>::max() / elem_bytes)
    throw bad(str("shape ", shape_str(t.shape), " overflows int64 bytes"));
  if (t.end - t.begin != t.numel * elem_bytes)
    throw bad(str("data_offsets [", t.begin, ", ", t.end, ") span ", t.end - t.begin,
                  " bytes, but dtype ", t.dtype, " and shape ", shape_str(t.shape), " need ",
                  t.numel * elem_bytes));
  return t;
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw DataError(str("writing ", path.string(), ": dtype ", dtype_name(dtype),
                        "; memo writes f32 and bf16"));
  if (metadata.count(kChecksumKey))
    throw DataError(str("writing ", path.string(), ": metadata key ", kChecksumKey,
                        " is reserved for memo's checksum"));
  std::set<std::string> seen;
  std::vector<int64_t> numels;
  ordered_json tensors_json = ordered_json::object();
  uint32_t crc = 0;
  int64_t offset_bytes = 0;
  std::vector<uint16_t> scratch;  // one BF16 piece
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || !seen.insert(t.name).second)
      throw DataError(str("writing ", path.string(), ": tensor name '", t.name,
                          "' is empty, reserved or used twice; names must be unique"));
    int64_t numel = checked_numel(t.shape);
    if (numel < 0 || std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; }))
      throw DataError(str("writing ", path.string(), ": tensor '", t.name, "' has shape ",
                          shape_str(t.shape),
                          "; dims must be non-negative and the count fit int64"));
    if (numel > 0 && t.data == nullptr)
      throw DataError(str("writing ", path.string(), ": tensor '", t.name, "' has no data"));
    int64_t bytes = numel * dtype_bytes(dtype);
    tensors_json[t.name] = {{"dtype", dtype == DType::kF32 ? "F32" : "BF16"},
                            {"shape", t.shape},
                            {"data_offsets", {offset_bytes, offset_bytes + bytes}}};
    offset_bytes += bytes;
    numels.push_back(numel);
    for_each_piece(t, numel, dtype, scratch, [&](std::string_view b) { crc = crc32c(crc, b); });
  }
  ordered_json header = ordered_json::object();
  ordered_json meta = ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta[kChecksumKey] = checksum_str(crc);
  header[kMetadataKey] = meta;
  for (auto& [name, value] : tensors_json.items()) header[name] = value;

  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data buffer to 8 bytes
  uint64_t n = header_text.size();
  char length_le[kHeaderLengthBytes];
  std::memcpy(length_le, &n, sizeof n);

  AtomicFileWriter out(path);
  out.append({length_le, sizeof length_le});
  out.append(header_text);
  for (size_t i = 0; i < tensors.size(); ++i)
    for_each_piece(tensors[i], numels[i], dtype, scratch,
                   [&](std::string_view b) { out.append(b); });
  out.commit();
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path), map_(path) {
  const std::string_view bytes = map_.bytes();
  const int64_t file_bytes = int64_t(bytes.size());
  if (file_bytes < kHeaderLengthBytes)
    throw FormatError(str(path_.string(), " is ", file_bytes,
                          " bytes, shorter than the 8-byte safetensors header length"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), sizeof n);
  if (n > kMaxHeaderBytes)
    throw FormatError(str(path_.string(), ": header length ", n, " at offset 0 is over the ",
                          kMaxHeaderBytes,
                          "-byte limit; the file is not safetensors or is corrupt"));
  if (int64_t(n) > file_bytes - kHeaderLengthBytes)
    throw FormatError(str(path_.string(), ": header length ", n, " at offset 0 runs past the end ",
                          "of the ", file_bytes, "-byte file; the file is truncated"));
  data_offset_bytes_ = kHeaderLengthBytes + int64_t(n);
  parse_header(bytes.substr(kHeaderLengthBytes, n));
  check_coverage(file_bytes - data_offset_bytes_);
  check_checksum(bytes.substr(size_t(data_offset_bytes_)));
}

void SafetensorsFile::parse_header(std::string_view header) {
  const std::string& p = path_.string();
  const json j = parse_header_object(p, header);
  for (const auto& [name, value] : j.items()) {
    if (name == kMetadataKey) {
      read_metadata(p, value, metadata_);
      continue;
    }
    TensorFields t = parse_tensor(TensorError{p, name}, value);
    entries_.emplace(name, Entry{std::move(t.dtype), std::move(t.shape), t.numel, t.begin, t.end});
  }
  for (const auto& [name, e] : entries_) names_.push_back(name);
  std::stable_sort(names_.begin(), names_.end(), [&](const std::string& a, const std::string& b) {
    const Entry &x = entries_.at(a), &y = entries_.at(b);
    return std::pair(x.begin, x.end) < std::pair(y.begin, y.end);
  });
}

// The spec requires the tensors to tile the data buffer exactly: no overlap, no hole, no tail.
void SafetensorsFile::check_coverage(int64_t data_bytes) const {
  const std::string& p = path_.string();
  int64_t covered = 0;
  const std::string* prev = nullptr;
  for (const std::string& name : names_) {
    const Entry& e = entries_.at(name);
    if (e.end > data_bytes)
      throw FormatError(str(p, ": tensor '", name, "' data_offsets [", e.begin, ", ", e.end,
                            ") run past the ", data_bytes,
                            "-byte data buffer; the file is truncated"));
    if (e.begin < covered)
      throw FormatError(str(p, ": tensor '", name, "' [", e.begin, ", ", e.end,
                            ") overlaps tensor '", *prev, "' ending at ", covered));
    if (e.begin > covered)
      throw FormatError(str(p, ": bytes [", covered, ", ", e.begin, ") of the data buffer before ",
                            "tensor '", name, "' belong to no tensor"));
    covered = e.end;
    if (e.end > e.begin) prev = &name;
  }
  if (covered != data_bytes)
    throw FormatError(str(p, ": bytes [", covered, ", ", data_bytes, ") at the end of the data ",
                          "buffer belong to no tensor"));
}

void SafetensorsFile::check_checksum(std::string_view data) const {
  auto it = metadata_.find(kChecksumKey);
  if (it == metadata_.end()) return;
  // In chunks, each given back once summed: the pass never holds more than one chunk resident.
  constexpr size_t kChunkBytes = size_t(64) << 20;
  uint32_t crc = 0;
  for (size_t at = 0; at < data.size(); at += kChunkBytes) {
    const std::string_view chunk = data.substr(at, kChunkBytes);
    crc = crc32c(crc, chunk);
    map_.release_pages(size_t(data_offset_bytes_) + at, chunk.size());
  }
  std::string actual = checksum_str(crc);
  if (it->second != actual)
    throw FormatError(str("checksum mismatch in ", path_.string(), ": the ", data.size(),
                          "-byte data buffer at offset ", data_offset_bytes_, " has ", actual,
                          ", the header records ", it->second, "; the file is corrupt"));
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it != entries_.end()) return it->second;
  constexpr size_t kShown = 8;
  std::string have;
  size_t shown = 0;
  for (const auto& [n, e] : entries_) {  // sorted by name: near-misses sit together
    if (shown == kShown) break;
    have += (shown++ ? ", " : "") + n;
  }
  if (entries_.size() > kShown) have += ", ...";
  throw DataError(str("tensor '", name, "' is not in ", path_.string(), "; it has ",
                      entries_.size(), " tensors: ", have.empty() ? "(none)" : have));
}

std::vector<int64_t> SafetensorsFile::shape(const std::string& name) const {
  return entry(name).shape;
}

const std::string& SafetensorsFile::dtype(const std::string& name) const {
  return entry(name).dtype;
}

int64_t SafetensorsFile::numel(const std::string& name) const { return entry(name).numel; }

namespace {

// IEEE half (binary16) to float, exactly (every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // zero
  } else {        // subnormal half: normalise
    int e = -1;
    uint32_t m = mant;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

namespace {

// n elements of a tensor of dtype `dtype` at src, as float32 at dst (SafetensorsFile::read_into).
void widen(const std::string& dtype, const char* src, float* dst, int64_t n) {
  if (dtype == "F32") {
    if (n > 0) std::memcpy(dst, src, size_t(n) * 4);
  } else if (dtype == "F64") {  // rounded to nearest float
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = float(v);
    }
  } else if (dtype == "BF16") {  // 16-bit types widen exactly; bf16 is f32's top half
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      const uint32_t bits = uint32_t(h) << 16;
      std::memcpy(dst + i, &bits, 4);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = half_to_float(h);
    }
  }
}

}  // namespace

void SafetensorsFile::read_into(const std::string& name, float* dst,
                                const std::vector<int64_t>& shape) const {
  const ShardRun whole{0, 0, checked_numel(shape)};
  read_runs_into(name, dst, shape, std::span<const ShardRun>(&whole, 1));
}

void SafetensorsFile::read_runs_into(const std::string& name, float* dst,
                                     const std::vector<int64_t>& shape,
                                     std::span<const ShardRun> runs) const {
  const Entry& e = entry(name);
  if (e.dtype != "F32" && e.dtype != "F64" && e.dtype != "BF16" && e.dtype != "F16")
    throw FormatError(str(path_.string(), ": tensor '", name, "' has dtype ", e.dtype,
                          "; memo reads F32, F64, BF16 and F16"));
  if (e.shape != shape)
    throw DataError(
        str(path_.string(), ": tensor '", name, "' has shape ", shape_str(e.shape), " (", e.numel,
            " elements), expected ", shape_str(shape),
            e.numel == checked_numel(shape) ? " (the same count, another layout)" : ""));
  const int64_t size = dtype_bytes(e.dtype);
  const char* src = map_.bytes().data() + data_offset_bytes_ + e.begin;
  for (const ShardRun& r : runs) {
    if (r.whole < 0 || r.count < 0 || r.whole + r.count > e.numel)
      throw DataError(str(path_.string(), ": tensor '", name, "' has ", e.numel,
                          " elements; elements [", r.whole, ", ", r.whole + r.count,
                          ") were asked for"));
    widen(e.dtype, src + r.whole * size, dst + r.part, r.count);
  }
  map_.release_pages(size_t(data_offset_bytes_ + e.begin), size_t(e.end - e.begin));
}

}  // namespace memo
