// The planner's text format. See text_format.h.
#include "memo/memory/plan/text_format.h"

#include <charconv>
#include <vector>

namespace memo::plan {
namespace {

constexpr std::string_view kProblemMagic = "memo-plan-problem";
constexpr std::string_view kPlanMagic = "memo-plan-plan";
constexpr std::int64_t kVersion = 1;

std::string escape_name(const std::string& name) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : name) {
    if (c <= 0x20 || c == '%' || c == 0x7f) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out;
}

// Reads the meaningful lines of a text one at a time, keeping the line number for errors.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}

  // The next non-blank, non-comment line split on spaces and tabs; throws at the end of text.
  std::vector<std::string_view> next(std::string_view expecting) {
    while (pos_ < text_.size()) {
      std::size_t eol = text_.find('\n', pos_);
      if (eol == std::string_view::npos) eol = text_.size();
      std::string_view line = text_.substr(pos_, eol - pos_);
      pos_ = eol + 1;
      ++line_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      std::vector<std::string_view> fields;
      std::size_t i = 0;
      while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
        std::size_t j = i;
        while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
        if (j > i) fields.push_back(line.substr(i, j - i));
        i = j;
      }
      if (fields.empty() || fields[0][0] == '#') continue;
      return fields;
    }
    throw FormatError(str("line ", line_ + 1, ": text ends; expected ", expecting));
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(str("line ", line_, ": ", what));
  }

  std::int64_t integer(std::string_view field, std::string_view what) const {
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (ec != std::errc{} || end != field.data() + field.size())
      fail(str("expected an integer ", what, ", got '", field, "'"));
    return value;
  }

  // Expects a line "<key> <integer>" and returns the integer.
  std::int64_t keyed(std::string_view key) {
    const auto f = next(str("'", key, " <integer>'"));
    if (f.size() != 2 || f[0] != key) fail(str("expected '", key, " <integer>'"));
    return integer(f[1], key);
  }

  void header(std::string_view magic) {
    const auto f = next(magic);
    if (f.size() != 2 || f[0] != magic) fail(str("expected header '", magic, " ", kVersion, "'"));
    const std::int64_t version = integer(f[1], "version");
    if (version != kVersion)
      fail(str("version ", version, " is not supported; this reader reads ", kVersion));
  }

  void trailer() {
    const auto f = next("'end'");
    if (f.size() != 1 || f[0] != "end") fail("expected 'end'");
    while (pos_ < text_.size()) {
      std::size_t eol = text_.find('\n', pos_);
      if (eol == std::string_view::npos) eol = text_.size();
      const std::string_view line = text_.substr(pos_, eol - pos_);
      pos_ = eol + 1;
      ++line_;
      if (line.find_first_not_of(" \t\r") != std::string_view::npos) fail("text after 'end'");
    }
  }

  std::string unescape_name(std::string_view field) const {
    std::string out;
    for (std::size_t i = 0; i < field.size(); ++i) {
      if (field[i] != '%') {
        out += field[i];
        continue;
      }
      int value = 0;
      if (i + 3 > field.size()) fail(str("truncated %XX escape in name '", field, "'"));
      const auto [end, ec] = std::from_chars(field.data() + i + 1, field.data() + i + 3, value, 16);
      if (ec != std::errc{} || end != field.data() + i + 3)
        fail(str("bad %XX escape in name '", field, "'"));
      out += char(value);
      i += 2;
    }
    return out;
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 0;
};

std::int64_t count_field(LineReader& in, std::string_view key) {
  const std::int64_t n = in.keyed(key);
  if (n < 0 || n > INT32_MAX)
    in.fail(str(key, " count ", n, " is out of range [0, ", INT32_MAX, "]"));
  return n;
}

}  // namespace

std::string to_text(const Problem& problem) {
  std::string out = str(kProblemMagic, " ", kVersion, "\ncapacity ", problem.capacity, "\nbuffers ",
                        problem.buffers.size(), "\n");
  for (const Buffer& b : problem.buffers)
    out += str(escape_name(b.name), " ", b.size, " ", b.align, " ", b.begin, " ", b.end, "\n");
  return out + "end\n";
}

std::string to_text(const Plan& plan) {
  std::string out =
      str(kPlanMagic, " ", kVersion, "\npeak ", plan.peak, "\noffsets ", plan.offsets.size(), "\n");
  for (Bytes offset : plan.offsets) out += str(offset, "\n");
  return out + "end\n";
}

Problem problem_from_text(std::string_view text) {
  LineReader in(text);
  in.header(kProblemMagic);
  Problem problem;
  problem.capacity = in.keyed("capacity");
  const std::int64_t n = count_field(in, "buffers");
  for (std::int64_t i = 0; i < n; ++i) {
    const auto f = in.next(str("buffer ", i, " of ", n));
    if (f.size() != 5)
      in.fail(str("buffer ", i, ": expected '<name> <size> <align> <begin> <end>', got ", f.size(),
                  " fields"));
    problem.buffers.push_back(Buffer{in.unescape_name(f[0]), in.integer(f[1], "size"),
                                     in.integer(f[2], "align"), in.integer(f[3], "begin"),
                                     in.integer(f[4], "end")});
  }
  in.trailer();
  return problem;
}

Plan plan_from_text(std::string_view text) {
  LineReader in(text);
  in.header(kPlanMagic);
  Plan plan;
  plan.peak = in.keyed("peak");
  const std::int64_t n = count_field(in, "offsets");
  for (std::int64_t i = 0; i < n; ++i) {
    const auto f = in.next(str("offset ", i, " of ", n));
    if (f.size() != 1)
      in.fail(str("offset ", i, ": expected one integer, got ", f.size(), " fields"));
    plan.offsets.push_back(in.integer(f[0], "offset"));
  }
  in.trailer();
  return plan;
}

}  // namespace memo::plan
