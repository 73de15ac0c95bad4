// Implementation of data/added_tokens.h: a byte trie walked from each position whose byte can
// start a token, and utf8proc's character classes for single_word, lstrip and rstrip.
#include "memo/data/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <map>

#include "memo/data/normalizer.h"

namespace memo {

namespace {

// The code point of the character ending at text[end) (from its first byte), or -1 for a byte
// that ends no valid character; `begin` gets where it starts.
int32_t code_point_before(std::string_view text, size_t end, size_t& begin) {
  begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80)
    --begin;
  utf8proc_int32_t c = -1;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + begin),
                       utf8proc_ssize_t(end - begin), &c);
  if (n <= 0 || size_t(n) != end - begin) {
    begin = end - 1;
    return -1;
  }
  return c;
}

// The code point of the character starting at text[begin], or -1 for an invalid byte; `length`
// gets its bytes (1 for an invalid byte).
int32_t code_point_at(std::string_view text, size_t begin, size_t& length) {
  utf8proc_int32_t c = -1;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + begin),
                       utf8proc_ssize_t(text.size() - begin), &c);
  length = n <= 0 ? 1 : size_t(n);
  return n <= 0 ? -1 : c;
}

// Rust regex's \w, which Hugging Face's single_word uses: Alphabetic (letters, letter numbers,
// marks, and the circled, parenthesized and squared Latin letters, symbols that Unicode counts as
// Other_Alphabetic), marks, decimal digits, connector punctuation and the joiners.
bool is_word(int32_t c) {
  if (c < 0) return false;
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) ||
      (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Whether `content` holds a line feed with a printable, non-space ASCII byte after it and
// before it (or starting there): the line ends a long document may be cut after.
bool crosses_a_cut(std::string_view content) {
  auto printable = [](char c) { return c > ' ' && c < 0x7F; };
  for (size_t i = 0; i + 1 < content.size(); ++i)
    if (content[i] == '\n' && printable(content[i + 1]) && (i == 0 || printable(content[i - 1])))
      return true;
  return false;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  std::map<std::pair<uint32_t, uint8_t>, uint32_t> edges;
  token_at_.assign(1, -1);
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    uint32_t node = 0;
    for (const char ch : t.content) {
      const auto byte = static_cast<uint8_t>(ch);
      auto [it, added] = edges.try_emplace({node, byte}, uint32_t(token_at_.size()));
      if (added) token_at_.push_back(-1);
      node = it->second;
    }
    if (token_at_[node] >= 0) continue;  // a content given twice keeps its first token
    token_at_[node] = int32_t(tokens_.size());
    tokens_.push_back(t);
    first_bytes_.set(static_cast<uint8_t>(t.content[0]));
    if (t.lstrip || crosses_a_cut(t.content)) spans_line_ends_ = true;
  }
  edges_.reserve(edges.size());
  for (const auto& [key, child] : edges) edges_.push_back({key.first, key.second, child});
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t at, size_t& length) const {
  int32_t best = -1;
  uint32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const auto it = std::lower_bound(
        edges_.begin(), edges_.end(), std::pair(node, byte), [](const Edge& e, const auto& key) {
          return e.node != key.first ? e.node < key.first : e.byte < key.second;
        });
    if (it == edges_.end() || it->node != node || it->byte != byte) break;
    node = it->child;
    if (token_at_[node] >= 0) {
      best = token_at_[node];
      length = i + 1 - at;
    }
  }
  return best;
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::next(std::string_view text, size_t from,
                                                                size_t previous_end) const {
  if (tokens_.empty()) return std::nullopt;
  for (size_t at = from; at < text.size(); ++at) {
    if (!first_bytes_.test(static_cast<uint8_t>(text[at]))) continue;
    size_t length = 0;
    const int32_t found = longest_at(text, at, length);
    if (found < 0) continue;
    const AddedToken& token = tokens_[size_t(found)];
    size_t begin = at, end = at + length, step = 0;
    if (token.single_word && ((begin > 0 && is_word(code_point_before(text, begin, step))) ||
                              (end < text.size() && is_word(code_point_at(text, end, step))))) {
      at = end - 1;  // the scan goes on after the discarded match
      continue;
    }
    if (token.lstrip)
      while (begin > previous_end) {
        size_t start = 0;
        if (!is_unicode_white_space(code_point_before(text, begin, start))) break;
        begin = std::max(start, previous_end);
      }
    if (token.rstrip)
      while (end < text.size() && is_unicode_white_space(code_point_at(text, end, step)))
        end += step;
    return Match{begin, end, token.id};
  }
  return std::nullopt;
}

}  // namespace memo
