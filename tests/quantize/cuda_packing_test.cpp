// The CUDA codec's packed payloads (base-3, codec 4; rANS entropy-coded,
// codec 5) against the CPU encoder and decoder as the reference: the same
// bytes and length for every size, rounding, slice and shared scale; the same
// decoded floats and counts; the same verdict (error code and message) on
// corrupt payloads, with the caller's buffers untouched. Skips, with a
// message, without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cuda.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/format.h"

namespace tq = terngrad::quantize;
namespace tc = terngrad::quantize::cuda;
using tq::CodecError;
using tq::Errc;
using tq::Packing;

namespace {

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(err));
}
#define CUDA_OK(call) cuda_ok((call), #call)

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    void* p = nullptr;
    CUDA_OK(cudaMalloc(&p, bytes + 64));
    base_ = static_cast<uint8_t*>(p);
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* at(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(base_ + byte_offset);
  }

 private:
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

template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& expected, const std::vector<T>& actual) {
  if (expected.size() != actual.size())
    return ::testing::AssertionFailure() << "sizes differ: expected " << expected.size() << ", got "
                                         << actual.size();
  for (size_t i = 0; i < expected.size(); ++i)
    if (std::memcmp(&expected[i], &actual[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "first difference at index " << i << " of " << expected.size()
                                           << ": expected " << +expected[i] << ", got " << +actual[i];
  return ::testing::AssertionSuccess();
}

// Gradient-like: N(bias, sigma) with rare outliers (clipping happens).
std::vector<float> gradient(size_t n, uint64_t seed, float sigma = 1e-3f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(2e-6f, sigma);
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = coin(gen) < 0.002f ? 30.0f * normal(gen) : normal(gen);
  return x;
}

// Mostly zeros with a few large values: tiny rANS streams, long runs of the
// zero symbol (frequencies near 2^14, the x_max saturation path).
std::vector<float> sparse(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  std::vector<float> x(n, 0.0f);
  for (auto& v : x)
    if (coin(gen) < 0.001f) v = coin(gen) < 0.5f ? -1.0f : 1.0f;
  return x;
}

// Uniform in [-1, 1] without clipping: dense codes, rANS loses to base-3
// (the fallback path).
std::vector<float> dense(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = u(gen);
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

std::vector<uint8_t> cpu_encode(const std::vector<float>& x, const tq::EncodeParams& p) {
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size(), p.packing));
  out.resize(tq::encode(x, p, out));
  return out;
}

const std::vector<size_t> kSizes = {0,      1,      2,      4,      5,       19,     20,
                                    21,     1279,   1280,   1281,   81919,   81920,  81921,
                                    163845, 409603, size_t{1} << 20, 3000007};

class CudaPacking : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tc::device_available())
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none, the CUDA packed codec is untested here";
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // GPU encode of x (placed `offset` bytes past an aligned address) through
  // tc::encode(); the returned payload has the length it reported. The
  // buffer's bytes past that length are checked untouched (0xA5).
  std::vector<uint8_t> gpu_encode(const std::vector<float>& x, const tq::EncodeParams& p, tc::Workspace& ws,
                                  size_t offset = 0) {
    const size_t n = x.size();
    const size_t cap = tq::max_encoded_bytes(n, p.packing);
    DeviceBuffer dx(n * sizeof(float) + offset), dout(cap);
    upload(dx.at<float>(offset), x, stream_);
    CUDA_OK(cudaMemsetAsync(dout.at<uint8_t>(), 0xA5, cap, stream_));
    const size_t len = tc::encode(dx.at<float>(offset), n, p, dout.at<uint8_t>(), cap, ws, stream_);
    EXPECT_LE(len, cap);
    auto all = download(dout.at<uint8_t>(), cap, stream_);
    if (p.packing == Packing::kEntropy && all[tq::kHeaderCodecOffset] == tq::kCodecTernaryEntropy)
      for (size_t i = len; i < cap; ++i) EXPECT_EQ(all[i], 0xA5) << "byte " << i << " past the payload";
    all.resize(std::min(len, cap));
    return all;
  }

  cudaStream_t stream_ = nullptr;
};

std::string trace(const std::string& what, size_t n, Packing p) {
  return std::string(what) + ", n = " + std::to_string(n) + ", packing " + tq::packing_name(p);
}

// ---------------------------------------------------------------- encode

TEST_F(CudaPacking, EncodeMatchesCpuBytesForEverySize) {
  tc::Workspace ws(kSizes.back());
  for (size_t n : kSizes) {
    const auto xg = gradient(n, 100 + n);
    const auto xs = sparse(n, 200 + n);
    const auto xd = dense(n, 300 + n);
    for (Packing packing : {Packing::kBase3, Packing::kEntropy}) {
      for (tq::Rounding r : {tq::Rounding::kStochastic, tq::Rounding::kNearest}) {
        for (float clip : {0.0f, 2.5f}) {
          int which = 0;
          for (const auto* x : {&xg, &xs, &xd}) {
            SCOPED_TRACE(trace("data " + std::to_string(which++), n, packing) +
                         (r == tq::Rounding::kNearest ? ", nearest" : ", stochastic") +
                         ", clip = " + std::to_string(clip));
            tq::EncodeParams p;
            p.packing = packing;
            p.rounding = r;
            p.clip_factor = clip;
            p.seed = 0x0123456789ABCDEFull + n;
            p.step = 7;
            p.tensor_id = 3;
            const auto cpu = cpu_encode(*x, p);
            const auto gpu = gpu_encode(*x, p, ws);
            ASSERT_TRUE(same_bits(cpu, gpu));
          }
        }
      }
    }
  }
}

TEST_F(CudaPacking, EncodeTakesTheEntropyPathAndTheFallback) {
  // The sizes above must exercise both outcomes of the entropy packing.
  tc::Workspace ws(1 << 20);
  tq::EncodeParams p;
  p.packing = Packing::kEntropy;
  p.seed = 5;
  const auto big = gpu_encode(gradient(1 << 20, 1), p, ws);
  EXPECT_EQ(big[tq::kHeaderCodecOffset], tq::kCodecTernaryEntropy);
  const auto tiny = gpu_encode(gradient(20, 1), p, ws);
  EXPECT_EQ(tiny[tq::kHeaderCodecOffset], tq::kCodecTernaryBase3);
  // Codes uniform over {-1, 0, +1} (x in {-1, 0, 1}, clip 0: no draw changes
  // them): rANS gets no closer than log2(3) = 1.585 bits to base-3's 1.6,
  // and at 2^16 elements its block states and directory cost more than that
  // difference (from about 2^18 on rANS wins by a hair): the fallback with
  // the symbols of many CUDA blocks copied from scratch.
  p.clip_factor = 0.0f;
  std::vector<float> codes(1 << 16);
  std::mt19937_64 gen(2);
  for (auto& v : codes) v = static_cast<float>(static_cast<int>(gen() % 3) - 1);
  const auto flat = gpu_encode(codes, p, ws);
  EXPECT_EQ(flat[tq::kHeaderCodecOffset], tq::kCodecTernaryBase3) << "uniform codes at 2^16 elements";
  EXPECT_TRUE(same_bits(cpu_encode(codes, p), flat));
  EXPECT_EQ(ws.encoded_bytes(stream_), flat.size());
}

TEST_F(CudaPacking, EncodeUnalignedInputAndSeeds) {
  tc::Workspace ws(200003);
  struct Rng {
    uint64_t seed;
    uint32_t step, tensor_id;
  };
  for (const Rng& r : {Rng{0, 0, 0}, Rng{42, 0xFFFFFFFFu, 0x80000001u}}) {
    for (size_t n : {size_t{7}, size_t{81923}, size_t{200003}}) {
      const auto x = gradient(n, 7 * n);
      for (Packing packing : {Packing::kBase3, Packing::kEntropy}) {
        for (size_t offset : {size_t{4}, size_t{8}, size_t{12}}) {
          SCOPED_TRACE(trace("unaligned", n, packing) + ", offset " + std::to_string(offset));
          tq::EncodeParams p;
          p.packing = packing;
          p.seed = r.seed;
          p.step = r.step;
          p.tensor_id = r.tensor_id;
          EXPECT_TRUE(same_bits(cpu_encode(x, p), gpu_encode(x, p, ws, offset)));
        }
      }
    }
  }
}

TEST_F(CudaPacking, EncodeSharedScaleHostAndDevice) {
  const size_t n = 409603;
  tc::Workspace ws(n);
  const auto x = gradient(n, 11);
  const float own = tq::local_scale(tq::compute_stats(x), 2.5f);
  DeviceBuffer dx(n * sizeof(float)), dscales(2 * sizeof(float));
  upload(dx.at<float>(), x, stream_);
  for (Packing packing : {Packing::kBase3, Packing::kEntropy}) {
    for (float factor : {1.0f, 3.0f, 1000.0f}) {
      SCOPED_TRACE(trace("shared", n, packing) + ", factor " + std::to_string(factor));
      tq::EncodeParams p;
      p.packing = packing;
      p.seed = 17;
      p.shared_scale = own * factor;
      const auto cpu = cpu_encode(x, p);
      EXPECT_TRUE(same_bits(cpu, gpu_encode(x, p, ws)));
      EXPECT_EQ(cpu[tq::kHeaderFlagsOffset] & tq::kFlagSharedScale, tq::kFlagSharedScale);
      // The same through device scales.
      upload(dscales.at<float>(), std::vector<float>{own, own * factor}, stream_);
      const size_t cap = tq::max_encoded_bytes(n, packing);
      DeviceBuffer dout(cap);
      tq::EncodeParams pd = p;
      pd.shared_scale.reset();
      tc::encode_shared_async(dx.at<float>(), n, pd, dscales.at<float>(), 2, dout.at<uint8_t>(), cap, ws, stream_);
      const size_t len = ws.encoded_bytes(stream_);
      EXPECT_TRUE(same_bits(cpu, download(dout.at<uint8_t>(), len, stream_)));
    }
  }
}

TEST_F(CudaPacking, EncodeSliceMatchesCpuSlice) {
  const size_t n = 500001;
  tc::Workspace ws(n);
  const auto x = gradient(n, 4242);
  const tq::TensorStats whole = tq::compute_stats(x);
  DeviceBuffer dx(n * sizeof(float));
  upload(dx.at<float>(), x, stream_);
  const std::vector<uint64_t> cuts = {0, 4, 81924, 163844, 400000, n};
  for (Packing packing : {Packing::kBase3, Packing::kEntropy}) {
    for (size_t s = 0; s + 1 < cuts.size(); ++s) {
      const uint64_t count = cuts[s + 1] - cuts[s];
      SCOPED_TRACE(trace("slice", count, packing) + " at " + std::to_string(cuts[s]));
      tq::EncodeParams p;
      p.packing = packing;
      p.seed = 77;
      p.step = 3;
      p.tensor_id = 9;
      p.element_offset = cuts[s];
      std::vector<uint8_t> cpu(tq::max_encoded_bytes(count, packing));
      cpu.resize(tq::encode_with_stats(std::span<const float>(x.data() + cuts[s], count), whole, p, cpu));
      DeviceBuffer dout(tq::max_encoded_bytes(count, packing));
      const size_t len = tc::encode_slice(dx.at<float>(), n, count, p, dout.at<uint8_t>(),
                                          tq::max_encoded_bytes(count, packing), ws, stream_);
      EXPECT_TRUE(same_bits(cpu, download(dout.at<uint8_t>(), len, stream_)));
    }
  }
}

TEST_F(CudaPacking, EncodeRefusesASmallBufferAndNonFiniteInput) {
  const size_t n = 100000;
  tc::Workspace ws(n);
  auto x = gradient(n, 3);
  DeviceBuffer dx(n * sizeof(float)), dout(tq::max_encoded_bytes(n));
  upload(dx.at<float>(), x, stream_);
  tq::EncodeParams p;
  p.packing = Packing::kEntropy;
  const auto e = codec_error_of([&] {
    tc::encode_async(dx.at<float>(), n, p, dout.at<uint8_t>(), tq::max_encoded_bytes(n, p.packing) - 1, ws, stream_);
  });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), Errc::kBufferTooSmall);
  // NaN input: refused on the device, nothing written.
  x[77777] = std::nanf("");
  upload(dx.at<float>(), x, stream_);
  const std::vector<uint8_t> sentinel(tq::max_encoded_bytes(n), 0x5A);
  upload(dout.at<uint8_t>(), sentinel, stream_);
  for (Packing packing : {Packing::kBase3, Packing::kEntropy}) {
    p.packing = packing;
    const auto err = codec_error_of([&] {
      tc::encode(dx.at<float>(), n, p, dout.at<uint8_t>(), tq::max_encoded_bytes(n, packing), ws, stream_);
    });
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->code(), Errc::kNonFinite) << err->what();
    EXPECT_TRUE(same_bits(sentinel, download(dout.at<uint8_t>(), sentinel.size(), stream_)));
  }
}

// ---------------------------------------------------------------- decode

// decode_any_async / decode_accumulate_any_async / accumulate_counts_any_async
// of one payload against the CPU's decode / decode_accumulate / accumulate_counts.
class CudaPackingDecode : public CudaPacking {
 protected:
  void expect_same_as_cpu(const std::vector<uint8_t>& payload, size_t n, tc::Workspace& ws) {
    DeviceBuffer dp(payload.size()), dout(n * sizeof(float));
    upload(dp.at<uint8_t>(), payload, stream_);
    std::vector<float> cpu(n, -3.0f);
    const auto cpu_err = codec_error_of([&] { tq::decode(payload, cpu); });
    std::vector<float> before(n, -3.0f);
    upload(dout.at<float>(), before, stream_);
    tc::decode_any_async(dp.at<uint8_t>(), payload.size(), dout.at<float>(), n, ws, stream_);
    const auto gpu_err = codec_error_of([&] { ws.check(stream_); });
    compare(cpu_err, gpu_err);
    EXPECT_TRUE(same_bits(cpu_err ? before : cpu, download(dout.at<float>(), n, stream_))) << "decode";

    std::vector<float> acc(n);
    for (size_t i = 0; i < n; ++i) acc[i] = 0.25f * static_cast<float>(i % 7);
    std::vector<float> cpu_acc = acc;
    const auto cpu_acc_err = codec_error_of([&] { tq::decode_accumulate(payload, cpu_acc); });
    upload(dout.at<float>(), acc, stream_);
    tc::decode_accumulate_any_async(dp.at<uint8_t>(), payload.size(), dout.at<float>(), n, ws, stream_);
    compare(cpu_acc_err, codec_error_of([&] { ws.check(stream_); }));
    EXPECT_TRUE(same_bits(cpu_acc_err ? acc : cpu_acc, download(dout.at<float>(), n, stream_))) << "accumulate";

    std::vector<int16_t> counts(n);
    for (size_t i = 0; i < n; ++i) counts[i] = static_cast<int16_t>(i % 5) - 2;
    std::vector<int16_t> cpu_counts = counts;
    const auto cpu_cnt_err = codec_error_of([&] { tq::accumulate_counts(payload, cpu_counts); });
    upload(dout.at<int16_t>(), counts, stream_);
    tc::accumulate_counts_any_async(dp.at<uint8_t>(), payload.size(), dout.at<int16_t>(), n, ws, stream_);
    compare(cpu_cnt_err, codec_error_of([&] { ws.check(stream_); }));
    EXPECT_TRUE(same_bits(cpu_cnt_err ? counts : cpu_counts, download(dout.at<int16_t>(), n, stream_)))
        << "counts";
    ws.check(stream_);  // nothing left pending
  }

  // The same verdict; for packed payloads the CPU's message too.
  static void compare(const std::optional<CodecError>& cpu, const std::optional<CodecError>& gpu) {
    ASSERT_EQ(cpu.has_value(), gpu.has_value())
        << "CPU: " << (cpu ? cpu->what() : "accepted") << "; GPU: " << (gpu ? gpu->what() : "accepted");
    if (!cpu) return;
    EXPECT_EQ(static_cast<int>(cpu->code()), static_cast<int>(gpu->code()))
        << "CPU: " << cpu->what() << "; GPU: " << gpu->what();
    const std::string c = cpu->what();
    if (c.find("base-3") != std::string::npos || c.find("entropy-coded") != std::string::npos)
      EXPECT_EQ(c, std::string(gpu->what()));
  }
};

TEST_F(CudaPackingDecode, EveryPackingDecodesAsOnTheCpu) {
  tc::Workspace ws(kSizes.back());
  for (size_t n : kSizes) {
    for (Packing packing : {Packing::k2Bit, Packing::kBase3, Packing::kEntropy}) {
      for (int data = 0; data < 2; ++data) {
        SCOPED_TRACE(trace(data == 0 ? "gradient" : "sparse", n, packing));
        tq::EncodeParams p;
        p.packing = packing;
        p.seed = 99 + n;
        const auto x = data == 0 ? gradient(n, 5 + n) : sparse(n, 6 + n);
        expect_same_as_cpu(cpu_encode(x, p), n, ws);
      }
    }
  }
}

TEST_F(CudaPackingDecode, GpuRoundTrip) {
  const size_t n = 3000007;
  tc::Workspace ws(n);
  const auto x = gradient(n, 31);
  for (Packing packing : {Packing::kBase3, Packing::kEntropy}) {
    SCOPED_TRACE(tq::packing_name(packing));
    tq::EncodeParams p;
    p.packing = packing;
    p.seed = 8;
    const auto payload = gpu_encode(x, p, ws);
    std::vector<float> cpu(n);
    tq::decode(payload, cpu);
    DeviceBuffer dp(payload.size()), dout(n * sizeof(float));
    upload(dp.at<uint8_t>(), payload, stream_);
    tc::decode_any_async(dp.at<uint8_t>(), payload.size(), dout.at<float>(), n, ws, stream_);
    ws.check(stream_);
    EXPECT_TRUE(same_bits(cpu, download(dout.at<float>(), n, stream_)));
  }
}

TEST_F(CudaPackingDecode, CorruptEntropyPayloadsGetTheCpuVerdict) {
  const size_t n = 200003;
  tc::Workspace ws(n);
  tq::EncodeParams p;
  p.packing = Packing::kEntropy;
  p.seed = 4;
  const auto good = cpu_encode(gradient(n, 4), p);
  ASSERT_EQ(good[tq::kHeaderCodecOffset], tq::kCodecTernaryEntropy);
  std::mt19937 rng(8);
  // Single bit flips: header, directory, the streams' states and words.
  for (size_t i = 0; i < good.size(); i += (i < 120 ? 1 : 997)) {
    SCOPED_TRACE("bit flip in byte " + std::to_string(i));
    auto bad = good;
    bad[i] ^= static_cast<uint8_t>(1u << (rng() % 8));
    expect_same_as_cpu(bad, n, ws);
  }
  auto reseal = [](std::vector<uint8_t> b) {
    tq::store_le32(b.data() + tq::kEntropyCrcOffset, tq::crc32_ieee(b.data(), tq::kEntropyCrcOffset));
    return b;
  };
  struct Case {
    const char* name;
    std::function<std::vector<uint8_t>()> make;
  };
  const std::vector<Case> cases = {
      {"lanes 33", [&] { auto b = good; b[tq::kEntropyLanesOffset] = 33; return reseal(b); }},
      {"lanes 0", [&] { auto b = good; b[tq::kEntropyLanesOffset] = 0; return reseal(b); }},
      {"lanes 1 (valid field, wrong streams)", [&] { auto b = good; b[tq::kEntropyLanesOffset] = 1; return reseal(b); }},
      {"block log2 3", [&] { auto b = good; b[tq::kEntropyBlockLog2Offset] = 3; return reseal(b); }},
      {"block log2 4", [&] { auto b = good; b[tq::kEntropyBlockLog2Offset] = 4; return reseal(b); }},
      {"group 4", [&] { auto b = good; b[tq::kEntropyGroupOffset] = 4; return reseal(b); }},
      {"reserved byte", [&] { auto b = good; b[tq::kEntropyReservedOffset] = 1; return reseal(b); }},
      {"flags", [&] { auto b = good; b[tq::kHeaderFlagsOffset] |= 0x80; return reseal(b); }},
      {"version", [&] { auto b = good; b[tq::kHeaderVersionOffset] = 2; return reseal(b); }},
      {"header size", [&] { auto b = good; b[tq::kHeaderSizeOffset] = 40; return reseal(b); }},
      {"NaN scale", [&] { auto b = good; tq::store_le32(b.data() + 16, 0x7FC00000u); return reseal(b); }},
      {"count 2^62 + 1", [&] { auto b = good; tq::store_le64(b.data() + 8, (uint64_t{1} << 62) + 1); return reseal(b); }},
      {"count + 1", [&] { auto b = good; tq::store_le64(b.data() + 8, n + 1); return reseal(b); }},
      {"count huge (directory does not fit)", [&] { auto b = good; tq::store_le64(b.data() + 8, uint64_t{1} << 40); return reseal(b); }},
      {"length field + 1", [&] { auto b = good; tq::store_le64(b.data() + tq::kEntropyLengthOffset, b.size() + 1); return reseal(b); }},
      {"truncated by one byte", [&] { auto b = good; b.pop_back(); return b; }},
      {"truncated, length resealed", [&] { auto b = good; b.pop_back(); tq::store_le64(b.data() + tq::kEntropyLengthOffset, b.size()); return reseal(b); }},
      {"padded, length resealed", [&] { auto b = good; b.push_back(0); tq::store_le64(b.data() + tq::kEntropyLengthOffset, b.size()); return reseal(b); }},
      {"block 0 probability", [&] { auto b = good; b[tq::kEntropyHeaderBytes + 4] ^= 1; return b; }},
      {"block 1 stream length + 2, block 2 - 2", [&] {
         auto b = good;
         uint8_t* d1 = b.data() + tq::kEntropyHeaderBytes + 10;
         tq::store_le32(d1, tq::load_le32(d1) + 2);
         tq::store_le32(d1 + 10, tq::load_le32(d1 + 10) - 2);
         return b;
       }},
      {"block 0 first state zero", [&] {
         auto b = good;
         const size_t dir = tq::kEntropyHeaderBytes + 10 * ((tq::base3_body_bytes(n) + 16383) / 16384);
         tq::store_le32(b.data() + dir, 0);
         return b;
       }},
      {"short header", [&] { return std::vector<uint8_t>(good.begin(), good.begin() + 51); }},
      {"6 bytes", [&] { return std::vector<uint8_t>(good.begin(), good.begin() + 6); }},
      {"empty", [&] { return std::vector<uint8_t>(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_same_as_cpu(c.make(), n, ws);
  }
}

TEST_F(CudaPackingDecode, PaddingDigitsOfTheLastEntropySymbol) {
  // A one-block payload coded with a nonzero padding digit: rebuilt by
  // re-encoding is not possible from outside, so take sizes whose last symbol
  // is partial and flip stream bits until the CPU names the padding (the
  // stream then decodes cleanly to another last symbol).
  for (size_t n : {size_t{20001}, size_t{20003}}) {
    tc::Workspace ws(n);
    tq::EncodeParams p;
    p.packing = Packing::kEntropy;
    p.seed = 12;
    const auto good = cpu_encode(gradient(n, 77), p);
    ASSERT_EQ(good[tq::kHeaderCodecOffset], tq::kCodecTernaryEntropy);
    int seen = 0;
    for (size_t i = good.size() - 64; i < good.size() && seen < 3; ++i) {
      for (int bit = 0; bit < 8 && seen < 3; ++bit) {
        auto bad = good;
        bad[i] ^= static_cast<uint8_t>(1u << bit);
        std::vector<float> out(n);
        const auto e = codec_error_of([&] { tq::decode(bad, out); });
        if (!e || std::string(e->what()).find("padding digit") == std::string::npos) continue;
        ++seen;
        SCOPED_TRACE("n " + std::to_string(n) + ", byte " + std::to_string(i) + " bit " + std::to_string(bit));
        expect_same_as_cpu(bad, n, ws);
      }
    }
    // Not guaranteed to occur; the bit flips above cover the rest of the verdicts.
    if (seen == 0) GTEST_LOG_(INFO) << "no bit flip produced a padding fault for n = " << n;
  }
}

TEST_F(CudaPackingDecode, CorruptBase3PayloadsGetTheCpuVerdict) {
  for (size_t n : {size_t{12}, size_t{81923}}) {
    tc::Workspace ws(n);
    tq::EncodeParams p;
    p.packing = Packing::kBase3;
    p.seed = 1;
    const auto good = cpu_encode(gradient(n, 2), p);
    const size_t nb = tq::base3_body_bytes(n);
    auto reseal = [](std::vector<uint8_t> b) {
      tq::store_le32(b.data() + tq::kHeaderCrcOffset, tq::crc32_ieee(b.data(), tq::kHeaderCrcOffset));
      return b;
    };
    struct Case {
      const char* name;
      std::function<std::vector<uint8_t>()> make;
    };
    const std::vector<Case> cases = {
        {"byte 0 = 243", [&] { auto b = good; b[tq::kHeaderBytes] = 243; return b; }},
        {"several bad bytes", [&] { auto b = good; b[tq::kHeaderBytes + nb - 1] = 255; b[tq::kHeaderBytes + nb / 2] = 250; return b; }},
        {"padding", [&] { auto b = good; b.back() = 242; return b; }},
        {"last byte 255", [&] { auto b = good; b.back() = 255; return b; }},
        {"truncated", [&] { auto b = good; b.pop_back(); return b; }},
        {"padded", [&] { auto b = good; b.push_back(0); return b; }},
        {"count + 5 (resealed)", [&] { auto b = good; tq::store_le64(b.data() + 8, n + 5); return reseal(b); }},
        {"count - 1 (resealed, same length)", [&] { auto b = good; tq::store_le64(b.data() + 8, n - 1); return reseal(b); }},
        {"flags", [&] { auto b = good; b[6] |= 0x40; return reseal(b); }},
        {"negative scale", [&] { auto b = good; b[19] |= 0x80; return reseal(b); }},
        {"header size", [&] { auto b = good; b[7] = 52; return reseal(b); }},
        {"crc", [&] { auto b = good; b[37] ^= 1; return b; }},
        {"magic", [&] { auto b = good; b[0] ^= 1; return b; }},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + ", n " + std::to_string(n));
      expect_same_as_cpu(c.make(), n, ws);
    }
  }
}

TEST_F(CudaPackingDecode, ScaleMismatchAcrossPackings) {
  const size_t n = 90001;
  tc::Workspace ws(n);
  tq::EncodeParams p;
  p.shared_scale = 0.5f;
  p.packing = Packing::kEntropy;
  const auto a = cpu_encode(gradient(n, 16), p);
  p.shared_scale = 0.25f;
  p.packing = Packing::kBase3;
  const auto b = cpu_encode(gradient(n, 17), p);
  DeviceBuffer da(a.size()), db(b.size()), dc(n * sizeof(int16_t));
  upload(da.at<uint8_t>(), a, stream_);
  upload(db.at<uint8_t>(), b, stream_);
  upload(dc.at<int16_t>(), std::vector<int16_t>(n, 0), stream_);
  tc::accumulate_counts_any_async(da.at<uint8_t>(), a.size(), dc.at<int16_t>(), n, ws, stream_);
  tc::accumulate_counts_any_async(db.at<uint8_t>(), b.size(), dc.at<int16_t>(), n, ws, stream_);
  const auto e = codec_error_of([&] { ws.check(stream_); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), Errc::kScaleMismatch) << e->what();
  std::vector<int16_t> only_a(n, 0);
  tq::accumulate_counts(a, only_a);
  EXPECT_TRUE(same_bits(only_a, download(dc.at<int16_t>(), n, stream_)));
}

TEST_F(CudaPackingDecode, HostArgumentChecks) {
  tc::Workspace ws(100);
  DeviceBuffer dp(64), dout(1000 * sizeof(float));
  auto code_of = [](const std::function<void()>& f) {
    const auto e = codec_error_of(f);
    return e ? e->code() : Errc::kCuda;
  };
  EXPECT_EQ(code_of([&] { tc::decode_any_async(dp.at<uint8_t>(), 64, dout.at<float>(), 101, ws, stream_); }),
            Errc::kInvalidArgument);
  EXPECT_EQ(code_of([&] { tc::decode_any_async(nullptr, 64, dout.at<float>(), 10, ws, stream_); }),
            Errc::kInvalidArgument);
  EXPECT_EQ(code_of([&] { tc::decode_any_async(dp.at<uint8_t>(), 64, dout.at<float>(1), 10, ws, stream_); }),
            Errc::kInvalidArgument);
  ws.check(stream_);
}

}  // namespace
