// The codec in the GPU training loop against the CPU trainer's codec path
// (comm::GradientCodec, as session.cpp and trainer.cpp use it), on the same
// gradients: payload bytes identical, aggregated sums identical (bound 0).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "gpu_test_util.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/gpu_codec_step.h"

namespace terngrad::train::cuda {
namespace {

namespace tqc = terngrad::quantize::cuda;

constexpr uint64_t kN = 10007;  // not a multiple of 4: a partial last byte

std::vector<Tensor> worker_grads(int workers) {
  std::vector<Tensor> g;
  for (int w = 0; w < workers; ++w) g.push_back(testing::random_tensor({static_cast<int64_t>(kN)}, 100 + w, -0.02f, 0.02f));
  return g;
}

struct CpuResult {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<float> sum;
};

CpuResult cpu_path(const std::string& spec, const std::vector<Tensor>& grads, uint32_t step) {
  const int N = static_cast<int>(grads.size());
  std::vector<std::unique_ptr<comm::GradientCodec>> codecs;
  std::vector<float> scales(N, 0.0f);
  float shared = 0.0f;
  for (int w = 0; w < N; ++w) {
    codecs.push_back(comm::make_codec(spec));
    if (codecs[w]->wants_shared_scale()) scales[w] = codecs[w]->local_scale(grads[w].data);
    shared = std::max(shared, scales[w]);
  }
  CpuResult r;
  for (int w = 0; w < N; ++w) {
    comm::EncodeContext ec;
    ec.tensor_id = 3;
    ec.step = step;
    ec.seed = 1000 + w;
    if (codecs[w]->wants_shared_scale()) ec.shared_scale = std::max(shared, scales[w]);
    std::vector<uint8_t> out(codecs[w]->payload_bytes(kN));
    const comm::ElementRange whole{0, kN};
    const std::span<uint8_t> outs[] = {out};
    codecs[w]->encode_slices(grads[w].data, ec, std::span(&whole, 1), outs);
    r.payloads.push_back(std::move(out));
  }
  std::vector<std::span<const uint8_t>> views(r.payloads.begin(), r.payloads.end());
  std::vector<uint8_t> agg;
  codecs[0]->aggregate(views, kN, agg);
  r.sum.resize(kN);
  codecs[0]->decode_aggregate(agg, r.sum);
  return r;
}

struct GpuResult {
  std::vector<std::vector<uint8_t>> payloads;  // empty for fp32
  std::vector<float> sum;
};

GpuResult gpu_path(const std::string& spec, const std::vector<Tensor>& grads, uint32_t step) {
  const int N = static_cast<int>(grads.size());
  const VariableCodec c = VariableCodec::parse(comm::make_codec(spec)->spec());
  GpuContext ctx;
  tqc::Workspace ws(kN);
  std::vector<DeviceTensor> d_grads;
  std::vector<DeviceBuffer> d_payloads;
  // The workers' local scales stay on the device; each encode takes their max there.
  DeviceBuffer d_scales(N * sizeof(float));
  for (int w = 0; w < N; ++w) {
    d_grads.push_back(to_device(grads[w]));
    d_payloads.emplace_back(std::max<size_t>(gpu_payload_bytes(c, kN), 1));
    local_scale_variable_async(c, d_grads[w].ptr(), kN, d_scales.as<float>() + w, ws, ctx.stream());
  }
  GpuResult r;
  std::vector<const uint8_t*> pp;
  std::vector<const float*> gp;
  for (int w = 0; w < N; ++w) {
    encode_variable_async(c, d_grads[w].ptr(), kN, 1000 + w, step, 3, d_scales.as<float>(), N,
                          d_payloads[w].as<uint8_t>(), ws, ctx.stream());
    pp.push_back(d_payloads[w].as<uint8_t>());
    gp.push_back(d_grads[w].ptr());
  }
  DeviceTensor sum({static_cast<int64_t>(kN)});
  DeviceBuffer counts(kN * sizeof(int16_t));
  aggregate_variable_async(c, pp, gp, kN, c.share_scale, sum.ptr(), counts.as<int16_t>(), ws, ctx.stream());
  ws.check(ctx.stream());
  for (int w = 0; w < N && c.ternary; ++w) {
    std::vector<uint8_t> host(gpu_payload_bytes(c, kN));
    TG_CUDA_CHECK(cudaMemcpy(host.data(), d_payloads[w].data(), host.size(), cudaMemcpyDeviceToHost));
    r.payloads.push_back(std::move(host));
  }
  r.sum = to_host(sum).data;
  return r;
}

void expect_same(const std::string& spec, int workers) {
  const auto grads = worker_grads(workers);
  const CpuResult cpu = cpu_path(spec, grads, 17);
  const GpuResult gpu = gpu_path(spec, grads, 17);
  if (spec.rfind("terngrad", 0) == 0) {
    ASSERT_EQ(gpu.payloads.size(), cpu.payloads.size());
    for (int w = 0; w < workers; ++w) EXPECT_EQ(gpu.payloads[w], cpu.payloads[w]) << spec << ": payload of worker " << w;
  }
  ASSERT_EQ(gpu.sum.size(), cpu.sum.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < cpu.sum.size(); ++i) mismatches += gpu.sum[i] != cpu.sum[i];
  EXPECT_EQ(mismatches, 0u) << spec << " with " << workers << " workers: aggregated sums differ";
}

TEST(GpuCodecStep, TernGradSharedScaleFourWorkersBitExact) {
  TG_REQUIRE_GPU();
  expect_same("terngrad:clip=2.5,share_scale=1", 4);
}

TEST(GpuCodecStep, TernGradSingleWorkerPassesThePayloadThrough) {
  TG_REQUIRE_GPU();
  expect_same("terngrad:clip=2.5,share_scale=1", 1);
}

TEST(GpuCodecStep, TernGradOwnScalesSumAsFloats) {
  TG_REQUIRE_GPU();
  expect_same("terngrad:clip=0,share_scale=0", 3);
}

TEST(GpuCodecStep, Fp32SumsInWorkerOrder) {
  TG_REQUIRE_GPU();
  expect_same("fp32", 4);
}

// The training step sums every variable through one aggregation workspace
// and checks it once: shared-scale variables with different scales are
// separate sums, not a scale mismatch (regression: they used to be).
TEST(GpuCodecStep, SharedScaleVariablesShareOneWorkspace) {
  TG_REQUIRE_GPU();
  const std::string spec = "terngrad:clip=2.5,share_scale=1";
  const VariableCodec c = VariableCodec::parse(comm::make_codec(spec)->spec());
  constexpr int N = 3;
  GpuContext ctx;
  tqc::Workspace ws(kN);
  DeviceBuffer counts(kN * sizeof(int16_t));
  std::vector<CpuResult> cpu;
  std::vector<DeviceTensor> sums;
  std::vector<std::vector<DeviceBuffer>> payloads(2);
  for (int var = 0; var < 2; ++var) {
    auto grads = worker_grads(N);
    for (Tensor& g : grads)
      for (float& x : g.data) x *= 3.0f * (var + 1);  // a different shared scale per variable
    cpu.push_back(cpu_path(spec, grads, 5));
    std::vector<const uint8_t*> pp;
    for (int w = 0; w < N; ++w) {
      const auto& bytes = cpu.back().payloads[w];
      payloads[var].emplace_back(bytes.size());
      TG_CUDA_CHECK(cudaMemcpy(payloads[var][w].data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      pp.push_back(payloads[var][w].as<uint8_t>());
    }
    sums.emplace_back(Shape{static_cast<int64_t>(kN)});
    const std::vector<const float*> unused(N, nullptr);
    aggregate_variable_async(c, pp, unused, kN, true, sums.back().ptr(), counts.as<int16_t>(), ws, ctx.stream());
  }
  ws.check(ctx.stream());
  for (int var = 0; var < 2; ++var) EXPECT_EQ(to_host(sums[var]).data, cpu[var].sum) << "variable " << var;
}

TEST(VariableCodec, ParsesTheTrainersSpecs) {
  // Runs without a device: plan parsing is host code.
  const VariableCodec t = VariableCodec::parse(comm::make_codec("terngrad:clip=1.5,share_scale=0")->spec());
  EXPECT_TRUE(t.ternary);
  EXPECT_FLOAT_EQ(t.clip, 1.5f);
  EXPECT_FALSE(t.share_scale);
  EXPECT_FALSE(VariableCodec::parse("fp32").ternary);
  EXPECT_THROW(VariableCodec::parse("fp16"), std::invalid_argument);
}

}  // namespace
}  // namespace terngrad::train::cuda
