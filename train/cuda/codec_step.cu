#include <algorithm>
#include <stdexcept>

#include "terngrad/device/grid_stride.cuh"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_sum.h"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/gpu_codec_step.h"
#include "kernels.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace tqc = terngrad::quantize::cuda;

namespace {

// out[i] = scale * float(count[i]), the scale read from the first payload's
// header on the device, so the scale never travels to the host.
__global__ void counts_to_sum(const int16_t* counts, const uint8_t* header, float* out, uint64_t n) {
  const float scale = __uint_as_float(quantize::header_scale_bits(header));
  for (const uint64_t i : grid_stride_range(n))
    out[i] = scale * static_cast<float>(static_cast<int32_t>(counts[i]));
}

__global__ void add_into(float* acc, const float* x, uint64_t n) {
  for (const uint64_t i : grid_stride_range(n))
    acc[i] += x[i];
}

__global__ void scale_kernel(float* x, uint64_t n, float f) {
  for (const uint64_t i : grid_stride_range(n))
    x[i] *= f;
}

__global__ void weight_decay_kernel(float* g, const float* w, uint64_t n, float wd) {
  for (const uint64_t i : grid_stride_range(n))
    g[i] += wd * w[i];
}

}  // namespace

VariableCodec VariableCodec::from(const comm::CodecConfig& config) {
  VariableCodec c;
  const auto* t = std::get_if<comm::TernGradParams>(&config.params);
  const bool wrapped = config.error_feedback || config.server_error_feedback;
  if (!wrapped && std::holds_alternative<comm::Fp32Params>(config.params)) return c;
  if (!wrapped && t != nullptr && t->bucket == 0 && t->pack == comm::TernaryPacking::k2Bit) {
    c.ternary = true;
    c.clip = t->clip;
    c.share_scale = t->share_scale;
    c.rounding = t->round == comm::TernaryRounding::kNearest ? quantize::Rounding::kNearest
                                                             : quantize::Rounding::kStochastic;
    return c;
  }
  throw std::invalid_argument("codec \"" + comm::to_spec(config) +
                              "\" has no GPU path (fp32 and terngrad with one scale per variable and pack=2bit do)");
}

VariableCodec VariableCodec::parse(const std::string& spec) { return from(comm::parse_codec_config(spec)); }

size_t gpu_payload_bytes(const VariableCodec& c, uint64_t n) { return c.ternary ? quantize::max_encoded_bytes(n) : 0; }

void encode_variable_async(const VariableCodec& c, const float* d_grad, uint64_t n, uint64_t seed, uint32_t step,
                           uint32_t tensor_id, const float* d_worker_scales, uint32_t num_workers, uint8_t* d_out,
                           tqc::Workspace& ws, cudaStream_t stream) {
  if (!c.ternary) return;
  quantize::EncodeParams p;
  p.clip_factor = c.clip;
  p.seed = seed;
  p.step = step;
  p.tensor_id = tensor_id;
  p.rounding = c.rounding;
  if (c.share_scale)
    tqc::encode_shared_async(d_grad, n, p, d_worker_scales, num_workers, d_out, quantize::max_encoded_bytes(n), ws,
                             stream);
  else
    tqc::encode_async(d_grad, n, p, d_out, quantize::max_encoded_bytes(n), ws, stream);
}

void local_scale_variable_async(const VariableCodec& c, const float* d_grad, uint64_t n, float* d_scale,
                                tqc::Workspace& ws, cudaStream_t stream) {
  if (c.ternary && c.share_scale) tqc::local_scale_async(d_grad, n, c.clip, d_scale, ws, stream);
}

void aggregate_variable_async(const VariableCodec& c, std::span<const uint8_t* const> d_payloads,
                              std::span<const float* const> d_grads, uint64_t n, bool all_share_one_scale,
                              float* d_sum, int16_t* d_counts, tqc::Workspace& ws, cudaStream_t stream) {
  if (n == 0) return;
  if (!c.ternary) {
    TG_CUDA_CHECK(cudaMemsetAsync(d_sum, 0, n * sizeof(float), stream));
    for (const float* g : d_grads) {
      add_into<<<blocks_for(n), kThreads, 0, stream>>>(d_sum, g, n);
      TG_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  const size_t bytes = quantize::max_encoded_bytes(n);
  if (d_payloads.size() == 1) {  // the CPU passes a single payload through and decodes it
    tqc::decode_async(d_payloads[0], bytes, d_sum, n, ws, stream);
    return;
  }
  if (all_share_one_scale && d_payloads.size() <= quantize::kMaxSumContributions) {
    // This variable's sum has its own shared scale: a new sum for the
    // workspace (the step sums every variable through it before one check).
    tqc::begin_counts_async(ws, stream);
    TG_CUDA_CHECK(cudaMemsetAsync(d_counts, 0, n * sizeof(int16_t), stream));
    for (const uint8_t* p : d_payloads) tqc::accumulate_counts_async(p, bytes, d_counts, n, ws, stream);
    counts_to_sum<<<blocks_for(n), kThreads, 0, stream>>>(d_counts, d_payloads[0], d_sum, n);
    TG_CUDA_CHECK_LAUNCH();
    return;
  }
  // Different scales: the float32 sum of the decoded payloads, in worker order.
  TG_CUDA_CHECK(cudaMemsetAsync(d_sum, 0, n * sizeof(float), stream));
  for (const uint8_t* p : d_payloads) tqc::decode_accumulate_async(p, bytes, d_sum, n, ws, stream);
}

void scale_async(float* d_x, uint64_t n, float factor, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(d_x, n, factor);
  TG_CUDA_CHECK_LAUNCH();
}

void add_weight_decay_async(float* d_g, const float* d_w, uint64_t n, float wd, cudaStream_t stream) {
  if (n == 0 || wd == 0.0f) return;
  weight_decay_kernel<<<blocks_for(n), kThreads, 0, stream>>>(d_g, d_w, n, wd);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace terngrad::train::cuda
