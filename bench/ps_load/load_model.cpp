// The replicas' payloads (load_model.h).
#include "load_model.h"

#include <stdexcept>

#include "../bench_common.h"
#include "terngrad/train/models.h"

namespace terngrad::bench {

LoadModel build_load_model(const LoadModelOptions& o) {
  if (o.replicas < 1 || o.num_ps < 1) throw std::invalid_argument("load model: replicas and num_ps must be >= 1");
  train::ModelOptions mo;
  mo.num_classes = o.num_classes > 0 ? o.num_classes : (o.net == "lenet" || o.net == "cifarnet" ? 10 : 1000);
  // Only the variables' names and sizes are used; the weights are dropped below.
  std::vector<comm::VariableSpec> vars;
  {
    auto model = train::make_model(o.net, mo, 1);
    for (const auto& p : model->params().params) {
      const uint64_t n = static_cast<uint64_t>(p.value.size());
      // session.cpp codec_plan: small variables and (unless quantized) the logits stay fp32.
      const bool fp32 = static_cast<int64_t>(n) < o.size_to_binarize || (p.is_logits && !o.quantize_logits);
      vars.push_back({p.name, n, fp32 ? "fp32" : o.codec});
    }
  }
  LoadModel m;
  m.layout = comm::place_variables(vars, o.num_ps, o.placement);
  const comm::Layout& L = m.layout;
  for (const auto& v : L.variables) {
    m.codecs.push_back(comm::make_codec(v.codec));
    m.wants_scales = m.wants_scales || m.codecs.back()->wants_shared_scale();
    m.parameters += v.size;
  }
  m.per_ps.assign(o.num_ps, {});
  for (const auto& s : L.shards) {
    LoadModel::PsShare& share = m.per_ps[s.ps];
    ++share.shards;
    share.elements += s.count;
    share.fp32_bytes += 4 * s.count;
    share.payload_bytes += m.codecs[s.variable]->payload_bytes(s.count);
  }
  for (const auto& share : m.per_ps) m.payload_bytes_per_replica += share.payload_bytes;

  m.local_scales.assign(L.variables.size(), 0.0f);
  m.payloads.assign(o.replicas, std::vector<std::vector<uint8_t>>(L.shards.size()));
  std::vector<float> grad;
  for (size_t v = 0; v < L.variables.size(); ++v) {
    comm::GradientCodec& codec = *m.codecs[v];
    grad.resize(L.variables[v].size);
    fill_gradient(grad.data(), grad.size(), kInputSeed + 7919 * o.seed + v);
    std::vector<comm::ElementRange> slices;
    for (size_t sh : L.shards_of[v]) slices.push_back({L.shards[sh].begin, L.shards[sh].count});
    comm::EncodeContext ctx;
    ctx.tensor_id = static_cast<uint32_t>(v);
    if (codec.wants_shared_scale()) {
      m.local_scales[v] = codec.local_scale(grad);
      ctx.shared_scale = m.local_scales[v];  // every replica's is equal: the max is it
    }
    for (int r = 0; r < o.replicas; ++r) {
      ctx.seed = kCodecSeed + 1000003 * o.seed + static_cast<uint64_t>(r);
      std::vector<std::span<uint8_t>> outs;
      for (size_t i = 0; i < slices.size(); ++i) {
        auto& p = m.payloads[r][L.shards_of[v][i]];
        p.resize(codec.payload_bytes(slices[i].count));
        outs.push_back(p);
      }
      codec.encode_slices(grad, ctx, slices, outs);
    }
  }
  return m;
}

}  // namespace terngrad::bench
