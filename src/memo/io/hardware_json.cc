// Implementation of io/hardware_json.h.
#include "memo/io/hardware_json.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <system_error>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"
#include "memo/io/atomic_file.h"
#include "memo/io/json_file.h"

namespace memo {
namespace {

using nlohmann::json;

const json& required(const json& j, std::string_view where, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null())
    throw ConfigError(str(where, ": required field ", name, " is missing"));
  return *it;
}

double read_number(const json& j, std::string_view where, const char* name) {
  const json& v = required(j, where, name);
  if (!v.is_number()) wrong_type(where, name, v, "a number");
  return v.get<double>();
}

int64_t read_int(const json& j, std::string_view where, const char* name) {
  const json& v = required(j, where, name);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw ConfigError(str(where, ": field ", name, " = ", json_excerpt(v), " is too large"));
  if (!v.is_number_integer())
    wrong_type(where, name, v, "an integer (write 80000000000, not 80e9)");
  return v.get<int64_t>();
}

std::string read_string(const json& j, std::string_view where, const char* name) {
  const json& v = required(j, where, name);
  if (!v.is_string()) wrong_type(where, name, v, "a string");
  return v.get<std::string>();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

GpuSpec gpu_spec_from_json(const json& j, std::string_view where) {
  if (!j.is_object())
    throw ConfigError(str(where, ": a GPU description must be a JSON object, got ", j.type_name()));
  GpuSpec g;
  g.name = read_string(j, where, "name");
  g.peak_bf16_flops = read_number(j, where, "peak_bf16_flops");
  g.memory_bytes = read_int(j, where, "memory_bytes");
  g.host_link_bytes_per_s = read_number(j, where, "host_link_bytes_per_s");
  g.nvlink_bytes_per_s = read_number(j, where, "nvlink_bytes_per_s");
  if (auto it = j.find("source"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) wrong_type(where, "source", *it, "a string");
    g.source = it->get<std::string>();
  }
  try {
    g.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(str(where, ": ", e.what()));
  }
  return g;
}

GpuSpec load_gpu_spec(const std::filesystem::path& path) {
  return gpu_spec_from_json(read_json_file<ConfigError>(path), path.string());
}

std::vector<std::string> shipped_gpu_names(const std::filesystem::path& hardware_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(hardware_dir, ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  if (ec) throw DataError(str("cannot list ", hardware_dir.string(), ": ", ec.message()));
  std::sort(names.begin(), names.end());
  return names;
}

GpuSpec find_gpu(std::string_view name_or_path, const std::filesystem::path& hardware_dir) {
  const bool is_path =
      name_or_path.find('/') != std::string_view::npos ||
      (name_or_path.size() >= 5 && lower(name_or_path.substr(name_or_path.size() - 5)) == ".json");
  if (is_path) return load_gpu_spec(std::filesystem::path(name_or_path));
  const std::string name = lower(name_or_path);
  const std::vector<std::string> shipped = shipped_gpu_names(hardware_dir);
  if (std::find(shipped.begin(), shipped.end(), name) == shipped.end())
    throw ConfigError(str("unknown GPU '", name_or_path, "'; shipped: ", join(shipped), " (in ",
                          hardware_dir.string(),
                          "), or give the path of a .json file of the same form"));
  return load_gpu_spec(hardware_dir / (name + ".json"));
}

namespace {

// The model word of a product name: the word after "NVIDIA", up to a space or '-', lower case.
std::string gpu_model(std::string_view name) {
  std::string n = lower(name);
  const std::string_view vendor = "nvidia ";
  if (n.rfind(vendor, 0) == 0) n = n.substr(vendor.size());
  return n.substr(0, n.find_first_of(" -"));
}

// The form factor a name states when it is not the SXM board: "pcie" or "nvl" ("" otherwise).
// One model's PCIe and NVL cards have other peaks than its SXM board.
std::string gpu_form(std::string_view name) {
  const std::string n = lower(name);
  for (const char* form : {"pcie", "nvl"})
    if (n.find(form) != std::string::npos) return form;
  return "";
}

}  // namespace

std::optional<GpuSpec> match_gpu(std::string_view device_name,
                                 const std::filesystem::path& hardware_dir) {
  const std::string model = gpu_model(device_name);
  std::error_code ec;
  if (model.empty() || !std::filesystem::is_directory(hardware_dir, ec)) return std::nullopt;
  std::optional<GpuSpec> found;
  for (const std::string& name : shipped_gpu_names(hardware_dir)) {
    GpuSpec spec;
    try {
      spec = load_gpu_spec(hardware_dir / (name + ".json"));
    } catch (const Error&) {
      continue;  // a broken file is not this GPU's: `memo plan --gpu` names it when asked for it
    }
    if (gpu_model(spec.name) != model || gpu_form(spec.name) != gpu_form(device_name)) continue;
    if (found) return std::nullopt;  // two datasheets of one model: the driver's name cannot say
    found = std::move(spec);
  }
  return found;
}

}  // namespace memo
