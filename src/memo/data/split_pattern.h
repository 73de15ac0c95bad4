// The pre-tokenizer of byte-level BPE: a regular expression that cuts text into pieces before
// merges (GPT-2's contractions / letters / numbers / punctuation / whitespace rule and its later
// variants). Unicode classes (\p{L}, \p{N}, \s) come from PCRE2 compiled with UTF and UCP, JIT
// compiled. Not a tokenizer: it only yields byte ranges. Thread-safe: each split call owns its
// match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace memo {

// GPT-2's split pattern (openai/gpt-2 encoder.py; gpt-3-encoder, tiktoken "gpt2", r50k, p50k).
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// cl100k_base's split pattern, which LLaMA 3's tokenizer.json also uses.
inline constexpr std::string_view kCl100kSplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Byte range [begin, end) of one piece within the text given to split().
struct Piece {
  size_t begin = 0, end = 0;
};

class SplitPattern {
 public:
  // Compiles `pattern` (PCRE2 syntax; the patterns above and those of Hugging Face tokenizer.json
  // files). A pattern PCRE2 rejects: ConfigError with PCRE2's message and the offset.
  explicit SplitPattern(std::string pattern);
  ~SplitPattern();
  SplitPattern(SplitPattern&&) noexcept;
  SplitPattern& operator=(SplitPattern&&) noexcept;

  // Replaces `pieces` by the pieces of `text`, in order; they tile the text exactly. Any bytes
  // the pattern does not match (invalid UTF-8, which no class matches; text a custom pattern
  // skips) become pieces of their own, so every byte belongs to exactly one piece.
  void split(std::string_view text, std::vector<Piece>& pieces) const;
  // Replaces `matches` by the byte ranges the pattern matches in `text`: leftmost first, not
  // overlapping, empty matches left out (a Replace normalizer's occurrences).
  void find_all(std::string_view text, std::vector<Piece>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace memo
