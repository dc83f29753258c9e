// The codec half of a GPU training step, on device buffers only: encode one
// worker's gradient of one variable, and sum N workers' payloads into the
// decoded aggregate. The arithmetic is the CPU trainer's (session.cpp and
// comm/codecs/*): TernGrad payloads come from the CUDA codec
// (terngrad/quantize/cuda.h, byte-identical to the CPU codec), shared-scale
// payloads are summed as exact integer counts and decoded as scale * count
// (quantize::decode_sum), fp32 gradients are summed 0 + g0 + g1 + ... in
// worker order (the fp32 codec's aggregate). So for equal gradients the GPU
// and CPU trainers produce equal bytes and equal sums.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string>

#include "terngrad/comm/codec_config.h"
#include "terngrad/quantize/cuda.h"

namespace terngrad::train::cuda {

// How one variable travels (parsed from the trainer's codec plan).
struct VariableCodec {
  bool ternary = false;     // false: fp32
  float clip = 2.5f;        // terngrad clip factor
  bool share_scale = true;  // terngrad scale sharing
  quantize::Rounding rounding = quantize::Rounding::kStochastic;  // terngrad round=
  // From a codec's typed parameters (comm/codec_config.h): fp32 and
  // per-variable terngrad have a GPU path; anything else (fp16, bucketed
  // terngrad, ef(), qsgd, ...) throws std::invalid_argument naming it.
  static VariableCodec from(const comm::CodecConfig& config);
  // from(comm::parse_codec_config(spec)).
  static VariableCodec parse(const std::string& spec);
};

// Bytes of one worker's payload for n elements (0 for fp32: the gradient
// itself is read in place, nothing is packed).
size_t gpu_payload_bytes(const VariableCodec& c, uint64_t n);

// TernGrad encode of d_grad[0, n) into d_out (gpu_payload_bytes(c, n)
// bytes); the EncodeParams are the CPU codec's. With scale sharing
// (c.share_scale), d_worker_scales[0, num_workers) holds every worker's
// local scale on the device (local_scale_variable_async) and the payload
// takes their max, read on the device: no host round trip. The caller
// orders all those writes before this call's stream position.
void encode_variable_async(const VariableCodec& c, const float* d_grad, uint64_t n, uint64_t seed, uint32_t step,
                           uint32_t tensor_id, const float* d_worker_scales, uint32_t num_workers, uint8_t* d_out,
                           quantize::cuda::Workspace& ws, cudaStream_t stream);

// This worker's local scale of d_grad[0, n) into *d_scale (device), for the
// codecs that share scales (a no-op otherwise).
void local_scale_variable_async(const VariableCodec& c, const float* d_grad, uint64_t n, float* d_scale,
                                quantize::cuda::Workspace& ws, cudaStream_t stream);

// d_sum[0, n) = the decoded sum of the workers' contributions: d_payloads[w]
// for ternary variables, d_grads[w] for fp32 ones. all_share_one_scale: every
// payload was encoded with the same shared scale (then counts are summed
// exactly). d_counts: n int16 of scratch (ternary, more than one worker).
void aggregate_variable_async(const VariableCodec& c, std::span<const uint8_t* const> d_payloads,
                              std::span<const float* const> d_grads, uint64_t n, bool all_share_one_scale,
                              float* d_sum, int16_t* d_counts, quantize::cuda::Workspace& ws, cudaStream_t stream);

// d_x[i] *= factor (the average over replicas, CPU: g *= 1/R).
void scale_async(float* d_x, uint64_t n, float factor, cudaStream_t stream);
// d_g[i] += wd * d_w[i] (weight decay, as compute_gradient adds it).
void add_weight_decay_async(float* d_g, const float* d_w, uint64_t n, float wd, cudaStream_t stream);

}  // namespace terngrad::train::cuda
