// Implementation of data/token_data.h. Sizes are checked before any token is read, so a truncated
// or lying header gives a FormatError, never a read past the buffer.
#include "memo/data/token_data.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "memo/core/error.h"
#include "memo/io/atomic_file.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "llm.c token files are little-endian; memo reads them as-is");

constexpr int64_t kHeaderBytes = kLlmcHeaderInts * int64_t(sizeof(int32_t));

int32_t int_at(const std::string& bytes, int64_t index) {
  int32_t v;
  std::memcpy(&v, bytes.data() + index * sizeof(int32_t), sizeof v);
  return v;
}

void check_vocab(int64_t vocab_size, const std::string& source) {
  if (vocab_size <= 0)
    throw ConfigError(str("vocab_size = ", vocab_size, " for ", source, " must be positive"));
}

void check_token(int64_t id, int64_t position, const std::string& source, int64_t vocab_size) {
  if (id < 0 || id >= vocab_size)
    throw DataError(str("token id ", id, " at position ", position, " of ", source,
                        " is outside the vocabulary [0, ", vocab_size, ")"));
}

// Unsigned file ids to int32, each checked before the narrowing (uint32 ids may exceed int32).
template <class T>
std::vector<int32_t> widen(const char* data, int64_t count, const std::string& p,
                           int64_t vocab_size) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, data + i * int64_t(sizeof(T)), sizeof v);
    check_token(int64_t(v), i, p, vocab_size);
    out[size_t(i)] = int32_t(v);
  }
  return out;
}

// The tokens of an llm.c file whose first int32 is a known magic.
std::vector<int32_t> read_llmc(const std::string& bytes, const std::string& p, int64_t vocab_size) {
  const int64_t file_bytes = int64_t(bytes.size());
  if (file_bytes < kHeaderBytes)
    throw FormatError(str(p, " starts with the llm.c magic but is ", file_bytes,
                          " bytes, shorter than the ", kHeaderBytes, "-byte header"));
  int32_t magic = int_at(bytes, 0), version = int_at(bytes, 1), count = int_at(bytes, 2);
  int32_t want_version = magic == kLlmcMagic ? kLlmcVersion : kLlmcVersionLlama3;
  int64_t token_bytes = magic == kLlmcMagic ? 2 : 4;
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
  const char* data = bytes.data() + kHeaderBytes;
  return token_bytes == 2 ? widen<uint16_t>(data, count, p, vocab_size)
                          : widen<uint32_t>(data, count, p, vocab_size);
}

}  // namespace

TokenData::TokenData(Checked, std::vector<int32_t> tokens, std::string source, int64_t vocab_size)
    : tokens_(std::move(tokens)), source_(std::move(source)), vocab_size_(vocab_size) {}

TokenData::TokenData(std::vector<int32_t> tokens, std::string source, int64_t vocab_size)
    : TokenData(Checked{}, std::move(tokens), std::move(source), vocab_size) {
  check_vocab(vocab_size_, source_);
  if (tokens_.empty()) throw DataError(str(source_, " is empty"));
  for (size_t i = 0; i < tokens_.size(); ++i)
    check_token(tokens_[i], int64_t(i), source_, vocab_size_);
}

TokenData TokenData::load(const fs::path& path, int64_t vocab_size) {
  const std::string p = path.string();
  check_vocab(vocab_size, p);
  std::string bytes = read_file(path);
  if (bytes.empty()) throw DataError(str(p, " is empty"));
  int32_t magic = 0;
  if (bytes.size() >= sizeof magic) magic = int_at(bytes, 0);
  std::vector<int32_t> tokens;
  if (magic == kLlmcMagic || magic == kLlmcMagicLlama3) {
    tokens = read_llmc(bytes, p, vocab_size);
  } else {
    tokens = widen<uint8_t>(bytes.data(), int64_t(bytes.size()), p, vocab_size);
  }
  return TokenData(Checked{}, std::move(tokens), p, vocab_size);
}

std::pair<TokenData, TokenData> split_tail(TokenData data, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw ConfigError(
        str("validation fraction ", val_fraction, " for ", data.source_, " must lie in (0, 1)"));
  const int64_t n = data.num_tokens();
  if (n < 2)
    throw DataError(str(data.source_, " holds ", n, " token; a train/validation split needs 2"));
  int64_t n_val = std::llround(val_fraction * double(n));
  n_val = std::min(std::max<int64_t>(n_val, 1), n - 1);
  const int64_t n_train = n - n_val;
  std::vector<int32_t> val(data.tokens_.begin() + n_train, data.tokens_.end());
  data.tokens_.resize(size_t(n_train));
  std::string src = data.source_;
  return {TokenData(TokenData::Checked{}, std::move(data.tokens_),
                    str(src, " [tokens 0, ", n_train, ")"), data.vocab_size_),
          TokenData(TokenData::Checked{}, std::move(val),
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
