// The added tokens of a Hugging Face tokenizer.json found in text, as Hugging Face's tokenizers
// finds them before it normalizes and pre-tokenizes: leftmost-longest over the token strings,
// with each token's flags:
//   single_word  a match touching a word character (\w: letters, marks, digits, connector
//                punctuation, ZWJ/ZWNJ) on either side is not a match; the scan goes on after it;
//   lstrip       the match takes the white space before it (not before the previous match's end);
//   rstrip       the match takes the white space after it;
//   normalized   the token is found in the normalized text (its string normalized likewise), not
//                in the raw text: a tokenizer keeps one matcher of each kind (see tokenizer.cc).
// Not a tokenizer: it only yields byte ranges and ids.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memo {

struct AddedToken {
  std::string content;  // the string matched (normalized, for a normalized token)
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // A content given twice keeps its first token; empty contents are never matched.
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }

  struct Match {
    size_t begin = 0, end = 0;  // [begin, end) of the text, the stripped white space included
    int32_t id = -1;
  };
  // The first match in text[from, ...), or nullopt. `previous_end`: where the previous match
  // ended (0 for none); lstrip takes no white space before it.
  std::optional<Match> next(std::string_view text, size_t from, size_t previous_end) const;

  // Whether some token holds a line feed between printable ASCII bytes (or starts with one before
  // such a byte), or strips white space on its left: a text cut after such a line feed may then
  // tokenize differently from the whole (see Note [Segments of a long document] in tokenizer.cc).
  bool spans_line_ends() const { return spans_line_ends_; }

 private:
  // The longest token starting at text[at], or -1.
  int32_t longest_at(std::string_view text, size_t at, size_t& length) const;

  std::vector<AddedToken> tokens_;
  // A byte trie of the contents: node 0 is the root; edges_ is sorted by (node, byte).
  struct Edge {
    uint32_t node;
    uint8_t byte;
    uint32_t child;
  };
  std::vector<Edge> edges_;
  std::vector<int32_t> token_at_;  // [node] index into tokens_ of the content ending there, or -1
  std::bitset<256> first_bytes_;   // bytes that start a content
  bool spans_line_ends_ = false;
};

}  // namespace memo
