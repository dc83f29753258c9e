// TensorBoard event files: TFRecord-framed `Event` protobufs carrying scalar
// summaries, written without a protobuf or TensorFlow dependency so that the
// C++ trainer's runs can be browsed with the stock `tensorboard --logdir`.
//
// Record framing (TFRecord): uint64 LE length, uint32 LE masked CRC-32C of
// those 8 bytes, the data, uint32 LE masked CRC-32C of the data.
// Encoded fields (tensorflow/core/util/event.proto, summary.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace terngrad::experiments {

// Seconds since the Unix epoch, with sub-second resolution.
double unix_time_now();

// One TFRecord: framing around `data`.
std::string frame_tfrecord(std::string_view data);

// Serialized Event protobufs.
std::string encode_file_version_event(double wall_time);  // file_version "brain.Event:2"
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

// Appends scalar events to one event file. The first record is the
// file_version event TensorBoard expects. Throws std::runtime_error when the
// file cannot be created or written.
class EventWriter {
 public:
  // Creates `dir/events.out.tfevents.<unix seconds>.<hostname>` (the name
  // TensorBoard looks for); `dir` must exist.
  explicit EventWriter(const std::string& dir);

  // Writes to exactly `path` (truncating it), e.g. a temporary file that is
  // renamed into place afterwards.
  static EventWriter to_path(const std::string& path, double wall_time = unix_time_now());

  EventWriter(EventWriter&&) = default;
  EventWriter& operator=(EventWriter&&) = default;
  ~EventWriter();

  // TensorBoard stores simple_value as float32; `value` is rounded to it.
  void scalar(const std::string& tag, int64_t step, double value, double wall_time = unix_time_now());
  void flush();
  // Flushes and closes; further writes throw.
  void close();

  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, double wall_time);
  void write_record(std::string_view data);

  std::string path_;
  std::ofstream out_;
};

// `events.out.tfevents.<seconds>.<hostname>` for the given time.
std::string event_file_name(double wall_time);

// Converts `run_dir/metrics.jsonl` (and `run_dir/eval.jsonl`, where a
// distributed run puts its evaluations) into one event file in run_dir with
// the scalars
//   train/loss, train/learning_rate, train/examples_per_sec,
//   comm/bytes_sent_per_worker (per step), comm/bytes_sent_per_worker_cumulative,
//   eval/top1, eval/top5, eval/ema_top1, eval/ema_top5
// (each only where the lines carry the field). The file is named
// `events.out.tfevents.<seconds>.<hostname>.tg-metrics`; a file with that
// suffix from an earlier call is replaced atomically (written to a temporary
// file, then renamed over it), so re-running the conversion never leaves two
// copies of the curves for TensorBoard to show. Every event carries the
// modification time of metrics.jsonl as its wall_time (the lines have no
// timestamps). Returns the number of scalars written. Throws
// std::runtime_error naming the file and line for a malformed line, and when
// neither input file exists.
int write_events_from_metrics(const std::string& run_dir);

}  // namespace terngrad::experiments
