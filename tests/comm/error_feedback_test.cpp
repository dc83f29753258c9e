// ef(<codec>): the error-feedback identities, bit for bit against a float32
// reference written here, and its checkpointed state.
#include <gtest/gtest.h>

#include <cstring>

#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;
using codec_test::normal_floats;
using codec_test::same_bits;

namespace {

// One step of the reference: p = g + e; e' = p - decode(payload).
struct ReferenceEf {
  std::vector<float> e, u;
  float momentum = 0.0f;

  std::vector<float> corrected(const std::vector<float>& g) {
    if (e.empty()) e.assign(g.size(), 0.0f), u.assign(g.size(), 0.0f);
    std::vector<float> p(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const float ui = momentum * u[i] + g[i];
      p[i] = (momentum != 0.0f ? ui : g[i]) + e[i];
      if (momentum != 0.0f) u[i] = ui;
    }
    return p;
  }
  void sent(const std::vector<float>& p, const std::vector<float>& s) {
    for (size_t i = 0; i < p.size(); ++i) {
      e[i] = p[i] - s[i];
      if (momentum != 0.0f && s[i] != 0.0f) u[i] = 0.0f;
    }
  }
};

tc::EncodeContext ctx_at(uint32_t step) {
  tc::EncodeContext c;
  c.tensor_id = 3;
  c.step = step;
  c.seed = 77;
  return c;
}

}  // namespace

// For every inner codec: the payload is the inner codec's encoding of g + e,
// and e' = (g + e) - decode(payload), over several steps.
TEST(ErrorFeedback, EncodesGradientPlusResidualAndKeepsWhatWasNotSent) {
  // terngrad (every packing and rounding) takes the fused path
  // (GradientCodec::encode_slices_error_feedback) without momentum.
  for (const char* inner : {"terngrad:share_scale=0", "fp16", "terngrad", "terngrad:bucket=512", "terngrad:round=nearest",
                            "terngrad:pack=base3", "terngrad:round=nearest,pack=entropy", "qsgd:levels=7,bucket=64",
                            "sign:scale=mean", "sign", "topk:ratio=0.05", "randomk:ratio=0.1"}) {
    for (float momentum : {0.0f, 0.9f}) {
      SCOPED_TRACE(std::string(inner) + " momentum " + std::to_string(momentum));
      tc::CodecConfig config = tc::parse_codec_config(inner);
      config.error_feedback = tc::ErrorFeedbackParams{momentum};
      auto ef = tc::make_codec(config);
      auto plain = tc::make_codec(inner);
      ReferenceEf ref;
      ref.momentum = momentum;
      const size_t n = 1001;
      for (uint32_t step = 0; step < 5; ++step) {
        const std::vector<float> g = normal_floats(n, 100 + step, 0.01f);
        const std::vector<float> p = ref.corrected(g);
        tc::EncodeContext c = ctx_at(step);
        if (ef->wants_shared_scale()) {
          const float scale = ef->local_scale(g);
          EXPECT_TRUE(same_bits(scale, plain->local_scale(p)));
          c.shared_scale = scale;
        }
        const std::vector<uint8_t> got = codec_test::encode(*ef, g, c);
        const std::vector<uint8_t> want = codec_test::encode(*plain, p, c);
        ASSERT_EQ(got, want) << "step " << step;
        std::vector<float> s(n);
        plain->decode(want, s);
        ref.sent(p, s);
        // The identity the state must satisfy: sent + e' reproduces g + e
        // (to the rounding of one subtraction), and the saved e' is ref's.
        const std::vector<uint8_t> state = ef->save_state();
        ASSERT_GE(state.size(), 20 + 4 * n);
        for (size_t i = 0; i < n; ++i) {
          float e;
          std::memcpy(&e, state.data() + 20 + 4 * i, 4);
          ASSERT_TRUE(same_bits(e, ref.e[i])) << i;
          ASSERT_NEAR(s[i] + e, p[i], 1e-6f * (std::abs(p[i]) + std::abs(s[i])) + 1e-12f);
        }
      }
    }
  }
}

// Over many steps of a constant gradient, error feedback sends (on average)
// the gradient itself: the sum of what was sent trails the sum of the
// gradients by exactly the final residual.
TEST(ErrorFeedback, NothingIsLostOnlyDelayed) {
  auto ef = tc::make_codec("ef(terngrad:share_scale=0)");
  const size_t n = 256;
  const std::vector<float> g = normal_floats(n, 5, 0.01f);
  std::vector<double> sent_total(n, 0.0), g_total(n, 0.0);
  for (uint32_t step = 0; step < 200; ++step) {
    const std::vector<uint8_t> payload = codec_test::encode(*ef, g, ctx_at(step));
    std::vector<float> s(n);
    ef->decode(payload, s);
    for (size_t i = 0; i < n; ++i) sent_total[i] += s[i], g_total[i] += g[i];
  }
  const std::vector<uint8_t> state = ef->save_state();
  for (size_t i = 0; i < n; ++i) {
    float e;
    std::memcpy(&e, state.data() + 20 + 4 * i, 4);
    EXPECT_NEAR(sent_total[i] + e, g_total[i], 1e-4 * std::abs(g_total[i]) + 1e-5) << i;
  }
}

TEST(ErrorFeedback, StateResumesBitExactly) {
  for (const char* spec : {"ef(terngrad)", "ef(fp16):momentum=0.9"}) {
    SCOPED_TRACE(spec);
    auto a = tc::make_codec(spec), b = tc::make_codec(spec);
    const size_t n = 333;
    auto step_of = [&](tc::GradientCodec& c, uint32_t step) {
      const std::vector<float> g = normal_floats(n, 900 + step, 0.02f);
      tc::EncodeContext ctx = ctx_at(step);
      if (c.wants_shared_scale()) ctx.shared_scale = c.local_scale(g);
      return codec_test::encode(c, g, ctx);
    };
    EXPECT_TRUE(a->save_state().empty());  // nothing encoded yet: nothing to carry
    for (uint32_t s = 0; s < 3; ++s) step_of(*a, s);
    b->load_state(a->save_state());  // "restart" b from a's checkpoint
    for (uint32_t s = 3; s < 6; ++s) ASSERT_EQ(step_of(*a, s), step_of(*b, s)) << s;
    EXPECT_EQ(a->save_state(), b->save_state());
  }
}

TEST(ErrorFeedback, RejectsForeignOrDamagedStateWithoutChangingIt) {
  auto ef = tc::make_codec("ef(fp32)");
  const std::vector<float> g = normal_floats(16, 1);
  codec_test::encode(*ef, g, ctx_at(0));
  const std::vector<uint8_t> good = ef->save_state();
  auto expect_refused = [&](std::vector<uint8_t> blob, const char* part) {
    try {
      ef->load_state(blob);
      ADD_FAILURE() << "accepted a bad state (" << part << ")";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_EQ(ef->save_state(), good);
  };
  expect_refused({1, 2, 3}, "shorter");
  std::vector<uint8_t> b = good;
  b[0] ^= 1;
  expect_refused(b, "magic");
  b = good;
  b[4] = 9;
  expect_refused(b, "version");
  b = good;
  b.pop_back();
  expect_refused(b, "do not hold");
  b = good;
  b[16] = 1;  // claims a momentum buffer the codec has not
  expect_refused(b, "momentum");
  // A state from a variable of another size is refused at the next encode.
  auto other = tc::make_codec("ef(fp32)");
  other->load_state(good);
  const std::vector<float> g2 = normal_floats(20, 2);
  std::vector<uint8_t> out(other->payload_bytes(g2.size()));
  EXPECT_THROW(other->encode(g2, ctx_at(1), out), std::invalid_argument);
}

TEST(ErrorFeedback, AggregatesAsItsInnerCodec) {
  auto ef = tc::make_codec("ef(terngrad)");
  auto plain = tc::make_codec("terngrad");
  EXPECT_TRUE(ef->sums_without_decoding());
  EXPECT_EQ(ef->payload_bytes(1000), plain->payload_bytes(1000));
  const std::vector<float> g1 = normal_floats(100, 1), g2 = normal_floats(100, 2);
  tc::EncodeContext c = ctx_at(0);
  c.shared_scale = std::max(plain->local_scale(g1), plain->local_scale(g2));
  const auto p1 = codec_test::encode(*plain, g1, c), p2 = codec_test::encode(*plain, g2, c);
  const std::span<const uint8_t> both[2] = {p1, p2};
  std::vector<uint8_t> a, b;
  ef->aggregate(both, 100, a);
  plain->aggregate(both, 100, b);
  EXPECT_EQ(a, b);
}

// Sliced encodes: slices that tile the variable and slices with a gap keep
// e' = p - d bit for bit, d the decoded slices and +0 where no slice covers.
TEST(ErrorFeedback, SlicedEncodesKeepTheResidualBits) {
  for (const char* inner : {"terngrad:share_scale=0", "terngrad:round=nearest,share_scale=0", "fp16", "topk:ratio=0.05",
                            "qsgd:levels=7,bucket=64"}) {
    for (bool gap : {false, true}) {
      SCOPED_TRACE(std::string(inner) + (gap ? " with a gap" : " tiled"));
      tc::CodecConfig config = tc::parse_codec_config(inner);
      config.error_feedback = tc::ErrorFeedbackParams{0.0f};
      auto ef = tc::make_codec(config);
      auto plain = tc::make_codec(inner);
      const size_t n = 4096;
      const std::vector<tc::ElementRange> slices =
          gap ? std::vector<tc::ElementRange>{{0, 1024}, {2048, 1024}} : std::vector<tc::ElementRange>{{0, 1024}, {1024, 3072}};
      ReferenceEf ref;
      for (uint32_t step = 0; step < 3; ++step) {
        const std::vector<float> g = normal_floats(n, 300 + step, 0.01f);
        const std::vector<float> p = ref.corrected(g);
        std::vector<std::vector<uint8_t>> bufs;
        std::vector<std::span<uint8_t>> outs;
        for (const auto& r : slices) bufs.emplace_back(plain->payload_bytes(r.count));
        for (auto& b : bufs) outs.emplace_back(b);
        ef->encode_slices(g, ctx_at(step), slices, outs);
        std::vector<float> s(n, 0.0f);
        for (size_t i = 0; i < slices.size(); ++i) {
          std::vector<uint8_t> want(plain->payload_bytes(slices[i].count));
          plain->encode_slices(p, ctx_at(step), std::span(&slices[i], 1), std::vector<std::span<uint8_t>>{want});
          ASSERT_EQ(bufs[i], want) << "slice " << i << " step " << step;
          plain->decode(want, std::span<float>(s).subspan(slices[i].begin, slices[i].count));
        }
        ref.sent(p, s);
        const std::vector<uint8_t> state = ef->save_state();
        for (size_t i = 0; i < n; ++i) {
          float e;
          std::memcpy(&e, state.data() + 20 + 4 * i, 4);
          ASSERT_TRUE(same_bits(e, ref.e[i])) << i << " step " << step;
        }
      }
    }
  }
}
