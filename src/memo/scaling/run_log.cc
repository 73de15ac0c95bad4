#include "memo/scaling/run_log.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "memo/core/error.h"

namespace memo::scaling {

LoggedNoiseScale late_noise_scale(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(str("cannot read training log ", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LoggedNoiseScale out;
  bool found = false;
  size_t pos = 0;
  for (int64_t n = 1; pos < text.size(); ++n) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // no newline: a write cut short
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw FormatError(str(path, " line ", n, ": not a JSON object: ", line.substr(0, 60)));
    if (j.contains("batch_tokens") && j.contains("curve"))
      throw FormatError(str(path, " line ", n, " is a memo sweep run, not a training log's step ",
                            "record; give a sweep file to --fit"));
    ++out.records;
    // a step record (memo train's log): its step, and B_simple where the probe had one
    if (!j.contains("step") || !j.at("step").is_number_integer()) continue;
    if (!j.contains("gns_b_simple") || !j.at("gns_b_simple").is_number()) continue;
    const double v = j.at("gns_b_simple").get<double>();
    if (!(std::isfinite(v) && v > 0.0)) continue;
    ++out.with_value;
    out.b_simple = v;
    out.step = j.at("step").get<int64_t>();
    found = true;
  }
  if (!found)
    throw DataError(str(path, " has no gns_b_simple values in its ", out.records,
                        " records: that run measured no noise scale; train with --batch at least 2 "
                        "x --micro-batch and without --no-gns"));
  return out;
}

}  // namespace memo::scaling
