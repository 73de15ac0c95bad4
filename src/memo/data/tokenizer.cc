// Implementation of data/tokenizer.h: pre-tokenizing, the merges, encode and decode (the files
// are read in tokenizer_load.cc).
// Note [Byte-level BPE merges]
// A piece (one pre-token's bytes) starts as one id per byte. Repeatedly, the adjacent pair with
// the lowest merge rank is replaced by its merged id; equal ranks go leftmost first. This is
// GPT-2's bpe() (which merges every occurrence of the best pair left to right in one pass: the
// same result, since a merge cannot create another copy of the pair it consumed) and Hugging
// Face's BPE. Pieces of up to kQuadraticMaxBytes bytes use the quadratic scan (tiktoken's
// byte_pair_merge: fastest for the short pieces of text); longer ones (whitespace runs, base64,
// invalid-byte runs) a heap over a linked list, O(n log n). The merge tests hold both equal.
// SentencePiece-style BPE merges the same way from one id per character instead (see
// merge_characters).
#include "memo/data/tokenizer.h"

#include <algorithm>
#include <exception>
#include <queue>

#include "memo/core/error.h"
#include "memo/data/tokenizer_impl.h"

namespace memo {

void Tokenizer::Impl::merge_quadratic(const int32_t* initial, size_t count,
                                      std::vector<int32_t>& out) const {
  int32_t parts[kQuadraticMaxBytes + 1];
  int32_t ranks[kQuadraticMaxBytes + 1];  // ranks[i]: merge rank of (parts[i], parts[i + 1])
  size_t n = count;
  for (size_t i = 0; i < n; ++i) parts[i] = initial[i];
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

void Tokenizer::Impl::merge_heap(const int32_t* initial, size_t count,
                                 std::vector<int32_t>& out) const {
  const int32_t n = int32_t(count);
  std::vector<int32_t> id(initial, initial + count), prev(id.size()), next(id.size());
  for (int32_t i = 0; i < n; ++i) {
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

void Tokenizer::Impl::merge_ids(const int32_t* initial, size_t n, std::vector<int32_t>& out,
                                bool force_heap) const {
  if (n == 0) return;
  if (n <= kQuadraticMaxBytes && !force_heap) {
    merge_quadratic(initial, n, out);
  } else {
    merge_heap(initial, n, out);
  }
}

// Hugging Face's BPE word: each character (a stray invalid byte counts as one) is its vocabulary
// token; else, with byte_fallback, the "<0xNN>" tokens of its bytes when all exist; else the unk
// token (one for a run of them with fuse_unk), or nothing without one. A pending unk is written
// when the next known character comes, not before fallback bytes (Hugging Face's order). Then
// the merges, as for bytes.
void Tokenizer::Impl::merge_characters(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    auto it = id_of_bytes.find(std::string(piece));
    if (it != id_of_bytes.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  bool unk_pending = false;
  std::string character;
  for (size_t at = 0; at < piece.size();) {
    size_t len = valid_utf8_prefix(piece.substr(at, 4)) == 0 ? 1 : 0;
    if (len == 0) {  // the length of the valid character starting here
      const auto c = static_cast<unsigned char>(piece[at]);
      len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    }
    character.assign(piece.substr(at, len));
    at += len;
    auto it = id_of_bytes.find(character);
    if (it != id_of_bytes.end()) {
      if (unk_pending) symbols.push_back(unk_id);
      unk_pending = false;
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback && std::all_of(character.begin(), character.end(), [&](char b) {
          return byte_id[static_cast<unsigned char>(b)] >= 0;
        })) {
      for (char b : character) symbols.push_back(byte_id[static_cast<unsigned char>(b)]);
      continue;
    }
    if (unk_id < 0) continue;
    if (unk_pending && !fuse_unk) symbols.push_back(unk_id);
    unk_pending = true;
  }
  if (unk_pending) symbols.push_back(unk_id);
  merge_ids(symbols.data(), symbols.size(), out, false);
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

void Tokenizer::merge_piece(std::string_view piece, std::vector<int32_t>& ids,
                            bool force_heap) const {
  const Impl& t = *impl_;
  if (piece.empty()) return;
  if (!t.byte_level) {
    t.merge_characters(piece, ids);
    return;
  }
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
  auto byte_ids = [&](int32_t* initial) {
    for (size_t i = 0; i < piece.size(); ++i)
      initial[i] = t.byte_id[static_cast<unsigned char>(piece[i])];
  };
  if (piece.size() <= kQuadraticMaxBytes) {
    int32_t initial[kQuadraticMaxBytes];
    byte_ids(initial);
    t.merge_ids(initial, piece.size(), ids, force_heap);
  } else {
    std::vector<int32_t> initial(piece.size());
    byte_ids(initial.data());
    t.merge_ids(initial.data(), initial.size(), ids, force_heap);
  }
}

namespace {

// Hugging Face's Metaspace pre-tokenizer on one stretch of text: spaces become the replacement,
// which is prepended as the scheme says (to text that does not start with it), and with `split`
// each replacement starts a new piece (MergedWithNext).
void metaspace_pieces(std::string_view text, const PreTokenizer& pre, TextStart start,
                      std::string& replaced, std::vector<Piece>& pieces) {
  replaced.clear();
  for (char c : text) {
    if (c == ' ') {
      replaced += pre.replacement;
    } else {
      replaced += c;
    }
  }
  const bool prepend = start != TextStart::continued &&
                       (pre.prepend == PrependScheme::kAlways ||
                        (pre.prepend == PrependScheme::kFirst && start == TextStart::sequence));
  if (prepend && !replaced.empty() && !replaced.starts_with(pre.replacement))
    replaced.insert(0, pre.replacement);
  pieces.clear();
  if (!pre.split) {
    if (!replaced.empty()) pieces.push_back({0, replaced.size()});
    return;
  }
  size_t begin = 0;
  for (size_t at = replaced.find(pre.replacement, 1); at != std::string::npos;
       at = replaced.find(pre.replacement, at + pre.replacement.size())) {
    pieces.push_back({begin, at});
    begin = at;
  }
  if (begin < replaced.size()) pieces.push_back({begin, replaced.size()});
}

}  // namespace

// Note [Added tokens in text]
// Hugging Face finds the added tokens in a text before anything else: first those matched in the
// raw text (normalized: false, as every special token of the common tokenizers), then, in each
// stretch between them once normalized, those matched in the normalized text; each remaining
// stretch is pre-tokenized and merged on its own. memo does the same, with one difference kept on
// purpose: in documents (encode, encode_batch) the control tokens (marked "special": <|endoftext|>,
// <|im_start|>) stay text, so a document cannot end itself or forge a chat turn, while the other
// added tokens (Qwen's <tool_call> and fill-in-the-middle tokens; Gemma 3 has 6,406, line-feed
// runs and HTML tags among them) become their ids as in Hugging Face. Prompts (encode_with_special)
// match all. One more difference, on a case no published tokenizer has: after a token that strips
// the white space on its right, memo looks for the next token after that white space; Hugging Face
// looks from the token's own end and can emit a token overlapping the stripped space (its text
// twice).
void Tokenizer::Impl::encode_with_added(std::string_view text, std::vector<int32_t>& ids,
                                        TextStart start, const AddedTokenMatcher& raw,
                                        const AddedTokenMatcher& normalized,
                                        const Tokenizer& self) const {
  size_t at = 0;
  for (auto m = raw.next(text, 0, 0); m; m = raw.next(text, m->end, m->end)) {
    if (m->begin > at)
      encode_normalizing(text.substr(at, m->begin - at), ids, start, normalized, self);
    ids.push_back(m->id);
    at = m->end;
    start = TextStart::after_special;
  }
  if (at < text.size()) encode_normalizing(text.substr(at), ids, start, normalized, self);
}

void Tokenizer::Impl::encode_normalizing(std::string_view text, std::vector<int32_t>& ids,
                                         TextStart start, const AddedTokenMatcher& normalized_set,
                                         const Tokenizer& self) const {
  std::string normalized;
  if (!normalizer.empty()) {
    normalized = normalizer.normalize(text, start == TextStart::continued);
    text = normalized;
  }
  size_t at = 0;
  for (auto m = normalized_set.next(text, 0, 0); m; m = normalized_set.next(text, m->end, m->end)) {
    if (m->begin > at) encode_normalized(text.substr(at, m->begin - at), ids, start, self);
    ids.push_back(m->id);
    at = m->end;
    start = TextStart::after_special;
  }
  if (at < text.size()) encode_normalized(text.substr(at), ids, start, self);
}

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int32_t>& ids,
                                        TextStart start, const Tokenizer& self) const {
  std::vector<Piece> pieces;
  std::string prefixed;
  switch (pre.kind) {
    case PreTokenizerKind::kNone:
      merge_characters(text, ids);
      return;
    case PreTokenizerKind::kMetaspace:
      metaspace_pieces(text, pre, start, prefixed, pieces);
      for (const Piece& p : pieces)
        self.merge_piece(std::string_view(prefixed).substr(p.begin, p.end - p.begin), ids, false);
      return;
    case PreTokenizerKind::kByteLevel:
      if (pre.prefix_space && start != TextStart::continued && !text.empty() && text[0] != ' ') {
        prefixed.assign(1, ' ');
        prefixed.append(text);
        text = prefixed;
      }
      break;
    case PreTokenizerKind::kSplitByteLevel:
      break;
  }
  pre.pattern->split(text, pieces);
  ids.reserve(ids.size() + text.size() / 3);
  const bool prefix_each = pre.prefix_space && pre.kind == PreTokenizerKind::kSplitByteLevel;
  for (const Piece& p : pieces) {
    const std::string_view piece = text.substr(p.begin, p.end - p.begin);
    if (prefix_each && piece[0] != ' ') {
      prefixed.assign(1, ' ');
      prefixed.append(piece);
      self.merge_piece(prefixed, ids, false);
    } else {
      self.merge_piece(piece, ids, false);
    }
  }
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& ids, TextStart start) const {
  if (impl_->bytes_only) {
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return;
  }
  impl_->encode_with_added(text, ids, start, impl_->document_raw, impl_->document_normalized,
                           *this);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, TextStart start) const {
  std::vector<int32_t> ids;
  encode(text, ids, start);
  return ids;
}

std::span<const int32_t> Tokenizer::prefix_ids() const { return impl_->prefix_ids; }

std::vector<int32_t> Tokenizer::encode_with_special(std::string_view text) const {
  std::vector<int32_t> ids = impl_->prefix_ids;
  if (impl_->bytes_only) {
    encode(text, ids);
  } else {
    impl_->encode_with_added(text, ids, TextStart::sequence, impl_->prompt_raw,
                             impl_->prompt_normalized, *this);
  }
  ids.insert(ids.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
  return ids;
}

// Note [Segments of a long document]
// With GPT-2's and cl100k's split patterns no piece crosses a line end that has a printable,
// non-space ASCII byte on both sides ("a\nB"): the byte before ends its piece together with the
// newline or just before it, whatever follows, and no alternative lets a piece start with a
// newline and continue into a non-space. Neither pattern looks behind, so matching from the
// segment's start finds the same pieces as matching inside the whole text. Cutting right after
// such a newline therefore gives the ids of the whole document; the batch test holds it. Other
// patterns are not cut, nor are documents whose added tokens could reach across the cut (one
// holding such a line feed, or taking the white space on its left: AddedTokenMatcher::
// spans_line_ends).
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

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string_view> docs,
                                                          std::span<const TextStart> starts) const {
  MEMO_CHECK(starts.empty() || starts.size() == docs.size(), "encode_batch: ", docs.size(),
             " texts, ", starts.size(), " starts");
  const Impl& t = *impl_;
  const bool can_cut = t.pre.pattern && t.normalizer.empty() && !t.pre.prefix_space &&
                       !t.document_raw.spans_line_ends() &&
                       !t.document_normalized.spans_line_ends() &&
                       (t.pre.pattern->pattern() == kGpt2SplitPattern ||
                        t.pre.pattern->pattern() == kCl100kSplitPattern);
  struct Task {
    size_t doc;
    std::string_view text;
    TextStart start;
  };
  std::vector<Task> tasks;
  for (size_t d = 0; d < docs.size(); ++d) {
    TextStart start = starts.empty() ? TextStart::sequence : starts[d];
    if (!can_cut || docs[d].size() <= 2 * kSegmentBytes) {
      tasks.push_back({d, docs[d], start});
      continue;
    }
    for (const auto& [b, e] : segments(docs[d])) {
      tasks.push_back({d, docs[d].substr(b, e - b), start});
      start = TextStart::continued;  // the rest of the document
    }
  }
  std::vector<std::vector<int32_t>> ids(tasks.size());
  const int64_t n = int64_t(tasks.size());
  // An exception may not leave an OpenMP region (it would terminate the process): the first one
  // (a split pattern's match limit, a normalizer's error) is kept and thrown after it.
  std::exception_ptr failed;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      encode(tasks[size_t(i)].text, ids[size_t(i)], tasks[size_t(i)].start);
    } catch (...) {
#pragma omp critical(memo_encode_batch_error)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
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

std::string Tokenizer::decode(std::span<const int32_t> ids, bool whole) const {
  const Impl& t = *impl_;
  std::string out;
  std::vector<std::string> spellings;
  if (!t.concat_decode) spellings.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || size_t(id) >= t.token_bytes.size() || !t.defined[size_t(id)])
      throw DataError(str("token id ", id, " at position ", i, " is not in the vocabulary of ",
                          t.source, " (", vocab_size(), " ids)"));
    if (t.concat_decode) {
      out += t.token_bytes[size_t(id)];
    } else {
      spellings.push_back(t.spelling[size_t(id)]);
    }
  }
  if (!t.concat_decode) out = t.decoder.decode(std::move(spellings), whole);
  return out;
}

int64_t Tokenizer::vocab_size() const { return int64_t(impl_->token_bytes.size()); }

std::optional<int32_t> Tokenizer::special_id(std::string_view content) const {
  for (const auto& [c, id] : impl_->specials)
    if (c == content) return id;
  return std::nullopt;
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->control.size() && impl_->control[size_t(id)];
}

std::optional<int32_t> Tokenizer::eos_token() const { return impl_->eos_id; }

std::optional<int32_t> Tokenizer::end_of_text() const {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>"})
    if (auto id = special_id(name)) return id;
  if (impl_->eos_id) return impl_->eos_id;
  for (const char* name : {"</s>", "<eos>"})
    if (auto id = special_id(name)) return id;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::document_start() const {
  const std::optional<int32_t> eot = end_of_text();
  if (!eot) return std::nullopt;
  const std::span<const int32_t> bos = prefix_ids();
  const bool framed = !bos.empty() && std::ranges::all_of(bos, [&](int32_t id) {
    return id != *eot && is_control(id);
  });
  return framed ? bos.front() : *eot;
}

bool Tokenizer::is_bytes() const { return impl_->bytes_only; }
const std::string& Tokenizer::source() const { return impl_->source; }
const nlohmann::json& Tokenizer::hf_json() const { return impl_->hf; }

}  // namespace memo
