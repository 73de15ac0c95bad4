// TensorBoard event files of scalars, written without TensorFlow or protobuf: a TFRecord file of
// tensorflow.Event messages, encoded by hand (only the fields below). Not a reader, and no
// images, histograms or text: memo logs scalars only.
//
// Note [TensorBoard event files]: the published formats this writer follows.
//   TFRecord (tensorflow/core/lib/io/record_writer.h): each record is, little-endian,
//     uint64 length | uint32 masked_crc(the 8 length bytes) | data | uint32 masked_crc(data)
//   with masked_crc = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (uint32), crc = CRC-32C.
//   Event (tensorflow/core/util/event.proto), one per record, protobuf wire format:
//     wall_time = 1 (double, seconds since the epoch), step = 2 (int64 varint), and one of
//     file_version = 3 (string, "brain.Event:2": the first record of every file),
//     summary = 5 (Summary: repeated Value value = 1; Value: tag = 1 string, simple_value = 2
//     float), session_log = 7 (SessionLog: status = 1 enum, START = 1).
//   File name: DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid>; TensorBoard reads every
//   file whose name holds "tfevents", a directory's files in name order, as one run. memo's
//   seconds are at least one past those of the files already there, so a new file sorts last.
// A value is stored as float32 (simple_value): integers past 2^24 (byte counts past 16 MiB) are
// rounded to 24 significant bits; the JSON log keeps the exact ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

namespace memo {

struct TensorBoardScalar {
  std::string tag;  // e.g. "train/loss": TensorBoard groups the charts by the part before '/'
  double value = 0.0;
};

// One event file, opened new (never appended to) in `dir`, which it creates. Each write_step
// hands its whole records to write(2) before it returns (no user-space buffer), so a dashboard
// tailing the file sees every step as soon as it is logged (a crash may cut the last record;
// TensorBoard stops reading there). No fsync: a chart may lose its last steps to a power cut.
//
// Restarts: a resumed run opens a second file in the same directory and passes the first step it
// will log as `restart_step`. The file then carries a SessionLog START event at that step, on which
// TensorBoard drops the earlier files' points at steps >= restart_step (what PyTorch's
// SummaryWriter(purge_step=...) writes): after a crash the chart shows the resumed run's values,
// not two lines over the steps the crashed run logged past its last checkpoint.
class TensorBoardWriter {
 public:
  // Throws DataError naming the directory or file and the system's reason.
  TensorBoardWriter(const std::filesystem::path& dir, std::optional<int64_t> restart_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Summary event of these scalars at `step`, stamped with the current wall time. Throws
  // DataError naming the file on a failed write.
  void write_step(int64_t step, std::span<const TensorBoardScalar> scalars);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_records(const std::string& bytes);

  std::filesystem::path path_;
  int fd_ = -1;  // owned; O_APPEND
};

}  // namespace memo
