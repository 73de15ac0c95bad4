#include "memo/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "memo/io/crc32c.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using test::error_message;
using test::TempDir;

// A safetensors file from a literal header and data buffer, as another tool would write it.
std::string make_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header + data;
}

std::string floats(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}

struct Fixture {
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};  // [2, 3]
  std::vector<float> b = {7.0f, 8.0f};                               // [2]
  float s = 42.0f;                                                   // []
  std::vector<NamedTensor> tensors() const {
    return {{"model.layers.0.w", {2, 3}, w.data()},
            {"model.b", {2}, b.data()},
            {"scalar", {}, &s},
            {"empty", {0, 4}, nullptr}};
  }
};

TEST(Crc32c, known_value_and_fast_path_matches_reference) {
  EXPECT_EQ(crc32c(0, "123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c_ref(0, "123456789"), 0xE3069283u);
  std::mt19937 rng(7);
  std::string buf(1000, '\0');
  for (char& c : buf) c = char(rng());
  for (size_t len : {0, 1, 7, 8, 9, 63, 1000}) {
    std::string_view v(buf.data() + 1, len - (len == 1000));  // unaligned start
    EXPECT_EQ(crc32c(0, v), crc32c_ref(0, v)) << len;
    // Chained updates equal one pass.
    EXPECT_EQ(crc32c(crc32c(0, v.substr(0, len / 2)), v.substr(len / 2)), crc32c(0, v)) << len;
  }
}

TEST(Safetensors, round_trips_tensors_shapes_and_metadata) {
  TempDir tmp;
  Fixture f;
  fs::path p = tmp / "m.safetensors";
  write_safetensors(p, f.tensors(), {{"format", "pt"}});
  SafetensorsFile file(p);
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"model.layers.0.w", "model.b", "scalar", "empty"}));
  EXPECT_EQ(file.shape("model.layers.0.w"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.shape("scalar"), std::vector<int64_t>{});
  EXPECT_EQ(file.numel("empty"), 0);
  EXPECT_EQ(file.dtype("model.b"), "F32");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_TRUE(file.has_checksum());
  std::vector<float> w(6);
  file.read_into("model.layers.0.w", w.data(), {2, 3});
  EXPECT_EQ(std::memcmp(w.data(), f.w.data(), 6 * sizeof(float)), 0);  // bitwise, -0.0 included
  float s = 0;
  file.read_into("scalar", &s, {});
  EXPECT_EQ(s, 42.0f);
  file.read_into("empty", nullptr, {0, 4});

  std::string bytes = read_file(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // header padded with spaces, as the reference writer does
  EXPECT_EQ(bytes[8 + n - 1] == ' ' || bytes[8 + n - 1] == '}', true);
  EXPECT_EQ(bytes.size(), 8 + n + (6 + 2 + 1) * sizeof(float));
}

TEST(Safetensors, file_from_another_tool_without_checksum_loads) {
  TempDir tmp;
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("h":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})";
  write_file_atomic(tmp / "x",
                    make_file(header, floats({1, 2}) + std::string("\x80\x3f\x00\x40", 4)));
  SafetensorsFile file(tmp / "x");
  EXPECT_FALSE(file.has_checksum());
  std::vector<float> a(2);
  file.read_into("a", a.data(), {2});
  EXPECT_EQ(a[1], 2.0f);
  file.read_into("h", a.data(), {2});  // BF16 widens exactly
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[1], 2.0f);
}

TEST(Safetensors, f16_and_f64_convert_and_integer_dtypes_are_rejected) {
  TempDir tmp;
  // F16 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24 (subnormal); F64 0.1; I32 7
  std::string header = R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
                       R"("d":{"dtype":"F64","shape":[1],"data_offsets":[6,14]},)"
                       R"("i":{"dtype":"I32","shape":[1],"data_offsets":[14,18]}})";
  const double tenth = 0.1;
  std::string data("\x00\x3c\x00\xc0\x01\x00", 6);
  data.append(reinterpret_cast<const char*>(&tenth), 8);
  data.append("\x07\x00\x00\x00", 4);
  write_file_atomic(tmp / "x", make_file(header, data));
  SafetensorsFile file(tmp / "x");
  std::vector<float> h(3), d(1);
  file.read_into("h", h.data(), {3});
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 0x1.0p-24f);
  file.read_into("d", d.data(), {1});
  EXPECT_EQ(d[0], 0.1f);
  std::string msg = error_message<FormatError>([&] { file.read_into("i", d.data(), {1}); });
  EXPECT_NE(msg.find("'i' has dtype I32"), std::string::npos) << msg;
}

// A tensor-parallel rank's read: the runs' elements in each dtype, nothing else written, a run
// past the end refused. [3, 4] of i + 1 as F32, BF16, F16 and F64 (each exact in every dtype).
TEST(Safetensors, runs_read_their_elements_alone_in_every_dtype) {
  TempDir tmp;
  std::string header = "{", data;
  int64_t at = 0;
  for (const auto& [dtype, bytes] : {std::pair{"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}}) {
    header += str(at ? "," : "", "\"", dtype, "\":{\"dtype\":\"", dtype,
                  "\",\"shape\":[3,4],\"data_offsets\":[", at, ",", at + 12 * bytes, "]}");
    for (int i = 0; i < 12; ++i) {
      const float f = float(i + 1);
      uint32_t b32;
      std::memcpy(&b32, &f, 4);
      const double d = f;
      const uint16_t b16 = uint16_t(b32 >> 16);  // exact: small integers
      if (std::string(dtype) == "F32") data.append(reinterpret_cast<const char*>(&f), 4);
      if (std::string(dtype) == "BF16") data.append(reinterpret_cast<const char*>(&b16), 2);
      if (std::string(dtype) == "F64") data.append(reinterpret_cast<const char*>(&d), 8);
      if (std::string(dtype) == "F16") {  // i + 1 <= 12: exponent 15 + e, 10-bit mantissa
        const int e = std::ilogb(f);
        const uint16_t h = uint16_t((15 + e) << 10 | (int(std::ldexp(f, 10 - e)) - 1024));
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    at += 12 * bytes;
  }
  write_file_atomic(tmp / "x", make_file(header + "}", data));
  SafetensorsFile file(tmp / "x");
  // column 1..2 of each row (a row-parallel part), into a buffer whose other elements stay -7
  const std::vector<ShardRun> runs{{1, 0, 2}, {5, 2, 2}, {9, 4, 2}};
  for (const char* dtype : {"F32", "BF16", "F16", "F64"}) {
    SCOPED_TRACE(dtype);
    std::vector<float> part(8, -7.0f);
    file.read_runs_into(dtype, part.data(), {3, 4}, runs);
    EXPECT_EQ(part, (std::vector<float>{2, 3, 6, 7, 10, 11, -7, -7}));
  }
  std::vector<float> part(8);
  const std::vector<ShardRun> past{{10, 0, 3}};
  const std::string msg = error_message<DataError>([&] {
    file.read_runs_into("F32", part.data(), {3, 4}, past);
  });
  EXPECT_NE(msg.find("'F32' has 12 elements; elements [10, 13) were asked for"), std::string::npos)
      << msg;
  EXPECT_THROW(file.read_runs_into("F32", part.data(), {4, 3}, runs), DataError);  // the shape
}

TEST(Safetensors, truncated_file_is_format_error_at_every_cut) {
  TempDir tmp;
  Fixture f;
  fs::path p = tmp / "m.safetensors";
  write_safetensors(p, f.tensors());
  std::string bytes = read_file(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  for (size_t cut : {size_t(0), size_t(3), size_t(7), size_t(8), size_t(8 + n / 2), size_t(8 + n),
                     bytes.size() - 4, bytes.size() - 1}) {
    write_file_atomic(tmp / "cut", bytes.substr(0, cut));
    std::string msg = error_message<FormatError>([&] { SafetensorsFile file(tmp / "cut"); });
    EXPECT_NE(msg.find((tmp / "cut").string()), std::string::npos) << cut << ": " << msg;
  }
}

TEST(Safetensors, flipped_data_byte_fails_the_checksum) {
  TempDir tmp;
  Fixture f;
  fs::path p = tmp / "m.safetensors";
  write_safetensors(p, f.tensors());
  std::string bytes = read_file(p);
  bytes[bytes.size() - 5] ^= 0x10;
  write_file_atomic(p, bytes);
  std::string msg = error_message<FormatError>([&] { SafetensorsFile file(p); });
  EXPECT_NE(msg.find("checksum mismatch in " + p.string()), std::string::npos) << msg;
}

TEST(Safetensors, corrupted_header_is_format_error) {
  TempDir tmp;
  Fixture f;
  fs::path p = tmp / "m.safetensors";
  write_safetensors(p, f.tensors());
  std::string bytes = read_file(p);
  bytes[8 + 20] = '\x01';
  write_file_atomic(p, bytes);
  std::string msg = error_message<FormatError>([&] { SafetensorsFile file(p); });
  EXPECT_NE(msg.find("malformed JSON header at byte"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;

  bytes = read_file(p);
  bytes[7] = '\x7f';  // header length in the exabytes
  write_file_atomic(p, bytes);
  msg = error_message<FormatError>([&] { SafetensorsFile file(p); });
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
}

// Each literal header is wrong in one way; the message must name the tensor or range at fault.
TEST(Safetensors, invalid_headers_name_the_tensor) {
  TempDir tmp;
  std::string data = floats({1, 2, 3, 4});  // 16 bytes
  struct Case {
    std::string header, expect;
  };
  std::vector<Case> cases = {
      {R"({"a":{"dtype":"F17","shape":[4],"data_offsets":[0,16]}})", "'a': unknown dtype F17"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "need 12"},
      {R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", "run past the 16-byte"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       "'b' [8, 16) overlaps tensor 'a'"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
       "bytes [8, 12)"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "bytes [8, 16) at the end"},
      {R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "dims are integers >= 0"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", "'a'"},
      {R"({"a":{"dtype":"F32","shape":[4]}})", "'a'"},
      {R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "'k'"},
      {R"({"__metadata__":[1],"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       "__metadata__ is a array"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
       "'a': shape [4294967296, 4294967296] overflows"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16.0]}})", "'a': data_offsets"},
      {R"({"a":{"dtype":7,"shape":[4],"data_offsets":[0,16]}})", "'a': dtype 7"},
      {R"({"a":5})", "'a': 5 lacks"},
      {R"([1, 2])", "does not start with '{'"},
      // a value nested 100,000 deep: quoted in short (json_excerpt), not dumped whole, which
      // overflowed the stack
      {R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}",
       "'a': [[[[...]]]] lacks"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,1e400]}})", "number overflow"},
  };
  for (const Case& c : cases) {
    write_file_atomic(tmp / "bad", make_file(c.header, data));
    std::string msg = error_message<FormatError>([&] { SafetensorsFile file(tmp / "bad"); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << "\n  gives: " << msg;
    EXPECT_NE(msg.find((tmp / "bad").string()), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
  }
}

TEST(Safetensors, missing_tensor_lists_what_the_file_has) {
  TempDir tmp;
  Fixture f;
  fs::path p = tmp / "m.safetensors";
  write_safetensors(p, f.tensors());
  SafetensorsFile file(p);
  EXPECT_FALSE(file.contains("lm_head.weight"));
  std::string msg = error_message<DataError>([&] { file.shape("lm_head.weight"); });
  EXPECT_NE(msg.find("'lm_head.weight' is not in " + p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 tensors: empty, model.b, model.layers.0.w, scalar"), std::string::npos)
      << msg;
}

TEST(Safetensors, read_into_checks_element_count) {
  TempDir tmp;
  Fixture f;
  write_safetensors(tmp / "m", f.tensors());
  SafetensorsFile file(tmp / "m");
  std::vector<float> w(12);
  std::string msg = error_message<DataError>([&] {
    file.read_into("model.layers.0.w", w.data(), {3, 4});
  });
  EXPECT_NE(msg.find("shape [2, 3] (6 elements), expected [3, 4]"), std::string::npos) << msg;
}

// A transposed tensor has the element count the caller expects: only the shape tells it apart.
TEST(Safetensors, read_into_refuses_a_transposed_tensor_naming_file_tensor_and_both_shapes) {
  TempDir tmp;
  Fixture f;
  write_safetensors(tmp / "m", f.tensors());
  SafetensorsFile file(tmp / "m");
  std::vector<float> w(6, -1.0f);
  std::string msg = error_message<DataError>([&] {
    file.read_into("model.layers.0.w", w.data(), {3, 2});
  });
  EXPECT_EQ(msg, (tmp / "m").string() +
                     ": tensor 'model.layers.0.w' has shape [2, 3] (6 elements), expected [3, 2] "
                     "(the same count, another layout)");
  EXPECT_EQ(w, std::vector<float>(6, -1.0f)) << "nothing copied";
  float s = 0;
  msg = error_message<DataError>([&] { file.read_into("scalar", &s, {1}); });
  EXPECT_NE(msg.find("'scalar' has shape [] (1 elements), expected [1]"), std::string::npos) << msg;
}

// This process's resident memory in bytes (file-backed pages included), from /proc/self/statm.
int64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  in >> size_pages >> resident_pages;
  return resident_pages * int64_t(::sysconf(_SC_PAGESIZE));
}

// The reader maps the file and gives back each tensor's pages once copied, and the whole
// buffer's after the checksum pass: loading a 64 MiB tensor grows the process by about nothing
// beyond the destination (read before the measurement), where reading the file into memory
// grew it by 64 MiB.
TEST(Safetensors, reading_gives_back_the_files_pages) {
  TempDir tmp;
  constexpr int64_t kNumel = int64_t(16) << 20;  // 64 MiB of f32
  // a quarter of the file: AddressSanitizer's shadow of the pages the checksum reads adds an
  // eighth of them (9.7 MB measured on a 2-core EPYC, 2026-12-04), a kept file would add all
  constexpr int64_t kSlackBytes = int64_t(16) << 20;
  {
    std::vector<float> w(static_cast<size_t>(kNumel));
    for (int64_t i = 0; i < kNumel; ++i) w[size_t(i)] = float(i % 1000);
    write_safetensors(tmp / "big", {{"w", {kNumel}, w.data()}});
  }
  std::vector<float> dst(static_cast<size_t>(kNumel), -1.0f);  // resident before the baseline
  const int64_t before = resident_bytes();
  SafetensorsFile file(tmp / "big");
  EXPECT_TRUE(file.has_checksum());  // its check touched every page
  EXPECT_LT(resident_bytes() - before, kSlackBytes);
  file.read_into("w", dst.data(), {kNumel});
  EXPECT_LT(resident_bytes() - before, kSlackBytes);
  EXPECT_EQ(dst[size_t(kNumel - 1)], float((kNumel - 1) % 1000));
}

TEST(Safetensors, writer_rejects_bad_tensor_lists_and_keeps_old_file) {
  TempDir tmp;
  Fixture f;
  fs::path p = tmp / "m";
  write_safetensors(p, f.tensors());
  std::string before = read_file(p);
  auto dup = f.tensors();
  dup.push_back(dup[0]);
  std::string msg = error_message<DataError>([&] { write_safetensors(p, dup); });
  EXPECT_NE(msg.find("'model.layers.0.w'"), std::string::npos) << msg;
  msg = error_message<DataError>([&] { write_safetensors(p, {{"neg", {-1, 2}, f.w.data()}}); });
  EXPECT_NE(msg.find("shape [-1, 2]"), std::string::npos) << msg;
  msg = error_message<DataError>([&] { write_safetensors(p, {}, {{kChecksumKey, "x"}}); });
  EXPECT_NE(msg.find(kChecksumKey), std::string::npos) << msg;
  EXPECT_EQ(read_file(p), before);
}

// The bf16 value nearest x, ties to the even pattern, chosen by exact distances in double (not by
// the writer's integer rounding). For finite x below bf16's largest finite value.
float nearest_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;  // toward zero; one step away
  float flo, fhi;
  std::memcpy(&flo, &lo, 4);
  std::memcpy(&fhi, &hi, 4);
  const double d_lo = std::fabs(double(x) - flo), d_hi = std::fabs(double(fhi) - x);
  if (d_lo != d_hi) return d_lo < d_hi ? flo : fhi;
  return (lo >> 16) % 2 == 0 ? flo : fhi;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(Safetensors, bf16_writes_each_value_rounded_to_nearest_even) {
  TempDir tmp;
  std::vector<float> w = {1.0f + 0x1p-8f,             // a tie: down to the even 1
                          1.0f + 3 * 0x1p-8f,         // a tie: up to the even 1 + 2^-6
                          -(1.0f + 0x1p-8f),          // ties are symmetric
                          1.0f + 0x1p-8f + 0x1p-20f,  // just past the tie: up
                          0.0f,
                          -0.0f,
                          1e-30f,
                          1e-40f,
                          65504.0f,
                          -3.0e38f};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int i = 0; i < 1000; ++i) w.push_back(normal(rng));
  const std::vector<float> special = {std::nanf(""), INFINITY, -INFINITY};
  const fs::path p = tmp / "bf16.safetensors";
  write_safetensors(p, {{"w", {int64_t(w.size())}, w.data()}, {"s", {3}, special.data()}},
                    {{"format", "pt"}}, DType::kBF16);
  const SafetensorsFile file(p);  // its checksum is checked here
  EXPECT_TRUE(file.has_checksum());
  EXPECT_EQ(file.dtype("w"), "BF16");
  std::vector<float> back(w.size()), s(3);
  file.read_into("w", back.data(), {int64_t(w.size())});
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_TRUE(same_bits(back[i], nearest_bf16(w[i]))) << i << ": " << w[i] << " -> " << back[i];
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 0x1p-6f);
  file.read_into("s", s.data(), {3});
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_EQ(s[1], INFINITY);
  EXPECT_EQ(s[2], -INFINITY);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, read_file(p).data(), 8);
  EXPECT_EQ(fs::file_size(p), 8 + header_bytes + 2 * (w.size() + 3));  // two bytes a value
  const std::string msg = error_message<DataError>([&] {
    write_safetensors(tmp / "f16", {{"w", {1}, w.data()}}, {}, DType::kF16);
  });
  EXPECT_NE(msg.find("dtype f16; memo writes f32 and bf16"), std::string::npos) << msg;
}

TEST(Safetensors, missing_file_is_data_error) {
  TempDir tmp;
  std::string msg = error_message<DataError>([&] { SafetensorsFile file(tmp / "nope"); });
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
}

// F16's top exponent (0x1f) is infinity (mantissa 0) or NaN, not a large finite number: a
// loaded checkpoint holding them is then refused as non-finite, not trained on as 65536.
TEST(Safetensors, f16_infinities_and_nan_widen_to_float_infinities_and_nan) {
  TempDir tmp;
  // F16 0x7c00 = +inf, 0xfc00 = -inf, 0x7e00 = NaN, 0x7bff = 65504 (the largest finite)
  const std::string header = R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})";
  write_file_atomic(tmp / "x",
                    make_file(header, std::string("\x00\x7c\x00\xfc\x00\x7e\xff\x7b", 8)));
  SafetensorsFile file(tmp / "x");
  std::vector<float> h(4);
  file.read_into("h", h.data(), {4});
  EXPECT_EQ(h[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h[2])) << h[2];
  EXPECT_EQ(h[3], 65504.0f);
}

}  // namespace
}  // namespace memo
