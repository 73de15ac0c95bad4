// GpuSpec <-> hardware/*.json: one small file per GPU, shipped in the repository's hardware/
// folder, or a user's own file of the same form. Fields: name (string), peak_bf16_flops,
// memory_bytes (integer), host_link_bytes_per_s, nvlink_bytes_per_s (numbers), and an optional
// source string. Every field but source is required; unknown fields are ignored.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/model/hardware.h"

namespace memo {

// `where` names the source in messages. Missing, null, wrong-type or invalid fields throw
// ConfigError naming `where` and the field. Calls GpuSpec::validate().
GpuSpec gpu_spec_from_json(const nlohmann::json& json, std::string_view where);

// Reads one file. Missing file: DataError; malformed JSON or a bad field: ConfigError naming the
// path and the field.
GpuSpec load_gpu_spec(const std::filesystem::path& path);

// The shipped names in `hardware_dir`: the stems of its *.json files, sorted ("a800-80gb", ...).
std::vector<std::string> shipped_gpu_names(const std::filesystem::path& hardware_dir);

// A shipped name, case-insensitive ("A800-80GB" reads hardware_dir/a800-80gb.json), or a path to
// a user's file (anything with a '/' or ending in ".json"). An unknown name throws ConfigError
// listing the shipped names.
GpuSpec find_gpu(std::string_view name_or_path, const std::filesystem::path& hardware_dir);

// The shipped GPU whose model is the one a driver names (the word after "NVIDIA": "NVIDIA H200"
// and "NVIDIA A100-SXM4-80GB" are the H200 and the A100 of "NVIDIA H200 SXM 141GB" and "NVIDIA
// A100 SXM4 80GB") in the same form factor (a "PCIe" or "NVL" card matches only a file that says
// so); none when no valid file or more than one matches, or the folder is missing.
std::optional<GpuSpec> match_gpu(std::string_view device_name,
                                 const std::filesystem::path& hardware_dir);

}  // namespace memo
