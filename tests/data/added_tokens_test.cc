// Added tokens found in text as Hugging Face's tokenizers finds them (the cases its own tests pin
// down, worked here by hand from its rules): leftmost-longest, single_word, lstrip / rstrip,
// normalized tokens; in documents only the tokens that are not control tokens.
#include "memo/data/added_tokens.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/small_tokenizer.h"
#include "memo/core/error.h"
#include "memo/data/tokenizer.h"

namespace memo {
namespace {

using nlohmann::json;

// Every match of `m` in `text`: (matched text, id).
std::vector<std::pair<std::string, int32_t>> matches(const AddedTokenMatcher& m,
                                                     std::string_view text) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (auto x = m.next(text, 0, 0); x; x = m.next(text, x->end, x->end))
    out.emplace_back(std::string(text.substr(x->begin, x->end - x->begin)), x->id);
  return out;
}

using Matches = std::vector<std::pair<std::string, int32_t>>;

TEST(AddedTokens, leftmost_then_longest) {
  const AddedTokenMatcher m({{"ab", 1}, {"abc", 2}, {"bcd", 3}, {"d", 4}});
  // "bcd" would be longer at 2, but "abc" starts first; then "d".
  EXPECT_EQ(matches(m, "xabcd"), (Matches{{"abc", 2}, {"d", 4}}));
  EXPECT_EQ(matches(m, "abab"), (Matches{{"ab", 1}, {"ab", 1}}));
  EXPECT_EQ(matches(m, "xyz"), Matches{});
  EXPECT_EQ(matches(AddedTokenMatcher(), "abc"), Matches{});
}

TEST(AddedTokens, single_word_skips_matches_inside_words) {
  AddedToken mask{"<mask>", 7};
  mask.single_word = true;
  const AddedTokenMatcher m({mask});
  EXPECT_EQ(matches(m, "<mask> My name <mask> A<mask> <mask>ony <mask>"),
            (Matches{{"<mask>", 7}, {"<mask>", 7}, {"<mask>", 7}}));
  // Punctuation is no word character; a combining mark (U+0330) is.
  EXPECT_EQ(matches(m, "<mask>, <mask>- \xE2\x97\x8C\xCC\xB0<mask>"),
            (Matches{{"<mask>", 7}, {"<mask>", 7}}));
  // Symbols Unicode counts as letters (Other_Alphabetic): circled A, squared A, emoji-block A.
  for (const char* letter : {"\xE2\x92\xB6", "\xF0\x9F\x84\xB0", "\xF0\x9F\x85\xB0"})
    EXPECT_EQ(matches(m, std::string(letter) + "<mask>"), Matches{}) << letter;
}

TEST(AddedTokens, lstrip_and_rstrip_take_white_space_up_to_the_previous_match) {
  AddedToken mask{"<mask>", 7};
  mask.single_word = mask.lstrip = mask.rstrip = true;
  const AddedTokenMatcher m({mask});
  // The second match took the tab after it, so the third takes none before it; U+2000 is space.
  EXPECT_EQ(matches(m, "Hi <mask> there\t<mask>\t<mask>\xE2\x80\x80"),
            (Matches{{" <mask> ", 7}, {"\t<mask>\t", 7}, {"<mask>\xE2\x80\x80", 7}}));
  EXPECT_TRUE(m.spans_line_ends());  // lstrip: a text may not be cut after a line feed
  AddedToken plain{"a\nb", 1}, left{"x", 2};
  EXPECT_TRUE(AddedTokenMatcher({plain}).spans_line_ends());
  EXPECT_TRUE(AddedTokenMatcher({{"\nb", 1}}).spans_line_ends());
  EXPECT_FALSE(AddedTokenMatcher({{"a \nb", 1}}).spans_line_ends());
  left.lstrip = true;
  EXPECT_TRUE(AddedTokenMatcher({left}).spans_line_ends());
  EXPECT_FALSE(AddedTokenMatcher({{"\n\n", 3}}).spans_line_ends());
}

// A small byte-level tokenizer with a Lowercase normalizer and the added tokens of Hugging Face's
// options test: [CLS] and [SEP] control tokens matched in the raw text; "my" (lstrip, rstrip),
// "name" and "ony" (single_word) matched in the normalized text.
Tokenizer options_tokenizer() {
  json tj = test::small_tokenizer_json();
  tj["normalizer"] = {{"type", "Lowercase"}};
  const int32_t base = tj["added_tokens"][1]["id"].get<int32_t>() + 1;
  auto token = [&](int32_t k, const char* content, bool special) {
    return json{{"id", base + k},         {"content", content}, {"special", special},
                {"normalized", !special}, {"lstrip", false},    {"rstrip", false},
                {"single_word", false}};
  };
  json cls = token(0, "[CLS]", true), sep = token(1, "[SEP]", true), my = token(2, "my", false),
       name = token(3, "name", false), ony = token(4, "ony", false);
  my["lstrip"] = my["rstrip"] = true;
  ony["single_word"] = true;
  tj["added_tokens"] = {cls, sep, my, name, ony};
  return Tokenizer::from_hf_json(tj, "options");
}

TEST(AddedTokens, prompts_match_all_documents_all_but_control_tokens) {
  const Tokenizer t = options_tokenizer();
  const int32_t cls = *t.special_id("[CLS]"), sep = *t.special_id("[SEP]");
  const int32_t my = *t.special_id("my"), name = *t.special_id("name");
  auto text = [&](std::string_view s) { return t.encode(s, TextStart::after_special); };
  // Hugging Face: [CLS], " my " (both spaces stripped into it, matched once lower-cased), "name",
  // " is anthony " (no "ony": inside a word), [SEP].
  std::vector<int32_t> want = {cls, my, name};
  for (int32_t id : text(" is anthony ")) want.push_back(id);
  want.push_back(sep);
  EXPECT_EQ(t.encode_with_special("[CLS] My name is Anthony [SEP]"), want);
  // In a document [CLS] and [SEP] stay text, lower-cased with the rest.
  want = t.encode("[CLS]");
  want.push_back(my);
  want.push_back(name);
  for (int32_t id : text(" is anthony [sep]")) want.push_back(id);
  EXPECT_EQ(t.encode("[CLS] My name is Anthony [SEP]"), want);
  EXPECT_EQ(t.decode(t.encode("My name")), "myname");  // the stripped space is gone, as in HF
}

// An end-of-text marked "special": false stays a control token: a document cannot end itself.
TEST(AddedTokens, the_end_of_text_is_a_control_token_whatever_the_file_says) {
  json tj = test::small_tokenizer_json();
  tj["added_tokens"][0]["special"] = false;  // <|endoftext|>
  const Tokenizer t = Tokenizer::from_hf_json(tj, "eot");
  const int32_t eot = *t.end_of_text();
  EXPECT_TRUE(t.is_control(eot));
  const std::vector<int32_t> doc = t.encode("one<|endoftext|>two");
  EXPECT_EQ(std::count(doc.begin(), doc.end(), eot), 0);
  const std::vector<int32_t> prompt = t.encode_with_special("one<|endoftext|>two");
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), eot), 1);
}

TEST(AddedTokens, a_flag_that_is_no_boolean_names_its_token) {
  json tj = test::small_tokenizer_json();
  tj["added_tokens"][1]["lstrip"] = "yes";
  std::string msg;
  try {
    Tokenizer::from_hf_json(tj, "flags");
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("added token \"<|fim|>\": lstrip is \"yes\", not true or false"),
            std::string::npos)
      << msg;
}

TEST(AddedTokens, a_document_with_added_tokens_encodes_as_a_batch_and_in_segments) {
  json tj = test::small_tokenizer_json("Sequence");
  const int32_t base = tj["added_tokens"][1]["id"].get<int32_t>() + 1;
  tj["added_tokens"].push_back({{"id", base}, {"content", "<tool_call>"}, {"special", false}});
  tj["added_tokens"].push_back({{"id", base + 1}, {"content", "x\nY"}, {"special", false}});
  const Tokenizer t = Tokenizer::from_hf_json(tj, "tools");
  const std::vector<int32_t> ids = t.encode(" the<tool_call> hello<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), base), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *t.end_of_text()), 0);  // a control token
  EXPECT_EQ(t.decode(ids), " the<tool_call> hello<|endoftext|>");
  // "x\nY" reaches across the line ends a long document is cut at: it is not cut.
  std::string doc;
  while (doc.size() < 2'500'000) doc += "a the x\nY in<tool_call>and\n";
  const std::vector<std::string_view> docs = {doc};
  const std::vector<int32_t> whole = t.encode(doc);
  EXPECT_EQ(t.encode_batch(docs)[0], whole);
  EXPECT_EQ(std::count(whole.begin(), whole.end(), base + 1),
            std::count(doc.begin(), doc.end(), 'Y'));
}

// single_word's word characters are Rust regex's \w: ASCII digits and '_' as well as letters, so
// "<mask>" touching either is inside a word and skipped.
TEST(AddedTokens, single_word_counts_digits_and_underscores_as_word_characters) {
  AddedToken mask{"<mask>", 7};
  mask.single_word = true;
  const AddedTokenMatcher m({mask});
  for (const char* text : {"a_<mask>", "_<mask>", "<mask>_", "9<mask>", "<mask>0"})
    EXPECT_EQ(matches(m, text), Matches{}) << text;
  EXPECT_EQ(matches(m, "-<mask>."), (Matches{{"<mask>", 7}}));
}

// Two added tokens with the same content (a tokenizer.json may list one twice, or two normalize
// to the same string): the content is the first's, as Hugging Face's AddedVocabulary keeps it.
TEST(AddedTokens, a_content_given_twice_matches_its_first_token) {
  const AddedTokenMatcher m({{"<x>", 1}, {"<y>", 2}, {"<x>", 3}});
  EXPECT_EQ(matches(m, "a<x>b<y>"), (Matches{{"<x>", 1}, {"<y>", 2}}));
}

}  // namespace
}  // namespace memo
