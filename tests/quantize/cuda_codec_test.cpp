// The CUDA codec against the CPU codec as the reference: every payload byte,
// every statistic (bitwise, in float64), every decoded float and count must be
// identical, and every error must carry the CPU's error code and leave the
// caller's buffers untouched. Skips, with a message, without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cuda.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/fp16.h"
#include "terngrad/quantize/half_input.h"

namespace tq = terngrad::quantize;
namespace tc = terngrad::quantize::cuda;
using tq::CodecError;
using tq::Errc;

namespace {

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(err));
}
#define CUDA_OK(call) cuda_ok((call), #call)

// Raw device bytes with slack, so tests can place buffers at chosen misalignments.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : size_(bytes + kSlack) {
    void* p = nullptr;
    CUDA_OK(cudaMalloc(&p, size_));
    base_ = static_cast<uint8_t*>(p);
  }
  ~DeviceBytes() { cudaFree(base_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  // cudaMalloc returns 256-byte aligned memory: base + offset has exactly the offset's alignment.
  template <class T>
  T* at(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(base_ + byte_offset);
  }
  static constexpr size_t kSlack = 64;

 private:
  size_t size_;
  uint8_t* base_ = nullptr;
};

template <class T>
void upload(T* dst, const std::vector<T>& src, cudaStream_t s) {
  if (src.empty()) return;
  CUDA_OK(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaStreamSynchronize(s));
}

template <class T>
std::vector<T> download(const T* src, size_t count, cudaStream_t s) {
  std::vector<T> v(count);
  if (count == 0) return v;
  CUDA_OK(cudaMemcpyAsync(v.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  return v;
}

// Bitwise equality of two arrays, reporting the first difference only.
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& expected, const std::vector<T>& actual) {
  if (expected.size() != actual.size())
    return ::testing::AssertionFailure()
           << "sizes differ: expected " << expected.size() << ", got " << actual.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure()
             << "first difference at index " << i << " of " << expected.size() << ": expected "
             << +expected[i] << ", got " << +actual[i];
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
uint64_t bits_of(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

::testing::AssertionResult same_stats(const tq::TensorStats& e, const tq::TensorStats& a) {
  if (e.count == a.count && bits_of(e.mean) == bits_of(a.mean) &&
      bits_of(e.stddev) == bits_of(a.stddev) && bits_of(e.max_abs) == bits_of(a.max_abs))
    return ::testing::AssertionSuccess();
  std::ostringstream os;  // hexfloat: the last bit matters here
  os << std::hexfloat << "expected {count " << e.count << ", mean " << e.mean << ", stddev "
     << e.stddev << ", max_abs " << e.max_abs << "}, got {count " << a.count << ", mean "
     << a.mean << ", stddev " << a.stddev << ", max_abs " << a.max_abs << "}";
  return ::testing::AssertionFailure() << os.str();
}

// Gradient-like data: N(bias, sigma) with rare outliers far out, so that
// clipping at 2.5 sigma really happens.
std::vector<float> gradient(size_t n, uint64_t seed, float sigma = 1e-3f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(2e-6f, sigma);
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = coin(gen) < 0.002f ? 30.0f * normal(gen) : normal(gen);
  return x;
}

std::optional<CodecError> codec_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CodecError& e) {
    return e;
  }
  return std::nullopt;
}

// Errc of the CPU reference on the same input, for comparing with the GPU.
Errc cpu_errc(const std::function<void()>& f) {
  const auto e = codec_error_of(f);
  if (!e) throw std::logic_error("the CPU reference did not throw for this input");
  return e->code();
}

#define EXPECT_CODEC_ERROR(stmt, errc, substring)                                               \
  do {                                                                                          \
    const auto tg_err_ = codec_error_of([&] { stmt; });                                         \
    ASSERT_TRUE(tg_err_.has_value()) << #stmt " did not throw CodecError";                      \
    EXPECT_EQ(static_cast<int>(tg_err_->code()), static_cast<int>(errc)) << tg_err_->what();    \
    EXPECT_NE(std::string(tg_err_->what()).find(substring), std::string::npos)                  \
        << "message \"" << tg_err_->what() << "\" does not mention \"" << substring << "\""; \
  } while (0)

class CudaCodec : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tc::device_available())
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none, the CUDA codec is untested here";
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // GPU encode of x placed `offset` bytes past a 256-byte boundary; the
  // payload and the statistics the workspace reports afterwards.
  std::vector<uint8_t> gpu_encode(const std::vector<float>& x, const tq::EncodeParams& p,
                                  tc::Workspace& ws, size_t offset = 0,
                                  tq::TensorStats* stats = nullptr, float* scale = nullptr) {
    const size_t n = x.size();
    DeviceBytes dx(n * sizeof(float) + offset);
    DeviceBytes dout(tq::max_encoded_bytes(n));
    float* xp = dx.at<float>(offset);
    upload(xp, x, stream_);
    tc::encode_async(xp, n, p, dout.at<uint8_t>(), tq::max_encoded_bytes(n), ws, stream_);
    ws.check(stream_);
    if (stats != nullptr) *stats = ws.stats(stream_);
    if (scale != nullptr) *scale = ws.scale(stream_);
    return download(dout.at<uint8_t>(), tq::max_encoded_bytes(n), stream_);
  }

  static std::vector<uint8_t> cpu_encode(const std::vector<float>& x, const tq::EncodeParams& p) {
    std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
    tq::encode(x, p, out);
    return out;
  }

  cudaStream_t stream_ = nullptr;
};

float header_scale(const std::vector<uint8_t>& payload) {
  return tq::bits_float(tq::load_le32(payload.data() + 16));
}

// Rewrites the header CRC after a deliberate field change.
void reseal(std::vector<uint8_t>& payload) {
  tq::store_le32(payload.data() + tq::kHeaderCrcOffset,
                 tq::crc32_ieee(payload.data(), tq::kHeaderCrcOffset));
}

const std::vector<size_t> kSizes = {0,    1,    2,    3,    4,     5,     7,      31,
                                    32,   33,   127,  4095, 4096,  4097,  8191,   8197,
                                    100003, (size_t{1} << 20) + 3};

// ---------------------------------------------------------------- encode

TEST_F(CudaCodec, EncodeMatchesCpuBytesAndStats) {
  tc::Workspace ws((size_t{1} << 20) + 3);
  struct Rng {
    uint64_t seed;
    uint32_t step, tensor_id;
  };
  const Rng rngs[] = {{0, 0, 0}, {0x0123456789ABCDEFull, 7, 3}, {42, 0xFFFFFFFFu, 0x80000001u}};
  for (size_t n : kSizes) {
    const auto x = gradient(n, 1000 + n);
    const tq::TensorStats cpu_stats = tq::compute_stats(x);
    for (float clip : {0.0f, 2.5f}) {
      for (const Rng& r : rngs) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", clip = " + std::to_string(clip) +
                     ", seed = " + std::to_string(r.seed) + ", step = " + std::to_string(r.step));
        tq::EncodeParams p;
        p.clip_factor = clip;
        p.seed = r.seed;
        p.step = r.step;
        p.tensor_id = r.tensor_id;
        tq::TensorStats st;
        float scale = -1.0f;
        const auto gpu = gpu_encode(x, p, ws, 0, &st, &scale);
        const auto cpu = cpu_encode(x, p);
        EXPECT_TRUE(same_bits(cpu, gpu));
        EXPECT_TRUE(same_stats(cpu_stats, st));
        EXPECT_EQ(bits_of(header_scale(cpu)), bits_of(scale));
      }
    }
  }
}

// Nearest rounding (round=nearest) shares ternary_math.h's nearest_code with
// the CPU path: the same bytes, flags and zero seed field, plain or shared.
TEST_F(CudaCodec, NearestRoundingMatchesCpuBytes) {
  tc::Workspace ws((size_t{1} << 20) + 3);
  for (size_t n : kSizes) {
    const auto x = gradient(n, 3000 + n);
    for (bool shared : {false, true}) {
      SCOPED_TRACE("n = " + std::to_string(n) + (shared ? ", shared scale" : ""));
      tq::EncodeParams p;
      p.rounding = tq::Rounding::kNearest;
      p.seed = 99;
      p.step = 3;
      p.tensor_id = 2;
      if (shared) p.shared_scale = 2.0f * tq::local_scale(tq::compute_stats(x), p.clip_factor) + 1e-6f;
      const auto cpu = cpu_encode(x, p);
      EXPECT_TRUE(same_bits(cpu, gpu_encode(x, p, ws)));
      EXPECT_TRUE(tq::inspect(cpu).nearest());
    }
  }
}

TEST_F(CudaCodec, EncodeUnalignedInput) {
  tc::Workspace ws(100003);
  tq::EncodeParams p;
  p.seed = 99;
  p.step = 5;
  for (size_t n : {size_t{5}, size_t{4097}, size_t{100003}}) {
    const auto x = gradient(n, 7 * n);
    const auto cpu = cpu_encode(x, p);
    for (size_t offset : {4, 8, 12}) {  // float-aligned, never 16-byte aligned: scalar path
      SCOPED_TRACE("n = " + std::to_string(n) + ", offset = " + std::to_string(offset));
      EXPECT_TRUE(same_bits(cpu, gpu_encode(x, p, ws, offset)));
    }
  }
}

TEST_F(CudaCodec, EncodeSharedScale) {
  tc::Workspace ws(100003);
  for (size_t n : {size_t{1}, size_t{4097}, size_t{100003}}) {
    const auto x = gradient(n, 31 * n);
    tq::EncodeParams p;
    p.seed = 1234;
    p.tensor_id = 17;
    const float own = tq::local_scale(tq::compute_stats(x), p.clip_factor);
    for (float shared : {own, own * 1.5f, own * 1000.0f}) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", shared = " + std::to_string(shared));
      p.shared_scale = shared;
      const auto gpu = gpu_encode(x, p, ws);
      EXPECT_TRUE(same_bits(cpu_encode(x, p), gpu));
      EXPECT_EQ(gpu[6], tq::kFlagSharedScale);
      EXPECT_EQ(bits_of(header_scale(gpu)), bits_of(shared));
    }
  }
  // An all-zero tensor (own scale 0) under a positive shared scale.
  std::vector<float> zeros(1000, 0.0f);
  tq::EncodeParams p;
  p.shared_scale = 0.25f;
  EXPECT_TRUE(same_bits(cpu_encode(zeros, p), gpu_encode(zeros, p, ws)));
}

// A variable split across parameter servers: each slice, encoded on the GPU
// with the whole tensor's statistics, equals the CPU's slice payload.
TEST_F(CudaCodec, EncodeSliceMatchesCpuSlice) {
  const size_t n = 300001;
  tc::Workspace ws(n);
  const auto x = gradient(n, 4242);
  const tq::TensorStats whole = tq::compute_stats(x);
  DeviceBytes dx(n * sizeof(float));
  upload(dx.at<float>(), x, stream_);
  const std::vector<uint64_t> cuts = {0, 4, 1000, 65536, 200004, n};
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    SCOPED_TRACE("slice " + std::to_string(cuts[s]) + ".." + std::to_string(cuts[s + 1]));
    const uint64_t count = cuts[s + 1] - cuts[s];
    tq::EncodeParams p;
    p.seed = 77;
    p.step = 3;
    p.tensor_id = 9;
    p.element_offset = cuts[s];
    std::vector<uint8_t> cpu(tq::max_encoded_bytes(count));
    tq::encode_with_stats(std::span<const float>(x.data() + cuts[s], count), whole, p, cpu);
    DeviceBytes dout(cpu.size());
    tc::encode_slice_async(dx.at<float>(), n, count, p, dout.at<uint8_t>(), cpu.size(), ws, stream_);
    ws.check(stream_);
    EXPECT_TRUE(same_bits(cpu, download(dout.at<uint8_t>(), cpu.size(), stream_)));
  }
  tq::EncodeParams bad;
  bad.element_offset = n - 3;
  DeviceBytes dout(tq::max_encoded_bytes(8));
  EXPECT_THROW(tc::encode_slice_async(dx.at<float>(), n, 8, bad, dout.at<uint8_t>(), tq::max_encoded_bytes(8), ws,
                                      stream_),
               CodecError);
}

// 16-bit inputs (tc::DeviceHalves): stats and payloads of the widened
// tensor, against the CPU codec reading the same halves (half_input.h, itself
// tested against the float32 encode): stochastic and nearest rounding, whole
// tensors and slices, odd sizes and 2-byte-aligned (not 4-byte) inputs; a
// non-finite half is refused and the packed formats are refused by name.
TEST_F(CudaCodec, SixteenBitInputsMatchTheCpuBytes) {
  const size_t kMax = (size_t{1} << 20) + 3;
  tc::Workspace ws(kMax);
  for (tq::HalfType type : {tq::HalfType::kFloat16, tq::HalfType::kBFloat16})
    for (size_t n : kSizes) {
      const auto x = gradient(n, 5000 + n);
      std::vector<uint16_t> h(n);
      for (size_t i = 0; i < n; ++i)
        h[i] = type == tq::HalfType::kFloat16 ? tq::fp16::from_float(x[i])
                                               : static_cast<uint16_t>(bits_of(x[i]) >> 16);
      const tq::HalfTensor host{h, type};
      DeviceBytes dh(2 * n + 2);
      uint16_t* hp = dh.at<uint16_t>(2);  // 2-byte aligned, not 4
      upload(hp, h, stream_);
      const tc::DeviceHalves dev{hp, n, type};
      for (tq::Rounding rounding : {tq::Rounding::kStochastic, tq::Rounding::kNearest}) {
        SCOPED_TRACE(std::string(tq::half_type_name(type)) + " n = " + std::to_string(n) +
                     (rounding == tq::Rounding::kNearest ? " nearest" : ""));
        tq::EncodeParams p;
        p.seed = 31 + n;
        p.step = 4;
        p.tensor_id = 6;
        p.rounding = rounding;
        std::vector<uint8_t> cpu(tq::max_encoded_bytes(n));
        tq::encode(host, p, cpu);
        DeviceBytes dout(cpu.size());
        tc::encode_async(dev, p, dout.at<uint8_t>(), cpu.size(), ws, stream_);
        ws.check(stream_);
        EXPECT_TRUE(same_stats(tq::compute_stats(host), ws.stats(stream_)));
        EXPECT_TRUE(same_bits(cpu, download(dout.at<uint8_t>(), cpu.size(), stream_)));
        if (n < 8) continue;
        p.element_offset = 4 * (n / 8);  // a slice with the whole tensor's statistics
        const uint64_t count = n - p.element_offset;
        std::vector<uint8_t> cpu_slice(tq::max_encoded_bytes(count));
        tq::encode_with_stats(host.subspan(p.element_offset, count), tq::compute_stats(host), p, cpu_slice);
        DeviceBytes dslice(cpu_slice.size());
        tc::encode_slice_async(dev, count, p, dslice.at<uint8_t>(), cpu_slice.size(), ws, stream_);
        ws.check(stream_);
        EXPECT_TRUE(same_bits(cpu_slice, download(dslice.at<uint8_t>(), cpu_slice.size(), stream_)));
      }
    }
  std::vector<uint16_t> bad(5000, 0x3C00);  // 1.0 in float16
  bad[4321] = 0x7C00;                      // +Inf
  DeviceBytes db(2 * bad.size());
  upload(db.at<uint16_t>(), bad, stream_);
  DeviceBytes dout(tq::max_encoded_bytes(bad.size()));
  tc::encode_async(tc::DeviceHalves{db.at<uint16_t>(), bad.size(), tq::HalfType::kFloat16}, tq::EncodeParams{},
                   dout.at<uint8_t>(), tq::max_encoded_bytes(bad.size()), ws, stream_);
  try {
    ws.check(stream_);
    FAIL() << "no error";
  } catch (const CodecError& e) {
    EXPECT_EQ(e.code(), Errc::kNonFinite);
    EXPECT_NE(std::string(e.what()).find("4321"), std::string::npos) << e.what();
  }
  tq::EncodeParams entropy;
  entropy.packing = tq::Packing::kEntropy;
  EXPECT_THROW(tc::encode_async(tc::DeviceHalves{db.at<uint16_t>(), bad.size(), tq::HalfType::kFloat16}, entropy,
                                dout.at<uint8_t>(), tq::max_encoded_bytes(bad.size()), ws, stream_),
               CodecError);
}

TEST_F(CudaCodec, EncodeSpecialValues) {
  tc::Workspace ws(1 << 16);
  tq::EncodeParams p;
  p.seed = 5;
  std::vector<std::pair<std::string, std::vector<float>>> cases;
  cases.push_back({"all zero", std::vector<float>(5001, 0.0f)});
  cases.push_back({"negative zeros", std::vector<float>(4099, -0.0f)});
  cases.push_back({"constant", std::vector<float>(4099, -0.75f)});
  {
    auto x = gradient(9000, 3);
    for (size_t i = 0; i < x.size(); i += 3) x[i] = -0.0f;
    cases.push_back({"gradient with -0", x});
  }
  {
    auto x = gradient(9000, 4);
    for (auto& v : x) v *= 1e-36f;  // subnormal-range scale: quantizer uses pre = 2^64
    cases.push_back({"tiny", x});
  }
  {
    auto x = gradient(9000, 5);
    for (auto& v : x) v *= 1e35f;  // squares near 1e64: fine in float64
    x[17] = std::numeric_limits<float>::max();
    cases.push_back({"huge", x});
  }
  {
    std::vector<float> x(6000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(1.0f, -149 + static_cast<int>(i % 40));
    cases.push_back({"denormals", x});
  }
  for (const auto& [name, x] : cases) {
    for (float clip : {0.0f, 2.5f}) {
      SCOPED_TRACE(name + ", clip = " + std::to_string(clip));
      p.clip_factor = clip;
      tq::TensorStats st;
      const auto gpu = gpu_encode(x, p, ws, 0, &st);
      EXPECT_TRUE(same_bits(cpu_encode(x, p), gpu));
      EXPECT_TRUE(same_stats(tq::compute_stats(x), st));
    }
  }
}

TEST_F(CudaCodec, EncodeZeroElements) {
  tc::Workspace ws(0);
  tq::EncodeParams p;
  p.seed = 77;
  p.step = 3;
  p.tensor_id = 9;
  const std::vector<float> empty;
  tq::TensorStats st;
  st.count = 123;
  const auto gpu = gpu_encode(empty, p, ws, 0, &st);
  ASSERT_EQ(gpu.size(), tq::kHeaderBytes);
  EXPECT_TRUE(same_bits(cpu_encode(empty, p), gpu));
  EXPECT_EQ(st.count, 0u);

  // stats_async with n = 0 and a null pointer is fine too.
  tc::stats_async(nullptr, 0, ws, stream_);
  EXPECT_EQ(ws.stats(stream_).count, 0u);
}

TEST_F(CudaCodec, EncodeIsDeterministicAcrossStreamsAndWorkspaces) {
  const auto x = gradient(300001, 11);
  tq::EncodeParams p;
  p.seed = 3;
  tc::Workspace ws1(x.size()), ws2(x.size() * 2);
  const auto a = gpu_encode(x, p, ws1);
  cudaStream_t other = nullptr;
  CUDA_OK(cudaStreamCreate(&other));
  std::swap(stream_, other);
  const auto b = gpu_encode(x, p, ws2);
  std::swap(stream_, other);
  cudaStreamDestroy(other);
  EXPECT_TRUE(same_bits(a, b));
}

// ---------------------------------------------------------------- scale sharing on the device

// Per-worker tensors of one variable: different seeds and spreads, so that the
// workers' own scales differ and most of them encode under a larger shared one.
std::vector<std::vector<float>> worker_tensors(size_t n, size_t workers, uint64_t seed) {
  std::vector<std::vector<float>> xs;
  for (size_t w = 0; w < workers; ++w)
    xs.push_back(gradient(n, seed + 97 * w, 1e-3f * static_cast<float>(w + 1)));
  return xs;
}

// The sizes for scale sharing: 0, non-multiples of 4 and of kStatsChunk (4096),
// and more than one stats chunk.
const std::vector<size_t> kSharedSizes = {0, 1, 3, 5, 4095, 4097, 8197, 100003};

TEST_F(CudaCodec, LocalScaleAsyncMatchesCpuLocalScale) {
  const size_t workers = 4;
  const size_t max_n = kSharedSizes.back();
  tc::Workspace ws(max_n);
  DeviceBytes dscales(workers * sizeof(float));
  std::vector<std::unique_ptr<DeviceBytes>> dx;
  for (size_t w = 0; w < workers; ++w) dx.push_back(std::make_unique<DeviceBytes>(max_n * sizeof(float)));
  for (size_t n : kSharedSizes) {
    const auto xs = worker_tensors(n, workers, 500 + n);
    for (size_t w = 0; w < workers; ++w) upload(dx[w]->at<float>(), xs[w], stream_);
    for (float clip : {0.0f, 2.5f}) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", clip = " + std::to_string(clip));
      upload(dscales.at<float>(), std::vector<float>(workers, -7.0f), stream_);
      // All workers enqueued back to back, no synchronization in between: the
      // point of the API. The workspace's last statistics are the last worker's.
      for (size_t w = 0; w < workers; ++w)
        tc::local_scale_async(dx[w]->at<float>(), n, clip, dscales.at<float>() + w, ws, stream_);
      EXPECT_TRUE(same_stats(tq::compute_stats(xs[workers - 1]), ws.stats(stream_)));
      std::vector<float> cpu(workers);
      for (size_t w = 0; w < workers; ++w) cpu[w] = tq::local_scale(tq::compute_stats(xs[w]), clip);
      EXPECT_TRUE(same_bits(cpu, download(dscales.at<float>(), workers, stream_)));
    }
  }
}

TEST_F(CudaCodec, EncodeSharedAsyncMatchesCpuSharedEncode) {
  const size_t workers = 4;
  const size_t max_n = kSharedSizes.back();
  tc::Workspace ws(max_n);
  DeviceBytes dscales(workers * sizeof(float));
  DeviceBytes dout(tq::max_encoded_bytes(max_n));
  std::vector<std::unique_ptr<DeviceBytes>> dx;
  for (size_t w = 0; w < workers; ++w) dx.push_back(std::make_unique<DeviceBytes>(max_n * sizeof(float)));
  for (size_t n : kSharedSizes) {
    const auto xs = worker_tensors(n, workers, 900 + n);
    for (size_t w = 0; w < workers; ++w) upload(dx[w]->at<float>(), xs[w], stream_);
    for (float clip : {0.0f, 2.5f}) {
      // The host flow this replaces: own scales, their max, encode with it.
      float shared = 0.0f;
      for (size_t w = 0; w < workers; ++w)
        shared = std::max(shared, tq::local_scale(tq::compute_stats(xs[w]), clip));
      for (size_t w = 0; w < workers; ++w)
        tc::local_scale_async(dx[w]->at<float>(), n, clip, dscales.at<float>() + w, ws, stream_);
      for (size_t w = 0; w < workers; ++w) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", clip = " + std::to_string(clip) +
                     ", worker " + std::to_string(w));
        tq::EncodeParams p;
        p.clip_factor = clip;
        p.seed = 0xC0FFEEull + n;
        p.step = 12;
        p.tensor_id = static_cast<uint32_t>(w + 1);
        tc::encode_shared_async(dx[w]->at<float>(), n, p, dscales.at<float>(), workers,
                                dout.at<uint8_t>(), tq::max_encoded_bytes(n), ws, stream_);
        const float gpu_scale = ws.scale(stream_);  // checks too
        const auto gpu = download(dout.at<uint8_t>(), tq::max_encoded_bytes(n), stream_);
        p.shared_scale = shared;
        EXPECT_TRUE(same_bits(cpu_encode(xs[w], p), gpu));
        EXPECT_EQ(gpu[6], tq::kFlagSharedScale);
        EXPECT_EQ(bits_of(shared), bits_of(gpu_scale));
        EXPECT_EQ(bits_of(shared), bits_of(header_scale(gpu)));
      }
    }
  }
}

TEST_F(CudaCodec, EncodeSliceSharedAsyncMatchesCpuSlice) {
  const size_t n = 300001;
  const size_t workers = 3;
  tc::Workspace ws(n);
  const auto xs = worker_tensors(n, workers, 31337);
  std::vector<std::unique_ptr<DeviceBytes>> dx;
  DeviceBytes dscales(workers * sizeof(float));
  float shared = 0.0f;
  for (size_t w = 0; w < workers; ++w) {
    dx.push_back(std::make_unique<DeviceBytes>(n * sizeof(float)));
    upload(dx[w]->at<float>(), xs[w], stream_);
    tc::local_scale_async(dx[w]->at<float>(), n, 2.5f, dscales.at<float>() + w, ws, stream_);
    shared = std::max(shared, tq::local_scale(tq::compute_stats(xs[w]), 2.5f));
  }
  const size_t w = 0;  // the narrowest spread: its own scale is below the shared one
  const tq::TensorStats whole = tq::compute_stats(xs[w]);
  const std::vector<uint64_t> cuts = {0, 4, 1000, 65536, 200004, n};
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    SCOPED_TRACE("slice " + std::to_string(cuts[s]) + ".." + std::to_string(cuts[s + 1]));
    const uint64_t count = cuts[s + 1] - cuts[s];
    tq::EncodeParams p;
    p.seed = 78;
    p.step = 4;
    p.tensor_id = 2;
    p.element_offset = cuts[s];
    DeviceBytes dout(tq::max_encoded_bytes(count));
    tc::encode_slice_shared_async(dx[w]->at<float>(), n, count, p, dscales.at<float>(), workers,
                                  dout.at<uint8_t>(), tq::max_encoded_bytes(count), ws, stream_);
    ws.check(stream_);
    p.shared_scale = shared;
    std::vector<uint8_t> cpu(tq::max_encoded_bytes(count));
    tq::encode_with_stats(std::span<const float>(xs[w].data() + cuts[s], count), whole, p, cpu);
    EXPECT_TRUE(same_bits(cpu, download(dout.at<uint8_t>(), cpu.size(), stream_)));
  }
}

TEST_F(CudaCodec, LocalScaleAsyncNonFiniteWritesNaNAndSharedEncodeRefusesIt) {
  const size_t n = 9001;
  tc::Workspace ws(n), ws_other(n);
  auto bad = gradient(n, 21);
  bad[4500] = std::nanf("");
  const auto good = gradient(n, 22);
  DeviceBytes dbad(n * sizeof(float)), dgood(n * sizeof(float)), dscales(2 * sizeof(float));
  DeviceBytes dout(tq::max_encoded_bytes(n));
  upload(dbad.at<float>(), bad, stream_);
  upload(dgood.at<float>(), good, stream_);
  tc::local_scale_async(dgood.at<float>(), n, 2.5f, dscales.at<float>(), ws, stream_);
  tc::local_scale_async(dbad.at<float>(), n, 2.5f, dscales.at<float>() + 1, ws, stream_);
  EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kNonFinite, "input element 4500 is NaN");
  const auto scales = download(dscales.at<float>(), 2, stream_);
  EXPECT_EQ(bits_of(tq::local_scale(tq::compute_stats(good), 2.5f)), bits_of(scales[0]));
  EXPECT_TRUE(std::isnan(scales[1]));

  // The good worker, in a workspace that never saw the error, still refuses
  // the poisoned scale and writes nothing.
  const std::vector<uint8_t> sentinel(tq::max_encoded_bytes(n), 0xA5);
  upload(dout.at<uint8_t>(), sentinel, stream_);
  tq::EncodeParams p;
  tc::encode_shared_async(dgood.at<float>(), n, p, dscales.at<float>(), 2, dout.at<uint8_t>(),
                          sentinel.size(), ws_other, stream_);
  EXPECT_CODEC_ERROR(ws_other.check(stream_), Errc::kInvalidArgument, "d_scales[1] = nan");
  EXPECT_TRUE(same_bits(sentinel, download(dout.at<uint8_t>(), sentinel.size(), stream_)));

  // An error already pending in the workspace: the scale is NaN as well, not stale.
  tc::local_scale_async(dbad.at<float>(), n, 2.5f, dscales.at<float>() + 1, ws, stream_);
  tc::local_scale_async(dgood.at<float>(), n, 2.5f, dscales.at<float>(), ws, stream_);
  EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kNonFinite, "4500");
  EXPECT_TRUE(std::isnan(download(dscales.at<float>(), 1, stream_)[0]));
}

TEST_F(CudaCodec, EncodeSharedAsyncRefusesBadDeviceScales) {
  const size_t n = 4097;
  tc::Workspace ws(n);
  const auto x = gradient(n, 23);
  const float own = tq::local_scale(tq::compute_stats(x), 2.5f);
  DeviceBytes dx(n * sizeof(float)), dscales(3 * sizeof(float)), dout(tq::max_encoded_bytes(n));
  upload(dx.at<float>(), x, stream_);
  const std::vector<uint8_t> sentinel(tq::max_encoded_bytes(n), 0x3C);
  struct Case {
    const char* name;
    std::vector<float> scales;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"max below own", {own * 0.5f, own * 0.25f, 0.0f}, "below this tensor's own scale"},
      {"-0", {own * 2.0f, -0.0f, own}, "d_scales[1] = -0"},
      {"negative", {own * 2.0f, own, -1.0f}, "d_scales[2] = -1"},
      {"+Inf", {std::numeric_limits<float>::infinity(), own, own}, "d_scales[0] = inf"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    upload(dscales.at<float>(), c.scales, stream_);
    upload(dout.at<uint8_t>(), sentinel, stream_);
    tq::EncodeParams p;  // clip 2.5, as `own`
    tc::encode_shared_async(dx.at<float>(), n, p, dscales.at<float>(), 3, dout.at<uint8_t>(),
                            sentinel.size(), ws, stream_);
    EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kInvalidArgument, c.message);
    EXPECT_TRUE(same_bits(sentinel, download(dout.at<uint8_t>(), sentinel.size(), stream_)));
  }
  // The CPU refuses the same max below own with the same code.
  tq::EncodeParams p;
  p.shared_scale = own * 0.5f;
  std::vector<uint8_t> cpu_out(tq::max_encoded_bytes(n));
  EXPECT_EQ(cpu_errc([&] { tq::encode(x, p, cpu_out); }), Errc::kInvalidArgument);
  // Only num_scales values are read: a bad value past them is ignored.
  upload(dscales.at<float>(), std::vector<float>{own, own * 3.0f, std::nanf("")}, stream_);
  tq::EncodeParams q;
  tc::encode_shared_async(dx.at<float>(), n, q, dscales.at<float>(), 2, dout.at<uint8_t>(),
                          sentinel.size(), ws, stream_);
  ws.check(stream_);
  q.shared_scale = own * 3.0f;
  EXPECT_TRUE(same_bits(cpu_encode(x, q), download(dout.at<uint8_t>(), sentinel.size(), stream_)));
}

TEST_F(CudaCodec, ScaleSharingArgumentChecksThrowImmediately) {
  const size_t n = 1000;
  tc::Workspace ws(n);
  DeviceBytes dx((n + 1) * sizeof(float)), dout(tq::max_encoded_bytes(n + 1)), dscales(8 * sizeof(float));
  float* x = dx.at<float>();
  uint8_t* out = dout.at<uint8_t>();
  float* scales = dscales.at<float>();
  const size_t cap = tq::max_encoded_bytes(n);
  tq::EncodeParams p;

  EXPECT_CODEC_ERROR(tc::local_scale_async(x, n + 1, 2.5f, scales, ws, stream_), Errc::kInvalidArgument,
                     "max_elements");
  EXPECT_CODEC_ERROR(tc::local_scale_async(nullptr, n, 2.5f, scales, ws, stream_), Errc::kInvalidArgument,
                     "d_x");
  EXPECT_CODEC_ERROR(tc::local_scale_async(x, n, 2.5f, nullptr, ws, stream_), Errc::kInvalidArgument,
                     "d_scale_out");
  EXPECT_CODEC_ERROR(tc::local_scale_async(x, n, 2.5f, reinterpret_cast<float*>(out + 1), ws, stream_),
                     Errc::kInvalidArgument, "d_scale_out");
  for (float clip : {-1.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(cpu_errc([&] { tq::local_scale(tq::TensorStats{}, clip); }), Errc::kInvalidArgument);
    EXPECT_CODEC_ERROR(tc::local_scale_async(x, n, clip, scales, ws, stream_), Errc::kInvalidArgument,
                       "clip_factor");
  }

  EXPECT_CODEC_ERROR(tc::encode_shared_async(x, n, p, nullptr, 4, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "d_scales is null");
  EXPECT_CODEC_ERROR(tc::encode_shared_async(x, n, p, scales, 0, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "num_scales is 0");
  EXPECT_CODEC_ERROR(tc::encode_shared_async(x, n, p, reinterpret_cast<const float*>(out + 2), 4, out, cap,
                                             ws, stream_),
                     Errc::kInvalidArgument, "d_scales");
  EXPECT_CODEC_ERROR(tc::encode_shared_async(x, n + 1, p, scales, 4, out, tq::max_encoded_bytes(n + 1), ws,
                                             stream_),
                     Errc::kInvalidArgument, "max_elements");
  EXPECT_CODEC_ERROR(tc::encode_shared_async(nullptr, n, p, scales, 4, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "d_x");
  EXPECT_CODEC_ERROR(tc::encode_shared_async(x, n, p, scales, 4, out, cap - 1, ws, stream_),
                     Errc::kBufferTooSmall, std::to_string(cap - 1));
  tq::EncodeParams with_host_scale;
  with_host_scale.shared_scale = 0.5f;
  EXPECT_CODEC_ERROR(tc::encode_shared_async(x, n, with_host_scale, scales, 4, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "params.shared_scale must be empty");
  tq::EncodeParams bad_clip;
  bad_clip.clip_factor = -2.0f;
  EXPECT_CODEC_ERROR(tc::encode_shared_async(x, n, bad_clip, scales, 4, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "clip_factor");

  tq::EncodeParams outside;
  outside.element_offset = n - 4;
  EXPECT_CODEC_ERROR(tc::encode_slice_shared_async(x, n, 8, outside, scales, 4, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "lies outside");
  EXPECT_CODEC_ERROR(tc::encode_slice_shared_async(x, n, 8, p, scales, 0, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "num_scales is 0");
  ws.check(stream_);  // none of these enqueued anything
}

// ---------------------------------------------------------------- stats

TEST_F(CudaCodec, StatsMatchCpuBitwise) {
  // 5,000,007 elements: 1221 chunk partials, more than one level-2 batch per lane.
  const std::vector<size_t> sizes = {1, 2, 31, 32, 33, 4095, 4096, 4097, 131072, 131075,
                                     (size_t{1} << 20) + 3, 5000007};
  tc::Workspace ws(5000007);
  DeviceBytes dx(5000007 * sizeof(float));
  for (size_t n : sizes) {
    for (float sigma : {1e-3f, 10.0f}) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", sigma = " + std::to_string(sigma));
      const auto x = gradient(n, 5 * n + 1, sigma);
      upload(dx.at<float>(), x, stream_);
      tc::stats_async(dx.at<float>(), n, ws, stream_);
      EXPECT_TRUE(same_stats(tq::compute_stats(x), ws.stats(stream_)));
    }
  }
  // Unaligned input (stats read with scalar loads anyway, but the offsets move chunk boundaries).
  const auto x = gradient(10007, 8);
  upload(dx.at<float>(4), x, stream_);
  tc::stats_async(dx.at<float>(4), x.size(), ws, stream_);
  EXPECT_TRUE(same_stats(tq::compute_stats(x), ws.stats(stream_)));
}

// ---------------------------------------------------------------- decode side

TEST_F(CudaCodec, DecodeAccumulateAndCountsMatchCpu) {
  tc::Workspace ws((size_t{1} << 20) + 3);
  for (size_t n : kSizes) {
    const auto x = gradient(n, 2 * n + 9);
    tq::EncodeParams p;
    p.seed = n;
    const auto payload = cpu_encode(x, p);

    std::mt19937 gen(static_cast<uint32_t>(n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> small(-200, 200);
    std::vector<float> acc(n);
    for (auto& v : acc) v = normal(gen);
    std::vector<int16_t> counts(n);
    for (auto& c : counts) c = static_cast<int16_t>(small(gen));
    if (n > 2) counts[1] = std::numeric_limits<int16_t>::max();  // wraps like the CPU's int16 add

    std::vector<float> cpu_dec(n), cpu_acc = acc;
    std::vector<int16_t> cpu_counts = counts;
    tq::decode(payload, cpu_dec);
    tq::decode_accumulate(payload, cpu_acc);
    tq::accumulate_counts(payload, cpu_counts);

    // Payload offsets 0 and 1 (body then not 4-byte aligned); output offsets
    // aligned and misaligned for the vector path.
    for (size_t poff : {0, 1}) {
      for (size_t ooff : {0, 4, 2}) {
        const bool float_ok = ooff % 4 == 0;
        SCOPED_TRACE("n = " + std::to_string(n) + ", payload offset = " + std::to_string(poff) +
                     ", output offset = " + std::to_string(ooff));
        DeviceBytes dp(payload.size() + poff);
        DeviceBytes dout(n * sizeof(float) + ooff);
        uint8_t* pp = dp.at<uint8_t>(poff);
        upload(pp, payload, stream_);
        if (float_ok) {
          float* op = dout.at<float>(ooff);
          tc::decode_async(pp, payload.size(), op, n, ws, stream_);
          ws.check(stream_);
          EXPECT_TRUE(same_bits(cpu_dec, download(op, n, stream_)));

          upload(op, acc, stream_);
          tc::decode_accumulate_async(pp, payload.size(), op, n, ws, stream_);
          ws.check(stream_);
          EXPECT_TRUE(same_bits(cpu_acc, download(op, n, stream_)));
        }
        int16_t* cp = dout.at<int16_t>(ooff);
        upload(cp, counts, stream_);
        tc::accumulate_counts_async(pp, payload.size(), cp, n, ws, stream_);
        ws.check(stream_);
        EXPECT_TRUE(same_bits(cpu_counts, download(cp, n, stream_)));
      }
    }
  }
}

TEST_F(CudaCodec, SharedScaleCountsMatchSumShared) {
  const size_t n = 70001;
  tc::Workspace ws(n);
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t w = 0; w < 3; ++w) {
    tq::EncodeParams p;
    p.seed = 10 + w;
    p.tensor_id = 4;
    p.shared_scale = 0.02f;
    payloads.push_back(cpu_encode(gradient(n, 100 + w), p));
  }
  std::vector<std::span<const uint8_t>> spans(payloads.begin(), payloads.end());
  std::vector<int16_t> cpu_counts(n);
  const float cpu_scale = tq::sum_shared(spans, cpu_counts);
  EXPECT_EQ(cpu_scale, 0.02f);

  DeviceBytes dp(payloads[0].size());
  DeviceBytes dc(n * sizeof(int16_t));
  upload(dc.at<int16_t>(), std::vector<int16_t>(n, 0), stream_);
  for (const auto& pl : payloads) {
    upload(dp.at<uint8_t>(), pl, stream_);
    tc::accumulate_counts_async(dp.at<uint8_t>(), pl.size(), dc.at<int16_t>(), n, ws, stream_);
  }
  ws.check(stream_);
  EXPECT_TRUE(same_bits(cpu_counts, download(dc.at<int16_t>(), n, stream_)));
}

TEST_F(CudaCodec, RoundTripThroughGpuEncodeAndDecode) {
  const size_t n = 262147;
  tc::Workspace ws(n);
  const auto x = gradient(n, 77);
  tq::EncodeParams p;
  p.seed = 8;
  DeviceBytes dx(n * sizeof(float)), dp(tq::max_encoded_bytes(n)), dy(n * sizeof(float));
  upload(dx.at<float>(), x, stream_);
  tc::encode_async(dx.at<float>(), n, p, dp.at<uint8_t>(), tq::max_encoded_bytes(n), ws, stream_);
  tc::decode_async(dp.at<uint8_t>(), tq::max_encoded_bytes(n), dy.at<float>(), n, ws, stream_);
  ws.check(stream_);
  std::vector<float> cpu_y(n);
  tq::decode(cpu_encode(x, p), cpu_y);
  EXPECT_TRUE(same_bits(cpu_y, download(dy.at<float>(), n, stream_)));
}

// ---------------------------------------------------------------- errors

TEST_F(CudaCodec, NonFiniteInputReportsFirstIndexAndWritesNothing) {
  const size_t n = 100000;
  tc::Workspace ws(n);
  DeviceBytes dx(n * sizeof(float)), dout(tq::max_encoded_bytes(n));
  const std::vector<uint8_t> sentinel(tq::max_encoded_bytes(n), 0xCD);
  struct Case {
    size_t index;
    float value;
    const char* what;
  };
  const Case cases[] = {{5000, std::nanf(""), "NaN"},
                        {3, -std::numeric_limits<float>::infinity(), "-Inf"},
                        {n - 1, std::numeric_limits<float>::infinity(), "+Inf"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto x = gradient(n, 1);
    x[c.index] = c.value;
    if (c.index == 5000) x[70000] = std::numeric_limits<float>::infinity();  // later: not reported
    EXPECT_EQ(cpu_errc([&] { tq::compute_stats(x); }), Errc::kNonFinite);
    upload(dx.at<float>(), x, stream_);
    upload(dout.at<uint8_t>(), sentinel, stream_);
    tq::EncodeParams p;
    tc::encode_async(dx.at<float>(), n, p, dout.at<uint8_t>(), tq::max_encoded_bytes(n), ws,
                     stream_);
    EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kNonFinite,
                       "input element " + std::to_string(c.index) + " is " + c.what);
    EXPECT_TRUE(same_bits(sentinel, download(dout.at<uint8_t>(), sentinel.size(), stream_)));

    tc::stats_async(dx.at<float>(), n, ws, stream_);
    EXPECT_CODEC_ERROR(ws.stats(stream_), Errc::kNonFinite, std::to_string(c.index));
  }
  // The record was cleared: the workspace works again.
  const auto x = gradient(n, 2);
  tq::EncodeParams p;
  EXPECT_TRUE(same_bits(cpu_encode(x, p), gpu_encode(x, p, ws)));
}

TEST_F(CudaCodec, SharedScaleBelowOwnScaleIsRefused) {
  const size_t n = 4097;
  tc::Workspace ws(n);
  const auto x = gradient(n, 12);
  tq::EncodeParams p;
  const float own = tq::local_scale(tq::compute_stats(x), p.clip_factor);
  p.shared_scale = own * 0.5f;
  std::vector<uint8_t> cpu_out(tq::max_encoded_bytes(n));
  EXPECT_EQ(cpu_errc([&] { tq::encode(x, p, cpu_out); }), Errc::kInvalidArgument);

  DeviceBytes dx(n * sizeof(float)), dout(tq::max_encoded_bytes(n));
  const std::vector<uint8_t> sentinel(tq::max_encoded_bytes(n), 0x5A);
  upload(dx.at<float>(), x, stream_);
  upload(dout.at<uint8_t>(), sentinel, stream_);
  tc::encode_async(dx.at<float>(), n, p, dout.at<uint8_t>(), sentinel.size(), ws, stream_);
  EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kInvalidArgument, "below this tensor's own scale");
  EXPECT_TRUE(same_bits(sentinel, download(dout.at<uint8_t>(), sentinel.size(), stream_)));
}

// Runs the three decode-side operations on a (corrupt) payload and checks
// that each throws `errc` on check() and leaves its output untouched.
class CudaCodecDecodeErrors : public CudaCodec {
 protected:
  void expect_refused(const std::vector<uint8_t>& payload, size_t n, Errc errc,
                      const std::string& substring) {
    tc::Workspace ws(n);
    DeviceBytes dp(payload.size()), dout(n * sizeof(float));
    upload(dp.at<uint8_t>(), payload, stream_);
    std::vector<float> acc(n, 1.5f);
    std::vector<int16_t> counts(n, 7);
    std::vector<float> cpu_out(n);
    std::vector<int16_t> cpu_counts(n);
    EXPECT_EQ(cpu_errc([&] { tq::decode(payload, cpu_out); }), errc);
    EXPECT_EQ(cpu_errc([&] { tq::accumulate_counts(payload, cpu_counts); }), errc);

    upload(dout.at<float>(), acc, stream_);
    tc::decode_async(dp.at<uint8_t>(), payload.size(), dout.at<float>(), n, ws, stream_);
    EXPECT_CODEC_ERROR(ws.check(stream_), errc, substring);
    EXPECT_TRUE(same_bits(acc, download(dout.at<float>(), n, stream_)));

    tc::decode_accumulate_async(dp.at<uint8_t>(), payload.size(), dout.at<float>(), n, ws, stream_);
    EXPECT_CODEC_ERROR(ws.check(stream_), errc, substring);
    EXPECT_TRUE(same_bits(acc, download(dout.at<float>(), n, stream_)));

    upload(dout.at<int16_t>(), counts, stream_);
    tc::accumulate_counts_async(dp.at<uint8_t>(), payload.size(), dout.at<int16_t>(), n, ws,
                                stream_);
    EXPECT_CODEC_ERROR(ws.check(stream_), errc, substring);
    EXPECT_TRUE(same_bits(counts, download(dout.at<int16_t>(), n, stream_)));

    ws.check(stream_);  // cleared: nothing pending any more
  }
};

TEST_F(CudaCodecDecodeErrors, CorruptHeaderFields) {
  const size_t n = 10001;
  tq::EncodeParams p;
  p.seed = 6;
  const auto good = cpu_encode(gradient(n, 13), p);
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> corrupt;
    const char* message;  // from header_fault_name()
  };
  const std::vector<Case> cases = {
      {"magic", [](auto& b) { b[1] ^= 0x20; }, "magic"},
      {"version (resealed)", [](auto& b) { b[4] = 3; reseal(b); }, "version"},  // 1 and 2 are the streams
      {"codec (resealed)", [](auto& b) { b[5] = 9; reseal(b); }, "codec"},
      {"header size (resealed)", [](auto& b) { b[7] = 41; reseal(b); }, "header size"},
      {"reserved flag (resealed)", [](auto& b) { b[6] |= 0x80; reseal(b); }, "flag"},
      {"count byte", [](auto& b) { b[9] ^= 0x01; }, "CRC"},
      {"scale byte", [](auto& b) { b[17] ^= 0x40; }, "CRC"},
      {"seed byte", [](auto& b) { b[30] ^= 0xFF; }, "CRC"},
      {"crc byte", [](auto& b) { b[38] ^= 0x08; }, "CRC"},
      {"NaN scale (resealed)", [](auto& b) { tq::store_le32(b.data() + 16, 0x7FC00000u); reseal(b); }, "scale"},
      {"negative zero scale (resealed)", [](auto& b) { tq::store_le32(b.data() + 16, 0x80000000u); reseal(b); }, "scale"},
      {"count of another length (resealed)", [](auto& b) { tq::store_le64(b.data() + 8, 20000); reseal(b); }, "length"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto bad = good;
    c.corrupt(bad);
    expect_refused(bad, n, Errc::kMalformedPayload, c.message);
  }
}

TEST_F(CudaCodecDecodeErrors, HeaderCountDiffersFromOutput) {
  // 5 and 8 elements both take 2 body bytes: the header is well formed, the
  // caller's shape is not (kInvalidArgument, as on the CPU).
  tq::EncodeParams p;
  const auto payload8 = cpu_encode(gradient(8, 1), p);
  expect_refused(payload8, 5, Errc::kInvalidArgument, "8 elements");
}

TEST_F(CudaCodecDecodeErrors, InvalidCodesAndPadding) {
  const size_t n = 40001;  // last byte holds one element and 6 padding bits
  tq::EncodeParams p;
  p.seed = 21;
  const auto good = cpu_encode(gradient(n, 14), p);
  const size_t nb = tq::body_bytes(n);
  {
    SCOPED_TRACE("one invalid code");
    auto bad = good;
    bad[tq::kHeaderBytes + 1234] |= 0b11 << 4;
    expect_refused(bad, n, Errc::kInvalidCode, "body byte 1234");
  }
  {
    SCOPED_TRACE("several invalid codes: the first is reported");
    auto bad = good;
    bad[tq::kHeaderBytes + 9000] = 0xFF;
    bad[tq::kHeaderBytes + 77] |= 0b11;
    bad[tq::kHeaderBytes + nb - 1] |= 0b11;
    expect_refused(bad, n, Errc::kInvalidCode, "body byte 77");
  }
  {
    SCOPED_TRACE("padding bits");
    auto bad = good;
    bad[tq::kHeaderBytes + nb - 1] |= 0b01 << 2;
    expect_refused(bad, n, Errc::kInvalidCode, "padding");
  }
  {
    SCOPED_TRACE("invalid code in the last byte's only element");
    auto bad = good;
    bad[tq::kHeaderBytes + nb - 1] |= 0b11;
    expect_refused(bad, n, Errc::kInvalidCode, "body byte " + std::to_string(nb - 1));
  }
}

TEST_F(CudaCodec, PayloadLengthMismatchThrowsAtOnce) {
  const size_t n = 1001;
  tc::Workspace ws(n);
  tq::EncodeParams p;
  auto payload = cpu_encode(gradient(n, 15), p);
  payload.pop_back();  // truncated
  std::vector<float> cpu_out(n);
  const Errc cpu = cpu_errc([&] { tq::decode(payload, cpu_out); });
  EXPECT_EQ(cpu, Errc::kMalformedPayload);
  DeviceBytes dp(payload.size() + 1), dout(n * sizeof(float));
  upload(dp.at<uint8_t>(), payload, stream_);
  for (size_t bytes : {payload.size(), payload.size() + 2, size_t{0}, size_t{39}}) {
    SCOPED_TRACE("payload_bytes = " + std::to_string(bytes));
    EXPECT_CODEC_ERROR(
        tc::decode_async(dp.at<uint8_t>(), bytes, dout.at<float>(), n, ws, stream_), cpu,
        std::to_string(bytes));
    EXPECT_CODEC_ERROR(tc::decode_accumulate_async(dp.at<uint8_t>(), bytes, dout.at<float>(), n,
                                                   ws, stream_),
                       cpu, "bytes");
    EXPECT_CODEC_ERROR(tc::accumulate_counts_async(dp.at<uint8_t>(), bytes,
                                                   dout.at<int16_t>(), n, ws, stream_),
                       cpu, "bytes");
  }
  ws.check(stream_);  // nothing was enqueued, nothing recorded
}

TEST_F(CudaCodec, ScaleMismatchBetweenSummedPayloads) {
  const size_t n = 5003;
  tc::Workspace ws(n);
  tq::EncodeParams p;
  p.shared_scale = 0.5f;
  const auto a = cpu_encode(gradient(n, 16), p);
  p.shared_scale = 0.25f;
  const auto b = cpu_encode(gradient(n, 17), p);
  std::vector<std::span<const uint8_t>> both = {a, b};
  std::vector<int16_t> cpu_counts(n);
  EXPECT_EQ(cpu_errc([&] { tq::sum_shared(both, cpu_counts); }), Errc::kScaleMismatch);

  DeviceBytes da(a.size()), db(b.size()), dc(n * sizeof(int16_t));
  upload(da.at<uint8_t>(), a, stream_);
  upload(db.at<uint8_t>(), b, stream_);
  upload(dc.at<int16_t>(), std::vector<int16_t>(n, 0), stream_);
  tc::accumulate_counts_async(da.at<uint8_t>(), a.size(), dc.at<int16_t>(), n, ws, stream_);
  tc::accumulate_counts_async(db.at<uint8_t>(), b.size(), dc.at<int16_t>(), n, ws, stream_);
  EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kScaleMismatch, "0.25");
  // Only the first payload was added.
  std::vector<int16_t> only_a(n, 0);
  tq::accumulate_counts(a, only_a);
  EXPECT_TRUE(same_bits(only_a, download(dc.at<int16_t>(), n, stream_)));

  // check() forgot the recorded scale: b alone is now accepted.
  tc::accumulate_counts_async(db.at<uint8_t>(), b.size(), dc.at<int16_t>(), n, ws, stream_);
  ws.check(stream_);
  tq::accumulate_counts(b, only_a);
  EXPECT_TRUE(same_bits(only_a, download(dc.at<int16_t>(), n, stream_)));
}

// One workspace sums two variables with different shared scales in stream
// order, checked once: begin_counts_async starts the second sum.
TEST_F(CudaCodec, BeginCountsStartsANewSumWithoutACheck) {
  const size_t n = 5003;
  tc::Workspace ws(n);
  tq::EncodeParams p;
  p.shared_scale = 0.5f;
  const auto a1 = cpu_encode(gradient(n, 21), p), a2 = cpu_encode(gradient(n, 22), p);
  p.shared_scale = 0.25f;
  const auto b1 = cpu_encode(gradient(n, 23), p), b2 = cpu_encode(gradient(n, 24), p);
  DeviceBytes da1(a1.size()), da2(a2.size()), db1(b1.size()), db2(b2.size());
  DeviceBytes dca(n * sizeof(int16_t)), dcb(n * sizeof(int16_t));
  upload(da1.at<uint8_t>(), a1, stream_);
  upload(da2.at<uint8_t>(), a2, stream_);
  upload(db1.at<uint8_t>(), b1, stream_);
  upload(db2.at<uint8_t>(), b2, stream_);
  upload(dca.at<int16_t>(), std::vector<int16_t>(n, 0), stream_);
  upload(dcb.at<int16_t>(), std::vector<int16_t>(n, 0), stream_);
  tc::begin_counts_async(ws, stream_);
  tc::accumulate_counts_async(da1.at<uint8_t>(), a1.size(), dca.at<int16_t>(), n, ws, stream_);
  tc::accumulate_counts_async(da2.at<uint8_t>(), a2.size(), dca.at<int16_t>(), n, ws, stream_);
  tc::begin_counts_async(ws, stream_);
  tc::accumulate_counts_async(db1.at<uint8_t>(), b1.size(), dcb.at<int16_t>(), n, ws, stream_);
  tc::accumulate_counts_async(db2.at<uint8_t>(), b2.size(), dcb.at<int16_t>(), n, ws, stream_);
  ws.check(stream_);
  std::vector<int16_t> want_a(n), want_b(n);
  std::vector<std::span<const uint8_t>> as = {a1, a2}, bs = {b1, b2};
  EXPECT_EQ(tq::sum_shared(as, want_a), 0.5f);
  EXPECT_EQ(tq::sum_shared(bs, want_b), 0.25f);
  EXPECT_TRUE(same_bits(want_a, download(dca.at<int16_t>(), n, stream_)));
  EXPECT_TRUE(same_bits(want_b, download(dcb.at<int16_t>(), n, stream_)));
  // A mismatch inside one sum is still caught after a begin.
  tc::begin_counts_async(ws, stream_);
  tc::accumulate_counts_async(da1.at<uint8_t>(), a1.size(), dca.at<int16_t>(), n, ws, stream_);
  tc::accumulate_counts_async(db1.at<uint8_t>(), b1.size(), dca.at<int16_t>(), n, ws, stream_);
  EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kScaleMismatch, "0.25");
}

TEST_F(CudaCodec, PendingErrorBlocksLaterOperationsUntilCheck) {
  const size_t n = 20000;
  tc::Workspace ws(n);
  tq::EncodeParams p;
  const auto good = cpu_encode(gradient(n, 18), p);
  auto bad = good;
  bad[tq::kHeaderBytes + 600] = 0b11000000;
  DeviceBytes dg(good.size()), db(bad.size()), dacc(n * sizeof(float));
  upload(dg.at<uint8_t>(), good, stream_);
  upload(db.at<uint8_t>(), bad, stream_);
  const std::vector<float> acc(n, -2.0f);
  upload(dacc.at<float>(), acc, stream_);
  tc::decode_accumulate_async(db.at<uint8_t>(), bad.size(), dacc.at<float>(), n, ws, stream_);
  tc::decode_accumulate_async(dg.at<uint8_t>(), good.size(), dacc.at<float>(), n, ws, stream_);
  EXPECT_CODEC_ERROR(ws.check(stream_), Errc::kInvalidCode, "body byte 600");
  EXPECT_TRUE(same_bits(acc, download(dacc.at<float>(), n, stream_)));
  // After the check the good payload applies.
  tc::decode_accumulate_async(dg.at<uint8_t>(), good.size(), dacc.at<float>(), n, ws, stream_);
  ws.check(stream_);
  std::vector<float> cpu_acc = acc;
  tq::decode_accumulate(good, cpu_acc);
  EXPECT_TRUE(same_bits(cpu_acc, download(dacc.at<float>(), n, stream_)));
}

TEST_F(CudaCodec, HostArgumentChecksThrowImmediately) {
  const size_t n = 1000;
  tc::Workspace ws(n);
  DeviceBytes dx((n + 1) * sizeof(float)), dout(tq::max_encoded_bytes(n + 1));
  float* x = dx.at<float>();
  uint8_t* out = dout.at<uint8_t>();
  const size_t cap = tq::max_encoded_bytes(n);
  tq::EncodeParams p;

  EXPECT_CODEC_ERROR(tc::encode_async(x, n + 1, p, out, tq::max_encoded_bytes(n + 1), ws, stream_),
                     Errc::kInvalidArgument, "max_elements");
  EXPECT_CODEC_ERROR(tc::stats_async(x, n + 1, ws, stream_), Errc::kInvalidArgument, "1001");
  EXPECT_CODEC_ERROR(tc::encode_async(x, n, p, out, cap - 1, ws, stream_), Errc::kBufferTooSmall,
                     std::to_string(cap - 1));
  EXPECT_CODEC_ERROR(tc::encode_async(nullptr, n, p, out, cap, ws, stream_),
                     Errc::kInvalidArgument, "d_x");
  EXPECT_CODEC_ERROR(tc::encode_async(x, n, p, nullptr, cap, ws, stream_), Errc::kInvalidArgument,
                     "d_out");
  EXPECT_CODEC_ERROR(tc::encode_async(reinterpret_cast<const float*>(out + 1), n, p, out, cap, ws,
                                      stream_),
                     Errc::kInvalidArgument, "aligned");
  for (float clip : {-1.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    tq::EncodeParams q;
    q.clip_factor = clip;
    EXPECT_EQ(cpu_errc([&] { tq::local_scale(tq::TensorStats{}, clip); }), Errc::kInvalidArgument);
    EXPECT_CODEC_ERROR(tc::encode_async(x, n, q, out, cap, ws, stream_), Errc::kInvalidArgument,
                       "clip_factor");
  }
  for (float shared : {-1.0f, -0.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    tq::EncodeParams q;
    q.shared_scale = shared;
    EXPECT_CODEC_ERROR(tc::encode_async(x, n, q, out, cap, ws, stream_), Errc::kInvalidArgument,
                       "shared_scale");
  }
  EXPECT_CODEC_ERROR(tc::decode_async(nullptr, cap, reinterpret_cast<float*>(x), n, ws, stream_),
                     Errc::kInvalidArgument, "d_payload");
  EXPECT_CODEC_ERROR(tc::decode_async(out, cap, nullptr, n, ws, stream_), Errc::kInvalidArgument,
                     "d_out");
  EXPECT_CODEC_ERROR(tc::decode_accumulate_async(out, cap, x, n + 1, ws, stream_),
                     Errc::kInvalidArgument, "max_elements");
  EXPECT_CODEC_ERROR(tc::accumulate_counts_async(out, cap, nullptr, n, ws, stream_),
                     Errc::kInvalidArgument, "d_out");
  ws.check(stream_);  // none of these enqueued anything
}

TEST(CudaCodecNoDevice, DeviceAvailableDoesNotCrash) {
  // Runs everywhere: without a driver or device this must answer false, not abort.
  const bool available = tc::device_available();
  if (!available) GTEST_SKIP() << "no CUDA device: device_available() answered false cleanly";
  int count = 0;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_GT(count, 0);
}

}  // namespace
