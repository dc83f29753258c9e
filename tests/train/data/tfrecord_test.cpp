// TFRecord framing (tfrecord.h): CRC-32C known answers, the writer/reader
// round trip, every framing fault as a DataError naming file, record and
// offset, skip mode, and sharded file sets (missing and inconsistent shards).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "terngrad/train/crc32c.h"
#include "terngrad/train/tfrecord.h"
#include "test_util.h"

namespace tt = terngrad::train;
using tg_test::error_of;
using tg_test::TempDir;

namespace {

std::string record_of(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) & 0xFF);
  return s;
}

// A file of records written with our writer.
void write_records(const std::string& path, const std::vector<std::string>& records) {
  tt::TfRecordWriter w(path);
  for (const auto& r : records) w.write(r);
  w.commit();
}

std::string bytes_of(const std::string& path) { return tg_test::read_text(path); }
void put_bytes(const std::string& path, const std::string& s) {
  tg_test::write_bytes(path, std::vector<uint8_t>(s.begin(), s.end()));
}

// The records in a file, via the reader.
std::vector<std::string> read_all(const std::string& path, bool skip = false) {
  tt::TfRecordFile f(path, skip);
  std::vector<std::string> out;
  for (int64_t i = 0; i < f.size(); ++i) out.push_back(f.read(i));
  return out;
}

}  // namespace

TEST(Crc32c, KnownAnswers) {
  // The check value of the CRC catalogue and RFC 3720 (iSCSI) B.4's vectors.
  EXPECT_EQ(tt::crc32c("123456789", 9), 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  std::vector<uint8_t> up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<uint8_t>(i), down[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(tt::crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(tt::crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(tt::crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(tt::crc32c(down.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(tt::crc32c("", 0), 0u);
  // TFRecord's mask: rotate right 15, add 0xa282ead8.
  EXPECT_EQ(tt::mask_crc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u);
}

TEST(Crc32c, SlicedEqualsBitwiseAtEveryLengthAndAlignment) {
  auto bitwise = [](const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int b = 0; b < 8; ++b) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
  };
  std::vector<uint8_t> buf(300);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (size_t off = 0; off < 8; ++off)
    for (size_t n = 0; n + off <= buf.size(); n += 7) EXPECT_EQ(tt::crc32c(buf.data() + off, n), bitwise(buf.data() + off, n));
}

TEST(TfRecord, RoundTripsRecordsOfAnySize) {
  TempDir dir;
  const std::vector<std::string> recs = {"", "x", record_of(1000, 1), record_of(70000, 2), ""};
  write_records(dir / "a.tfrecord", recs);
  std::string expect;
  for (const auto& r : recs) expect += tt::frame_tfrecord(r);
  EXPECT_EQ(bytes_of(dir / "a.tfrecord"), expect);
  EXPECT_EQ(read_all(dir / "a.tfrecord"), recs);
  tt::TfRecordFile f(dir / "a.tfrecord", false);
  EXPECT_EQ(f.span(2).offset, 12u + 4u + 12u + 1u + 4u);
  EXPECT_EQ(f.span(3).length, 70000u);
  EXPECT_EQ(f.damaged_regions(), 0);
}

TEST(TfRecord, WriterIsAtomic) {
  TempDir dir;
  {
    tt::TfRecordWriter w(dir / "a.tfrecord");
    w.write("abc");
  }  // not committed
  EXPECT_TRUE(tg_test::list_dir(dir.path()).empty());
}

TEST(TfRecord, ReadsFromManyThreadsAtOnce) {
  TempDir dir;
  std::vector<std::string> recs;
  for (int i = 0; i < 64; ++i) recs.push_back(record_of(100 + i * 37, i));
  write_records(dir / "a.tfrecord", recs);
  const tt::TfRecordFile f(dir / "a.tfrecord", false);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (int i = t; i < 64; i += 2)
          if (f.read(i) != recs[i]) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// ---- Faults ---------------------------------------------------------------

class TfRecordFault : public ::testing::Test {
 protected:
  // Three records of 10, 20, 30 bytes: offsets 0, 26, 62; file size 108.
  void SetUp() override {
    write_records(path, {record_of(10, 1), record_of(20, 2), record_of(30, 3)});
    good = bytes_of(path);
    ASSERT_EQ(good.size(), 108u);
  }
  std::string damaged(size_t at, char x) {
    std::string s = good;
    s[at] = static_cast<char>(s[at] ^ x);
    return s;
  }
  TempDir dir;
  std::string path = dir / "train-00000-of-00001";
  std::string good;
};

TEST_F(TfRecordFault, BadLengthCrcNamesFileRecordAndOffset) {
  put_bytes(path, damaged(26 + 9, 0x01));  // record 1's length CRC
  const std::string msg = error_of<tt::DataError>([&] { tt::TfRecordFile f(path, false); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "record 1 (offset 26)");
  EXPECT_CONTAINS(msg, "bad length CRC");
}

TEST_F(TfRecordFault, DamagedLengthIsCaughtByItsCrc) {
  put_bytes(path, damaged(26, 0x40));  // record 1's length byte
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::TfRecordFile f(path, false); }), "bad length CRC");
}

TEST_F(TfRecordFault, BadDataCrcIsFoundWhenTheRecordIsRead) {
  put_bytes(path, damaged(62 + 12 + 5, 0x10));  // a data byte of record 2
  tt::TfRecordFile f(path, false);  // headers are fine
  EXPECT_EQ(f.read(0), record_of(10, 1));
  const std::string msg = error_of<tt::DataError>([&] { f.read(2); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "record 2 (offset 62)");
  EXPECT_CONTAINS(msg, "bad data CRC");
  put_bytes(path, damaged(107, 0x01));  // the data CRC itself
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::TfRecordFile(path, false).read(2); }), "bad data CRC");
}

TEST_F(TfRecordFault, TruncationMidHeaderAndMidData) {
  put_bytes(path, good.substr(0, 62 + 7));  // record 2's header cut after 7 bytes
  std::string msg = error_of<tt::DataError>([&] { tt::TfRecordFile f(path, false); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "record 2 (offset 62)");
  EXPECT_CONTAINS(msg, "truncated header");
  put_bytes(path, good.substr(0, 62 + 12 + 15));  // record 2's data cut
  msg = error_of<tt::DataError>([&] { tt::TfRecordFile f(path, false); });
  EXPECT_CONTAINS(msg, "record 2 (offset 62)");
  EXPECT_CONTAINS(msg, "truncated data");
  put_bytes(path, good.substr(0, good.size() - 1));  // only the final CRC cut
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::TfRecordFile f(path, false); }), "truncated data");
}

TEST_F(TfRecordFault, OversizeLengthWithAValidCrcIsRefusedBeforeAllocating) {
  std::string s = good;
  std::string header;
  for (int i = 0; i < 8; ++i) header.push_back(static_cast<char>(i == 7 ? 0x7F : 0xFF));  // ~9.2e18 bytes
  const uint32_t crc = tt::mask_crc32c(tt::crc32c(header.data(), 8));
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>((crc >> (8 * i)) & 0xFF));
  s.replace(26, 12, header);
  put_bytes(path, s);
  const std::string msg = error_of<tt::DataError>([&] { tt::TfRecordFile f(path, false); });
  EXPECT_CONTAINS(msg, "record 1 (offset 26)");
  EXPECT_CONTAINS(msg, "claims 9223372036854775807 data bytes");
}

TEST_F(TfRecordFault, SkipModeStepsOverADamagedHeaderToTheNextValidRecord) {
  put_bytes(path, damaged(26 + 9, 0x01));  // record 1's length CRC
  tt::TfRecordFile f(path, true);
  ASSERT_EQ(f.size(), 2);
  EXPECT_EQ(f.damaged_regions(), 1);
  EXPECT_EQ(f.damaged_bytes(), 36u);  // record 1: 12 + 20 + 4 bytes
  EXPECT_CONTAINS(f.fault(), "record 1 (offset 26)");
  EXPECT_EQ(f.read(0), record_of(10, 1));
  EXPECT_EQ(f.read(1), record_of(30, 3));
  EXPECT_EQ(f.span(1).offset, 62u);
}

TEST_F(TfRecordFault, SkipModeGivesUpADamagedTail) {
  put_bytes(path, good.substr(0, 62 + 12 + 15));  // record 2 truncated
  tt::TfRecordFile f(path, true);
  EXPECT_EQ(f.size(), 2);
  EXPECT_EQ(f.damaged_regions(), 1);
  EXPECT_EQ(f.damaged_bytes(), 27u);
  EXPECT_CONTAINS(f.fault(), "truncated data");
}

TEST_F(TfRecordFault, SkipModeNeedsTheDataCrcTooToResynchronize) {
  // Record 1's length CRC and record 2's data both damaged: the only whole
  // valid record after the fault would be none, so the rest is one region.
  std::string s = damaged(26 + 9, 0x01);
  s[62 + 12 + 5] ^= 0x10;
  put_bytes(path, s);
  tt::TfRecordFile f(path, true);
  EXPECT_EQ(f.size(), 1);
  EXPECT_EQ(f.damaged_bytes(), 108u - 26u);
}

TEST(TfRecord, EmptyFileHasNoRecordsAndMissingFileIsNamed) {
  TempDir dir;
  put_bytes(dir / "empty", "");
  EXPECT_EQ(tt::TfRecordFile(dir / "empty", false).size(), 0);
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::TfRecordFile(dir / "nope", false); }), dir / "nope");
}

// Readers keep every shard open: past the soft limit of open files (1024 on
// many systems; ImageNet has 1152 shards) the reader raises it to the hard
// limit instead of failing. Here the soft limit is lowered to just above
// what is open now, then 40 files are opened.
TEST(TfRecord, MoreShardsThanTheSoftOpenFileLimitStillOpen) {
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  int open_now = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) (void)e, ++open_now;
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < static_cast<rlim_t>(open_now + 64))
    GTEST_SKIP() << "hard limit of open files " << saved.rlim_max << " leaves no room for the check";
  TempDir dir;
  put_bytes(dir / "one", "");
  struct rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(open_now + 8);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<tt::TfRecordFile> files;
  std::string error;
  try {
    for (int i = 0; i < 40; ++i) files.emplace_back(dir / "one", false);
  } catch (const std::exception& e) {
    error = e.what();
  }
  struct rlimit after {};
  ::getrlimit(RLIMIT_NOFILE, &after);
  files.clear();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_EQ(error, "");
  EXPECT_EQ(after.rlim_cur, saved.rlim_max);
}

// ---- Shard sets -------------------------------------------------------------

TEST(TfRecordShards, ParsesShardNames) {
  const tt::ShardName s = tt::parse_shard_name("train-00003-of-01024");
  EXPECT_EQ(s.prefix, "train");
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.count, 1024);
  EXPECT_EQ(tt::parse_shard_name("my-set-1-of-2").prefix, "my-set");
  EXPECT_EQ(tt::parse_shard_name("mnist_train.tfrecord").count, -1);
  EXPECT_EQ(tt::parse_shard_name("train-x-of-2").count, -1);
  EXPECT_EQ(tt::parse_shard_name("-of-2").count, -1);
}

TEST(TfRecordShards, GlobFindsAWholeSetInShardOrderAndIgnoresHiddenFiles) {
  TempDir dir;
  for (int k : {2, 0, 1}) put_bytes(dir / ("train-0000" + std::to_string(k) + "-of-00003"), "");
  put_bytes(dir / "validation-00000-of-00001", "");
  put_bytes(dir / ".train-00001-of-00003.tmp.1.2", "");  // a writer's temporary
  const auto files = tt::resolve_tfrecord_files(dir / "train-*-of-*");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], dir / "train-00000-of-00003");
  EXPECT_EQ(files[2], dir / "train-00002-of-00003");
  EXPECT_EQ(tt::resolve_tfrecord_files(dir / "train-00001-of-00003"),
            std::vector<std::string>{dir / "train-00001-of-00003"});  // one named shard alone
}

TEST(TfRecordShards, MissingShardIsNamed) {
  TempDir dir;
  for (int k : {0, 2, 4}) put_bytes(dir / ("train-0000" + std::to_string(k) + "-of-00005"), "");
  const std::string msg = error_of<tt::DataError>([&] { tt::resolve_tfrecord_files(dir / "train-*-of-*"); });
  EXPECT_CONTAINS(msg, "2 of 5 shards missing");
  EXPECT_CONTAINS(msg, "train-00001-of-00005");
  EXPECT_CONTAINS(msg, "train-00003-of-00005");
}

TEST(TfRecordShards, InconsistentCountsAndStraysAreErrors) {
  TempDir dir;
  put_bytes(dir / "train-00000-of-00002", "");
  put_bytes(dir / "train-00001-of-00003", "");
  std::string msg = error_of<tt::DataError>([&] { tt::resolve_tfrecord_files(dir / "train-*"); });
  EXPECT_CONTAINS(msg, "inconsistent shard sets");
  EXPECT_CONTAINS(msg, "train-00001-of-00003");
  tg_test::fs::remove(dir / "train-00001-of-00003");
  put_bytes(dir / "train-notes.txt", "");
  msg = error_of<tt::DataError>([&] { tt::resolve_tfrecord_files(dir / "train-*"); });
  EXPECT_CONTAINS(msg, "train-notes.txt");
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::resolve_tfrecord_files(dir / "validation-*-of-*"); }),
                  "no files match");
  put_bytes(dir / "t-00005-of-00002", "");
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::resolve_tfrecord_files(dir / "t-*-of-*"); }),
                  "is shard 5 of a set of 2");
}

TEST(TfRecordShards, PlainGlobsAndSingleFiles) {
  TempDir dir;
  put_bytes(dir / "b.tfrecord", "");
  put_bytes(dir / "a.tfrecord", "");
  EXPECT_EQ(tt::resolve_tfrecord_files(dir / "*.tfrecord"),
            (std::vector<std::string>{dir / "a.tfrecord", dir / "b.tfrecord"}));
  EXPECT_EQ(tt::resolve_tfrecord_files(dir / "a.tfrecord"), std::vector<std::string>{dir / "a.tfrecord"});
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::resolve_tfrecord_files(dir / "mnist_train.tfrecord"); }),
                  "mnist_train.tfrecord");
}
