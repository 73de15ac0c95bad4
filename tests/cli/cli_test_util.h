// Shared by the command-line tests: a config and corpus on disk, and the losses of a JSON log.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace memo::test {

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// `bytes` of Genesis 1:1, repeated.
inline std::string corpus(int64_t bytes) {
  std::string s;
  const std::string line = "In the beginning God created the heaven and the earth. ";
  while (int64_t(s.size()) < bytes) s += line;
  s.resize(size_t(bytes));
  return s;
}

// step -> the "loss" value as printed (round-trip exact), the last record of each step winning.
inline std::map<int64_t, std::string> losses(const std::string& log_path) {
  std::map<int64_t, std::string> out;
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out[j.at("step").get<int64_t>()] = j.at("loss").dump();
  }
  return out;
}

}  // namespace memo::test
