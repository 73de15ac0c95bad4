// A small byte-level BPE tokenizer.json for tests: 256 bytes, merges that spell a few English
// words and whitespace runs, random byte pairs (invalid UTF-8 included), two special tokens.
#pragma once

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "memo/data/byte_level.h"
#include "memo/data/split_pattern.h"
#include "memo/data/tokenizer.h"

namespace memo::test {

using nlohmann::json;

// A byte-level BPE whose merges spell each word of `words` left to right ("Ġ t", "Ġt h", ...),
// plus merges of random byte pairs (invalid UTF-8 too), in a tokenizer.json.
inline json small_tokenizer_json(const std::string& pre_tokenizer_type = "ByteLevel") {
  json vocab = json::object();
  json merges = json::array();
  int32_t next = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, char(b)))] = next++;
  auto add_word = [&](const std::string& word) {
    std::string prefix = word.substr(0, 1);
    for (size_t i = 1; i < word.size(); ++i) {
      const std::string piece = word.substr(i, 1), joined = prefix + piece;
      const std::string spelled = byte_level_encode(joined);
      if (!vocab.contains(spelled)) {
        merges.push_back(byte_level_encode(prefix) + " " + byte_level_encode(piece));
        vocab[spelled] = next++;
      }
      prefix = joined;
    }
  };
  for (const char* w : {" the", " and", " of", "the", "in", " in", "ing", " that", " he", "   ",
                        "  ", "\n\n", "aaaa", "aaaaaaaa", "ab", "abab", " hello", "hello", "!!"})
    add_word(w);
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) add_word(std::string{char(rng() % 256), char(rng() % 256)});
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  if (pre_tokenizer_type == "Sequence")
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"},
              {"pattern", {{"Regex", std::string(kCl100kSplitPattern)}}},
              {"behavior", "Isolated"},
              {"invert", false}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  return {{"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"added_tokens",
           {{{"id", next}, {"content", "<|endoftext|>"}, {"special", true}},
            {{"id", next + 1}, {"content", "<|fim|>"}, {"special", true}}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

// small_tokenizer_json with a TemplateProcessing post-processor that puts <|fim|> before each
// sequence as its BOS (a Llama-style tokenizer).
inline json small_bos_tokenizer_json() {
  json tj = small_tokenizer_json();
  const int32_t bos = tj["added_tokens"][1]["id"];
  tj["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|fim|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens",
       {{"<|fim|>", {{"id", "<|fim|>"}, {"ids", {bos}}, {"tokens", {"<|fim|>"}}}}}}};
  return tj;
}

inline Tokenizer small_tokenizer(const std::string& pre = "ByteLevel") {
  return Tokenizer::from_hf_json(small_tokenizer_json(pre), "small");
}

}  // namespace memo::test
