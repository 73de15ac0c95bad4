// Implementation of data/token_data.h. Files are memory-mapped; sizes are checked before any
// token is read, so a truncated or lying header gives a FormatError, never a read past the map.
#include "memo/data/token_data.h"

#include <glob.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "memo/core/error.h"
#include "memo/data/shards.h"
#include "memo/io/atomic_file.h"
#include "memo/io/mapped_file.h"

namespace memo {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "llm.c token files are little-endian; memo reads them as-is");

// One file's ids (or the in-memory vector) at stream positions [first, first + count).
struct TokenSegment {
  const char* data = nullptr;
  int width_bytes = 0;  // 1 (raw bytes), 2 (uint16), 4 (uint32 or in-memory int32)
  int64_t count = 0;
  int64_t first = 0;
  const uint8_t* mask = nullptr;  // the loss mask's bits (Note [Loss mask files]), or null
};

struct TokenStore {
  std::vector<int32_t> owned;    // in-memory tokens
  std::vector<MappedFile> maps;  // mapped files, in stream order
  std::vector<MappedFile> mask_maps;
  std::vector<TokenSegment> segments;
  bool has_mask = false;                           // every segment has one
  std::optional<std::vector<int64_t>> doc_starts;  // stream positions (Note [Document offsets])
  int64_t num_tokens() const {
    return segments.empty() ? 0 : segments.back().first + segments.back().count;
  }
};

namespace {

constexpr int64_t kHeaderBytes = kLlmcHeaderInts * int64_t(sizeof(int32_t));

int32_t int_at(std::string_view bytes, int64_t index) {
  int32_t v;
  std::memcpy(&v, bytes.data() + index * sizeof(int32_t), sizeof v);
  return v;
}

void check_vocab(int64_t vocab_size, const std::string& source) {
  if (vocab_size <= 0)
    throw ConfigError(str("vocab_size = ", vocab_size, " for ", source, " must be positive"));
}

[[noreturn]] void throw_bad_token(int64_t id, int64_t position, const std::string& source,
                                  int64_t vocab_size) {
  throw DataError(str("token id ", id, " at position ", position, " of ", source,
                      " is outside the vocabulary [0, ", vocab_size, ")"));
}

template <class T>
int64_t id_at(const char* data, int64_t i) {
  T v;
  std::memcpy(&v, data + i * int64_t(sizeof(T)), sizeof v);
  return int64_t(v);
}

// Checks every id of a segment: one pass for the maximum (vectorises), a second only on failure.
template <class T>
void check_ids(const TokenSegment& s, const std::string& source, int64_t vocab_size) {
  if (int64_t(std::numeric_limits<T>::max()) < vocab_size && std::is_unsigned_v<T>) return;
  int64_t max_id = 0, min_id = 0;
  const T* ids = reinterpret_cast<const T*>(s.data);  // llm.c bodies start 1024 bytes in: aligned
  for (int64_t i = 0; i < s.count; ++i) {
    max_id = std::max<int64_t>(max_id, int64_t(ids[i]));
    min_id = std::min<int64_t>(min_id, int64_t(ids[i]));
  }
  if (max_id < vocab_size && min_id >= 0) return;
  for (int64_t i = 0; i < s.count; ++i)
    if (int64_t(ids[i]) >= vocab_size || int64_t(ids[i]) < 0)
      throw_bad_token(int64_t(ids[i]), i, source, vocab_size);
}

// The token segment of one mapped file whose first int32 may be an llm.c magic.
TokenSegment parse_file(std::string_view bytes, const std::string& p) {
  const int64_t file_bytes = int64_t(bytes.size());
  if (file_bytes == 0) throw DataError(str(p, " is empty"));
  int32_t magic = 0;
  if (bytes.size() >= sizeof magic) magic = int_at(bytes, 0);
  if (magic != kLlmcMagic && magic != kLlmcMagicLlama3)
    return TokenSegment{bytes.data(), 1, file_bytes, 0};
  if (file_bytes < kHeaderBytes)
    throw FormatError(str(p, " starts with the llm.c magic but is ", file_bytes,
                          " bytes, shorter than the ", kHeaderBytes, "-byte header"));
  int32_t version = int_at(bytes, 1), count = int_at(bytes, 2);
  int32_t want_version = magic == kLlmcMagic ? kLlmcVersion : kLlmcVersionLlama3;
  int token_bytes = magic == kLlmcMagic ? 2 : 4;
  if (version != want_version)
    throw FormatError(str(p, ": llm.c header version ", version, " at offset 4 is not supported; ",
                          "magic ", magic, " needs version ", want_version));
  if (count < 0)
    throw FormatError(str(p, ": llm.c header token count ", count, " at offset 8 is negative"));
  if (count == 0) throw DataError(str(p, " is empty (its llm.c header counts 0 tokens)"));
  int64_t expected = kHeaderBytes + int64_t(count) * token_bytes;
  if (expected != file_bytes)
    throw FormatError(str(p, ": llm.c header counts ", count, " tokens of ", token_bytes,
                          " bytes, so the file should be ", expected, " bytes, but it is ",
                          file_bytes, expected > file_bytes ? " (truncated)" : " (trailing data)"));
  return TokenSegment{bytes.data() + kHeaderBytes, token_bytes, count, 0};
}

// A uint16 file holds ids below 65536 only, whatever the model's vocab_size (a larger vocabulary
// is fine: its ids are checked like any other). Its tokenizer must fit too: one with more ids
// could only have written it by dropping or wrapping the ids that do not fit.
void check_width(const TokenSegment& s, const std::string& path, int64_t tokenizer_ids) {
  constexpr int64_t kUint16Ids = int64_t(std::numeric_limits<uint16_t>::max()) + 1;
  if (s.width_bytes == 2 && tokenizer_ids > kUint16Ids)
    throw FormatError(str(path, " holds uint16 token ids (llm.c magic ", kLlmcMagic,
                          "), but its tokenizer has ", tokenizer_ids, " ids, over the ", kUint16Ids,
                          " that uint16 holds; re-run `memo tokenize`, which writes uint32 shards ",
                          "(magic ", kLlmcMagicLlama3, ") for such a tokenizer"));
}

void check_segment(const TokenSegment& s, const std::string& source, int64_t vocab_size) {
  if (s.width_bytes == 1) check_ids<uint8_t>(s, source, vocab_size);
  if (s.width_bytes == 2) check_ids<uint16_t>(s, source, vocab_size);
  if (s.width_bytes == 4) check_ids<uint32_t>(s, source, vocab_size);
}

std::vector<fs::path> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<fs::path> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (files.empty()) throw DataError(str("no file matches ", pattern));
  std::sort(files.begin(), files.end());
  return files;
}

void check_manifest_vocab(const fs::path& dir, const ShardManifest& m, int64_t vocab_size) {
  if (m.vocab_size > vocab_size)
    throw ConfigError(str("the tokenizer of ", dir.string(), " has ", m.vocab_size,
                          " ids but the model's vocab_size is ", vocab_size,
                          "; set vocab_size >= ", m.vocab_size, " in the model config"));
}

// The shards of one split listed by a manifest, each checked to exist before anything is mapped.
std::vector<ShardInfo> manifest_shards(const fs::path& dir, const ShardManifest& m,
                                       const std::string& split, int64_t vocab_size) {
  const std::string manifest = (dir / kShardManifestFile).string();
  if (!m.complete)
    throw DataError(str(dir.string(), " is an unfinished `memo tokenize` run (", manifest,
                        " says complete: false); rerun the same tokenize command to finish it"));
  check_manifest_vocab(dir, m, vocab_size);
  // "all": the training shards, then the validation shards, in the order of the input (the
  // manifest lists them as written, and a split's last shard is written after the other's).
  std::vector<ShardInfo> shards;
  for (const char* part : {"train", "val"}) {
    if (split != part && split != "all") continue;
    for (const ShardInfo& s : m.shards) {
      if (s.split != part) continue;
      for (const std::string& file : {s.file, s.docs, s.mask}) {
        const fs::path f = dir / file;
        if (!file.empty() && !fs::exists(f))
          throw DataError(str("shard file ", f.string(), " listed in ", manifest, " is missing"));
      }
      shards.push_back(s);
    }
  }
  return shards;
}

// The body of a .docs or .mask file (Note [Document offsets], Note [Loss mask files]) after its
// header is checked: magic, version 1, count, and a size of 16 + body_bytes(count).
template <class BodyBytes>
std::string_view sidecar_body(std::string_view bytes, const char* magic, const std::string& path,
                              BodyBytes body_bytes, uint32_t& count) {
  if (bytes.size() < 16 || bytes.substr(0, 8) != magic)
    throw FormatError(str(path, " does not start with \"", magic, "\""));
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&count, bytes.data() + 12, 4);
  if (version != 1) throw FormatError(str(path, ": version ", version, " is not supported"));
  const uint64_t want = 16 + uint64_t(body_bytes(count));
  if (bytes.size() != want)
    throw FormatError(str(path, " counts ", count, " entries, so it should be ", want,
                          " bytes, but it is ", bytes.size()));
  return bytes.substr(16);
}

// Where the documents of shard s (tokens at stream position first) start, as stream positions;
// each must lie in the shard, ascending, on the document start token (Note [Document layout]).
void read_document_offsets(const fs::path& path, const TokenSegment& seg, int32_t start_id,
                           std::vector<int64_t>& starts) {
  const MappedFile map(path);
  uint32_t count = 0;
  const std::string_view body = sidecar_body(
      map.bytes(), "memodocs", path.string(), [](uint32_t n) { return 4 * uint64_t(n); }, count);
  int64_t previous = -1;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t offset;
    std::memcpy(&offset, body.data() + 4 * size_t(i), 4);
    if (int64_t(offset) <= previous || int64_t(offset) >= seg.count)
      throw FormatError(str(path.string(), ": document offset ", offset, " (entry ", i,
                            ") is not ascending within the shard's ", seg.count, " tokens"));
    int32_t id = 0;
    std::memcpy(&id, seg.data + int64_t(offset) * seg.width_bytes, size_t(seg.width_bytes));
    if (start_id >= 0 && id != start_id)
      throw FormatError(str(path.string(), ": the document at offset ", offset, " starts with ",
                            "token ", id, ", not the manifest's document start ", start_id));
    previous = int64_t(offset);
    starts.push_back(seg.first + int64_t(offset));
  }
}

}  // namespace

TokenData::TokenData(std::shared_ptr<const TokenStore> store, int64_t begin, int64_t end,
                     std::string source, int64_t vocab_size)
    : store_(std::move(store)),
      begin_(begin),
      end_(end),
      source_(std::move(source)),
      vocab_size_(vocab_size) {}

TokenData::TokenData(std::vector<int32_t> tokens, std::string source, int64_t vocab_size)
    : source_(std::move(source)), vocab_size_(vocab_size) {
  check_vocab(vocab_size_, source_);
  if (tokens.empty()) throw DataError(str(source_, " is empty"));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size_)
      throw_bad_token(tokens[i], int64_t(i), source_, vocab_size_);
  auto store = std::make_shared<TokenStore>();
  store->owned = std::move(tokens);
  store->segments.push_back(TokenSegment{reinterpret_cast<const char*>(store->owned.data()), 4,
                                         int64_t(store->owned.size()), 0});
  end_ = store->num_tokens();
  store_ = std::move(store);
}

namespace {

// `listed`: the shards of a manifest (one per file), whose files must be llm.c token files of the
// token counts it records (a damaged header is never read as raw bytes).
std::shared_ptr<TokenStore> map_files(const std::vector<fs::path>& files, const std::string& source,
                                      int64_t vocab_size, int64_t tokenizer_ids,
                                      const std::vector<ShardInfo>* listed = nullptr) {
  check_vocab(vocab_size, source);
  if (files.empty()) throw DataError(str(source, " has no token files"));
  auto store = std::make_shared<TokenStore>();
  for (size_t i = 0; i < files.size(); ++i) {
    const fs::path& f = files[i];
    MappedFile map(f);
    TokenSegment s = parse_file(map.bytes(), f.string());
    if (listed && s.width_bytes == 1)
      throw FormatError(str(f.string(), " is listed in its folder's ", kShardManifestFile,
                            " but does not start with the llm.c magic (", kLlmcMagic, " or ",
                            kLlmcMagicLlama3, "): the shard is damaged; re-run `memo tokenize`"));
    if (listed && s.count != (*listed)[i].tokens)
      throw FormatError(str(f.string(), " holds ", s.count, " tokens, but its folder's ",
                            kShardManifestFile, " records ", (*listed)[i].tokens,
                            ": the shard is damaged or from another run; re-run `memo tokenize`"));
    check_width(s, f.string(), tokenizer_ids);
    check_segment(s, f.string(), vocab_size);
    s.first = store->num_tokens();
    store->segments.push_back(s);
    store->maps.push_back(std::move(map));
  }
  return store;
}

// The .docs and .mask files of the shards behind `store`, one per segment.
void read_sidecars(TokenStore& store, const fs::path& dir, const ShardManifest& m,
                   const std::vector<ShardInfo>& shards) {
  std::vector<int64_t> starts;
  bool all_docs = true;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].docs.empty())
      all_docs = false;
    else
      read_document_offsets(dir / shards[i].docs, store.segments[i], m.document_start, starts);
  }
  if (all_docs && m.data_format == kShardPromptCompletionFormat && m.end_of_text >= 0) {
    // Every end-of-text of prompt-completion shards starts an example (an example's own text
    // holds control tokens as text), but each split's closing one, its last token: a .docs file
    // that lost an entry would merge two examples into one that sees both.
    size_t next = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const TokenSegment& seg = store.segments[i];
      for (int64_t t = 0; t < seg.count; ++t) {
        int32_t id = 0;
        std::memcpy(&id, seg.data + t * seg.width_bytes, size_t(seg.width_bytes));
        if (id != m.end_of_text) continue;
        const int64_t at = seg.first + t;
        while (next < starts.size() && starts[next] < at) ++next;
        const bool listed = next < starts.size() && starts[next] == at;
        // a split's last token (with --split all the train split's comes before the val's)
        const bool closing = t + 1 == seg.count &&
                             (i + 1 == shards.size() || shards[i + 1].split != shards[i].split);
        if (!listed && !closing)
          throw FormatError(str((dir / shards[i].docs).string(), " does not list the end-of-text ",
                                "at offset ", t, " of ", shards[i].file, ", where an example ",
                                "starts: the file is damaged; re-run `memo tokenize`"));
      }
    }
  }
  if (all_docs) store.doc_starts = std::move(starts);
  if (m.data_format != kShardPromptCompletionFormat) return;
  for (size_t i = 0; i < shards.size(); ++i) {
    const fs::path path = dir / shards[i].mask;
    MappedFile& map = store.mask_maps.emplace_back(path);
    uint32_t count = 0;
    const std::string_view body = sidecar_body(
        map.bytes(), "memomask", path.string(), [](uint32_t n) { return (uint64_t(n) + 7) / 8; },
        count);
    if (int64_t(count) != store.segments[i].count)
      throw FormatError(str(path.string(), " masks ", count, " tokens, but its shard ",
                            shards[i].file, " holds ", store.segments[i].count));
    store.segments[i].mask = reinterpret_cast<const uint8_t*>(body.data());
  }
  store.has_mask = true;
}

}  // namespace

TokenData TokenData::load_files(const std::vector<fs::path>& files, const std::string& source,
                                int64_t vocab_size) {
  std::shared_ptr<TokenStore> store = map_files(files, source, vocab_size, 0);
  const int64_t n = store->num_tokens();
  return TokenData(std::move(store), 0, n, source, vocab_size);
}

std::optional<TokenData> TokenData::load_split(const fs::path& dir, const std::string& split,
                                               int64_t vocab_size) {
  std::optional<ShardManifest> m = read_shard_manifest(dir);
  if (!m) throw DataError(str(dir.string(), " has no ", kShardManifestFile));
  const std::vector<ShardInfo> shards = manifest_shards(dir, *m, split, vocab_size);
  if (shards.empty()) return std::nullopt;
  std::vector<fs::path> files;
  for (const ShardInfo& s : shards) files.push_back(dir / s.file);
  const std::string source = str(dir.string(), " (", files.size(),
                                 split == "train" ? " training shards)"
                                 : split == "val" ? " validation shards)"
                                                  : " shards, training and validation)");
  std::shared_ptr<TokenStore> store = map_files(files, source, vocab_size, m->vocab_size, &shards);
  read_sidecars(*store, dir, *m, shards);
  const int64_t n = store->num_tokens();
  return TokenData(std::move(store), 0, n, source, vocab_size);
}

TokenData TokenData::load(const fs::path& path, int64_t vocab_size) {
  const std::string p = path.string();
  check_vocab(vocab_size, p);
  // A shard folder's tokenizer.json is checked (shard_tokenizer_json, data/shards.h) before
  // anything trains on its shards: a checkpoint copies it, and the run should not find out there.
  shard_tokenizer_json(p);
  if (!fs::is_directory(path)) {  // shard files named one by one or by a glob: their folder's
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");  // manifest
    if (std::optional<ShardManifest> m = read_shard_manifest(dir)) {
      check_manifest_vocab(dir, *m, vocab_size);
      if (m->data_format == kShardPromptCompletionFormat)
        throw ConfigError(str(p, " names prompt-completion shards one by one; give their folder ",
                              dir.string(), " so that their loss masks are read"));
      // each named file is one of the manifest's shards, held to its entry as the folder's are
      const bool glob = p.find_first_of("*?[") != std::string::npos && !fs::exists(path);
      const std::vector<fs::path> files = glob ? glob_files(p) : std::vector<fs::path>{path};
      std::vector<ShardInfo> listed;
      for (const fs::path& f : files) {
        const std::string name = f.filename().string();
        const auto it = std::find_if(m->shards.begin(), m->shards.end(),
                                     [&](const ShardInfo& s) { return s.file == name; });
        if (it == m->shards.end())
          throw DataError(str(f.string(), " is not listed in its folder's ", kShardManifestFile,
                              "; give the folder, or shards that `memo tokenize` wrote there"));
        listed.push_back(*it);
      }
      std::shared_ptr<TokenStore> store = map_files(files, p, vocab_size, m->vocab_size, &listed);
      const int64_t n = store->num_tokens();
      return TokenData(std::move(store), 0, n, p, vocab_size);
    }
  }
  if (p.find_first_of("*?[") != std::string::npos && !fs::exists(path))
    return load_files(glob_files(p), p, vocab_size);
  if (fs::is_directory(path)) {
    if (fs::exists(path / kShardManifestFile)) {
      std::optional<TokenData> train = load_split(path, "train", vocab_size);
      if (!train) throw DataError(str(p, " has no training shards"));
      return std::move(*train);
    }
    std::vector<fs::path> files = glob_files((path / "*.bin").string());
    return load_files(files, str(p, " (", files.size(), " files)"), vocab_size);
  }
  return load_files({path}, p, vocab_size);
}

std::optional<TokenData> load_validation_shards(const fs::path& path, int64_t vocab_size) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return std::nullopt;
  if (!fs::exists(path / kShardManifestFile)) return std::nullopt;
  return TokenData::load_split(path, "val", vocab_size);
}

int64_t TokenData::num_files() const { return int64_t(store_->maps.size()); }

bool TokenData::has_loss_mask() const { return store_->has_mask; }

namespace {

// run(segment, i0, n) for each part [i0, i0 + n) of a segment that stream positions
// [g, g + count) cover, in order.
template <class F>
void for_each_segment_run(const std::vector<TokenSegment>& segs, int64_t g, int64_t count,
                          F&& run) {
  auto it = std::upper_bound(segs.begin(), segs.end(), g,
                             [](int64_t v, const TokenSegment& s) { return v < s.first; });
  --it;  // the segment holding g
  while (count > 0) {
    const int64_t i0 = g - it->first, n = std::min(count, it->count - i0);
    run(*it, i0, n);
    count -= n;
    g += n;
    ++it;
  }
}

}  // namespace

void TokenData::copy_mask(int64_t start, int64_t count, uint8_t* out) const {
  MEMO_CHECK(has_loss_mask() && start >= 0 && count >= 0 && start + count <= num_tokens(),
             "copy_mask [", start, ", ", start + count, ") of ", num_tokens(), " tokens");
  for_each_segment_run(store_->segments, begin_ + start, count,
                       [&out](const TokenSegment& s, int64_t i0, int64_t n) {
                         for (int64_t i = i0; i < i0 + n; ++i)
                           *out++ = uint8_t((s.mask[i / 8] >> (i % 8)) & 1);
                       });
}

std::optional<std::vector<int64_t>> TokenData::document_starts() const {
  if (!store_->doc_starts) return std::nullopt;
  const std::vector<int64_t>& all = *store_->doc_starts;
  std::vector<int64_t> mine;
  for (auto it = std::lower_bound(all.begin(), all.end(), begin_); it != all.end() && *it < end_;
       ++it)
    mine.push_back(*it - begin_);
  return mine;
}

void TokenData::copy(int64_t start, int64_t count, int32_t* out) const {
  MEMO_CHECK(start >= 0 && count >= 0 && start + count <= num_tokens(), "copy [", start, ", ",
             start + count, ") of ", num_tokens(), " tokens");
  for_each_segment_run(store_->segments, begin_ + start, count,
                       [&out](const TokenSegment& s, int64_t i0, int64_t n) {
                         if (s.width_bytes == 1) {
                           const auto* src = reinterpret_cast<const uint8_t*>(s.data) + i0;
                           for (int64_t i = 0; i < n; ++i) out[i] = int32_t(src[i]);
                         } else if (s.width_bytes == 2) {
                           const auto* src = reinterpret_cast<const uint16_t*>(s.data) + i0;
                           for (int64_t i = 0; i < n; ++i) out[i] = int32_t(src[i]);
                         } else {
                           std::memcpy(out, s.data + i0 * 4, size_t(n) * 4);
                         }
                         out += n;
                       });
}

int32_t TokenData::operator[](int64_t i) const {
  int32_t v;
  copy(i, 1, &v);
  return v;
}

std::pair<TokenData, TokenData> split_tail(TokenData data, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw ConfigError(
        str("--val-fraction ", val_fraction, " for ", data.source_, " must lie in (0, 1)"));
  const int64_t n = data.num_tokens();
  if (n < 2)
    throw DataError(str(data.source_, " holds ", n, " token; a train/validation split needs 2"));
  int64_t n_val = std::llround(val_fraction * double(n));
  n_val = std::min(std::max<int64_t>(n_val, 1), n - 1);
  const int64_t n_train = n - n_val;
  const std::string& src = data.source_;
  return {TokenData(data.store_, data.begin_, data.begin_ + n_train,
                    str(src, " [tokens 0, ", n_train, ")"), data.vocab_size_),
          TokenData(data.store_, data.begin_ + n_train, data.end_,
                    str(src, " [tokens ", n_train, ", ", n, ")"), data.vocab_size_)};
}

void write_llmc_tokens(const fs::path& path, const std::vector<int32_t>& tokens) {
  const std::string p = path.string();
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw DataError(str("writing ", p, ": ", tokens.size(), " tokens are more than the llm.c ",
                        "header's int32 count holds (", std::numeric_limits<int32_t>::max(), ")"));
  std::vector<uint16_t> body(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > std::numeric_limits<uint16_t>::max())
      throw DataError(str("writing ", p, ": token id ", tokens[i], " at position ", i,
                          " does not fit the uint16 range [0, 65536) of llm.c token files"));
    body[i] = uint16_t(tokens[i]);
  }
  int32_t header[kLlmcHeaderInts] = {kLlmcMagic, kLlmcVersion, int32_t(tokens.size())};
  AtomicFileWriter out(path);
  out.append({reinterpret_cast<const char*>(header), sizeof header});
  out.append({reinterpret_cast<const char*>(body.data()), body.size() * sizeof(uint16_t)});
  out.commit();
}

}  // namespace memo
