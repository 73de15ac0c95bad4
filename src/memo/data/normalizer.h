// The normalizer of a Hugging Face tokenizer.json: NFC, NFD, NFKC, NFKD, Prepend, Replace (a string
// or a PCRE2 regex), Lowercase, Strip and Sequence of them, applied to text before it is split.
// Unicode data (normal forms, lower case, White_Space) comes from utf8proc. Not lossless: the
// text it yields is what the tokenizer encodes and what decode gives back.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace memo {

class Normalizer {
 public:
  // Does nothing (a tokenizer.json whose normalizer is null).
  Normalizer();
  // The "normalizer" object of a tokenizer.json (null: does nothing). Another type, or a Sequence
  // holding one: ConfigError naming the type and `source`.
  static Normalizer from_json(const nlohmann::json& normalizer, const std::string& source);
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  // The normalized text. Invalid UTF-8 bytes pass through unchanged and each valid run between
  // them is normalized on its own (Hugging Face accepts only valid UTF-8), so any bytes encode.
  // `continued`: the text continues text normalized before it, so Prepend and a left Strip,
  // which belong to a text's start, do not apply.
  std::string normalize(std::string_view text, bool continued = false) const;
  bool empty() const;

  struct Step;

 private:
  std::vector<std::unique_ptr<Step>> steps_;
};

// The valid UTF-8 prefix length of `text` (bytes): where the first invalid sequence starts.
size_t valid_utf8_prefix(std::string_view text);

// Unicode's White_Space property (Rust's char::is_whitespace, which Hugging Face's Strip and
// added tokens' lstrip / rstrip use); false for -1 (an invalid byte).
bool is_unicode_white_space(int32_t c);

}  // namespace memo
