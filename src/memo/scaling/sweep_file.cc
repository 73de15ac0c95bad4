#include "memo/scaling/sweep_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string_view>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"

namespace memo::scaling {

namespace {

// The fields memo fit reads beyond the required ones, where a line has them: "" when they are as
// memo sweep writes them, else what is wrong.
std::string field_fault(const nlohmann::json& j) {
  if (j.contains("seed") && !j.at("seed").is_number_unsigned())
    return str("'seed' must be an integer of 0 or more, got ", json_excerpt(j.at("seed")));
  for (const char* key : {"final_loss", "best_loss", "val_loss", "loss_reduction"})
    if (j.contains(key) && !j.at(key).is_number() && !j.at(key).is_null())
      return str("'", key, "' must be a number or null, got ", json_excerpt(j.at(key)));
  if (j.contains("curve")) {
    const nlohmann::json& c = j.at("curve");
    if (!c.is_array()) return str("'curve' must be a list, got ", json_excerpt(c));
    for (const nlohmann::json& p : c)
      if (!p.is_array() || p.size() != 3 || !p[0].is_number() || !p[1].is_number() ||
          !(p[2].is_number() || p[2].is_null()))
        return str("'curve' point ", json_excerpt(p),
                   " is not [step, tokens, loss] (loss a number or null)");
  }
  return "";
}

}  // namespace

SweepFile read_sweep_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw DataError(str("sweep file ", path, " is a directory"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(str("cannot read sweep file ", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SweepFile out;
  size_t pos = 0;
  for (int64_t n = 1; pos < text.size(); ++n) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) {  // no newline: a write cut short
      out.truncated_tail = true;
      break;
    }
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw FormatError(str(path, " line ", n, ": not a JSON object: ", line.substr(0, 60)));
    for (const char* key : {"lr", "batch_tokens"}) {
      if (!j.contains(key) || !j.at(key).is_number() || !(j.at(key).get<double>() > 0.0))
        throw FormatError(str(path, " line ", n, ": '", key, "' must be a positive number, got ",
                              j.contains(key) ? json_excerpt(j.at(key)) : "nothing"));
    }
    if (!j.contains("optimizer") || !j.at("optimizer").is_string())
      throw FormatError(str(path, " line ", n, ": 'optimizer' must be a string"));
    if (const std::string fault = field_fault(j); !fault.empty())
      throw FormatError(str(path, " line ", n, ": ", fault));
    out.lines.push_back({n, std::move(j)});
  }
  return out;
}

double loss_field(const nlohmann::json& run, const std::string& key) {
  if (!run.contains(key) || !run.at(key).is_number())
    return std::numeric_limits<double>::infinity();
  return run.at(key).get<double>();
}

std::string run_setting(const nlohmann::json& run) {
  return run.at("optimizer").get<std::string>() + " " +
         run.value("hyperparameters", nlohmann::json::object()).dump();
}

std::string differing_setup_field(const nlohmann::json& a, const nlohmann::json& b, bool for_fit) {
  const bool caps = for_fit && a.contains("target_loss") && b.contains("target_loss");
  for (const char* key : kSetupFields) {
    const std::string_view k = key;
    if (caps && k == "budget") continue;
    if ((k == "target_loss" || k == "extra_steps") && a.contains(key) != b.contains(key))
      return key;
    if (a.contains(key) && b.contains(key) && a.at(key) != b.at(key)) return key;
  }
  return "";
}

}  // namespace memo::scaling
