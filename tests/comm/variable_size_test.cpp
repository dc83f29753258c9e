// Codecs whose payload size depends on the values (variable_size()): the
// interface's contract on the test codec "varsize_test"
// (tests/support/varsize_test_codec.h), the fixed-size codecs' unchanged
// answers, and the wrappers that decode what they encoded themselves
// (ef(): its residual is against the bytes sent; server_ef(): it sends back
// only the bytes its payload uses).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../support/varsize_test_codec.h"
#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;
using codec_test::normal_floats;
using codec_test::same_bits;

namespace {

// 1 element in `every` is nonzero (sizes that vary with the values).
std::vector<float> sparse_floats(size_t n, size_t every, uint64_t seed) {
  std::vector<float> g = normal_floats(n, seed);
  for (size_t i = 0; i < n; ++i)
    if (i % every != 0) g[i] = 0.0f;
  return g;
}

// The residual an "ef(...)" state holds (state blob: 20-byte header, n floats).
std::vector<float> residual_of(const tc::GradientCodec& ef, size_t n) {
  const std::vector<uint8_t> state = ef.save_state();
  EXPECT_GE(state.size(), 20 + 4 * n);
  std::vector<float> e(n);
  if (state.size() >= 20 + 4 * n) std::memcpy(e.data(), state.data() + 20, 4 * n);
  return e;
}

}  // namespace

TEST(VariableSize, TestCodecWritesWhatTheValuesNeedWithinTheCapacity) {
  varsize_test::register_varsize_test_codec();
  auto c = tc::make_codec("varsize_test");
  EXPECT_TRUE(c->variable_size());
  const size_t n = 1001;
  std::vector<size_t> sizes;
  for (size_t every : {1, 3, 50}) {
    const std::vector<float> g = sparse_floats(n, every, every);
    std::vector<uint8_t> out(c->payload_bytes(n), 0xAB);
    const size_t used = c->encode(g, {}, out);
    EXPECT_EQ(used, c->encoded_size(out, n));
    EXPECT_LE(used, c->payload_bytes(n));
    sizes.push_back(used);
    std::vector<float> back(n);
    c->decode(std::span<const uint8_t>(out).first(used), back);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(back[i], g[i])) << i;
    // The capacity's bytes are not the payload: its decoder says so.
    if (used < out.size()) codec_test::expect_rejected_saying_on_decode(*c, out, n, "the header says");
  }
  EXPECT_EQ(sizes[0], c->payload_bytes(n));  // every element nonzero: the capacity exactly
  EXPECT_LT(sizes[1], sizes[0]);
  EXPECT_LT(sizes[2], sizes[1]);
}

TEST(VariableSize, EncodedSizeRefusesWhatIsNotAPayloadOfTheCodec) {
  varsize_test::register_varsize_test_codec();
  auto c = tc::make_codec("varsize_test");
  const std::vector<float> g = sparse_floats(64, 4, 1);
  std::vector<uint8_t> out(c->payload_bytes(64));
  const size_t used = c->encode(g, {}, out);
  EXPECT_THROW(c->encoded_size(std::span<const uint8_t>(out).first(used - 1), 64), std::invalid_argument);
  EXPECT_THROW(c->encoded_size(out, 65), std::invalid_argument);  // another element count
  out[0] ^= 1;
  EXPECT_THROW(c->encoded_size(out, 64), std::invalid_argument);
}

// Fixed-size codecs: encoded_size is payload_bytes (and needs that many).
TEST(VariableSize, FixedSizeCodecsUseTheirWholePayload) {
  for (const char* spec : {"fp32", "fp16", "terngrad", "topk:ratio=0.1", "ef(sign)", "server_ef(terngrad)"}) {
    SCOPED_TRACE(spec);
    auto c = tc::make_codec(spec);
    EXPECT_FALSE(c->variable_size());
    const std::vector<float> g = normal_floats(100, 5);
    std::vector<uint8_t> out(c->payload_bytes(100) + 7);
    EXPECT_EQ(c->encode(g, {}, out), c->payload_bytes(100));
    EXPECT_EQ(c->encoded_size(out, 100), c->payload_bytes(100));
    EXPECT_THROW(c->encoded_size(std::span<const uint8_t>(out).first(c->payload_bytes(100) - 1), 100),
                 std::invalid_argument);
  }
}

// ef(): e' = p - decode(what was sent), the sent payload being the used
// bytes of each slice (with and without momentum, whose masking reads it too).
TEST(VariableSize, ErrorFeedbackKeepsWhatTheShorterPayloadDidNotSend) {
  varsize_test::register_varsize_test_codec();
  for (const char* spec : {"ef(varsize_test:threshold=0.5)", "ef(varsize_test:threshold=0.5):momentum=0.9"}) {
    SCOPED_TRACE(spec);
    auto ef = tc::make_codec(spec);
    EXPECT_TRUE(ef->variable_size());
    const size_t n = 1000;
    const std::vector<float> g = normal_floats(n, 9);
    // Two slices, each in a buffer of the capacity.
    const tc::ElementRange slices[2] = {{0, 600}, {600, 400}};
    std::vector<uint8_t> a(ef->payload_bytes(600)), b(ef->payload_bytes(400));
    const std::span<uint8_t> outs[2] = {a, b};
    ef->encode_slices(g, {}, slices, outs);
    const size_t used_a = ef->encoded_size(a, 600), used_b = ef->encoded_size(b, 400);
    EXPECT_LT(used_a, a.size());
    EXPECT_LT(used_b, b.size());
    std::vector<float> sent(n);
    ef->decode(std::span<const uint8_t>(a).first(used_a), std::span<float>(sent).first(600));
    ef->decode(std::span<const uint8_t>(b).first(used_b), std::span<float>(sent).subspan(600));
    const std::vector<float> e = residual_of(*ef, n);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool small = std::fabs(g[i]) <= 0.5f;
      ASSERT_TRUE(same_bits(sent[i], small ? 0.0f : g[i])) << i;
      ASSERT_TRUE(same_bits(e[i], g[i] - sent[i])) << i;
      kept += small;
    }
    EXPECT_GT(kept, n / 4);  // the residual holds something
    // The next step sends g + e: the kept elements come back once they grow.
    std::vector<uint8_t> next(ef->payload_bytes(n));
    const size_t used = ef->encode(g, {}, next);
    std::vector<float> sent2(n);
    ef->decode(std::span<const uint8_t>(next).first(used), sent2);
    size_t recovered = 0;
    for (size_t i = 0; i < n; ++i) recovered += std::fabs(g[i]) <= 0.5f && sent2[i] != 0.0f;
    EXPECT_GT(recovered, 0u);
  }
}

// server_ef(): the server's re-encoded sum is one payload of the inner codec,
// cut to its used bytes.
TEST(VariableSize, ServerErrorFeedbackSendsBackOnlyTheUsedBytes) {
  varsize_test::register_varsize_test_codec();
  auto c = tc::make_codec("server_ef(varsize_test:threshold=1)");
  EXPECT_TRUE(c->variable_size());
  const size_t n = 500;
  const std::vector<uint8_t> p0 = codec_test::encode(*c, normal_floats(n, 1));
  const std::vector<uint8_t> p1 = codec_test::encode(*c, normal_floats(n, 2));
  const std::span<const uint8_t> payloads[2] = {p0, p1};
  std::vector<uint8_t> state, out;
  c->aggregate_step(payloads, n, {0, 0, 0}, state, out);
  EXPECT_LT(out.size(), c->payload_bytes(n));
  EXPECT_EQ(out.size(), c->encoded_size(out, n));
  std::vector<float> sum(n);
  c->decode_aggregate(out, sum);
  // What was not sent back is the residual: sum + e' = decode(p0) + decode(p1).
  std::vector<float> want(n, 0.0f);
  c->decode_accumulate(p0, want);
  c->decode_accumulate(p1, want);
  for (size_t i = 0; i < n; ++i) {
    float e;
    std::memcpy(&e, state.data() + 16 + 4 * i, 4);
    ASSERT_TRUE(same_bits(e, want[i] - sum[i])) << i;
  }
}
