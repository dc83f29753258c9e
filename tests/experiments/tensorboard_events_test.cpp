// TensorBoard event files: CRC-32C vectors, and files read back by a reader
// written here from the TFRecord / protobuf specs (a bitwise CRC, a generic
// protobuf field walker), independent of the writer's code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "terngrad/train/crc32c.h"
#include "tensorboard_events.h"

namespace te = terngrad::experiments;
namespace tt = terngrad::train;
namespace fs = std::filesystem;

namespace {

// Bit-at-a-time CRC-32C, the definition rather than the table.
uint32_t reference_crc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t reference_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

uint64_t read_le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s.at(pos + i))) << (8 * i);
  return v;
}

// One protobuf field: number, wire type, and its payload (varint / fixed bits
// or length-delimited bytes).
struct Field {
  uint32_t number;
  uint32_t wire_type;
  uint64_t bits = 0;
  std::string bytes;
};

uint64_t read_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(pos++));
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
  throw std::runtime_error("varint too long");
}

std::vector<Field> parse_message(const std::string& s) {
  std::vector<Field> fields;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = read_varint(s, pos);
    Field f{static_cast<uint32_t>(key >> 3), static_cast<uint32_t>(key & 7)};
    switch (f.wire_type) {
      case 0: f.bits = read_varint(s, pos); break;
      case 1: f.bits = read_le(s, pos, 8); pos += 8; break;
      case 5: f.bits = read_le(s, pos, 4); pos += 4; break;
      case 2: {
        const uint64_t n = read_varint(s, pos);
        f.bytes = s.substr(pos, n);
        if (f.bytes.size() != n) throw std::runtime_error("truncated field");
        pos += n;
        break;
      }
      default: throw std::runtime_error("unexpected wire type");
    }
    fields.push_back(f);
  }
  return fields;
}

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

DecodedEvent decode_event(const std::string& data) {
  DecodedEvent e;
  for (const Field& f : parse_message(data)) {
    if (f.number == 1 && f.wire_type == 1) std::memcpy(&e.wall_time, &f.bits, 8);
    else if (f.number == 2 && f.wire_type == 0) e.step = static_cast<int64_t>(f.bits);
    else if (f.number == 3 && f.wire_type == 2) e.file_version = f.bytes;
    else if (f.number == 5 && f.wire_type == 2) {
      for (const Field& v : parse_message(f.bytes)) {
        EXPECT_EQ(v.number, 1u);
        std::string tag;
        float value = 0;
        for (const Field& vf : parse_message(v.bytes)) {
          if (vf.number == 1 && vf.wire_type == 2) tag = vf.bytes;
          if (vf.number == 2 && vf.wire_type == 5) {
            const auto bits = static_cast<uint32_t>(vf.bits);
            std::memcpy(&value, &bits, 4);
          }
        }
        e.values.emplace_back(tag, value);
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.number;
    }
  }
  return e;
}

// Parses the TFRecord framing of a whole file, checking both CRCs of every record.
std::vector<DecodedEvent> read_event_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<DecodedEvent> events;
  size_t pos = 0;
  while (pos < s.size()) {
    if (s.size() - pos < 12) throw std::runtime_error("truncated record header");
    const uint64_t len = read_le(s, pos, 8);
    EXPECT_EQ(read_le(s, pos + 8, 4), reference_mask(reference_crc32c(s.substr(pos, 8)))) << "length CRC";
    if (s.size() - pos - 12 < len + 4) throw std::runtime_error("truncated record");
    const std::string data = s.substr(pos + 12, len);
    EXPECT_EQ(read_le(s, pos + 12 + len, 4), reference_mask(reference_crc32c(data))) << "data CRC";
    events.push_back(decode_event(data));
    pos += 12 + len + 4;
  }
  return events;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("tg_tb_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path());
  return out;
}

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// tag -> step -> value over all scalar events.
std::map<std::string, std::map<int64_t, float>> scalars_by_tag(const std::vector<DecodedEvent>& events) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const auto& e : events)
    for (const auto& [tag, v] : e.values) {
      EXPECT_EQ(out[tag].count(e.step), 0u) << tag << " step " << e.step << " twice";
      out[tag][e.step] = v;
    }
  return out;
}

}  // namespace

TEST(TensorBoardCrc32c, KnownVectors) {
  EXPECT_EQ(tt::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(tt::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xFF');
  EXPECT_EQ(tt::crc32c(ones.data(), ones.size()), 0x62A8AB43u);  // RFC 3720 B.4
  EXPECT_EQ(tt::crc32c("", 0), 0u);
}

TEST(TensorBoardCrc32c, MatchesBitwiseDefinition) {
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  for (size_t n : {1u, 3u, 64u, 1000u})
    EXPECT_EQ(tt::crc32c(bytes.data(), n), reference_crc32c(bytes.substr(0, n))) << n;
  EXPECT_EQ(tt::mask_crc32c(0xE3069283u), reference_mask(0xE3069283u));
}

TEST(TensorBoardEventWriter, WritesFileVersionThenScalars) {
  TempDir dir;
  std::string path;
  {
    te::EventWriter w(dir.path().string());
    path = w.path();
    w.scalar("train/loss", 10, 1.5, 1000.25);
    w.scalar("train/loss", 20, 0.75, 1001.5);
    w.scalar("eval/top1", 20, 0.9135, 1002.0);
    w.scalar("neg", -3, -2.0, 1003.0);  // int64 step as a 10-byte varint
    w.flush();
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(name.substr(name.size() - std::strlen(host)), host);

  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.5e9);
  EXPECT_TRUE(events[0].values.empty());
  EXPECT_EQ(events[1].step, 10);
  EXPECT_EQ(events[1].wall_time, 1000.25);
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].first, "train/loss");
  EXPECT_EQ(events[1].values[0].second, 1.5f);
  EXPECT_EQ(events[2].values[0].second, 0.75f);
  EXPECT_EQ(events[3].values[0].first, "eval/top1");
  EXPECT_EQ(events[3].values[0].second, 0.9135f);
  EXPECT_EQ(events[4].step, -3);
  EXPECT_EQ(events[4].values[0].second, -2.0f);
}

TEST(TensorBoardEventWriter, LongTagUsesMultiByteLength) {
  TempDir dir;
  const std::string tag(300, 'x');  // lengths >= 128 need a 2-byte varint
  std::string path;
  {
    te::EventWriter w = te::EventWriter::to_path((dir.path() / "events.out.tfevents.1.test").string(), 5.0);
    w.scalar(tag, 1u << 20, 42.0, 6.0);
    path = w.path();
    w.close();
  }
  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].wall_time, 5.0);
  EXPECT_EQ(events[1].step, 1 << 20);
  EXPECT_EQ(events[1].values.at(0).first, tag);
  EXPECT_EQ(events[1].values.at(0).second, 42.0f);
}

TEST(TensorBoardMetricsToEvents, ConvertsTrainAndEvalLines) {
  TempDir dir;
  write_file(dir.path() / "metrics.jsonl",
             R"({"event":"train","step":10,"loss":1.87,"learning_rate":0.01,"examples_per_sec":2387.85,"bytes_sent_per_worker":1000,"bytes_recv_per_worker":3000})"
             "\n"
             R"({"event":"train","step":20,"loss":1.5,"learning_rate":0.009,"examples_per_sec":2400,"bytes_sent_per_worker":2000})"
             "\n\n"
             R"({"event":"eval","step":20,"top1":0.8877,"top5":0.9972,"examples":10000,"ema_top1":0.897,"ema_top5":0.9979})"
             "\n"
             R"({"event":"something_else","step":20})"
             "\n");
  // A distributed run's evaluator: one more evaluation, without EMA fields.
  write_file(dir.path() / "eval.jsonl", R"({"event":"eval","step":30,"top1":0.9,"top5":0.998,"examples":10000})" "\n");

  EXPECT_EQ(te::write_events_from_metrics(dir.path().string()), 2 * 5 + 4 + 2);
  const auto files = event_files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  const auto events = read_event_file(files[0]);
  EXPECT_EQ(events.at(0).file_version, "brain.Event:2");
  auto s = scalars_by_tag(events);
  EXPECT_EQ(s.size(), 9u);
  EXPECT_EQ(s["train/loss"], (std::map<int64_t, float>{{10, 1.87f}, {20, 1.5f}}));
  EXPECT_EQ(s["train/learning_rate"], (std::map<int64_t, float>{{10, 0.01f}, {20, 0.009f}}));
  EXPECT_EQ(s["train/examples_per_sec"][20], 2400.0f);
  EXPECT_EQ(s["comm/bytes_sent_per_worker"], (std::map<int64_t, float>{{10, 1000.0f}, {20, 2000.0f}}));
  // 1000 bytes for steps 1..10, then 2000 for steps 11..20.
  EXPECT_EQ(s["comm/bytes_sent_per_worker_cumulative"], (std::map<int64_t, float>{{10, 10000.0f}, {20, 30000.0f}}));
  EXPECT_EQ(s["eval/top1"], (std::map<int64_t, float>{{20, 0.8877f}, {30, 0.9f}}));
  EXPECT_EQ(s["eval/top5"], (std::map<int64_t, float>{{20, 0.9972f}, {30, 0.998f}}));
  EXPECT_EQ(s["eval/ema_top1"], (std::map<int64_t, float>{{20, 0.897f}}));
  EXPECT_EQ(s["eval/ema_top5"], (std::map<int64_t, float>{{20, 0.9979f}}));
  // Events are in step order.
  for (size_t i = 2; i < events.size(); ++i) EXPECT_LE(events[i - 1].step, events[i].step);
}

TEST(TensorBoardMetricsToEvents, RerunReplacesItsOwnFileOnly) {
  TempDir dir;
  write_file(dir.path() / "metrics.jsonl", R"({"event":"train","step":10,"loss":2.0})" "\n");
  // An event file written by something else stays untouched.
  write_file(dir.path() / "events.out.tfevents.1.other", "");
  te::write_events_from_metrics(dir.path().string());
  auto before = event_files(dir.path());
  ASSERT_EQ(before.size(), 2u);

  write_file(dir.path() / "metrics.jsonl",
             R"({"event":"train","step":10,"loss":2.0})" "\n" R"({"event":"train","step":20,"loss":1.0})" "\n");
  EXPECT_EQ(te::write_events_from_metrics(dir.path().string()), 2);
  auto after = event_files(dir.path());
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(before, after);
  for (const auto& f : after) {
    if (f.filename() == "events.out.tfevents.1.other") {
      EXPECT_EQ(fs::file_size(f), 0u);
    } else {
      EXPECT_EQ(scalars_by_tag(read_event_file(f))["train/loss"], (std::map<int64_t, float>{{10, 2.0f}, {20, 1.0f}}));
    }
  }
  // No temporary file is left behind.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 3u);
}

TEST(TensorBoardMetricsToEvents, MalformedLineNamesFileAndLine) {
  TempDir dir;
  write_file(dir.path() / "metrics.jsonl",
             R"({"event":"train","step":10,"loss":2.0})" "\n" R"({"event":"train","step":20,"loss":)" "\n");
  try {
    te::write_events_from_metrics(dir.path().string());
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("metrics.jsonl:2:"), std::string::npos) << msg;
  }
  EXPECT_TRUE(event_files(dir.path()).empty());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(TensorBoardMetricsToEvents, WrongFieldTypeAndMissingStep) {
  TempDir dir;
  write_file(dir.path() / "eval.jsonl", R"({"event":"eval","step":5,"top1":"high"})" "\n");
  EXPECT_THROW(
      {
        try {
          te::write_events_from_metrics(dir.path().string());
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("eval.jsonl:1: \"top1\" is not a number"), std::string::npos) << e.what();
          throw;
        }
      },
      std::runtime_error);
  write_file(dir.path() / "eval.jsonl", R"({"event":"eval","top1":0.5})" "\n");
  EXPECT_THROW(te::write_events_from_metrics(dir.path().string()), std::runtime_error);
}

TEST(TensorBoardMetricsToEvents, MissingInputs) {
  TempDir dir;
  EXPECT_THROW(te::write_events_from_metrics(dir.path().string()), std::runtime_error);
}
