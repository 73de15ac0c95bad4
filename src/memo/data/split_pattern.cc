// Implementation of data/split_pattern.h over PCRE2 (8-bit code units).
// Note [Invalid UTF-8 in the pre-tokenizer]
// The pattern is compiled with PCRE2_MATCH_INVALID_UTF: a match never includes an invalid UTF-8
// sequence, so a run of invalid bytes falls between two matches. split() turns every such gap
// into a piece, which BPE then encodes byte by byte plus merges, so decode(encode(x)) == x for
// any bytes. On valid UTF-8 this is exactly the pattern's own segmentation.
#include "memo/data/split_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "memo/core/error.h"

namespace memo {
namespace {

// Deep backtracking (\s+(?!\S) over a long whitespace run) needs more than PCRE2's default
// 32 KiB JIT stack; 4 MiB covers runs of millions of spaces.
constexpr size_t kJitStackMinBytes = 32 * 1024;
constexpr size_t kJitStackMaxBytes = 4 * 1024 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct SplitPattern::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

// A thread's match state: match data (the whole match only: any pattern's), a JIT stack and the
// context that points at it. Made once per thread and kept: making one maps the JIT stack and
// unmapping it frees it, which per call cost ~90 us per document (an mmap and a munmap each) and
// made 50,000 short JSON lines tokenize 4x slower than the same text as one document.
namespace {
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(kJitStackMinBytes, kJitStackMaxBytes, nullptr);
    MEMO_CHECK(data && context && stack, "PCRE2 match state: out of memory");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& thread_match_state() {
  thread_local MatchState state;
  return state;
}
}  // namespace

SplitPattern::SplitPattern(std::string pattern)
    : pattern_(std::move(pattern)), compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!compiled_->code)
    throw ConfigError(str("split pattern ", pattern_, " does not compile at offset ", offset, ": ",
                          pcre2_message(error)));
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

SplitPattern::~SplitPattern() = default;
SplitPattern::SplitPattern(SplitPattern&&) noexcept = default;
SplitPattern& SplitPattern::operator=(SplitPattern&&) noexcept = default;

void SplitPattern::split(std::string_view text, std::vector<Piece>& pieces) const {
  pieces.clear();
  MatchState& state = thread_match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;  // end of the last piece
  while (at < text.size()) {
    const int rc = compiled_->jit ? pcre2_jit_match(compiled_->code, subject, text.size(), at, 0,
                                                    state.data, state.context)
                                  : pcre2_match(compiled_->code, subject, text.size(), at, 0,
                                                state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw DataError(
          str("split pattern ", pattern_, " failed at byte ", at, ": ", pcre2_message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    size_t begin = ovector[0], end = ovector[1];
    if (begin > at) pieces.push_back({at, begin});  // see Note [Invalid UTF-8 in the pre-tokenizer]
    if (end == begin) {  // an empty match (a custom pattern): the next byte stands alone
      end = begin + 1;
    }
    pieces.push_back({begin, end});
    at = end;
  }
  if (at < text.size()) pieces.push_back({at, text.size()});
}

void SplitPattern::find_all(std::string_view text, std::vector<Piece>& matches) const {
  matches.clear();
  MatchState& state = thread_match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at < text.size()) {
    const int rc = compiled_->jit ? pcre2_jit_match(compiled_->code, subject, text.size(), at, 0,
                                                    state.data, state.context)
                                  : pcre2_match(compiled_->code, subject, text.size(), at, 0,
                                                state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw DataError(str("pattern ", pattern_, " failed at byte ", at, ": ", pcre2_message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    if (ovector[1] == ovector[0]) {  // empty: look again one byte on
      at = ovector[0] + 1;
      continue;
    }
    matches.push_back({ovector[0], ovector[1]});
    at = ovector[1];
  }
}

}  // namespace memo
