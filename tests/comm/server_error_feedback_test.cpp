// server_ef(<codec>): the server's re-encoding with error feedback, bit for
// bit against a float32 reference written here, and its checked state.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;
using codec_test::normal_floats;
using codec_test::same_bits;

namespace {

const char* const kInner[] = {"terngrad", "terngrad:share_scale=0", "terngrad:round=nearest", "fp16",
                              "qsgd:levels=7,bucket=64", "sign:scale=mean",  "topk:ratio=0.05",
                              "randomk:ratio=0.1"};

// R workers' payloads of one step, encoded as workers do (scale sharing included).
std::vector<std::vector<uint8_t>> worker_payloads(tc::GradientCodec& c, size_t n, int workers, uint32_t step) {
  std::vector<std::vector<float>> grads;
  float shared = 0.0f;
  for (int w = 0; w < workers; ++w) {
    grads.push_back(normal_floats(n, 1000 * step + w, 0.01f));
    if (c.wants_shared_scale()) shared = std::max(shared, c.local_scale(grads.back()));
  }
  std::vector<std::vector<uint8_t>> out;
  for (int w = 0; w < workers; ++w) {
    tc::EncodeContext ctx;
    ctx.tensor_id = 2;
    ctx.step = step;
    ctx.seed = 100 + w;
    if (c.wants_shared_scale()) ctx.shared_scale = shared;
    out.push_back(codec_test::encode(c, grads[w], ctx));
  }
  return out;
}

std::vector<std::span<const uint8_t>> views_of(const std::vector<std::vector<uint8_t>>& payloads) {
  return {payloads.begin(), payloads.end()};
}

float residual_at(const std::vector<uint8_t>& state, size_t i) {
  float f;
  std::memcpy(&f, state.data() + 16 + 4 * i, 4);  // little-endian hosts only (x86-64, aarch64)
  return f;
}

}  // namespace

TEST(ServerErrorFeedback, SpecsParseAndPrintCanonically) {
  const tc::CodecConfig c = tc::parse_codec_config("server_ef(terngrad:clip=2)");
  EXPECT_TRUE(c.server_error_feedback);
  EXPECT_FALSE(c.error_feedback);
  EXPECT_EQ(tc::to_spec(c), "server_ef(terngrad:clip=2,share_scale=1)");
  const tc::CodecConfig both = tc::parse_codec_config("ef(server_ef(qsgd:levels=7,bucket=64)):momentum=0.5");
  EXPECT_TRUE(both.server_error_feedback);
  ASSERT_TRUE(both.error_feedback);
  EXPECT_EQ(both.error_feedback->momentum, 0.5f);
  EXPECT_EQ(tc::to_spec(both), "ef(server_ef(qsgd:levels=7,bucket=64)):momentum=0.5");
  EXPECT_EQ(tc::make_codec(both)->spec(), tc::to_spec(both));
  EXPECT_EQ(tc::make_codec(tc::CodecConfig{tc::TernGradParams{}, std::nullopt, tc::ServerErrorFeedbackParams{}})->spec(),
            "server_ef(terngrad:clip=2.5,share_scale=1)");
}

TEST(ServerErrorFeedback, MalformedSpecsAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"server_ef(ef(terngrad))", "ef() goes outside"},
      {"server_ef(server_ef(fp32))", "one too many"},
      {"server_ef()", "needs a codec inside"},
      {"server_ef(terngrad):clip=2", "takes no keys"},
      {"server_ef(terngrad", "takes no keys"},
      {"server_ef(sign)", "use sign:scale=mean"},
      {"ef(ef(server_ef(fp32)))", "one error feedback too many"},
      {"server_ef(nosuch)", "nosuch"},
  };
  for (const auto& [spec, expect] : cases) {
    SCOPED_TRACE(spec);
    try {
      tc::parse_codec_config(spec);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tc::register_codec("server_ef", [](const tc::CodecSpec&) { return tc::make_codec("fp32"); }),
               std::invalid_argument);
}

// Workers see the inner codec: same payload bytes, same decoding.
TEST(ServerErrorFeedback, WorkersEncodeAsTheInnerCodec) {
  for (const char* inner : kInner) {
    SCOPED_TRACE(inner);
    auto plain = tc::make_codec(inner);
    auto server = tc::make_codec(std::string("server_ef(") + inner + ")");
    EXPECT_TRUE(server->aggregate_keeps_state());
    EXPECT_FALSE(plain->aggregate_keeps_state());
    EXPECT_FALSE(server->sums_without_decoding());
    EXPECT_EQ(plain->payload_bytes(1000), server->payload_bytes(1000));
    EXPECT_EQ(worker_payloads(*plain, 1000, 3, 4), worker_payloads(*server, 1000, 3, 4));
  }
}

// The server's identity over several steps: S = the inner codec's sum,
// p = S + e, the pull is one inner payload of p (as many bytes as a push),
// and e' = p - decode(pull) bit for bit; over T steps the pulls add up to
// the sums less the last residual.
TEST(ServerErrorFeedback, SendsSumPlusResidualAndKeepsWhatWasNotSent) {
  constexpr size_t n = 3000;
  constexpr int kWorkers = 3, kSteps = 6;
  for (const char* inner : kInner) {
    SCOPED_TRACE(inner);
    auto plain = tc::make_codec(inner);
    auto server = tc::make_codec(std::string("server_ef(") + inner + ")");
    std::vector<uint8_t> state, out, summed;
    std::vector<float> e(n, 0.0f), total_pulled(n, 0.0f);
    std::vector<double> total_sum(n, 0.0), total_sent(n, 0.0);
    for (uint32_t step = 0; step < kSteps; ++step) {
      const auto payloads = worker_payloads(*plain, n, kWorkers, step);
      const auto views = views_of(payloads);
      plain->aggregate(views, n, summed);
      std::vector<float> s(n), p(n), d(n);
      plain->decode_aggregate(summed, s);
      for (size_t i = 0; i < n; ++i) p[i] = s[i] + e[i];

      server->aggregate_step(views, n, {2, step, 0}, state, out);
      ASSERT_EQ(out.size(), plain->payload_bytes(n));
      plain->validate(out, n);  // a payload of the inner codec
      server->decode_aggregate(out, d);
      std::vector<float> d_plain(n);
      plain->decode(out, d_plain);
      ASSERT_EQ(state.size(), 16 + 4 * n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_bits(d[i], d_plain[i])) << i;
        const float expect = p[i] - d[i];
        ASSERT_TRUE(same_bits(residual_at(state, i), expect)) << "step " << step << " element " << i;
        e[i] = expect;
        total_sum[i] += s[i];
        total_sent[i] += d[i];
      }
    }
    // Nothing lost, only delayed: sum of pulls = sum of sums - last residual.
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::abs(total_sent[i] - (total_sum[i] - e[i])));
      scale = std::max(scale, std::abs(total_sum[i]));
    }
    EXPECT_LE(worst, 1e-5 * std::max(scale, 1.0)) << "telescoping sum";
  }
}

// The same inputs give the same pull and state; another slice of the same
// variable draws other random numbers (no two slices share a stream).
TEST(ServerErrorFeedback, DeterministicAndSlicesDrawIndependently) {
  auto plain = tc::make_codec("terngrad");
  auto a = tc::make_codec("server_ef(terngrad)"), b = tc::make_codec("server_ef(terngrad)");
  const auto payloads = worker_payloads(*plain, 4096, 4, 1);
  const auto views = views_of(payloads);
  std::vector<uint8_t> sa, sb, oa, ob, sc, oc;
  a->aggregate_step(views, 4096, {2, 1, 0}, sa, oa);
  b->aggregate_step(views, 4096, {2, 1, 0}, sb, ob);
  EXPECT_EQ(oa, ob);
  EXPECT_EQ(sa, sb);
  a->aggregate_step(views, 4096, {2, 1, 8192}, sc, oc);
  EXPECT_NE(oa, oc) << "two slices drew the same random numbers";
}

TEST(ServerErrorFeedback, BadStatesAreRefusedAndNothingChanges) {
  constexpr size_t n = 64;
  auto plain = tc::make_codec("terngrad");
  auto server = tc::make_codec("ef(server_ef(terngrad))");
  const auto payloads = worker_payloads(*plain, n, 2, 0);
  const auto views = views_of(payloads);
  std::vector<uint8_t> good, out;
  server->aggregate_step(views, n, {2, 0, 0}, good, out);
  ASSERT_EQ(good.size(), 16 + 4 * n);

  auto with = [&](auto change) {
    std::vector<uint8_t> s = good;
    change(s);
    return s;
  };
  const float nan = std::nanf("");
  const std::pair<std::vector<uint8_t>, const char*> bad[] = {
      {with([](auto& s) { s.resize(10); }), "shorter than its 16-byte header"},
      {with([](auto& s) { s[0] ^= 1; }), "bad magic"},
      {with([](auto& s) { s[4] = 9; }), "version 9"},
      {with([](auto& s) { s[8] = 65; }), "a residual of 65 elements"},
      {with([](auto& s) { s.pop_back(); }), "do not hold"},
      {with([&](auto& s) { std::memcpy(s.data() + 16 + 4 * 7, &nan, 4); }), "element 7 is not finite"},
  };
  for (const auto& [state, expect] : bad) {
    SCOPED_TRACE(expect);
    try {
      server->validate_aggregate_state(state, n);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
    std::vector<uint8_t> s = state, o = {1, 2, 3};
    EXPECT_THROW(server->aggregate_step(views, n, {2, 1, 0}, s, o), std::invalid_argument);
    EXPECT_EQ(s, state);
    EXPECT_EQ(o, (std::vector<uint8_t>{1, 2, 3}));
  }
  // A malformed worker payload: refused, state untouched.
  std::vector<uint8_t> torn = payloads[1];
  torn.resize(torn.size() - 1);
  const std::vector<std::span<const uint8_t>> torn_views = {payloads[0], torn};
  std::vector<uint8_t> s = good;
  EXPECT_ANY_THROW(server->aggregate_step(torn_views, n, {2, 1, 0}, s, out));
  EXPECT_EQ(s, good);
  // A codec that keeps no server state takes none.
  EXPECT_THROW(plain->validate_aggregate_state(good, n), std::invalid_argument);
  EXPECT_NO_THROW(plain->validate_aggregate_state({}, n));
  // The stateless call says what to call instead.
  try {
    server->aggregate(views, n, out);
    ADD_FAILURE() << "aggregate() without state accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("aggregate_step"), std::string::npos) << e.what();
  }
}

// The residual is checked in chunks of 4096 floats before the step touches
// it in place: an Inf or NaN anywhere, the last element included, is named,
// and the state and the output stay as they were.
TEST(ServerErrorFeedback, ANonFiniteResidualFarIntoALargeStateIsNamedAndNothingChanges) {
  constexpr size_t n = 3 * 4096 + 10;
  auto plain = tc::make_codec("terngrad");
  auto server = tc::make_codec("server_ef(terngrad:round=nearest)");
  const auto payloads = worker_payloads(*plain, n, 2, 3);
  const auto views = views_of(payloads);
  std::vector<uint8_t> good, out;
  server->aggregate_step(views, n, {1, 0, 0}, good, out);
  ASSERT_EQ(good.size(), 16 + 4 * n);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (const auto& [at, value] : {std::pair<size_t, float>{4096 + 17, inf}, {2 * 4096, -inf}, {n - 1, nan}}) {
    std::vector<uint8_t> s = good, o = {7};
    std::memcpy(s.data() + 16 + 4 * at, &value, 4);
    const std::vector<uint8_t> before = s;
    try {
      server->aggregate_step(views, n, {1, 1, 0}, s, o);
      ADD_FAILURE() << "accepted a non-finite residual at " << at;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("element " + std::to_string(at) + " is not finite"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(s, before);
    EXPECT_EQ(o, std::vector<uint8_t>{7});
    EXPECT_THROW(server->validate_aggregate_state(before, n), std::invalid_argument);
  }
  // The good state still steps, and the same step from a copy of it gives the same bytes.
  std::vector<uint8_t> s1 = good, s2 = good, o1, o2;
  server->aggregate_step(views, n, {1, 1, 0}, s1, o1);
  tc::make_codec("server_ef(terngrad:round=nearest)")->aggregate_step(views, n, {1, 1, 0}, s2, o2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(o1, o2);
}
