#include "memo/scaling/sweep_file.h"

#include <fstream>
#include <iterator>
#include <limits>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"

namespace memo::scaling {

SweepFile read_sweep_file(const std::string& path) {
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

}  // namespace memo::scaling
