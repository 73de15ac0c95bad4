// Token shards: what `memo tokenize` writes and `memo train --data DIR` reads.
//   DIR/tokenizer.json        the tokenizer (Hugging Face format), copied into checkpoints
//   DIR/train-000000.bin ...  llm.c token files, uint16 ids (magic 20240520) when the vocabulary
//   DIR/val-000000.bin ...    has at most 65536 ids, else uint32 (llm.c's Llama 3 variant,
//                             magic 20240801 version 7); documents as Note [Document layout]
//   DIR/train-000000.docs     where the shard's documents start (Note [Document offsets])
//   DIR/train-000000.mask     --format prompt-completion: which targets the loss counts
//                             (Note [Loss mask files])
//   DIR/manifest.json         the run (tokenizer checksum, inputs, options), each shard's split,
//                             token count and the CRC-32C of it and its .docs and .mask, totals,
//                             and where to resume
// Shards and the manifest are written atomically; after a kill, rerunning the same command
// continues after the last complete shard (see Note [Resuming a tokenize run]).
//
// Note [Document layout]
// A text document's tokens are its text's ids framed as the model the tokenizer belongs to was
// pretrained on, so that a run continuing that model sees documents laid out as before:
//   - a tokenizer whose template (or tokenizer_config.json's add_bos_token) puts a BOS before a
//     sequence (Llama 2 and 3, Mistral, Gemma): BOS, the text, then the end-of-text token, as
//     `tokenizer.encode(text, bos=True, eos=True)` in Meta's and torchtitan's training code;
//   - any other (GPT-2, Qwen): the end-of-text token, then the text (llm.c's layout).
// The first token of each layout is the document start: the manifest's document_start (absent
// in folders written before it: end_of_text), where --document-mask restarts attention and
// positions; --eod-mask-loss leaves out the predictions made from end_of_text tokens (under the
// BOS layout, the one that crosses into the next document). A prompt-completion example starts
// with its end-of-text (Note [Loss mask files]) under either tokenizer.
//
// Note [Document offsets]
// A .docs file lists the offsets, within its shard, of the documents that start there (their
// document start token), ascending; a document that began in the previous shard is not listed
// again. Little-endian: the 8 bytes "memodocs", uint32 version (1), uint32 count, then count
// uint32 offsets. Readers check each listed token is the manifest's document_start.
//
// Note [Loss mask files]
// --format prompt-completion reads JSON lines holding either "prompt" and "completion" strings
// or "messages" (a list of {"role", "content"} strings). An example is its end-of-text (the
// document start), then its prompt and completion, or its rendered messages. A prompt-completion
// example's loss counts the completion's tokens and the next example's end-of-text (the end of
// this one: the model learns to stop); a split ends with one more end-of-text, the end of its
// last example. Messages are rendered with the tokenizer's chat tokens in the turn layout of
// Hugging Face's templates for those tokenizers, the turns exactly as given (a model's own
// chat_template may add a default system turn, an empty <think> block, a BOS, or trim contents:
// those parts are the data's to give):
//   ChatML (<|im_start|>, <|im_end|>: Qwen)  <|im_start|>ROLE\nCONTENT<|im_end|>\n
//   Llama 3 (<|start_header_id|>, <|end_header_id|>, <|eot_id|>)
//                          <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
// with the special tokens as their ids and the text between them encoded as ordinary text; the
// loss counts each "assistant" message's CONTENT and the token that ends it (<|im_end|>,
// <|eot_id|>), nothing else (not the next end-of-text). A tokenizer with neither set refuses
// messages. Each text piece is encoded where it stands (TextStart in data/tokenizer.h): a prompt
// as a sequence's start; a completion, or a message's CONTENT, as text continuing the piece
// before it, to which no sequence-start rule applies (a Llama 2 or Mistral tokenizer puts no "▁"
// before it); text after a special token as Hugging Face encodes text between added tokens. No
// token spans two pieces, as at generation, where the prompt is encoded alone and the model
// continues it. A .mask file is little-endian: the 8 bytes "memomask", uint32 version (1), uint32
// count (the shard's tokens), then ceil(count / 8) bytes; bit i % 8 (least significant first) of
// byte i / 8 is 1 when the loss counts token i as a target, the prediction made from token i - 1.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace memo {

inline constexpr const char* kShardManifestFile = "manifest.json";
inline constexpr const char* kShardTokenizerFile = "tokenizer.json";
// tokenizer_config.json beside the tokenizer given, copied as it is where there is one: its
// eos_token, which tokenizer.json cannot say, is what a checkpoint of these shards stops at.
inline constexpr const char* kShardTokenizerConfigFile = "tokenizer_config.json";
inline constexpr const char* kShardFormat = "memo-token-shards";
inline constexpr int kShardFormatVersion = 2;  // 1: no .docs or .mask files (still read)
inline constexpr const char* kShardTextFormat = "text";
inline constexpr const char* kShardPromptCompletionFormat = "prompt-completion";

struct ShardInfo {
  std::string file;   // name inside the directory
  std::string split;  // "train" or "val"
  int64_t tokens = 0;
  uint32_t crc32c = 0;  // of the whole file, header included
  std::string docs;     // its .docs file (Note [Document offsets]); "" in version 1
  uint32_t docs_crc32c = 0;
  std::string mask;  // its .mask file (Note [Loss mask files]); "" without one
  uint32_t mask_crc32c = 0;
};

struct ShardManifest {
  int64_t vocab_size = 0;  // of the tokenizer
  bool complete = false;
  std::string data_format = kShardTextFormat;  // or kShardPromptCompletionFormat
  int32_t end_of_text = -1;
  int32_t document_start = -1;  // Note [Document layout]; end_of_text where the file has none
  std::vector<ShardInfo> shards;
  nlohmann::json json;  // the whole manifest
};

// The manifest of shard directory `dir`, or nullopt if it has none. A malformed manifest:
// FormatError naming it.
std::optional<ShardManifest> read_shard_manifest(const std::filesystem::path& dir);

// The tokenizer.json of the shard directory behind a --data value (the directory itself, or the
// folder of a shard file or glob), or "" when there is none (raw text, a lone llm.c file). One
// that does not parse, or whose checksum is not the manifest's tokenizer_crc32c: FormatError
// naming it.
std::string shard_tokenizer_json(const std::string& data_path);
// The folder a --data path names: itself, or the folder of a shard (or a glob of them) in it.
std::filesystem::path shard_folder(const std::string& data_path);
// The tokenizer_config.json a `memo tokenize` folder (or a shard in it) carries; empty where it
// has none.
std::string shard_tokenizer_config(const std::string& data_path);

struct TokenizeOptions {
  std::string tokenizer;  // Tokenizer::load path
  std::string out_dir;
  std::vector<std::string> inputs;  // files or folders; *.jsonl / *.json are JSON lines
  // kShardTextFormat: plain text files and JSON lines with a "text" field; or
  // kShardPromptCompletionFormat: JSON lines of examples (Note [Loss mask files]).
  std::string format = kShardTextFormat;
  int64_t shard_tokens = 100'000'000;
  // Documents whose first byte lies in the last val_fraction of the input bytes go to val-*.bin;
  // 0: no validation shards (training then holds out the tail of the training stream).
  double val_fraction = 0.0;
  int64_t batch_bytes = 16 << 20;  // text tokenised in parallel per batch
  int64_t stop_after_shards = 0;   // tests: return (as if killed) after this many new shards
};

struct TokenizeResult {
  int64_t documents = 0, text_bytes = 0, train_tokens = 0, val_tokens = 0, shards = 0;
  bool already_complete = false;
  bool resumed = false;
  bool complete = false;  // false only when stop_after_shards stopped it
  double seconds = 0.0;
};

// Tokenises every document of the inputs into shards in options.out_dir, printing a progress
// line (MB/s, ETA) at most once a second. Errors: unreadable inputs, a JSON line without a
// string "text" field, or under prompt-completion a plain text file or a line that is not an
// example (DataError naming file and byte offset), a tokenizer without an end-of-text token or,
// for messages, without chat tokens, an out_dir holding another run's shards (ConfigError).
TokenizeResult tokenize_corpus(const TokenizeOptions& options, std::ostream& progress);

}  // namespace memo
