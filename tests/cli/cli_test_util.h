// Shared by the command-line tests: a config and corpus on disk, the losses of a JSON log, and a
// sweep file on an exact law.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "memo/scaling/laws.h"
#include "memo/train/trainer.h"

namespace memo::test {

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A LLaMA of 35k parameters (2 layers, hidden 32, GQA 4/2 heads, byte vocabulary): the model of
// the tests that launch memo train.
inline constexpr const char* kTinyLlamaConfig =
    R"({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": false})";

// `bytes` of Genesis 1:1, repeated.
inline std::string corpus(int64_t bytes) {
  std::string s;
  const std::string line = "In the beginning God created the heaven and the earth. ";
  while (int64_t(s.size()) < bytes) s += line;
  s.resize(size_t(bytes));
  return s;
}

// Words drawn at random by a fixed LCG. Unlike a repeated verse, this text stays noisy once the
// model has learnt its statistics, so the mean gradient shrinks faster than its noise and B_simple
// rises during a short run (from ~15 to ~40 tokens over the runs below).
inline std::string random_words(int64_t bytes) {
  const std::vector<std::string> words = {"in",     "the", "beginning", "god",   "created",
                                          "heaven", "and", "earth",     "light", "was",
                                          "good",   "day", "night",     "waters"};
  std::string s;
  uint64_t x = 12345;
  while (int64_t(s.size()) < bytes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s += words[(x >> 33) % words.size()] + " ";
  }
  s.resize(size_t(bytes));
  return s;
}

// A file's bytes (checkpoints compared byte for byte).
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A JSON-lines log's records, in order (blank lines skipped).
inline std::vector<nlohmann::json> records(const std::string& log_path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(log_path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
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

// A sweep whose per-batch optimal lr is exactly the surge law's (parabolas in log lr).
inline std::string surge_sweep(double eps_max, double b_noise) {
  std::string out;
  for (double b : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0}) {
    const double opt = scaling::lr_surge(b, eps_max, b_noise);
    for (int k = -4; k <= 4; ++k) {
      const double lr = eps_max * std::pow(2.0, 0.5 * k);
      const double d = std::log(lr / opt);
      out +=
          nlohmann::json{
              {"optimizer", "adam"}, {"lr", lr}, {"batch_tokens", b}, {"val_loss", 2.0 + d * d}}
              .dump() +
          "\n";
    }
  }
  return out;
}

// kTinyLlamaConfig and 20,000 bytes of corpus written into `dir`, and options that train on them
// in 32-token sequences; the caller sets batch, steps, outputs and the rest.
inline TrainOptions tiny_train_options(const std::filesystem::path& dir) {
  write_text((dir / "config.json").string(), kTinyLlamaConfig);
  write_text((dir / "data.txt").string(), corpus(20000));
  TrainOptions o;
  o.config_path = (dir / "config.json").string();
  o.data_path = (dir / "data.txt").string();
  o.seq = 32;
  return o;
}

}  // namespace memo::test
