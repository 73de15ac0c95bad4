// SentencePiece-style tokenizer.json parts on small hand-written files: each normalizer and
// decoder, the Metaspace pre-tokenizer, byte_fallback / unk / fuse_unk BPE, BOS and EOS from the
// post_processor and tokenizer_config.json, and the refusals. Needs nothing outside the tree.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "memo/core/error.h"
#include "memo/data/decoder.h"
#include "memo/data/normalizer.h"
#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

using nlohmann::json;

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string normalize(const json& n, const std::string& text) {
  return Normalizer::from_json(n, "test").normalize(text);
}

TEST(Normalizer, unicode_forms_come_from_utf8proc) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(normalize({{"type", "NFD"}}, "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");  // U+FB01 ligature
  EXPECT_EQ(normalize({{"type", "NFC"}}, "\xEF\xAC\x81"), "\xEF\xAC\x81");
  EXPECT_EQ(normalize({{"type", "NFKD"}}, "\xE2\x84\xAB"), "A\xCC\x8A");  // Angstrom sign
  // Invalid bytes pass through; the valid runs around them are normalized.
  EXPECT_EQ(normalize({{"type", "NFC"}},
                      "e\xCC\x81\xFF"
                      "e\xCC\x81"),
            "\xC3\xA9\xFF\xC3\xA9");
}

TEST(Normalizer, prepend_replace_lowercase_strip_sequence) {
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", kSpace}}, "ab"), kSpace + "ab");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", kSpace}}, ""), "");
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
  EXPECT_EQ(normalize(replace, "a b  c"), "a" + kSpace + "b" + kSpace + kSpace + "c");
  const json regex = {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}};
  EXPECT_EQ(normalize(regex, "a    b c  d"), "a b c d");
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "AbC \xC3\x89 \xC4\xB0"), "abc \xC3\xA9 i\xCC\x87");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                      " \t\xE3\x80\x80 a b\n\xC2\xA0"),
            "a b");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, " a "),
            " a");
  const json sequence = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", kSpace}}, replace, {{"type", "Lowercase"}}}}};
  EXPECT_EQ(normalize(sequence, "Hi There"), kSpace + "hi" + kSpace + "there");
}

TEST(Normalizer, refuses_other_types_by_name) {
  const std::string msg = test::error_message<ConfigError>([] {
    Normalizer::from_json({{"type", "Precompiled"}}, "x.json");
  });
  EXPECT_NE(msg.find("x.json: normalizer Precompiled is not supported"), std::string::npos) << msg;
}

std::string decode(const json& d, std::vector<std::string> tokens, bool whole = true) {
  return Decoder::from_json(d, "test").decode(std::move(tokens), whole);
}

TEST(Decoder, each_step_as_hugging_face_defines_it) {
  EXPECT_EQ(decode({{"type", "ByteFallback"}}, {"<0x41>", "<0xE2>", "<0x82>", "<0xAC>", "x"}),
            "A\xE2\x82\xAC"
            "x");
  EXPECT_EQ(decode({{"type", "ByteFallback"}}, {"<0xFF>"}), "\xFF");  // bytes stay bytes
  EXPECT_EQ(decode({{"type", "ByteFallback"}}, {"<0xZZ>", "<0x4>"}), "<0xZZ><0x4>");
  const json strip = {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}};
  EXPECT_EQ(decode(strip, {"  a ", " b"}), " ab");  // per token
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}};
  EXPECT_EQ(decode(replace, {kSpace + "a" + kSpace, "b"}), " a b");
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", kSpace},
                          {"prepend_scheme", "always"},
                          {"split", true}};
  // The first token of a whole sequence drops its replacement characters (Hugging Face's rule).
  EXPECT_EQ(decode(metaspace, {kSpace + "hi", kSpace + "there"}), "hi there");
  EXPECT_EQ(decode(metaspace, {kSpace + "hi", kSpace + "there"}, false), " hi there");
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"\xC4\xA0"
                                             "a",
                                             "<|x|>"}),
            " a<|x|>");
  const json llama = {{"type", "Sequence"},
                      {"decoders",
                       {replace,
                        {{"type", "ByteFallback"}},
                        {{"type", "Fuse"}},
                        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(decode(llama, {kSpace + "a", "<0x21>", kSpace + "b"}), "a! b");
  EXPECT_EQ(decode(llama, {kSpace + "a"}, false), " a");  // inside a sequence: no strip
}

TEST(Decoder, refuses_other_types_by_name) {
  const std::string msg = test::error_message<ConfigError>([] {
    Decoder::from_json({{"type", "CTC"}}, "x.json");
  });
  EXPECT_NE(msg.find("x.json: decoder CTC is not supported"), std::string::npos) << msg;
}

// A Llama-2-style tokenizer.json: <unk> <s> </s>, the 256 byte tokens, a few characters and
// merges; Prepend + Replace normalizer, no pre-tokenizer, the Replace/ByteFallback/Fuse/Strip
// decoder, <s> before each sequence.
json llama_style_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  int32_t next = 3;
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = next++;
  }
  for (const std::string& s :
       {kSpace, std::string("a"), std::string("b"), std::string("h"), std::string("i"),
        kSpace + "h", kSpace + "hi", std::string("ab"), kSpace + "ab", kSpace + kSpace})
    vocab[s] = next++;
  const json merges = {kSpace + " h", kSpace + "h i", "a b", kSpace + " ab", kSpace + " " + kSpace};
  return {{"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", kSpace}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}}}}},
          {"pre_tokenizer", nullptr},
          {"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", merges}}}};
}

TEST(SentencePieceBpe, merges_characters_and_falls_back_to_bytes) {
  const Tokenizer t = Tokenizer::from_hf_json(llama_style_json(), "llama-style");
  const int32_t sp = 259, a = 260, b = 261, sp_hi = 265, sp_ab = 267, sp_sp = 268;
  EXPECT_EQ(t.encode("hi ab"), (std::vector<int32_t>{sp_hi, sp_ab}));
  EXPECT_EQ(t.encode("  ab"), (std::vector<int32_t>{sp_sp, sp_ab}));
  EXPECT_EQ(t.encode("ba"), (std::vector<int32_t>{sp, b, a}));
  // "é" is not in the vocabulary: its two bytes' tokens.
  EXPECT_EQ(t.encode("\xC3\xA9"), (std::vector<int32_t>{sp, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(t.decode(t.encode("hi ab \xC3\xA9!")), "hi ab \xC3\xA9!");
  EXPECT_EQ(t.token_bytes(sp_hi), " hi");
  EXPECT_EQ(t.token_bytes(3 + 0x21), "!");
  // a continuation (memo generate's new tokens) keeps its leading space, as streamed: the
  // decoder's sequence-start strip is for a whole text
  const std::vector<int32_t> more = {sp_hi, sp_ab, sp, 3 + 0xC3, 3 + 0xA9};
  EXPECT_EQ(t.decode(more), "hi ab \xC3\xA9");
  std::string streamed;
  for (int32_t id : more) streamed += t.token_bytes(id);
  EXPECT_EQ(t.decode(more, false), streamed);
  EXPECT_EQ(streamed, " hi ab \xC3\xA9");
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 100, '\0');
    for (char& c : s) c = "ab hi\xC3\xA9\xFF\n"[rng() % 10];
    ASSERT_EQ(t.decode(t.encode(s)), s) << i;
  }
}

TEST(SentencePieceBpe, unknown_characters_without_fallback_become_unk) {
  json j = llama_style_json();
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(Tokenizer::from_hf_json(j, "fuse").encode("xyz"), (std::vector<int32_t>{259, 0}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(Tokenizer::from_hf_json(j, "no-fuse").encode("xyz"),
            (std::vector<int32_t>{259, 0, 0, 0}));
}

TEST(SentencePieceBpe, bos_from_the_template_and_the_config) {
  const Tokenizer t = Tokenizer::from_hf_json(llama_style_json(), "llama-style");
  EXPECT_EQ(t.encode_with_special("hi"), (std::vector<int32_t>{1, 265}));
  EXPECT_EQ(t.encode_with_special(""), (std::vector<int32_t>{1}));
  EXPECT_EQ(t.end_of_text(), 2);  // </s>, by name
  const json config = {{"add_bos_token", false},
                       {"add_eos_token", true},
                       {"bos_token", "<s>"},
                       {"eos_token", "</s>"}};
  test::TempDir dir;
  write_file_atomic(dir / "tokenizer.json", llama_style_json().dump());
  write_file_atomic(dir / "tokenizer_config.json", config.dump());
  const Tokenizer c = Tokenizer::load(dir.path());
  EXPECT_EQ(c.encode_with_special("hi</s>hi"), (std::vector<int32_t>{265, 2, 265, 2}));
  // The tokenizer.json it hands on (shards, checkpoints) carries the config's template.
  const Tokenizer again = Tokenizer::from_hf_json(c.hf_json(), "again");
  EXPECT_EQ(again.encode_with_special("hi"), (std::vector<int32_t>{265, 2}));
  json bad = config;
  bad["add_bos_token"] = true;
  bad["bos_token"] = "<bos>";
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(llama_style_json(), "x.json", bad);
            }).find("add_bos_token"),
            std::string::npos);
}

TEST(SentencePieceBpe, metaspace_pre_tokenizer_prepends_and_splits) {
  json j = llama_style_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "first"}};
  const Tokenizer t = Tokenizer::from_hf_json(j, "metaspace");
  // Split before each space: "▁▁ab" would be one merge chain without it; with it, "▁" "▁ab".
  EXPECT_EQ(t.encode("hi  ab"), (std::vector<int32_t>{265, 259, 267}));
  // "first": only the text's start gets the prefix, not the text after a special token.
  EXPECT_EQ(t.encode_with_special("ab</s>ab"), (std::vector<int32_t>{1, 267, 2, 266}));
  EXPECT_EQ(t.decode(t.encode("hi ab")), "hi ab");
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  EXPECT_EQ(Tokenizer::from_hf_json(j, "always").encode_with_special("ab</s>ab"),
            (std::vector<int32_t>{1, 267, 2, 267}));
  j["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(Tokenizer::from_hf_json(j, "never").encode("ab"), (std::vector<int32_t>{266}));
}

// Text continuing other text (a completion after its prompt) gets none of a text's start rules:
// its ids are those the joined text has where no token crosses the join.
TEST(SentencePieceBpe, continued_text_gets_no_start_prefix) {
  const int32_t sp = 259, ab = 266, sp_ab = 267;
  const Tokenizer prepend = Tokenizer::from_hf_json(llama_style_json(), "llama-style");
  // the Prepend normalizer's "▁" before the text's own: "▁" "▁ab"
  EXPECT_EQ(prepend.encode(" ab"), (std::vector<int32_t>{sp, sp_ab}));
  EXPECT_EQ(prepend.encode(" ab", TextStart::continued), (std::vector<int32_t>{sp_ab}));
  EXPECT_EQ(prepend.encode("ab", TextStart::continued), (std::vector<int32_t>{ab}));
  std::vector<int32_t> joined = prepend.encode("hi");
  prepend.encode(" ab", joined, TextStart::continued);
  EXPECT_EQ(joined, prepend.encode("hi ab"));
  // after a special token the Prepend normalizer applies, as Hugging Face encodes the text between
  // added tokens
  EXPECT_EQ(prepend.encode("ab", TextStart::after_special), (std::vector<int32_t>{sp_ab}));

  json j = llama_style_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", kSpace},
                        {"prepend_scheme", "always"},
                        {"split", true}};
  for (const char* scheme : {"always", "first"}) {
    j["pre_tokenizer"]["prepend_scheme"] = scheme;
    const Tokenizer t = Tokenizer::from_hf_json(j, scheme);
    EXPECT_EQ(t.encode("ab", TextStart::continued), (std::vector<int32_t>{ab})) << scheme;
    EXPECT_EQ(t.encode(" ab", TextStart::continued), (std::vector<int32_t>{sp_ab})) << scheme;
    EXPECT_EQ(t.encode("ab", TextStart::after_special),
              (std::vector<int32_t>{std::string(scheme) == "always" ? sp_ab : ab}))
        << scheme;
  }
  // A left Strip belongs to a text's start too; the Unicode forms and Replace do not.
  j = llama_style_json();
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}}}};
  const Tokenizer strip = Tokenizer::from_hf_json(j, "strip");
  EXPECT_EQ(strip.encode(" ab"), (std::vector<int32_t>{ab}));
  EXPECT_EQ(strip.encode(" ab", TextStart::continued), (std::vector<int32_t>{sp_ab}));
  // Every id list of the byte tokenizer is the same wherever the text stands.
  const Tokenizer bytes = Tokenizer::bytes();
  EXPECT_EQ(bytes.encode(" ab", TextStart::continued), bytes.encode(" ab"));
}

TEST(SentencePieceBpe, refuses_what_it_does_not_implement) {
  json j = llama_style_json();
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("continuing_subword_prefix"),
            std::string::npos);
  j = llama_style_json();
  j["model"]["unk_token"] = "<nope>";
  EXPECT_NE(test::error_message<FormatError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("<nope>"),
            std::string::npos);
  j = llama_style_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("one character"),
            std::string::npos);
}

}  // namespace
}  // namespace memo
