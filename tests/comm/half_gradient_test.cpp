// 16-bit gradients through the codec interface (GradientCodec's *_half
// calls): for every codec family, the payloads, and the residuals of stateful
// codecs over three steps, are those of the float32 calls on the widened
// gradient, bit for bit. TernGrad, ef() and server_ef() of it read the halves
// directly; the others widen through the interface's default; both must give
// the float32 bytes, and the default's copy must never let a codec's
// statistics cache serve another tensor.
#include <cstring>
#include <string>

#include "codec_test_util.h"
#include "terngrad/quantize/fp16.h"

namespace tc = terngrad::comm;
namespace tq = terngrad::quantize;
using namespace codec_test;

namespace {

std::vector<uint16_t> to_halves(std::span<const float> g, tq::HalfType t) {
  std::vector<uint16_t> h(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (t == tq::HalfType::kFloat16) {
      h[i] = tq::fp16::from_float(g[i]);
    } else {
      uint32_t b;
      std::memcpy(&b, &g[i], 4);
      h[i] = static_cast<uint16_t>(b >> 16);
    }
  }
  return h;
}

std::vector<float> widened(const std::vector<uint16_t>& h, tq::HalfType t) {
  std::vector<float> w(h.size());
  tq::widen(tq::HalfTensor{h, t}, w);
  return w;
}

struct Steps {
  std::vector<std::vector<uint8_t>> payloads;  // every slice of every step
  std::vector<uint8_t> state;                  // save_state() after the last
  bool operator==(const Steps&) const = default;
};

// Three steps of gradients g0, g1, g2 (as halves, or widened to float32), cut
// into three slices; with scale sharing, a shared scale 1.25x the own one.
Steps run(const std::string& spec, const std::vector<std::vector<uint16_t>>& grads, tq::HalfType t, bool as_halves) {
  auto codec = tc::make_codec(spec);
  Steps out;
  for (size_t step = 0; step < grads.size(); ++step) {
    const std::vector<float> w = widened(grads[step], t);
    const tq::HalfTensor h{grads[step], t};
    const uint64_t n = w.size();
    const std::vector<tc::ElementRange> slices = {{0, 4 * (n / 12)}, {4 * (n / 12), 4 * (n / 6)},
                                                  {4 * (n / 12) + 4 * (n / 6), n - 4 * (n / 12) - 4 * (n / 6)}};
    tc::EncodeContext ctx;
    ctx.seed = 77;
    ctx.step = static_cast<uint32_t>(step);
    ctx.tensor_id = 4;
    if (codec->wants_shared_scale())
      ctx.shared_scale = 1.25f * (as_halves ? codec->local_scale_half(h) : codec->local_scale(w));
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::span<uint8_t>> outs;
    for (const auto& s : slices) bufs.emplace_back(codec->payload_bytes(s.count));
    for (auto& b : bufs) outs.emplace_back(b);
    if (as_halves)
      codec->encode_slices_half(h, ctx, slices, outs);
    else
      codec->encode_slices(w, ctx, slices, outs);
    for (size_t i = 0; i < bufs.size(); ++i) {
      bufs[i].resize(codec->encoded_size(bufs[i], slices[i].count));
      out.payloads.push_back(bufs[i]);
    }
  }
  out.state = codec->save_state();
  return out;
}

}  // namespace

TEST(HalfGradients, EveryCodecFamilyEncodesTheWidenedGradientsBytes) {
  const char* specs[] = {"terngrad",
                         "terngrad:pack=entropy",
                         "terngrad:round=nearest,share_scale=0",
                         "ef(terngrad:round=nearest)",
                         "ef(server_ef(terngrad:round=nearest))",
                         "ef(terngrad):momentum=0.9",
                         "terngrad:bucket=512",
                         "qsgd",
                         "fp16",
                         "fp32",
                         "topk:ratio=0.01",
                         "ef(sign)"};
  for (tq::HalfType t : {tq::HalfType::kFloat16, tq::HalfType::kBFloat16})
    for (size_t n : {size_t{7}, size_t{4100}, size_t{70001}}) {
      std::vector<std::vector<uint16_t>> grads;
      for (uint64_t s = 0; s < 3; ++s) grads.push_back(to_halves(normal_floats(n, 100 * n + s, 0.05f), t));
      for (const char* spec : specs) {
        SCOPED_TRACE(std::string(spec) + " " + tq::half_type_name(t) + " n=" + std::to_string(n));
        const Steps halves = run(spec, grads, t, true);
        const Steps floats = run(spec, grads, t, false);
        ASSERT_EQ(halves.payloads.size(), floats.payloads.size());
        for (size_t i = 0; i < halves.payloads.size(); ++i) ASSERT_EQ(halves.payloads[i], floats.payloads[i]) << i;
        EXPECT_EQ(halves.state, floats.state);
      }
    }
}

// The pairing rule: local_scale_half(a) then an encode of another tensor b of
// the same size uses b's own statistics, as the float32 calls on two spans do.
TEST(HalfGradients, AnEncodeOfAnotherTensorNeverTakesTheFirstOnesStatistics) {
  const size_t n = 5000;
  for (const char* spec : {"terngrad:share_scale=0", "terngrad:bucket=1024,share_scale=0", "qsgd"}) {
    SCOPED_TRACE(spec);
    const auto a = to_halves(normal_floats(n, 1, 0.05f), tq::HalfType::kBFloat16);
    const auto b = to_halves(normal_floats(n, 2, 3.0f), tq::HalfType::kBFloat16);
    const auto wa = widened(a, tq::HalfType::kBFloat16), wb = widened(b, tq::HalfType::kBFloat16);
    auto h = tc::make_codec(spec), f = tc::make_codec(spec);
    tc::EncodeContext ctx;
    ctx.seed = 3;
    (void)h->local_scale_half(tq::HalfTensor{a, tq::HalfType::kBFloat16});
    (void)f->local_scale(wa);
    std::vector<uint8_t> ph(h->payload_bytes(n)), pf(ph.size());
    h->encode(std::span<const float>(wb), ctx, ph);  // the float32 call in between: no pair either
    f->encode(std::span<const float>(wb), ctx, pf);
    EXPECT_EQ(ph, pf);
    (void)h->local_scale_half(tq::HalfTensor{a, tq::HalfType::kBFloat16});
    (void)f->local_scale(wa);
    const tc::ElementRange whole{0, n};
    const std::span<uint8_t> oh[1] = {ph}, of[1] = {pf};
    h->encode_slices_half(tq::HalfTensor{b, tq::HalfType::kBFloat16}, ctx, std::span(&whole, 1), oh);
    f->encode_slices(wb, ctx, std::span(&whole, 1), of);
    EXPECT_EQ(ph, pf);
  }
}

TEST(HalfGradients, NonFiniteHalvesAreNamed) {
  std::vector<uint16_t> h = to_halves(normal_floats(300, 9, 0.05f), tq::HalfType::kFloat16);
  h[123] = 0x7C00;  // +Inf
  for (const char* spec : {"terngrad", "ef(terngrad:round=nearest)", "qsgd"}) {
    SCOPED_TRACE(spec);
    auto c = tc::make_codec(spec);
    std::vector<uint8_t> out(c->payload_bytes(h.size()));
    const tc::ElementRange whole{0, h.size()};
    const std::span<uint8_t> outs[1] = {out};
    try {
      if (c->wants_shared_scale()) c->local_scale_half(tq::HalfTensor{h, tq::HalfType::kFloat16});
      c->encode_slices_half(tq::HalfTensor{h, tq::HalfType::kFloat16}, tc::EncodeContext{}, std::span(&whole, 1), outs);
      FAIL() << "no error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("123"), std::string::npos) << e.what();
    }
  }
}
