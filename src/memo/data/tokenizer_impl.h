// The state behind data/tokenizer.h, shared by its two source files: tokenizer.cc (pre-tokenizing,
// the merges, encode and decode) and tokenizer_load.cc (reading GPT-2's files and Hugging Face's
// tokenizer.json + tokenizer_config.json). Internal to data/: nothing else includes it.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memo/data/added_tokens.h"
#include "memo/data/decoder.h"
#include "memo/data/normalizer.h"
#include "memo/data/split_pattern.h"
#include "memo/data/tokenizer.h"

namespace memo {

constexpr size_t kQuadraticMaxBytes = 64;
constexpr int32_t kNoRank = INT32_MAX;

// (left id, right id) -> (merge rank, merged id), open addressing with linear probing.
class PairMap {
 public:
  struct Merge {
    int32_t rank = kNoRank;
    int32_t id = -1;
  };
  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }
  // Keeps the lower rank when a pair is given twice.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t id) {
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty) {
        s = Slot{key, {rank, id}};
        return;
      }
      if (s.key == key) {
        if (rank < s.merge.rank) s.merge = {rank, id};
        return;
      }
    }
  }
  Merge find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return {};
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge;
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
  }
  size_t hash(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// How text is cut into pieces before the merges (Hugging Face's pre_tokenizer).
enum class PreTokenizerKind {
  kNone,            // null: the whole (normalized) text is one piece
  kByteLevel,       // ByteLevel with its regex (GPT-2's pattern)
  kSplitByteLevel,  // Sequence [Split(regex, Isolated), ByteLevel without regex]
  kMetaspace,       // Metaspace: spaces become the replacement character, optionally split there
};

enum class PrependScheme { kAlways, kFirst, kNever };

struct PreTokenizer {
  PreTokenizerKind kind = PreTokenizerKind::kByteLevel;
  std::optional<SplitPattern> pattern;  // kByteLevel, kSplitByteLevel
  bool prefix_space = false;            // ByteLevel add_prefix_space: " " before a piece lacking it
  std::string replacement;              // kMetaspace: one character ("▁")
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;  // kMetaspace: each replacement character starts a new piece
};

// How far past its entries a tokenizer file's ids may reach (ids need not be dense, but an id of
// two billion in a file of 50,000 tokens is a damaged file, not a table to allocate).
constexpr int64_t kIdSlack = int64_t(1) << 20;

struct Tokenizer::Impl {
  std::string source;
  int64_t id_limit = kIdSlack;  // ids below it are accepted: the file's entries plus kIdSlack
  bool bytes_only = false;
  // [vocab] each id's text inside a sequence: its raw bytes for byte-level BPE, else what the
  // decoder makes of the token alone (see Decoder::decode, whole = false).
  std::vector<std::string> token_bytes;
  std::vector<uint8_t> defined;  // [vocab] 1 where the id exists
  // Byte-level BPE: the id of each single byte. Character-level BPE: the id of each byte's
  // fallback token "<0xNN>", or -1.
  std::array<int32_t, 256> byte_id{};
  // The BPE vocabulary: raw bytes (byte-level) or spellings (character-level) -> id.
  std::unordered_map<std::string, int32_t> id_of_bytes;
  PairMap merges;
  Normalizer normalizer;
  PreTokenizer pre;
  // The model's first symbols: the piece's bytes (byte-level BPE, behind a ByteLevel
  // pre-tokenizer) or its characters looked up in the vocabulary (SentencePiece-style BPE).
  bool byte_level = true;
  bool byte_fallback = false;  // an unknown character becomes the "<0xNN>" tokens of its bytes
  int32_t unk_id = -1;         // else this token (-1: the character is dropped, as in HF)
  bool fuse_unk = false;       // consecutive unknown characters share one unk token
  bool ignore_merges = false;  // HF: a piece that is one token in the vocabulary is that token
  // decode(): true: the ids' token_bytes concatenated (byte-level BPE with a ByteLevel decoder or
  // none); false: the decoder over the spellings.
  bool concat_decode = true;
  Decoder decoder;
  std::vector<std::string> spelling;                      // [vocab] when !concat_decode
  std::vector<std::pair<std::string, int32_t>> specials;  // added tokens, longest first
  std::vector<bool> control;  // [id]: an added token marked "special" (no text; a control token)
  // The added tokens as read (in order), and the matchers finish_specials builds from them: in
  // documents the tokens that are not control tokens, in prompts all (see Note [Added tokens in
  // text]); each split into the tokens matched in the raw text and those matched once normalized.
  struct AddedTokenSpec {
    AddedToken token;
    bool control = true, normalized = false;
  };
  std::vector<AddedTokenSpec> added;
  AddedTokenMatcher document_raw, document_normalized, prompt_raw, prompt_normalized;
  // Around a prompt (encode_with_special): the post_processor's template, or BOS/EOS as
  // tokenizer_config.json's add_bos_token / add_eos_token ask.
  std::vector<int32_t> prefix_ids, suffix_ids;
  std::optional<int32_t> eos_id;  // tokenizer_config.json's eos_token
  nlohmann::json hf;

  void set_token(int32_t id, std::string bytes);
  void set_vocab(const nlohmann::json& vocab, const std::vector<std::string>& skip);
  void set_vocab_spellings(const nlohmann::json& vocab);
  void add_merge(const std::string& left, const std::string& right, int32_t rank);
  // An added token; `is_control`: marked "special" (never matched in documents), and matched in
  // the raw text unless `normalized`.
  void add_special(std::string content, int32_t id, bool is_control = true,
                   bool normalized = false);
  void mark_control(int32_t id);  // control[id] = true, the vector grown to hold it
  void finish_specials();
  // Fills token_bytes (and spelling) of every id from the decoder, once the vocabulary is read.
  void finish_decoding(const std::vector<std::string>& spellings);

  int32_t rank_of(int32_t left, int32_t right) const { return merges.find(left, right).rank; }
  void merge_quadratic(const int32_t* initial, size_t n, std::vector<int32_t>& out) const;
  void merge_heap(const int32_t* initial, size_t n, std::vector<int32_t>& out) const;
  void merge_ids(const int32_t* initial, size_t n, std::vector<int32_t>& out,
                 bool force_heap) const;
  void merge_characters(std::string_view piece, std::vector<int32_t>& out) const;
  // Text with added tokens: the raw matcher's tokens become their ids, and each stretch between
  // them is encoded by encode_normalizing, the first with the prefix rules `start` asks for, the
  // others as after a special token.
  void encode_with_added(std::string_view text, std::vector<int32_t>& ids, TextStart start,
                         const AddedTokenMatcher& raw, const AddedTokenMatcher& normalized,
                         const Tokenizer& self) const;
  // One stretch without raw added tokens: normalized, then the normalized matcher's tokens
  // become their ids and the rest is encoded by encode_normalized.
  void encode_normalizing(std::string_view text, std::vector<int32_t>& ids, TextStart start,
                          const AddedTokenMatcher& normalized, const Tokenizer& self) const;
  // One stretch of normalized ordinary text: pre-tokenize, merge, with the prefix rules `start`
  // asks for.
  void encode_normalized(std::string_view text, std::vector<int32_t>& ids, TextStart start,
                         const Tokenizer& self) const;
};

}  // namespace memo
