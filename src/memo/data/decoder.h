// The decoder of a Hugging Face tokenizer.json: how the vocabulary spellings of a list of ids
// become text. ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace and Sequence, with
// Hugging Face's semantics, except that bytes stay bytes: where Hugging Face would put U+FFFD
// for byte tokens that are not valid UTF-8 (ByteFallback, ByteLevel), memo keeps the raw bytes,
// so decode(encode(x)) == x holds for any bytes wherever the tokenizer is otherwise lossless.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace memo {

class Decoder {
 public:
  // No decoder (null in the file): the spellings are joined.
  Decoder();
  // The "decoder" object of a tokenizer.json (null: none). Another type: ConfigError naming it.
  static Decoder from_json(const nlohmann::json& decoder, const std::string& source);
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  // The text of `tokens` (each one token's spelling). `whole`: they are a whole sequence, so the
  // rules for its start and end apply (Metaspace drops the first token's replacement characters;
  // a Strip after Fuse trims the text's ends); false: they sit inside a longer sequence (one
  // token's text while streaming), and those rules do not apply.
  std::string decode(std::vector<std::string> tokens, bool whole) const;
  // Exactly one ByteLevel decoder (GPT-2, LLaMA 3): the tokens' bytes are simply concatenated.
  bool is_byte_level() const;

  struct Step;

 private:
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace memo
