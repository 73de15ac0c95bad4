#include "memo/io/hardware_json.h"

#include <gtest/gtest.h>

#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

using nlohmann::json;
using test::error_message;
using test::TempDir;

std::filesystem::path hardware_dir() {
  return std::filesystem::path(test::source_dir()) / "hardware";
}

json valid() {
  return json{{"name", "Test GPU"},
              {"peak_bf16_flops", 100e12},
              {"memory_bytes", int64_t(24) << 30},
              {"host_link_bytes_per_s", 16e9},
              {"nvlink_bytes_per_s", 0}};
}

// Writes `j` to dir/name and returns the message load_gpu_spec throws for it.
std::string load_error(const TempDir& tmp, const json& j) {
  const auto path = tmp / "bad.json";
  write_file_atomic(path, j.dump());
  return error_message<ConfigError>([&] { load_gpu_spec(path); });
}

TEST(HardwareJson, every_shipped_file_loads_with_the_datasheet_figures) {
  const auto names = shipped_gpu_names(hardware_dir());
  EXPECT_EQ(names, (std::vector<std::string>{"a100-80gb", "a800-80gb", "h100-sxm", "h200"}));
  for (const std::string& n : names) {
    GpuSpec g = load_gpu_spec(hardware_dir() / (n + ".json"));
    EXPECT_FALSE(g.name.empty()) << n;
    EXPECT_FALSE(g.source.empty()) << n << ": every shipped figure cites its source";
  }
  GpuSpec a800 = find_gpu("a800-80gb", hardware_dir());
  EXPECT_EQ(a800.peak_bf16_flops, 312e12);
  EXPECT_EQ(a800.memory_bytes, 80'000'000'000);
  EXPECT_EQ(a800.host_link_bytes_per_s, 32e9);
  EXPECT_EQ(a800.nvlink_bytes_per_s, 400e9);
  EXPECT_EQ(find_gpu("a100-80gb", hardware_dir()).nvlink_bytes_per_s, 600e9);
  GpuSpec h100 = find_gpu("h100-sxm", hardware_dir());
  EXPECT_EQ(h100.peak_bf16_flops, 989e12);
  EXPECT_EQ(h100.host_link_bytes_per_s, 64e9);
  EXPECT_EQ(h100.nvlink_bytes_per_s, 900e9);
  GpuSpec h200 = find_gpu("h200", hardware_dir());
  EXPECT_EQ(h200.memory_bytes, 141'000'000'000);
  EXPECT_EQ(h200.peak_bf16_flops, 989e12);
}

TEST(HardwareJson, find_gpu_ignores_case_and_takes_a_path) {
  EXPECT_EQ(find_gpu("A800-80GB", hardware_dir()).name, "NVIDIA A800 SXM4 80GB");
  TempDir tmp;
  write_file_atomic(tmp / "mine.json", valid().dump());
  GpuSpec g = find_gpu((tmp / "mine.json").string(), hardware_dir());
  EXPECT_EQ(g.name, "Test GPU");
  EXPECT_EQ(g.memory_bytes, int64_t(24) << 30);
  EXPECT_EQ(g.nvlink_bytes_per_s, 0);  // a PCIe card without NVLink is allowed
  EXPECT_TRUE(g.source.empty());
}

// What a CUDA driver names a GPU (cudaDeviceProp::name) finds its shipped datasheet by model.
TEST(HardwareJson, match_gpu_finds_a_drivers_name_by_its_model) {
  EXPECT_EQ(match_gpu("NVIDIA H200", hardware_dir())->name, "NVIDIA H200 SXM 141GB");
  EXPECT_EQ(match_gpu("NVIDIA H100 80GB HBM3", hardware_dir())->name, "NVIDIA H100 SXM5 80GB");
  EXPECT_EQ(match_gpu("NVIDIA A100-SXM4-80GB", hardware_dir())->peak_bf16_flops, 312e12);
  EXPECT_FALSE(match_gpu("NVIDIA GeForce RTX 4090", hardware_dir()));
  EXPECT_FALSE(match_gpu("NVIDIA H100 PCIe", hardware_dir()));  // not the SXM5 board's peak
  EXPECT_FALSE(match_gpu("NVIDIA H100 NVL", hardware_dir()));
  EXPECT_FALSE(match_gpu("", hardware_dir()));
  EXPECT_FALSE(match_gpu("NVIDIA H200", hardware_dir() / "missing"));
  // two datasheets of one model: the driver's name cannot choose, so none
  TempDir tmp;
  json a = valid(), b = valid();
  a["name"] = "NVIDIA H200 SXM 141GB";
  b["name"] = "NVIDIA H200 SXM 141GB, measured";
  write_file_atomic(tmp / "a.json", a.dump());
  write_file_atomic(tmp / "b.json", b.dump());
  EXPECT_FALSE(match_gpu("NVIDIA H200", tmp.path()));
  // an NVL card finds the NVL file only
  json nvl = valid();
  nvl["name"] = "NVIDIA H200 NVL 141GB";
  write_file_atomic(tmp / "nvl.json", nvl.dump());
  EXPECT_EQ(match_gpu("NVIDIA H200 NVL", tmp.path())->name, "NVIDIA H200 NVL 141GB");
  // a broken file beside a good one is skipped, not fatal
  TempDir other;
  write_file_atomic(other / "a.json", a.dump());
  write_file_atomic(other / "broken.json", "{");
  EXPECT_EQ(match_gpu("NVIDIA H200", other.path())->name, "NVIDIA H200 SXM 141GB");
}

TEST(HardwareJson, unknown_name_lists_the_shipped_ones) {
  std::string msg = error_message<ConfigError>([&] { find_gpu("b200", hardware_dir()); });
  EXPECT_NE(msg.find("unknown GPU 'b200'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a100-80gb, a800-80gb, h100-sxm, h200"), std::string::npos) << msg;
  EXPECT_NE(msg.find("path"), std::string::npos) << msg;
}

TEST(HardwareJson, missing_path_is_a_data_error_naming_it) {
  TempDir tmp;
  const std::string path = tmp.str("absent.json");
  std::string msg = error_message<DataError>([&] { find_gpu(path, hardware_dir()); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(HardwareJson, missing_field_names_file_and_field) {
  TempDir tmp;
  for (const char* field :
       {"name", "peak_bf16_flops", "memory_bytes", "host_link_bytes_per_s", "nvlink_bytes_per_s"}) {
    json j = valid();
    j.erase(field);
    std::string msg = load_error(tmp, j);
    EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("required field ") + field + " is missing"), std::string::npos)
        << msg;
  }
}

TEST(HardwareJson, negative_or_zero_figure_names_file_field_and_value) {
  TempDir tmp;
  json j = valid();
  j["peak_bf16_flops"] = -1.5;
  std::string msg = load_error(tmp, j);
  EXPECT_NE(msg.find("bad.json: peak_bf16_flops = -1.5 must be a positive number of FLOP/s"),
            std::string::npos)
      << msg;
  j = valid();
  j["memory_bytes"] = 0;
  msg = load_error(tmp, j);
  EXPECT_NE(msg.find("memory_bytes = 0 must be a positive"), std::string::npos) << msg;
  j = valid();
  j["nvlink_bytes_per_s"] = -400e9;
  msg = load_error(tmp, j);
  EXPECT_NE(msg.find("nvlink_bytes_per_s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("non-negative"), std::string::npos) << msg;
}

TEST(HardwareJson, wrong_type_names_file_field_and_expected_type) {
  TempDir tmp;
  json j = valid();
  j["host_link_bytes_per_s"] = "32 GB/s";
  std::string msg = load_error(tmp, j);
  EXPECT_NE(msg.find("bad.json: field host_link_bytes_per_s = \"32 GB/s\" is a string, expected a "
                     "number"),
            std::string::npos)
      << msg;
  j = valid();
  j["memory_bytes"] = 80e9;  // a float, not an integer byte count
  msg = load_error(tmp, j);
  EXPECT_NE(msg.find("memory_bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("an integer"), std::string::npos) << msg;
  j = valid();
  j["name"] = 7;
  msg = load_error(tmp, j);
  EXPECT_NE(msg.find("field name = 7 is a number, expected a string"), std::string::npos) << msg;
}

TEST(HardwareJson, malformed_json_names_the_file) {
  TempDir tmp;
  const auto path = tmp / "broken.json";
  write_file_atomic(path, "{\"name\": ");
  std::string msg = error_message<ConfigError>([&] { load_gpu_spec(path); });
  EXPECT_NE(msg.find("broken.json: malformed JSON"), std::string::npos) << msg;
}

}  // namespace
}  // namespace memo
