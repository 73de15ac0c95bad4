// Implementation of data/tokenizer.h: loading the two file layouts, the pre-tokenizer, the merges.
// Note [Byte-level BPE merges]
// A piece (one pre-token's bytes) starts as one id per byte. Repeatedly, the adjacent pair with
// the lowest merge rank is replaced by its merged id; equal ranks go leftmost first. This is
// GPT-2's bpe() (which merges every occurrence of the best pair left to right in one pass: the
// same result, since a merge cannot create another copy of the pair it consumed) and Hugging
// Face's BPE. Pieces of up to kQuadraticMaxBytes bytes use the quadratic scan (tiktoken's
// byte_pair_merge: fastest for the short pieces of text); longer ones (whitespace runs, base64,
// invalid-byte runs) a heap over a linked list, O(n log n). The merge tests hold both equal.
#include "memo/data/tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "memo/core/error.h"
#include "memo/data/byte_level.h"
#include "memo/data/split_pattern.h"
#include "memo/io/atomic_file.h"

namespace memo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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

json parse_json(std::string_view text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(str(source, " is not valid JSON: ", e.what()));
  }
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  bool bytes_only = false;
  std::vector<std::string> token_bytes;                  // [vocab] raw bytes of each id
  std::vector<uint8_t> defined;                          // [vocab] 1 where the id exists
  std::array<int32_t, 256> byte_id{};                    // id of each single byte
  std::unordered_map<std::string, int32_t> id_of_bytes;  // the BPE vocabulary, raw bytes
  PairMap merges;
  std::optional<SplitPattern> pattern;
  bool ignore_merges = false;  // HF: a piece that is one token in the vocabulary is that token
  std::vector<std::pair<std::string, int32_t>> specials;  // added tokens, longest first
  json hf;

  void set_token(int32_t id, std::string bytes) {
    if (id < 0) throw FormatError(str(source, ": token id ", id, " is negative"));
    if (size_t(id) >= token_bytes.size()) {
      token_bytes.resize(size_t(id) + 1);
      defined.resize(size_t(id) + 1, 0);
    }
    token_bytes[size_t(id)] = std::move(bytes);
    defined[size_t(id)] = 1;
  }

  // Byte-level vocabulary (spelling -> id) into token_bytes, id_of_bytes and byte_id.
  void set_vocab(const json& vocab, const std::vector<std::string>& skip) {
    if (!vocab.is_object()) throw FormatError(str(source, ": the vocabulary is not a JSON object"));
    byte_id.fill(-1);
    for (const auto& [spelling, id_json] : vocab.items()) {
      if (std::find(skip.begin(), skip.end(), spelling) != skip.end()) continue;
      std::optional<std::string> raw = byte_level_decode(spelling);
      if (!raw)
        throw FormatError(str(source, ": vocabulary entry \"", spelling,
                              "\" is not spelled in GPT-2's byte-level alphabet"));
      const int32_t id = id_json.get<int32_t>();
      if (raw->size() == 1) byte_id[static_cast<unsigned char>((*raw)[0])] = id;
      id_of_bytes.emplace(*raw, id);
      set_token(id, std::move(*raw));
    }
    for (int b = 0; b < 256; ++b)
      if (byte_id[size_t(b)] < 0)
        throw FormatError(str(source, ": the vocabulary has no token for byte ", b,
                              "; byte-level BPE needs all 256"));
  }

  void add_merge(const std::string& left, const std::string& right, int32_t rank) {
    auto bytes_of = [&](const std::string& spelling) {
      std::optional<std::string> raw = byte_level_decode(spelling);
      if (!raw)
        throw FormatError(str(source, ": merge ", rank, " (\"", left, " ", right, "\") has \"",
                              spelling, "\", not in the byte-level alphabet"));
      return *raw;
    };
    const std::string a = bytes_of(left), b = bytes_of(right);
    auto ia = id_of_bytes.find(a), ib = id_of_bytes.find(b), iab = id_of_bytes.find(a + b);
    if (ia == id_of_bytes.end() || ib == id_of_bytes.end() || iab == id_of_bytes.end())
      throw FormatError(str(source, ": merge ", rank, " (\"", left, " ", right,
                            "\") names a token missing from the vocabulary"));
    merges.insert(ia->second, ib->second, rank, iab->second);
  }

  void add_special(std::string content, int32_t id) {
    set_token(id, content);
    specials.emplace_back(std::move(content), id);
  }

  void finish_specials() {
    std::stable_sort(specials.begin(), specials.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }

  int32_t rank_of(int32_t left, int32_t right) const { return merges.find(left, right).rank; }

  void merge_quadratic(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_heap(std::string_view piece, std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::merge_quadratic(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t parts[kQuadraticMaxBytes + 1];
  int32_t ranks[kQuadraticMaxBytes + 1];  // ranks[i]: merge rank of (parts[i], parts[i + 1])
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) parts[i] = byte_id[static_cast<unsigned char>(piece[i])];
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(parts[i], parts[i + 1]);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoRank) break;
    parts[best] = merges.find(parts[best], parts[best + 1]).id;
    for (size_t i = best + 1; i + 1 < n; ++i) parts[i] = parts[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) ranks[i] = ranks[i + 1];
    --n;
    if (best + 1 < n) ranks[best] = rank_of(parts[best], parts[best + 1]);
    if (best > 0) ranks[best - 1] = rank_of(parts[best - 1], parts[best]);
  }
  out.insert(out.end(), parts, parts + n);
}

void Tokenizer::Impl::merge_heap(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t n = int32_t(piece.size());
  std::vector<int32_t> id(static_cast<size_t>(n)), prev(id.size()), next(id.size());
  for (int32_t i = 0; i < n; ++i) {
    id[size_t(i)] = byte_id[static_cast<unsigned char>(piece[size_t(i)])];
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {  // merge of node `left` (holding left_id) with its successor (right_id)
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;  // lowest rank, then leftmost
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    const int32_t right = next[size_t(left)];
    if (right < 0) return;
    const int32_t rank = rank_of(id[size_t(left)], id[size_t(right)]);
    if (rank != kNoRank) heap.push({rank, left, id[size_t(left)], id[size_t(right)]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[size_t(c.left)];
    // Stale: the left node was consumed or changed, or its successor changed.
    if (id[size_t(c.left)] != c.left_id || right < 0 || id[size_t(right)] != c.right_id) continue;
    id[size_t(c.left)] = merges.find(c.left_id, c.right_id).id;
    id[size_t(right)] = -1;
    next[size_t(c.left)] = next[size_t(right)];
    if (next[size_t(right)] >= 0) prev[size_t(next[size_t(right)])] = c.left;
    if (prev[size_t(c.left)] >= 0) push(prev[size_t(c.left)]);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(id[size_t(i)]);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::bytes() {
  auto impl = std::make_unique<Impl>();
  impl->source = "bytes";
  impl->bytes_only = true;
  for (int b = 0; b < 256; ++b) impl->set_token(b, std::string(1, char(b)));
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "encoder.json") && fs::exists(path / "vocab.bpe"))
      return from_gpt2_files(read_file(path / "encoder.json"), read_file(path / "vocab.bpe"),
                             path.string());
    if (fs::exists(path / "tokenizer.json")) return load(path / "tokenizer.json");
    throw DataError(str("tokenizer directory ", path.string(),
                        " has neither encoder.json + vocab.bpe (GPT-2) nor tokenizer.json"));
  }
  const std::string p = path.string();
  return from_hf_json(parse_json(read_file(path), p), p);
}

Tokenizer Tokenizer::from_gpt2_files(std::string_view encoder_json, std::string_view vocab_bpe,
                                     const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  const std::string kEndOfText = "<|endoftext|>";
  const json encoder = parse_json(encoder_json, source + "/encoder.json");
  impl->set_vocab(encoder, {kEndOfText});
  if (encoder.contains(kEndOfText))
    impl->add_special(kEndOfText, encoder[kEndOfText].get<int32_t>());
  impl->finish_specials();
  // vocab.bpe: a "#version" line, then one "left right" merge per line in rank order.
  json merges = json::array();
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t line_start = 0;
  while (line_start < vocab_bpe.size()) {
    size_t line_end = vocab_bpe.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = vocab_bpe.size();
    std::string_view line = vocab_bpe.substr(line_start, line_end - line_start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line_start = line_end + 1;
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      throw FormatError(str(source, "/vocab.bpe: line \"", line, "\" is not \"left right\""));
    pairs.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  impl->merges.reserve(pairs.size());
  for (size_t r = 0; r < pairs.size(); ++r) {
    impl->add_merge(pairs[r].first, pairs[r].second, int32_t(r));
    merges.push_back(pairs[r].first + " " + pairs[r].second);
  }
  impl->pattern.emplace(std::string(kGpt2SplitPattern));
  // The same tokenizer as Hugging Face's GPT-2 tokenizer.json, so checkpoints carry one format.
  json added = json::array();
  for (const auto& [content, id] : impl->specials)
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", true},
                     {"special", true}});
  impl->hf = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"post_processor",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", false},
                {"use_regex", true}}},
              {"decoder",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", encoder},
                {"merges", merges}}}};
  return Tokenizer(std::move(impl));
}

namespace {

// The split pattern of a Hugging Face pre_tokenizer: ByteLevel (GPT-2's pattern when use_regex),
// or a Sequence of Split(Regex, Isolated) then ByteLevel without its regex.
std::string hf_split_pattern(const json& pre, const std::string& source) {
  auto check_byte_level = [&](const json& b) {
    if (b.value("add_prefix_space", false))
      throw ConfigError(str(source, ": ByteLevel add_prefix_space = true is not supported (it ",
                            "changes the text, so decode(encode(x)) != x)"));
  };
  const std::string type = pre.is_object() ? pre.value("type", "") : "";
  if (type == "ByteLevel") {
    check_byte_level(pre);
    if (!pre.value("use_regex", true))
      throw ConfigError(str(source, ": a ByteLevel pre_tokenizer without use_regex and without a ",
                            "Split before it does not split text; not supported"));
    return std::string(kGpt2SplitPattern);
  }
  if (type == "Sequence") {
    const json& list = pre.at("pretokenizers");
    if (list.size() == 2 && list[0].value("type", "") == "Split" &&
        list[1].value("type", "") == "ByteLevel") {
      const json& split = list[0];
      check_byte_level(list[1]);
      if (list[1].value("use_regex", true))
        throw ConfigError(str(source, ": Split followed by ByteLevel with use_regex = true (two ",
                              "regex passes) is not supported"));
      if (split.value("behavior", "") != "Isolated" || split.value("invert", false) ||
          !split.at("pattern").contains("Regex"))
        throw ConfigError(str(source, ": only Split with a Regex pattern, behavior Isolated and ",
                              "invert false is supported, got ", split.dump()));
      return split.at("pattern").at("Regex").get<std::string>();
    }
  }
  throw ConfigError(str(source, ": pre_tokenizer ", pre.dump().substr(0, 200),
                        " is not supported; memo reads ByteLevel, or Sequence [Split, ByteLevel]"));
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const json& tj, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  try {
    const json& model = tj.at("model");
    if (model.value("type", "BPE") != "BPE")
      throw ConfigError(str(source, ": model type ", model.value("type", ""),
                            " is not supported; memo reads byte-level BPE"));
    if (tj.contains("normalizer") && !tj.at("normalizer").is_null())
      throw ConfigError(str(source, ": a normalizer (", tj.at("normalizer").value("type", ""),
                            ") is not supported; byte-level BPE tokenizers have none"));
    if (model.value("byte_fallback", false))
      throw ConfigError(str(source, ": byte_fallback BPE (SentencePiece-style) is not supported"));
    impl->pattern.emplace(hf_split_pattern(tj.at("pre_tokenizer"), source));
    impl->ignore_merges = model.value("ignore_merges", false);
    std::vector<std::string> added_contents;
    if (tj.contains("added_tokens"))
      for (const json& t : tj.at("added_tokens"))
        added_contents.push_back(t.at("content").get<std::string>());
    // Added tokens may also sit in the vocabulary (GPT-2's <|endoftext|>); they are matched
    // literally, so their vocabulary spelling is skipped.
    json vocab = model.at("vocab");
    for (const std::string& c : added_contents) {
      auto it = vocab.find(c);
      if (it != vocab.end() && !byte_level_decode(c)) vocab.erase(it);
    }
    impl->set_vocab(vocab, {});
    const json& merges = model.at("merges");
    impl->merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& m = merges[r];
      if (m.is_array()) {
        impl->add_merge(m.at(0).get<std::string>(), m.at(1).get<std::string>(), int32_t(r));
      } else {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos)
          throw FormatError(str(source, ": merge ", r, " \"", s, "\" is not \"left right\""));
        impl->add_merge(s.substr(0, space), s.substr(space + 1), int32_t(r));
      }
    }
    if (tj.contains("added_tokens"))
      for (const json& t : tj.at("added_tokens"))
        impl->add_special(t.at("content").get<std::string>(), t.at("id").get<int32_t>());
    impl->finish_specials();
  } catch (const json::exception& e) {
    throw FormatError(str(source, " is not a Hugging Face tokenizer.json: ", e.what()));
  }
  impl->hf = tj;
  return Tokenizer(std::move(impl));
}

void Tokenizer::merge_piece(std::string_view piece, std::vector<int32_t>& ids,
                            bool force_heap) const {
  const Impl& t = *impl_;
  if (piece.empty()) return;
  if (piece.size() == 1) {
    ids.push_back(t.byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (t.ignore_merges) {
    auto it = t.id_of_bytes.find(std::string(piece));
    if (it != t.id_of_bytes.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  if (piece.size() <= kQuadraticMaxBytes && !force_heap) {
    t.merge_quadratic(piece, ids);
  } else {
    t.merge_heap(piece, ids);
  }
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& ids) const {
  if (impl_->bytes_only) {
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return;
  }
  std::vector<Piece> pieces;
  impl_->pattern->split(text, pieces);
  ids.reserve(ids.size() + text.size() / 3);
  for (const Piece& p : pieces) merge_piece(text.substr(p.begin, p.end - p.begin), ids, false);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_with_special(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at < text.size()) {
    // The earliest special string at or after `at` (the longest one at that position).
    size_t best_pos = std::string_view::npos;
    const std::pair<std::string, int32_t>* best = nullptr;
    for (const auto& s : impl_->specials) {
      const size_t pos = text.find(s.first, at);
      if (pos < best_pos) {
        best_pos = pos;
        best = &s;
      }
    }
    if (!best) break;
    encode(text.substr(at, best_pos - at), ids);
    ids.push_back(best->second);
    at = best_pos + best->first.size();
  }
  if (at < text.size()) encode(text.substr(at), ids);
  return ids;
}

// Note [Segments of a long document]
// With GPT-2's and cl100k's split patterns no piece crosses a line end that has a printable,
// non-space ASCII byte on both sides ("a\nB"): the byte before ends its piece together with the
// newline or just before it, whatever follows, and no alternative lets a piece start with a
// newline and continue into a non-space. Neither pattern looks behind, so matching from the
// segment's start finds the same pieces as matching inside the whole text. Cutting right after
// such a newline therefore gives the ids of the whole document; the batch test holds it. Other
// patterns are not cut.
namespace {

constexpr size_t kSegmentBytes = 1 << 20;

bool printable_ascii(char c) { return c > ' ' && c < 0x7F; }

// [begin, end) byte ranges of `text`, about kSegmentBytes each, cut after "x\nY" newlines.
std::vector<std::pair<size_t, size_t>> segments(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  while (text.size() - begin > 2 * kSegmentBytes) {
    size_t cut = begin + kSegmentBytes;
    while (cut + 1 < text.size() &&
           !(text[cut] == '\n' && printable_ascii(text[cut - 1]) && printable_ascii(text[cut + 1])))
      ++cut;
    if (cut + 1 >= text.size()) break;
    out.emplace_back(begin, cut + 1);
    begin = cut + 1;
  }
  out.emplace_back(begin, text.size());
  return out;
}

}  // namespace

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(
    std::span<const std::string_view> docs) const {
  const bool can_cut = impl_->pattern && (impl_->pattern->pattern() == kGpt2SplitPattern ||
                                          impl_->pattern->pattern() == kCl100kSplitPattern);
  struct Task {
    size_t doc;
    std::string_view text;
  };
  std::vector<Task> tasks;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (!can_cut || docs[d].size() <= 2 * kSegmentBytes) {
      tasks.push_back({d, docs[d]});
      continue;
    }
    for (const auto& [b, e] : segments(docs[d])) tasks.push_back({d, docs[d].substr(b, e - b)});
  }
  std::vector<std::vector<int32_t>> ids(tasks.size());
  const int64_t n = int64_t(tasks.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) encode(tasks[size_t(i)].text, ids[size_t(i)]);
  std::vector<std::vector<int32_t>> out(docs.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    std::vector<int32_t>& dst = out[tasks[i].doc];
    if (dst.empty()) {
      dst = std::move(ids[i]);
    } else {
      dst.insert(dst.end(), ids[i].begin(), ids[i].end());
    }
  }
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->token_bytes.size() || !impl_->defined[size_t(id)])
    throw DataError(str("token id ", id, " is not in the vocabulary of ", impl_->source, " (",
                        vocab_size(), " ids)"));
  return impl_->token_bytes[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || size_t(id) >= impl_->token_bytes.size() || !impl_->defined[size_t(id)])
      throw DataError(str("token id ", id, " at position ", i, " is not in the vocabulary of ",
                          impl_->source, " (", vocab_size(), " ids)"));
    out += impl_->token_bytes[size_t(id)];
  }
  return out;
}

int64_t Tokenizer::vocab_size() const { return int64_t(impl_->token_bytes.size()); }

std::optional<int32_t> Tokenizer::special_id(std::string_view content) const {
  for (const auto& [c, id] : impl_->specials)
    if (c == content) return id;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::end_of_text() const {
  if (auto id = special_id("<|endoftext|>")) return id;
  return special_id("<|end_of_text|>");
}

bool Tokenizer::is_bytes() const { return impl_->bytes_only; }
const std::string& Tokenizer::source() const { return impl_->source; }
const json& Tokenizer::hf_json() const { return impl_->hf; }

}  // namespace memo
