// io/tensorboard.h: event files read back by the independent reader of io/tfevents_reader.h, which
// checks both CRCs of every record and decodes the Event fields by wire type.
#include "memo/io/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "io/tfevents_reader.h"
#include "memo/core/error.h"
#include "memo/io/crc32c.h"
#include "test_util.h"

namespace memo {
namespace {

namespace fs = std::filesystem;

double tensorboard_test_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(TensorBoard, crc32c_of_both_the_writer_and_the_reader_gives_the_check_value) {
  EXPECT_EQ(crc32c(0, "123456789"), 0xE3069283u);  // the CRC-32C catalogue's check value
  EXPECT_EQ(test::tfevents_crc32c("123456789"), 0xE3069283u);
  const std::string bytes(1000, '\x5a');
  EXPECT_EQ(crc32c(0, bytes), test::tfevents_crc32c(bytes));
}

TEST(TensorBoard, scalars_read_back_with_their_tags_steps_and_float_values) {
  test::TempDir dir;
  const double t0 = tensorboard_test_now_s();
  fs::path path;
  {
    TensorBoardWriter w(dir / "tb" / "nested", std::nullopt);
    path = w.path();
    // 0.1 and 1/3 are not floats; 3e9 bytes is past 2^24; a negative value and a tiny one
    const std::vector<TensorBoardScalar> s1 = {
        {"train/loss", 5.5451774444795623}, {"train/lr", 0.1}, {"memory/device_peak_bytes", 3e9}};
    const std::vector<TensorBoardScalar> s2 = {{"train/loss", 1.0 / 3.0}, {"x/neg", -2.5e-30}};
    w.write_step(1, s1);
    w.write_step(300000, s2);
    w.write_step(300001, {});
  }
  const double t1 = tensorboard_test_now_s();
  EXPECT_EQ(path.parent_path(), dir / "tb" / "nested");
  const std::string name = path.filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(::getpid())), std::string::npos) << name;
  EXPECT_EQ(test::tfevents_files(dir / "tb" / "nested"), std::vector<fs::path>{path});

  const std::vector<test::TfEvent> events = test::read_tfevents(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].scalars.empty());
  for (const test::TfEvent& e : events) {
    EXPECT_GE(e.wall_time, t0 - 1.0);  // seconds; 1 s of slack for the clock's rounding
    EXPECT_LE(e.wall_time, t1 + 1.0);
    EXPECT_FALSE(e.session_status);
  }
  EXPECT_EQ(events[1].step, 1);
  ASSERT_EQ(events[1].scalars.size(), 3u);
  EXPECT_EQ(events[1].scalars[0].first, "train/loss");
  EXPECT_EQ(events[1].scalars[0].second, float(5.5451774444795623));
  EXPECT_EQ(events[1].scalars[1].first, "train/lr");
  EXPECT_EQ(events[1].scalars[1].second, float(0.1));
  EXPECT_EQ(events[1].scalars[2].first, "memory/device_peak_bytes");
  EXPECT_EQ(events[1].scalars[2].second, float(3e9));
  EXPECT_EQ(events[2].step, 300000);  // a varint of three bytes
  ASSERT_EQ(events[2].scalars.size(), 2u);
  EXPECT_EQ(events[2].scalars[0].second, float(1.0 / 3.0));
  EXPECT_EQ(events[2].scalars[1].first, "x/neg");
  EXPECT_EQ(events[2].scalars[1].second, float(-2.5e-30));
  EXPECT_EQ(events[3].step, 300001);
  EXPECT_TRUE(events[3].scalars.empty());
}

TEST(TensorBoard, each_step_is_in_the_file_when_write_step_returns) {
  test::TempDir dir;
  TensorBoardWriter w(dir.path(), std::nullopt);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<TensorBoardScalar> s = {{"train/loss", double(step)}};
    w.write_step(step, s);
    const std::vector<test::TfEvent> events = test::read_tfevents(w.path());  // writer still open
    ASSERT_EQ(events.size(), size_t(1 + step));
    EXPECT_EQ(events.back().step, step);
  }
}

// A resumed run: a second file beside the first, opening with a SessionLog START at the first step
// it will log, so TensorBoard drops the crashed run's points from that step on.
TEST(TensorBoard, a_restart_opens_a_new_file_that_starts_a_session_at_its_first_step) {
  test::TempDir dir;
  TensorBoardWriter first(dir.path(), std::nullopt);
  TensorBoardWriter second(dir.path(), 7);  // same process and second: a name of its own
  // TensorBoard reads the files in name order: the restart's must come after the points it drops
  EXPECT_EQ(test::tfevents_files(dir.path()), (std::vector<fs::path>{first.path(), second.path()}));
  const std::vector<TensorBoardScalar> s = {{"train/loss", 2.0}};
  second.write_step(7, s);
  const std::vector<test::TfEvent> events = test::read_tfevents(second.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].step, 7);
  EXPECT_EQ(events[1].session_status, 1);  // SessionLog.START
  EXPECT_TRUE(events[1].scalars.empty());
  EXPECT_EQ(events[2].step, 7);
  EXPECT_EQ(test::read_tfevents(first.path()).size(), 1u);
}

TEST(TensorBoard, a_directory_that_cannot_be_made_is_named_in_the_error) {
  test::TempDir dir;
  std::ofstream(dir / "file") << "x";
  const std::string msg = test::error_message<DataError>(
      [&] { TensorBoardWriter w(dir / "file" / "tb", std::nullopt); });
  EXPECT_NE(msg.find((dir / "file" / "tb").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("TensorBoard directory"), std::string::npos) << msg;
  const std::string msg2 =
      test::error_message<DataError>([&] { TensorBoardWriter w(dir / "file", std::nullopt); });
  EXPECT_NE(msg2.find((dir / "file").string()), std::string::npos) << msg2;
}

}  // namespace
}  // namespace memo
