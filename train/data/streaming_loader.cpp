// Prefetching, multi-threaded batch streaming (streaming_loader.h).
#include "terngrad/train/streaming_loader.h"

#include <algorithm>
#include <stdexcept>

#include "counter_rng.h"

namespace terngrad::train {

namespace {

constexpr int kMaxReplacements = 16;
constexpr int64_t kExampleFloats = kImageNetSide * kImageNetSide * 3;

// Decodes and preprocesses e; DataError (naming e.where) when it cannot.
void decode_into(const EncodedExample& e, const StreamOptions& opts, uint64_t seed, float* out) {
  const Image img = decode_example(e, 3);
  try {
    preprocess_image(img, opts.preprocess, seed, out);
  } catch (const std::exception& err) {
    throw DataError(e.where + ": " + err.what());
  }
}

void check_label(const EncodedExample& e, const StreamOptions& opts) {
  if (e.label < 0 || e.label >= opts.num_classes)
    throw DataError(e.where + ": label " + std::to_string(e.label) + " is outside [0, " +
                    std::to_string(opts.num_classes) + ")");
}

}  // namespace

uint64_t example_seed(uint64_t batch_seed, int64_t b) { return detail::derive_seed(batch_seed, static_cast<uint64_t>(b)); }

int64_t load_example(const ExampleSource& src, int64_t index, const StreamOptions& opts, uint64_t seed, float* out,
                     int32_t& label) {
  // The example itself, then (skip mode) replacements until one decodes.
  detail::CounterRng pick(detail::derive_seed(seed, 0x5EB1ACEull));
  const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(src.size(), 1));  // below(0) would divide by zero
  int64_t i = index;
  std::string first_failure;
  // Called while a DataError is being handled: rethrows it unless skipping,
  // else moves i to a replacement (or gives up after kMaxReplacements).
  auto replace_or_rethrow = [&](const DataError& err, int attempt) {
    if (!opts.skip_corrupt) throw;
    if (attempt == 0) first_failure = err.what();
    if (attempt == kMaxReplacements)
      throw DataError(first_failure + "; and " + std::to_string(kMaxReplacements) +
                      " replacements failed too, the last: " + err.what());
    i = static_cast<int64_t>(pick.below(n));
  };
  for (int attempt = 0;; ++attempt) {
    EncodedExample e;
    try {
      e = src.read(i);
    } catch (const DataError& err) {
      replace_or_rethrow(err, attempt);
      continue;
    }
    check_label(e, opts);  // never skipped (see the header)
    try {
      decode_into(e, opts, seed, out);
      label = e.label;
      return attempt;
    } catch (const DataError& err) {
      replace_or_rethrow(err, attempt);
    }
  }
}

void load_batch(const ExampleSource& src, const std::vector<int64_t>& indices, const StreamOptions& opts,
                uint64_t batch_seed, Tensor& x, std::vector<int32_t>& labels, int64_t* skipped) {
  const int64_t n = static_cast<int64_t>(indices.size());
  // Not Tensor::resize: that calls numel() from the layers library.
  x.shape = {n, kImageNetSide, kImageNetSide, 3};
  x.data.resize(static_cast<size_t>(n * kExampleFloats));
  labels.resize(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) {
    const int64_t s = load_example(src, indices[b], opts, example_seed(batch_seed, b),
                                   x.data.data() + b * kExampleFloats, labels[b]);
    if (skipped) *skipped += s;
  }
}

StreamingLoader::StreamingLoader(std::shared_ptr<const ExampleSource> source, ShardedSampler sampler,
                                 StreamOptions opts, int64_t first_batch, SeedFn seed_of)
    : source_(std::move(source)),
      sampler_(std::move(sampler)),
      opts_(opts),
      seed_of_(std::move(seed_of)),
      next_batch_(first_batch),
      planned_(first_batch),
      start_(std::chrono::steady_clock::now()) {
  if (!source_) throw std::invalid_argument("StreamingLoader: no source");
  if (opts_.batch_size < 1) throw std::invalid_argument("StreamingLoader: batch_size " + std::to_string(opts_.batch_size) + " < 1");
  if (opts_.prefetch < 1) throw std::invalid_argument("StreamingLoader: prefetch " + std::to_string(opts_.prefetch) + " < 1");
  if (opts_.num_classes < 1) throw std::invalid_argument("StreamingLoader: num_classes " + std::to_string(opts_.num_classes) + " < 1");
  int n = opts_.threads > 0 ? opts_.threads : static_cast<int>(std::thread::hardware_concurrency());
  n = std::max(n, 1);
  {
    std::lock_guard<std::mutex> lock(m_);
    plan_locked();
  }
  try {
    for (int t = 0; t < n; ++t) threads_.emplace_back([this] { work(); });
  } catch (...) {  // could not start them all: stop those that did
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

StreamingLoader::~StreamingLoader() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

// Tops the queue up to `prefetch` batches: indices from the sampler in
// order (so batch k is the same whoever computes it), buffers from the pool.
void StreamingLoader::plan_locked() {
  while (static_cast<int64_t>(queue_.size()) < opts_.prefetch) {
    auto s = std::make_unique<Slot>();
    s->number = planned_++;
    s->seed = seed_of_(s->number);
    sampler_.next_batch(opts_.batch_size, s->indices);
    if (!pool_.empty()) {
      s->x = std::move(pool_.back());
      pool_.pop_back();
    }
    s->x.shape = {opts_.batch_size, kImageNetSide, kImageNetSide, 3};
    s->x.data.resize(static_cast<size_t>(opts_.batch_size * kExampleFloats));
    s->labels.assign(static_cast<size_t>(opts_.batch_size), -1);
    queue_.push_back(std::move(s));
  }
}

void StreamingLoader::work() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lock(m_);
  for (;;) {
    Slot* slot = nullptr;
    work_cv_.wait(lock, [&] {
      if (stop_) return true;
      for (const auto& s : queue_)
        if (s->claimed < opts_.batch_size) {
          slot = s.get();
          return true;
        }
      return false;
    });
    if (stop_) return;
    const int64_t b = slot->claimed++;
    const int64_t index = slot->indices[static_cast<size_t>(b)];
    const uint64_t seed = example_seed(slot->seed, b);
    float* out = slot->x.data.data() + b * kExampleFloats;
    lock.unlock();
    // The slot stays in the queue until done == batch_size, so it outlives
    // this unlocked stretch; nothing may escape the thread.
    const auto t0 = Clock::now();
    int32_t label = -1;
    int64_t skipped = 0;
    std::exception_ptr error;
    try {
      skipped = load_example(*source_, index, opts_, seed, out, label);
    } catch (...) {
      error = std::current_exception();
    }
    const double busy = std::chrono::duration<double>(Clock::now() - t0).count();
    lock.lock();
    stats_.busy_s += busy;
    slot->labels[static_cast<size_t>(b)] = label;
    slot->skipped += skipped;
    if (error && (slot->error_at < 0 || b < slot->error_at)) {
      slot->error_at = b;
      slot->error = error;
    }
    ++slot->done;
    ready_cv_.notify_all();  // per example: next()'s stall timer counts progress, not whole batches
  }
}

void StreamingLoader::next(Tensor& x, std::vector<int32_t>& labels) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(m_);
  Slot* front = queue_.front().get();
  // Bounded wait: gives up when no example of this batch finishes for
  // stall_timeout_s (a hung network file system, not a slow decoder).
  while (front->done < opts_.batch_size) {
    const int64_t seen = front->done;
    if (!ready_cv_.wait_for(lock, std::chrono::duration<double>(opts_.stall_timeout_s),
                            [&] { return front->done != seen; }))
      throw std::runtime_error("input stalled: no example of batch " + std::to_string(front->number) + " (" +
                               std::to_string(front->done) + " of " + std::to_string(opts_.batch_size) +
                               " done) finished in " + std::to_string(opts_.stall_timeout_s) + " s, reading " +
                               source_->describe());
  }
  std::unique_ptr<Slot> s = std::move(queue_.front());
  queue_.pop_front();
  ++next_batch_;
  stats_.wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.skipped += s->skipped;
  std::swap(x, s->x);
  std::swap(labels, s->labels);
  pool_.push_back(std::move(s->x));
  if (!s->error) {
    ++stats_.batches;
    stats_.images += opts_.batch_size;
  }
  plan_locked();
  lock.unlock();
  work_cv_.notify_all();
  if (s->error) std::rethrow_exception(s->error);
}

StreamingLoader::Stats StreamingLoader::stats() const {
  std::lock_guard<std::mutex> lock(m_);
  Stats s = stats_;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.threads = static_cast<int>(threads_.size());
  return s;
}

}  // namespace terngrad::train
