// Implementation of io/tensorboard.h: the protobuf wire format of the few Event fields memo writes
// (see Note [TensorBoard event files]), TFRecord framing, and the file.
#include "memo/io/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <ctime>
#include <system_error>

#include "memo/core/error.h"
#include "memo/io/crc32c.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

// Protobuf wire types (protobuf.dev/programming-guides/encoding).
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

// Field numbers of event.proto and summary.proto.
constexpr uint32_t kEventWallTime = 1;
constexpr uint32_t kEventStep = 2;
constexpr uint32_t kEventFileVersion = 3;
constexpr uint32_t kEventSummary = 5;
constexpr uint32_t kEventSessionLog = 7;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1;
constexpr uint32_t kValueSimpleValue = 2;
constexpr uint32_t kSessionLogStatus = 1;
constexpr uint64_t kSessionLogStart = 1;

constexpr const char* kFileVersion = "brain.Event:2";  // the version TensorBoard expects today
constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;        // record_writer.h's MaskedCrc

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(char(uint8_t(v) | 0x80));
  out.push_back(char(uint8_t(v)));
}

// Little-endian, whatever the host's order: the formats fix it.
void put_fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(bits >> (8 * i))));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (uint64_t(field) << 3) | wire_type);
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// An Event's wall_time and step, then `what` (its oneof field, already encoded).
std::string event(double wall_time_s, int64_t step, const std::string& what) {
  std::string out;
  put_key(out, kEventWallTime, kFixed64);
  put_fixed(out, std::bit_cast<uint64_t>(wall_time_s), 8);
  put_key(out, kEventStep, kVarint);
  put_varint(out, uint64_t(step));  // int64 as varint: two's complement, as protobuf does
  out += what;
  return out;
}

std::string summary(std::span<const TensorBoardScalar> scalars) {
  std::string out;
  for (const TensorBoardScalar& s : scalars) {
    std::string value;
    put_bytes(value, kValueTag, s.tag);
    put_key(value, kValueSimpleValue, kFixed32);
    put_fixed(value, std::bit_cast<uint32_t>(float(s.value)), 4);
    put_bytes(out, kSummaryValue, value);
  }
  return out;
}

uint32_t masked_crc(std::string_view bytes) {
  const uint32_t crc = crc32c(0, bytes);
  return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta;
}

// One TFRecord holding `data`.
std::string record(const std::string& data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string out = length;
  put_fixed(out, masked_crc(length), 4);
  out += data;
  put_fixed(out, masked_crc(data), 4);
  return out;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string reason(int err) { return std::error_code(err, std::generic_category()).message(); }

// The seconds in the name of a file `events.out.tfevents.<seconds>.<...>` (nullopt for others).
std::optional<int64_t> name_seconds(const std::string& name) {
  const std::string prefix = "events.out.tfevents.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  int64_t seconds = 0;
  const char* begin = name.data() + prefix.size();
  const auto [end, ec] = std::from_chars(begin, name.data() + name.size(), seconds);
  if (ec != std::errc() || end == begin) return std::nullopt;
  return seconds;
}

// Now, or one second past the newest event file already in `dir` if that is later: TensorBoard
// reads a directory's files in name order, and a restart's SessionLog START must come after the
// points it drops (a resume within the second the earlier run began would otherwise sort by pid).
int64_t file_seconds(const fs::path& dir) {
  int64_t seconds = int64_t(std::time(nullptr));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (const auto s = name_seconds(entry.path().filename().string()); s && *s >= seconds)
      seconds = *s + 1;
  return seconds;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const fs::path& dir, std::optional<int64_t> restart_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw DataError(str("cannot create the TensorBoard directory ", dir.string(), ": ",
                        ec ? ec.message() : "a file of that name is in the way"));
  // A new name each time (O_EXCL): runs and resumes in one directory never share a file.
  const std::string base = "events.out.tfevents." + std::to_string(file_seconds(dir)) + "." +
                           host_name() + "." + std::to_string(::getpid());
  for (int n = 0; fd_ < 0; ++n) {
    path_ = dir / (n == 0 ? base : base + "." + std::to_string(n));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || n >= 1000))
      throw DataError(str("cannot create ", path_.string(), ": ", reason(errno)));
  }
  try {
    const double t = now_s();
    std::string first;
    put_bytes(first, kEventFileVersion, kFileVersion);
    std::string bytes = record(event(t, 0, first));
    if (restart_step) {
      std::string session_log;
      put_key(session_log, kSessionLogStatus, kVarint);
      put_varint(session_log, kSessionLogStart);
      std::string what;
      put_bytes(what, kEventSessionLog, session_log);
      bytes += record(event(t, *restart_step, what));
    }
    write_records(bytes);
  } catch (...) {
    ::close(fd_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::write_step(int64_t step, std::span<const TensorBoardScalar> scalars) {
  std::string what;
  put_bytes(what, kEventSummary, summary(scalars));
  write_records(record(event(now_s(), step, what)));
}

void TensorBoardWriter::write_records(const std::string& bytes) {
  std::string_view rest = bytes;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError(str("cannot write ", path_.string(), ": ", reason(errno)));
    rest.remove_prefix(size_t(n));
  }
}

}  // namespace memo
