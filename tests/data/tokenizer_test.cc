// Tokenizer tests that need nothing outside the tree: a small byte-level BPE built here, its
// merges, special tokens, error messages, and the round trip on random bytes (fuzz).
#include "memo/data/tokenizer.h"

#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "data/small_tokenizer.h"
#include "memo/core/error.h"
#include "memo/data/byte_level.h"
#include "memo/data/split_pattern.h"
#include "memo/io/atomic_file.h"
#include "test_util.h"

namespace memo {
namespace {

using nlohmann::json;
using test::small_tokenizer;
using test::small_tokenizer_json;

std::string random_bytes(std::mt19937& rng, size_t n) {
  // Mostly text-like bytes with invalid UTF-8, long runs and multi-byte characters mixed in.
  static const std::vector<std::string> atoms = {"a",
                                                 "b",
                                                 " ",
                                                 "  ",
                                                 "\n",
                                                 "\t",
                                                 "the",
                                                 " hello",
                                                 "!",
                                                 "'s",
                                                 "'S",
                                                 "123456",
                                                 "\xC3\xA9",
                                                 "\xE4\xB8\xAD",
                                                 "\xF0\x9F\x98\x80",
                                                 "\xFF",
                                                 "\xC3",
                                                 "\x80\x80",
                                                 "\xED\xA0\x80",
                                                 "\0"};
  std::string s;
  while (s.size() < n) {
    const uint32_t r = rng() % 10;
    if (r < 6) {
      s += atoms[rng() % atoms.size()];
    } else if (r < 9) {
      s += char(rng() % 256);
    } else {
      s += std::string(rng() % 200, " \na"[rng() % 3]);
    }
  }
  return s;
}

TEST(Tokenizer, encodes_words_by_their_merges) {
  const Tokenizer t = small_tokenizer();
  const std::vector<int32_t> ids = t.encode(" the hello");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(t.token_bytes(ids[0]), " the");
  EXPECT_EQ(t.token_bytes(ids[1]), " hello");
}

// GPT-2's bpe() as openai/gpt-2 encoder.py writes it, on byte-level strings: the oracle.
std::vector<int32_t> reference_bpe(const std::string& piece, const json& tokenizer_json) {
  std::map<std::pair<std::string, std::string>, size_t> ranks;
  const json& merges = tokenizer_json["model"]["merges"];
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string m = merges[r].get<std::string>();
    ranks.emplace(std::make_pair(m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)), r);
  }
  std::vector<std::string> word;
  for (char c : piece) word.push_back(byte_level_encode(std::string(1, c)));
  while (word.size() > 1) {
    size_t best = SIZE_MAX;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && it->second < best) best = it->second, bigram = it->first;
    }
    if (best == SIZE_MAX) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        merged.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word = merged;
  }
  std::vector<int32_t> ids;
  for (const std::string& w : word)
    ids.push_back(tokenizer_json["model"]["vocab"][w].get<int32_t>());
  return ids;
}

TEST(Tokenizer, merges_equal_gpt2_reference_bpe) {
  const json j = small_tokenizer_json();
  const Tokenizer t = Tokenizer::from_hf_json(j, "small");
  std::mt19937 rng(8);
  std::vector<std::string> pieces = {"aaaaaaaaa", std::string(64, 'a'), std::string(70, 'a'),
                                     " thethe",   "abababab",           "   "};
  for (int i = 0; i < 300; ++i) pieces.push_back(random_bytes(rng, 1 + rng() % 100).substr(0, 100));
  for (const std::string& p : pieces) {
    std::vector<int32_t> ours;
    t.merge_piece(p, ours, false);
    ASSERT_EQ(ours, reference_bpe(p, j)) << p;
  }
}

TEST(Tokenizer, split_pattern_follows_gpt2_rules) {
  const SplitPattern p{std::string(kGpt2SplitPattern)};
  std::vector<Piece> pieces;
  const std::string text = "Hello world's  123 caf\xC3\xA9!!\n\n  x";
  p.split(text, pieces);
  std::vector<std::string> got;
  for (const Piece& q : pieces) got.push_back(text.substr(q.begin, q.end - q.begin));
  // \s+(?!\S) leaves the last space of a run to the word after it
  const std::vector<std::string> want = {"Hello",        " world", "'s",    " ", " 123",
                                         " caf\xC3\xA9", "!!",     "\n\n ", " x"};
  EXPECT_EQ(got, want);
}

TEST(Tokenizer, invalid_utf8_bytes_become_their_own_pieces) {
  const SplitPattern p{std::string(kGpt2SplitPattern)};
  std::vector<Piece> pieces;
  const std::string text = "ab\xFF\xFE cd";
  p.split(text, pieces);
  std::vector<std::string> got;
  for (const Piece& q : pieces) got.push_back(text.substr(q.begin, q.end - q.begin));
  EXPECT_EQ(got, (std::vector<std::string>{"ab", "\xFF\xFE", " cd"}));
}

TEST(Tokenizer, special_tokens_only_where_asked) {
  const Tokenizer t = small_tokenizer();
  ASSERT_TRUE(t.end_of_text().has_value());
  const int32_t eot = *t.end_of_text();
  EXPECT_EQ(t.vocab_size(), eot + 2);
  const std::string text = " the<|endoftext|><|fim|> hello";
  const std::vector<int32_t> plain = t.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  const std::vector<int32_t> special = t.encode_with_special(text);
  ASSERT_EQ(special.size(), 4u);
  EXPECT_EQ(special[1], eot);
  EXPECT_EQ(special[2], eot + 1);
  EXPECT_EQ(t.decode(plain), text);
  EXPECT_EQ(t.decode(special), text);
}

TEST(Tokenizer, round_trips_random_bytes) {
  for (const char* pre : {"ByteLevel", "Sequence"}) {
    const Tokenizer t = small_tokenizer(pre);
    std::mt19937 rng(42);
    for (int i = 0; i < 300; ++i) {
      const std::string s = random_bytes(rng, rng() % 3000);
      const std::vector<int32_t> ids = t.encode(s);
      ASSERT_EQ(t.decode(ids), s) << pre << " case " << i;
      for (int32_t id : ids) ASSERT_LT(id, t.vocab_size());
    }
  }
}

TEST(Tokenizer, heap_merge_equals_quadratic_merge) {
  const Tokenizer t = small_tokenizer();
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const std::string piece = random_bytes(rng, 1 + rng() % 60).substr(0, 64);
    std::vector<int32_t> quadratic, heap;
    t.merge_piece(piece, quadratic, false);
    t.merge_piece(piece, heap, true);
    ASSERT_EQ(quadratic, heap) << "piece " << i;
  }
}

TEST(Tokenizer, long_whitespace_and_letter_runs) {
  const Tokenizer t = small_tokenizer();
  for (const std::string& s : {std::string(200000, ' ') + "x", std::string(100000, 'a'),
                               std::string(50000, '\n') + std::string(50000, '\xFF')}) {
    EXPECT_EQ(t.decode(t.encode(s)), s);
  }
}

TEST(Tokenizer, bytes_tokenizer_is_identity) {
  const Tokenizer t = Tokenizer::bytes();
  const std::string s("\xFF\x00z", 3);
  EXPECT_EQ(t.encode(s), (std::vector<int32_t>{255, 0, 'z'}));
  EXPECT_EQ(t.decode(t.encode(s)), s);
  EXPECT_EQ(t.vocab_size(), 256);
}

TEST(Tokenizer, encode_batch_equals_one_by_one) {
  const Tokenizer t = small_tokenizer("Sequence");
  std::mt19937 rng(5);
  std::vector<std::string> docs;
  for (int i = 0; i < 50; ++i) docs.push_back(random_bytes(rng, rng() % 2000));
  std::vector<std::string_view> views(docs.begin(), docs.end());
  const auto batch = t.encode_batch(views);
  for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(batch[i], t.encode(docs[i]));
}

// An error inside the parallel loop (here PCRE2's match limit on a catastrophic pattern) is
// thrown to the caller, not left to terminate the process.
TEST(Tokenizer, encode_batch_throws_what_one_document_throws) {
  json tj = small_tokenizer_json("Sequence");
  tj["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a+)+$"}};
  const Tokenizer t = Tokenizer::from_hf_json(tj, "catastrophic");
  const std::string bad = std::string(80, 'a') + "b hello";
  const std::vector<std::string_view> docs = {"the", bad, "and", bad};
  const std::string msg = test::error_message<DataError>([&] { t.encode_batch(docs); });
  EXPECT_NE(msg.find("match limit"), std::string::npos) << msg;
}

TEST(Tokenizer, long_documents_cut_into_segments_give_the_ids_of_the_whole) {
  std::mt19937 rng(12);
  // > 3 MiB: cut twice into segments of about 1 MiB (a middle one too), line ends of every
  // kind, invalid bytes too
  std::string text;
  while (text.size() < 3'200'000) {
    text += random_bytes(rng, 200);
    text += "x\nY";
    if (rng() % 3 == 0) text += "!\n\nq \n  z\r\n";
  }
  for (const char* pre : {"ByteLevel", "Sequence"}) {
    const Tokenizer t = small_tokenizer(pre);
    const std::string shifted = text.substr(7);  // other cut points
    const std::vector<std::string_view> docs = {text, "short", shifted};
    const auto batch = t.encode_batch(docs);
    EXPECT_EQ(batch[0], t.encode(text)) << pre;
    EXPECT_EQ(batch[1], t.encode("short")) << pre;
    EXPECT_EQ(batch[2], t.encode(shifted)) << pre;
  }
}

TEST(Tokenizer, decode_names_an_unknown_id) {
  const Tokenizer t = small_tokenizer();
  const std::vector<int32_t> ids = {1, 2, 999999};
  const std::string msg = test::error_message<DataError>([&] { t.decode(ids); });
  EXPECT_NE(msg.find("token id 999999 at position 2"), std::string::npos) << msg;
}

TEST(Tokenizer, refuses_what_it_does_not_implement) {
  json j = small_tokenizer_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("normalizer BertNormalizer is not supported"),
            std::string::npos);
  j = small_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("pre_tokenizer Whitespace is not supported"),
            std::string::npos);
  j = small_tokenizer_json();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("decoder WordPiece is not supported"),
            std::string::npos);
  j = small_tokenizer_json();
  j["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("post_processor BertProcessing is not supported"),
            std::string::npos);
  j = small_tokenizer_json();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(test::error_message<ConfigError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("Unigram"),
            std::string::npos);
  j = small_tokenizer_json();
  j["model"]["merges"].push_back("zz qq");
  EXPECT_NE(test::error_message<FormatError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("\"zz qq\""),
            std::string::npos);
  EXPECT_NE(test::error_message<DataError>([] {
              Tokenizer::load("/nonexistent/tok");
            }).find("/nonexistent/tok"),
            std::string::npos);
}

// Ids that are no token ids (fractions, beyond int32, far past the file's entries) are refused
// by entry, never cast (2^40 would become 0) or allocated for (two billion table rows).
TEST(Tokenizer, refuses_ids_that_are_not_token_ids) {
  const std::string spelling = byte_level_encode(" the");
  for (const json& id : {json(1099511627776LL), json(3.7), json(-1), json("7"), json(2000000000)}) {
    json j = small_tokenizer_json();
    j["model"]["vocab"][spelling] = id;
    const std::string msg =
        test::error_message<FormatError>([&] { Tokenizer::from_hf_json(j, "x.json"); });
    EXPECT_TRUE(msg.find("vocabulary entry \"" + spelling + "\"") != std::string::npos ||
                msg.find("is far beyond the") != std::string::npos)
        << id.dump() << ": " << msg;
  }
  json j = small_tokenizer_json();
  j["added_tokens"][0]["id"] = 2000000000;
  EXPECT_NE(test::error_message<FormatError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("token id 2000000000 is far beyond the"),
            std::string::npos);
  j = small_tokenizer_json();
  j["added_tokens"][0]["id"] = 12.5;
  EXPECT_NE(test::error_message<FormatError>([&] {
              Tokenizer::from_hf_json(j, "x.json");
            }).find("the id of added token \"<|endoftext|>\" is 12.5"),
            std::string::npos);
}

// 200,000 nested brackets: a short error, not a stack overflow in the parsed document's copy.
TEST(Tokenizer, a_deeply_nested_file_is_a_short_error) {
  test::TempDir dir;
  write_file_atomic(dir / "tokenizer.json", std::string(200'000, '[') + std::string(200'000, ']'));
  const std::string msg =
      test::error_message<FormatError>([&] { Tokenizer::load(dir / "tokenizer.json"); });
  EXPECT_NE(msg.find("JSON nested more than 256 deep at byte 256"), std::string::npos) << msg;
}

TEST(Tokenizer, a_file_that_is_no_tokenizer_json_says_what_it_is) {
  EXPECT_EQ(test::error_message<FormatError>([] {
              Tokenizer::from_hf_json(json::array({1, 2}), "x.json");
            }),
            "x.json is not a Hugging Face tokenizer.json: not a JSON object");
  const std::string encoder = test::error_message<FormatError>([] {
    Tokenizer::from_hf_json({{"!", 0}, {"\"", 1}, {"model", 19849}}, "encoder.json");
  });
  EXPECT_NE(encoder.find("it has no \"model\" object (it looks like GPT-2's encoder.json: give "
                         "the folder that holds it and vocab.bpe)"),
            std::string::npos)
      << encoder;
}

TEST(Tokenizer, byte_level_add_prefix_space_prepends_a_space) {
  const Tokenizer plain = small_tokenizer();
  json j = small_tokenizer_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  const Tokenizer t = Tokenizer::from_hf_json(j, "prefix");
  EXPECT_EQ(t.encode("the and"), plain.encode(" the and"));
  EXPECT_EQ(t.encode(" the"), plain.encode(" the"));  // already starts with a space
  EXPECT_EQ(t.decode(t.encode("hello")), " hello");   // Hugging Face's ByteLevel keeps it
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{});
  // It belongs to a text's start: text continuing other text gets none; text after a special
  // token does (Hugging Face applies it to the text between added tokens).
  EXPECT_EQ(t.encode("the and", TextStart::continued), plain.encode("the and"));
  EXPECT_EQ(t.encode("the", TextStart::after_special), plain.encode(" the"));
  // After a Split, every piece lacking a space gets one (Hugging Face applies it per split), a
  // continued text's first piece included: the joined text's pieces all get it.
  json s = small_tokenizer_json("Sequence");
  s["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  const Tokenizer each = Tokenizer::from_hf_json(s, "prefix-each");
  EXPECT_EQ(each.decode(each.encode("the,and")), " the ,and");
  EXPECT_EQ(each.encode("the", TextStart::continued), each.encode("the"));
}

TEST(Tokenizer, merges_as_arrays_equal_merges_as_strings) {
  json j = small_tokenizer_json();
  const Tokenizer a = Tokenizer::from_hf_json(j, "strings");
  for (json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    m = json::array({s.substr(0, space), s.substr(space + 1)});
  }
  const Tokenizer b = Tokenizer::from_hf_json(j, "arrays");
  std::mt19937 rng(9);
  for (int i = 0; i < 50; ++i) {
    const std::string s = random_bytes(rng, 500);
    EXPECT_EQ(a.encode(s), b.encode(s));
  }
}

}  // namespace
}  // namespace memo
