// StreamingLoader on small generated image folders: batches are the same
// bits for any thread count and prefetch depth and equal to synchronous
// load_batch, corrupt files and bad labels are errors naming the file at the
// batch that holds them, skip mode replaces deterministically and counts,
// and the loader shuts down promptly while producing or stalled.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "image_folder_util.h"
#include "terngrad/train/image_folder.h"
#include "terngrad/train/streaming_loader.h"
#include "test_util.h"

namespace tt = terngrad::train;

namespace {

constexpr int64_t kBatch = 4;

uint64_t seed_of(int64_t k) { return 1000003ull * static_cast<uint64_t>(k) + 17; }

struct Folder {
  tg_test::TempDir dir;
  std::shared_ptr<tt::ImageFolderSource> src;
  explicit Folder(int per_class = 6) {
    tg_test::make_image_folder(dir / "train", {"cat", "dog", "eel"}, per_class, 40, 50);
    src = std::make_shared<tt::ImageFolderSource>(dir / "train");
  }
};

tt::StreamOptions options(int threads, int64_t prefetch, tt::ImageStyle style = tt::ImageStyle::kAlexNet) {
  tt::StreamOptions o;
  o.preprocess = {style, true};
  o.batch_size = kBatch;
  o.threads = threads;
  o.prefetch = prefetch;
  o.num_classes = 3;
  return o;
}

// Batches [first, first + n) the synchronous way.
std::vector<std::pair<tt::Tensor, std::vector<int32_t>>> sync_batches(const tt::ExampleSource& src,
                                                                     const tt::StreamOptions& o, int64_t first,
                                                                     int64_t n, int64_t* skipped = nullptr) {
  tt::ShardedSampler sampler(src.size(), 2, 1, 99);
  sampler.restore_after(first * o.batch_size);
  std::vector<std::pair<tt::Tensor, std::vector<int32_t>>> out(static_cast<size_t>(n));
  std::vector<int64_t> idx;
  for (int64_t k = 0; k < n; ++k) {
    sampler.next_batch(o.batch_size, idx);
    tt::load_batch(src, idx, o, seed_of(first + k), out[k].first, out[k].second, skipped);
  }
  return out;
}

std::unique_ptr<tt::StreamingLoader> loader(std::shared_ptr<const tt::ExampleSource> src, const tt::StreamOptions& o,
                                            int64_t first = 0) {
  tt::ShardedSampler sampler(src->size(), 2, 1, 99);  // worker 1 of 2
  sampler.restore_after(first * o.batch_size);
  return std::make_unique<tt::StreamingLoader>(std::move(src), sampler, o, first, seed_of);
}

TEST(StreamingLoader, SameBitsForAnyThreadCountAndPrefetchAsSynchronous) {
  Folder f;
  for (tt::ImageStyle style : {tt::ImageStyle::kAlexNet, tt::ImageStyle::kInception}) {
    const auto want = sync_batches(*f.src, options(1, 1, style), 3, 5);  // starts mid-run: a resumed worker
    for (const auto& [threads, prefetch] : {std::pair<int, int64_t>{1, 1}, {2, 1}, {2, 3}, {3, 2}}) {
      auto l = loader(f.src, options(threads, prefetch, style), 3);
      EXPECT_EQ(l->threads(), threads);
      tt::Tensor x;
      std::vector<int32_t> labels;
      for (size_t k = 0; k < want.size(); ++k) {
        l->next(x, labels);
        ASSERT_EQ(x.shape, (tt::Shape{kBatch, 224, 224, 3}));
        ASSERT_EQ(labels, want[k].second) << "batch " << k << " threads " << threads;
        ASSERT_TRUE(x.data == want[k].first.data) << "batch " << k << " threads " << threads << " prefetch " << prefetch;
      }
      const auto st = l->stats();
      EXPECT_EQ(st.batches, 5);
      EXPECT_EQ(st.images, 5 * kBatch);
      EXPECT_EQ(st.skipped, 0);
      EXPECT_GT(st.busy_s, 0.0);
    }
  }
}

TEST(StreamingLoader, LabelsAreTheFolderClasses) {
  Folder f;
  tt::ShardedSampler sampler(f.src->size(), 1, 0, 5);
  std::vector<int64_t> idx;
  sampler.next_batch(9, idx);
  tt::Tensor x;
  std::vector<int32_t> labels;
  tt::load_batch(*f.src, idx, options(1, 1), 7, x, labels);
  for (size_t b = 0; b < idx.size(); ++b) EXPECT_EQ(labels[b], idx[b] / 6);  // 6 files per class, sorted
}

TEST(StreamingLoader, TruncatedJpegIsAnErrorNamingTheFileAtItsBatch) {
  Folder f;
  // Truncate one JPEG after the folder was indexed (the signature survives).
  int64_t bad = -1;
  for (int64_t i = 0; i < f.src->size() && bad < 0; ++i)
    if (f.src->read(i).format == tt::ImageFormat::kJpeg && i % 2 == 1) bad = i;  // worker 1's shard: odd indices
  ASSERT_GE(bad, 0);
  const std::string path = f.src->path(bad);
  std::vector<uint8_t> bytes = tg_test::read_bytes(path);
  bytes.resize(bytes.size() / 3);
  tg_test::write_file(path, bytes);
  // Which batch holds it.
  tt::ShardedSampler sampler(f.src->size(), 2, 1, 99);
  std::vector<int64_t> idx;
  int64_t bad_batch = -1;
  for (int64_t k = 0; bad_batch < 0; ++k) {
    sampler.next_batch(kBatch, idx);
    if (std::find(idx.begin(), idx.end(), bad) != idx.end()) bad_batch = k;
  }
  auto l = loader(f.src, options(2, 3));
  tt::Tensor x;
  std::vector<int32_t> labels;
  for (int64_t k = 0; k < bad_batch; ++k) ASSERT_NO_THROW(l->next(x, labels)) << k;
  const std::string msg = tg_test::error_of<tt::DataError>([&] { l->next(x, labels); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "example " + std::to_string(bad));
  EXPECT_NO_THROW(l->next(x, labels));  // goes on with the next batch

  // Skip mode: the same error is counted and the example replaced, identically with any threads.
  tt::StreamOptions skip = options(1, 1);
  skip.skip_corrupt = true;
  int64_t sync_skipped = 0;
  const auto want = sync_batches(*f.src, skip, 0, bad_batch + 2, &sync_skipped);
  EXPECT_EQ(sync_skipped, 1);
  skip.threads = 2;
  skip.prefetch = 2;
  auto s = loader(f.src, skip);
  for (size_t k = 0; k < want.size(); ++k) {
    s->next(x, labels);
    ASSERT_TRUE(x.data == want[k].first.data) << k;
    ASSERT_EQ(labels, want[k].second) << k;
  }
  EXPECT_EQ(s->stats().skipped, 1);
}

TEST(StreamingLoader, LabelOutsideTheClassesNamesFileAndLabel) {
  Folder f;
  tt::StreamOptions o = options(2, 2);
  o.num_classes = 2;  // the folder has 3
  o.skip_corrupt = true;  // not a corrupt record: never skipped
  tt::Tensor x;
  std::vector<int32_t> labels;
  std::string msg;
  {
    auto l = loader(f.src, o);
    for (int k = 0; k < 8 && msg.empty(); ++k) {
      try {
        l->next(x, labels);
      } catch (const tt::DataError& e) {
        msg = e.what();
      }
    }
  }
  EXPECT_CONTAINS(msg, "eel/");
  EXPECT_CONTAINS(msg, "label 2 is outside [0, 2)");
  EXPECT_CONTAINS(msg, "example ");
}

TEST(StreamingLoader, ShutsDownPromptlyWhileProducing) {
  Folder f(20);
  using Clock = std::chrono::steady_clock;
  for (int consumed : {0, 1, 3}) {
    const auto t0 = Clock::now();
    {
      auto l = loader(f.src, options(2, 6));
      tt::Tensor x;
      std::vector<int32_t> labels;
      for (int k = 0; k < consumed; ++k) l->next(x, labels);
    }  // destroyed with batches in flight
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0);
  }
}

// A source whose reads hang (a stuck network file system).
class StuckSource : public tt::ExampleSource {
 public:
  explicit StuckSource(std::shared_ptr<const tt::ExampleSource> inner, int delay_ms = 600)
      : inner_(std::move(inner)), delay_ms_(delay_ms) {}
  int64_t size() const override { return inner_->size(); }
  tt::EncodedExample read(int64_t i) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    return inner_->read(i);
  }
  int64_t num_shards() const override { return inner_->num_shards(); }
  int32_t shard_of(int64_t i) const override { return inner_->shard_of(i); }
  std::string describe() const override { return "stuck " + inner_->describe(); }

 private:
  std::shared_ptr<const tt::ExampleSource> inner_;
  int delay_ms_;
};

// Reads that wait (a network file system's latency, not CPU) overlap across
// the threads: the examples really are loaded in parallel.
TEST(StreamingLoader, ThreadsOverlapSlowReads) {
  Folder f;
  auto slow = std::make_shared<StuckSource>(f.src, 40);
  using Clock = std::chrono::steady_clock;
  double secs[2];
  for (int t : {0, 1}) {
    const auto t0 = Clock::now();
    auto l = loader(slow, options(t == 0 ? 1 : 4, 2));
    tt::Tensor x;
    std::vector<int32_t> labels;
    for (int k = 0; k < 3; ++k) l->next(x, labels);  // 12 reads: >= 480 ms in one thread
    secs[t] = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  EXPECT_GT(secs[0] / secs[1], 1.8) << "1 thread " << secs[0] << " s, 4 threads " << secs[1] << " s";
}

TEST(StreamingLoader, AStalledInputIsAnErrorNotAHang) {
  Folder f;
  tt::StreamOptions o = options(1, 1);
  o.stall_timeout_s = 0.2;
  auto l = loader(std::make_shared<StuckSource>(f.src), o);
  tt::Tensor x;
  std::vector<int32_t> labels;
  const std::string msg = tg_test::error_of<std::runtime_error>([&] { l->next(x, labels); });
  EXPECT_CONTAINS(msg, "input stalled");
  EXPECT_CONTAINS(msg, "stuck image folder");
}

TEST(StreamingLoader, RefusesBadOptions) {
  Folder f;
  tt::StreamOptions o = options(1, 0);
  EXPECT_THROW(loader(f.src, o), std::invalid_argument);
  o = options(1, 1);
  o.num_classes = 0;
  EXPECT_THROW(loader(f.src, o), std::invalid_argument);
}

}  // namespace
