// PowerSGD (comm/codecs/powersgd_codec.cpp) against a float64 reference of
// the same algorithm in plain loops: P, the decoded sum and the warm start
// over several steps and workers; rank-r exactness and P^'s orthonormality;
// ef(powersgd)'s identity; the payload, spec and state checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/philox.h"

namespace {

using namespace terngrad::comm;
using codec_test::normal_floats;

using Mat = std::vector<double>;  // row-major

// The documented initial draw (FORMATS.md, "powersgd"): element e of Q.
double initial_q(uint32_t tensor, uint64_t e) {
  namespace q = terngrad::quantize;
  const uint64_t seed = 0x706f7765725347ull;
  const q::Philox4x32Counter c{{static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32), tensor, 0x44475350u}};
  const q::Philox4x32Key k{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const uint32_t u = q::philox4x32_10(c, k).v[0] >> 8;
  return static_cast<float>((static_cast<double>(u) + 0.5) * 0x1p-23 - 1.0);
}

// The algorithm in float64: one step over the workers' matrices.
struct Reference {
  size_t rows, cols, r;
  Mat q;  // cols x r, the warm start
  Reference(size_t rows_, size_t cols_, size_t r_, uint32_t tensor) : rows(rows_), cols(cols_), r(r_), q(cols_ * r_) {
    for (size_t e = 0; e < q.size(); ++e) q[e] = initial_q(tensor, e);
  }
  Mat p_of(const std::vector<float>& m) const {
    Mat p(rows * r, 0.0);
    for (size_t i = 0; i < rows; ++i)
      for (size_t k = 0; k < r; ++k)
        for (size_t j = 0; j < cols; ++j) p[i * r + k] += m[i * cols + j] * q[j * r + k];
    return p;
  }
  static Mat gram_schmidt(Mat a, size_t rows, size_t r) {
    for (size_t k = 0; k < r; ++k) {
      double n2 = 0;
      for (size_t i = 0; i < rows; ++i) n2 += a[i * r + k] * a[i * r + k];
      const double n = std::sqrt(n2);
      for (size_t i = 0; i < rows; ++i) a[i * r + k] /= n;
      for (size_t l = k + 1; l < r; ++l) {
        double d = 0;
        for (size_t i = 0; i < rows; ++i) d += a[i * r + k] * a[i * r + l];
        for (size_t i = 0; i < rows; ++i) a[i * r + l] -= d * a[i * r + k];
      }
    }
    return a;
  }
  // Returns the decoded sum; keeps P (the sum) and updates q.
  Mat step(const std::vector<std::vector<float>>& ms, Mat* p_sum) {
    Mat p(rows * r, 0.0);
    for (const auto& m : ms) {
      const Mat pw = p_of(m);
      for (size_t e = 0; e < p.size(); ++e) p[e] += pw[e];
    }
    *p_sum = p;
    const Mat ph = gram_schmidt(p, rows, r);
    Mat qs(cols * r, 0.0);
    for (const auto& m : ms)
      for (size_t j = 0; j < cols; ++j)
        for (size_t k = 0; k < r; ++k)
          for (size_t i = 0; i < rows; ++i) qs[j * r + k] += m[i * cols + j] * ph[i * r + k];
    Mat out(rows * cols, 0.0);
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j)
        for (size_t k = 0; k < r; ++k) out[i * cols + j] += ph[i * r + k] * qs[j * r + k];
    q = qs;
    return out;
  }
};

double max_abs(const Mat& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// One in-process step of the codecs (as the trainer runs it): pre-round,
// sums in worker order, encode, aggregate, decode, warm start everywhere.
struct Step {
  std::vector<float> p_sum, decoded;
  std::vector<std::vector<float>> p_workers;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> aggregate;
};

Step run_step(std::vector<std::unique_ptr<GradientCodec>>& codecs, const std::vector<std::vector<float>>& ms,
              uint32_t tensor, uint32_t step) {
  Step s;
  const uint64_t n = ms[0].size();
  const uint64_t pf = codecs[0]->presum_floats(0, n);
  s.p_sum.assign(pf, 0.0f);
  for (size_t w = 0; w < codecs.size(); ++w) {
    EncodeContext ec;
    ec.tensor_id = tensor;
    ec.step = step;
    ec.seed = w;
    s.p_workers.emplace_back(pf);
    codecs[w]->presum(0, ms[w], ec, s.p_workers.back());
    for (size_t e = 0; e < pf; ++e) s.p_sum[e] += s.p_workers.back()[e];
  }
  for (size_t w = 0; w < codecs.size(); ++w) {
    EncodeContext ec;
    ec.tensor_id = tensor;
    ec.step = step;
    ec.seed = w;
    ec.presums = {s.p_sum};
    s.payloads.push_back(codec_test::encode(*codecs[w], ms[w], ec));
  }
  std::vector<std::span<const uint8_t>> views(s.payloads.begin(), s.payloads.end());
  codecs[0]->aggregate(views, n, s.aggregate);
  const DecodeContext dc{tensor, step, {s.p_sum}};
  s.decoded.assign(n, 0.0f);
  codecs[0]->decode_aggregate_with(s.aggregate, dc, s.decoded);
  for (auto& c : codecs) c->observe_aggregate(s.aggregate, n, dc);
  return s;
}

std::vector<std::unique_ptr<GradientCodec>> make_codecs(const std::string& spec, size_t workers) {
  std::vector<std::unique_ptr<GradientCodec>> cs;
  for (size_t w = 0; w < workers; ++w) cs.push_back(make_codec(spec));
  return cs;
}

TEST(PowerSgd, MatchesAFloat64ReferenceOverStepsAndWorkers) {
  const size_t rows = 12, cols = 10, r = 3, workers = 3;
  const uint32_t tensor = 5;
  auto codecs = make_codecs("powersgd:rank=3,rows=12", workers);
  EXPECT_EQ(codecs[0]->presum_rounds(), 1u);
  EXPECT_EQ(codecs[0]->presum_floats(0, rows * cols), rows * r);
  EXPECT_EQ(codecs[0]->payload_bytes(rows * cols), 48 + 4 * cols * r);
  Reference ref(rows, cols, r, tensor);
  for (uint32_t step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<std::vector<float>> ms;
    for (size_t w = 0; w < workers; ++w) ms.push_back(normal_floats(rows * cols, 100 * step + w));
    // The reference's P of each worker, before its step moves q.
    std::vector<Mat> pw_ref;
    for (const auto& m : ms) pw_ref.push_back(ref.p_of(m));
    Mat p_ref;
    const Mat out_ref = ref.step(ms, &p_ref);
    const Step s = run_step(codecs, ms, tensor, step);
    const double pscale = max_abs(p_ref), oscale = max_abs(out_ref);
    for (size_t w = 0; w < workers; ++w)
      for (size_t e = 0; e < rows * r; ++e) ASSERT_NEAR(s.p_workers[w][e], pw_ref[w][e], 2e-5 * pscale) << w << " " << e;
    for (size_t e = 0; e < rows * r; ++e) ASSERT_NEAR(s.p_sum[e], p_ref[e], 2e-5 * pscale) << e;
    for (size_t e = 0; e < rows * cols; ++e) ASSERT_NEAR(s.decoded[e], out_ref[e], 2e-4 * oscale) << e;
    // The warm start is the summed Q (what the aggregate holds) on every worker.
    const double qscale = max_abs(ref.q);
    for (size_t e = 0; e < cols * r; ++e) {
      float v;
      std::memcpy(&v, s.aggregate.data() + 48 + 4 * e, 4);
      ASSERT_NEAR(v, ref.q[e], 2e-4 * qscale) << e;
    }
    for (size_t w = 1; w < workers; ++w) EXPECT_EQ(codecs[w]->save_state(), codecs[0]->save_state());
  }
}

TEST(PowerSgd, ReconstructsARankRGradientAndPHatIsOrthonormal) {
  const size_t rows = 16, cols = 9, r = 2, workers = 2;
  // Every worker's M_w = A C_w^T with a shared A: the sum has rank <= r and
  // P's column space is A's from the first step.
  const std::vector<float> a = normal_floats(rows * r, 7);
  std::vector<std::vector<float>> ms;
  std::vector<double> sum(rows * cols, 0.0);
  for (size_t w = 0; w < workers; ++w) {
    const std::vector<float> c = normal_floats(cols * r, 20 + w);
    std::vector<float> m(rows * cols);
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) {
        double x = 0;
        for (size_t k = 0; k < r; ++k) x += static_cast<double>(a[i * r + k]) * c[j * r + k];
        m[i * cols + j] = static_cast<float>(x);
        sum[i * cols + j] += static_cast<float>(x);
      }
    ms.push_back(m);
  }
  auto codecs = make_codecs("powersgd:rank=2,rows=16", workers);
  for (uint32_t step = 0; step < 3; ++step) {
    const Step s = run_step(codecs, ms, 1, step);
    const double scale = max_abs(sum);
    for (size_t e = 0; e < sum.size(); ++e) ASSERT_NEAR(s.decoded[e], sum[e], 1e-5 * scale) << "step " << step;
    // Each worker's own approximation P^ Q_w^T is its gradient too.
    const DecodeContext dc{1, step, {s.p_sum}};
    std::vector<float> own(rows * cols);
    codecs[1]->decode_with(s.payloads[1], dc, own);
    for (size_t e = 0; e < own.size(); ++e) ASSERT_NEAR(own[e], ms[1][e], 1e-5 * scale);
    // P^'s columns: decode a payload whose Q is the unit vector at (j = 0, k).
    std::vector<std::vector<float>> cols_of_p(r, std::vector<float>(rows));
    for (size_t k = 0; k < r; ++k) {
      std::vector<uint8_t> unit = s.payloads[0];
      std::fill(unit.begin() + 48, unit.end(), 0);
      const float one = 1.0f;
      std::memcpy(unit.data() + 48 + 4 * k, &one, 4);
      std::vector<float> out(rows * cols);
      codecs[0]->decode_with(unit, dc, out);
      for (size_t i = 0; i < rows; ++i) cols_of_p[k][i] = out[i * cols];
    }
    for (size_t k = 0; k < r; ++k)
      for (size_t l = 0; l < r; ++l) {
        double d = 0;
        for (size_t i = 0; i < rows; ++i) d += static_cast<double>(cols_of_p[k][i]) * cols_of_p[l][i];
        EXPECT_NEAR(d, k == l ? 1.0 : 0.0, 1e-6) << k << "," << l;
      }
  }
}

TEST(PowerSgd, ErrorFeedbackSentPlusResidualIsInputPlusOldResidual) {
  const size_t rows = 8, cols = 6, n = rows * cols, workers = 2;
  auto codecs = make_codecs("ef(powersgd:rank=2,rows=8)", workers);
  EXPECT_EQ(codecs[0]->presum_rounds(), 1u);
  EXPECT_TRUE(codecs[0]->observes_aggregate());
  EXPECT_TRUE(codecs[0]->slices_whole_variable_only());
  auto residual = [&](const GradientCodec& c) {
    const std::vector<uint8_t> blob = c.save_state();
    std::vector<float> e(n, 0.0f);
    if (blob.empty()) return e;
    EXPECT_EQ(blob[17], 1) << "the inner codec's warm start travels with the residual";
    std::memcpy(e.data(), blob.data() + 20, 4 * n);
    return e;
  };
  for (uint32_t step = 0; step < 4; ++step) {
    std::vector<std::vector<float>> ms;
    for (size_t w = 0; w < workers; ++w) ms.push_back(normal_floats(n, 50 + 10 * step + w));
    std::vector<std::vector<float>> before;
    for (auto& c : codecs) before.push_back(residual(*c));
    const Step s = run_step(codecs, ms, 3, step);
    for (size_t w = 0; w < workers; ++w) {
      std::vector<float> sent(n);
      codecs[w]->decode_with(s.payloads[w], DecodeContext{3, step, {s.p_sum}}, sent);
      const std::vector<float> after = residual(*codecs[w]);
      for (size_t i = 0; i < n; ++i)
        ASSERT_NEAR(sent[i] + after[i], ms[w][i] + before[w][i], 1e-5f) << "step " << step << " worker " << w;
    }
  }
  // The state (residual and warm start) round-trips bit for bit.
  auto again = make_codec("ef(powersgd:rank=2,rows=8)");
  again->load_state(codecs[0]->save_state());
  EXPECT_EQ(again->save_state(), codecs[0]->save_state());
}

TEST(PowerSgd, StateRoundTripsAndResumesBitExactly) {
  const size_t rows = 6, cols = 5, n = rows * cols;
  auto a = make_codecs("powersgd:rank=2,rows=6", 1);
  run_step(a, {normal_floats(n, 1)}, 0, 0);
  const std::vector<uint8_t> state = a[0]->save_state();
  ASSERT_EQ(state.size(), 32 + 4 * cols * 2);
  auto b = make_codecs("powersgd:rank=2,rows=6", 1);
  b[0]->load_state(state);
  const Step sa = run_step(a, {normal_floats(n, 2)}, 0, 1), sb = run_step(b, {normal_floats(n, 2)}, 0, 1);
  EXPECT_EQ(sa.payloads, sb.payloads);
  EXPECT_EQ(sa.aggregate, sb.aggregate);
  // Damaged or foreign states are refused by name and change nothing.
  std::vector<uint8_t> bad = state;
  bad.pop_back();
  EXPECT_THROW(b[0]->load_state(bad), std::invalid_argument);
  bad = state;
  const float nan = std::nanf("");
  std::memcpy(bad.data() + 32, &nan, 4);
  try {
    b[0]->load_state(bad);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  auto other = make_codec("powersgd:rank=1,rows=6");
  try {
    other->load_state(state);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank=2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b[0]->save_state(), a[0]->save_state());
}

TEST(PowerSgd, AZeroColumnRestartsFromTheInitialDraw) {
  // A zero gradient makes Q zero: the next step must not stay stuck at zero.
  const size_t n = 4 * 4;
  auto c = make_codecs("powersgd:rank=2,rows=4", 1);
  run_step(c, {std::vector<float>(n, 0.0f)}, 9, 0);
  auto fresh = make_codecs("powersgd:rank=2,rows=4", 1);
  const std::vector<float> g = normal_floats(n, 3);
  EXPECT_EQ(run_step(c, {g}, 9, 1).p_sum, run_step(fresh, {g}, 9, 1).p_sum);
}

TEST(PowerSgd, MalformedPayloadsAreRefusedByName) {
  const size_t rows = 4, cols = 3, n = rows * cols;
  auto c = make_codecs("powersgd:rank=2,rows=4", 2);
  const Step s = run_step(c, {normal_floats(n, 1), normal_floats(n, 2)}, 0, 0);
  const DecodeContext dc{0, 0, {s.p_sum}};
  auto expect_refused = [&](std::span<const uint8_t> p, const std::string& words) {
    std::vector<float> out(n, 12.5f);
    try {
      c[0]->decode_with(p, dc, out);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
    for (float x : out) ASSERT_EQ(x, 12.5f);
    EXPECT_ANY_THROW(c[0]->validate(p, n));
  };
  const std::vector<uint8_t>& good = s.payloads[0];
  expect_refused(std::span(good).first(47), "less than the 48-byte header");
  expect_refused(std::span(good).first(good.size() - 4), "bytes");
  std::vector<uint8_t> p = good;
  p[0] ^= 1;
  expect_refused(p, "bad magic");
  p = good;
  p[30] ^= 1;
  expect_refused(p, "CRC");
  p = good;
  const float nan = std::nanf("");
  std::memcpy(p.data() + 48 + 8, &nan, 4);
  expect_refused(p, "Q value 2 is NaN or Inf");
  expect_refused(s.aggregate, "a sum payload");
  // Another shape: a payload of another codec's rows.
  auto wide = make_codecs("powersgd:rank=2,rows=3", 1);
  const Step sw = run_step(wide, {normal_floats(n, 1)}, 0, 0);
  expect_refused(sw.payloads[0], "rows=3");
  std::vector<float> out(n);
  EXPECT_THROW(c[0]->decode_with(good, dc, std::span(out).first(n - 1)), std::invalid_argument);
  // Without the round sums, or with the wrong ones, decoding says what it needs.
  try {
    c[0]->decode(good, out);
    ADD_FAILURE();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("summed P"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c[0]->decode_aggregate(s.aggregate, out), std::logic_error);
  EXPECT_THROW(c[0]->decode_with(good, DecodeContext{}, out), std::invalid_argument);
  std::vector<float> nan_p = s.p_sum;
  nan_p[1] = nan;
  EXPECT_THROW(c[0]->decode_with(good, DecodeContext{0, 0, {nan_p}}, out), std::invalid_argument);
  // The aggregate refuses payloads of different steps.
  const Step later = run_step(c, {normal_floats(n, 3), normal_floats(n, 4)}, 0, 1);
  const std::span<const uint8_t> mixed[] = {s.payloads[0], later.payloads[1]};
  std::vector<uint8_t> agg;
  EXPECT_THROW(c[0]->aggregate(mixed, n, agg), std::runtime_error);
}

TEST(PowerSgd, SpecAndShapeErrorsNameTheValue) {
  auto expect_msg = [](auto&& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "accepted: " << words;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_msg([] { make_codec("powersgd:rank=0"); }, "rank");
  expect_msg([] { make_codec("powersgd:rank=4,cols=3"); }, "cols");
  expect_msg([] { make_codec("server_ef(powersgd)"); }, "server_ef(powersgd) is not supported");
  expect_msg([] { make_codec("ef(server_ef(powersgd:rank=2))"); }, "server_ef(powersgd) is not supported");
  expect_msg([] { make_codec("powersgd:rank=2,rows=7")->payload_bytes(20); }, "rows=7 does not divide the variable's 20 elements");
  expect_msg([] { make_codec("powersgd:rank=4,rows=2")->payload_bytes(20); }, "rank=4 exceeds min(rows, cols) = min(2, 10)");
  expect_msg([] { make_codec("powersgd:rank=2")->payload_bytes(20); }, "rows is not set");
  EXPECT_EQ(make_codec("powersgd")->spec(), "powersgd:rank=4");
  EXPECT_EQ(make_codec("ef(powersgd:rows=10,rank=2)")->spec(), "ef(powersgd:rank=2,rows=10)");
  EXPECT_EQ(parse_codec_config("powersgd:rank=2,rows=10"), parse_codec_config(to_spec(parse_codec_config("powersgd:rank=2,rows=10"))));
  // Slices: only the whole variable.
  auto c = make_codec("powersgd:rank=1,rows=4");
  const std::vector<float> g = normal_floats(16, 1);
  std::vector<float> p(4);
  c->presum(0, g, EncodeContext{}, p);
  std::vector<uint8_t> a(c->payload_bytes(8)), b(c->payload_bytes(8));
  const ElementRange halves[] = {{0, 8}, {8, 8}};
  const std::span<uint8_t> outs[] = {a, b};
  EncodeContext ec;
  ec.presums = {p};
  expect_msg([&] { c->encode_slices(g, ec, halves, outs); }, "not an element range");
  // A non-finite gradient names its element.
  std::vector<float> bad = g;
  bad[5] = std::nanf("");
  expect_msg([&] { c->presum(0, bad, EncodeContext{}, p); }, "element 5 is NaN or Inf (not finite)");
  expect_msg([&] { c->presum(1, g, EncodeContext{}, p); }, "round 1");
  // Single-round codecs have no pre-rounds and slice freely.
  auto t = make_codec("terngrad");
  EXPECT_EQ(t->presum_rounds(), 0u);
  EXPECT_FALSE(t->slices_whole_variable_only());
  EXPECT_FALSE(t->observes_aggregate());
  EXPECT_THROW(t->presum_floats(0, 8), std::invalid_argument);
}

}  // namespace
