// "--codec=auto": which codec each variable travels with, chosen from
// measured inputs rather than by the user (issue 37).
//
// Users of gradient compression report "no speedup" more than anything else:
// whether a codec pays depends on the link's rate, the codec's cost on this
// CPU, the variable's size and the number of replicas. This unit holds the
// three pieces the choice needs, none of which touches a network or a file:
//   - the candidates: "auto" or "auto(<spec>,<spec>,...)", checked whole
//     against the run's mode before anything starts (parse_auto_codec);
//   - each candidate's cost on this machine: encode, the server's sum and the
//     decode as the trainer runs them, timed at two sizes and fitted as
//     a + b n seconds (measure_codec_cost);
//   - the step-time model (experiments/network/perf_model.py's, per
//     variable) and the choice that minimises it (choose_codecs).
// Probing the link is the service's (link_probe.h); caching the costs per
// CPU and SIMD level and telling the replicas is the trainer's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace terngrad::comm {

// The candidates of an "auto" spec, as canonical codec specs (make_codec(s)->spec()).
struct AutoCodec {
  std::vector<std::string> candidates;
};

// True for "auto" and "auto(...)": the spec names a choice, not a codec.
bool is_auto_codec(std::string_view spec);

// "auto": fp32, fp16 and the recommended error-feedback TernGrad
// configuration (experiments/results/codecs): ef(server_ef(terngrad:
// round=nearest)) in sync runs; ef(terngrad:round=nearest) in async runs,
// where no step's sum exists to re-encode. "auto(a,b,...)": the user's
// candidates; a codec spec's own parameters may hold commas
// ("auto(fp32,terngrad:clip=2.5,share_scale=1)"): a piece "key=value" with
// no ':' or '(' before its '=' continues the previous candidate.
// Throws std::invalid_argument naming the problem for: a spec that is not
// auto, an empty candidate list, an unknown codec or bad parameter (make_codec's
// message), the same codec twice, and a candidate this mode cannot run: in an
// async run (sync = false) a multi-round codec (pre-rounds summed over the
// replicas of one step) or one whose server sum keeps state between steps.
AutoCodec parse_auto_codec(std::string_view spec, bool sync);

// A codec's cost on this machine, seconds as a + b n for a variable of n
// elements: what the replica spends encoding (encode) and decoding the
// server's sum (decode), what the server spends summing two payloads
// (sum2: a sum of R payloads is taken as R / 2 of it), and the bytes each
// way: up = payload_bytes(n); down = the sum's bytes, per element and fixed
// (measured with 2 payloads, or from aggregate_bytes(n, R) where the codec
// knows it).
struct LinearCost {
  double fixed = 0, per_element = 0;
  double at(uint64_t n) const { return fixed + per_element * static_cast<double>(n); }
};
struct CodecCost {
  std::string spec;
  LinearCost encode_s, sum2_s, decode_s, down_bytes;
};

// Times one codec as the trainer runs it (local scale, encode, the server's
// aggregate_step of 2 payloads, decode_aggregate_with) on Gaussian
// gradients of n_small and n_large elements, best of `repeats`, fresh codecs
// per size (error-feedback state is sized by its first gradient). Throws
// std::invalid_argument for a bad spec or sizes (n_small < 4, n_large <=
// n_small, repeats < 1).
CodecCost measure_codec_cost(const std::string& spec, uint64_t n_small = 1 << 14, uint64_t n_large = 1 << 21,
                             int repeats = 3);

// The specs whose costs a choice needs: the candidates, and fp32 (fixed
// variables travel fp32 whatever is chosen) when it is not one of them.
std::vector<std::string> specs_to_cost(const std::vector<std::string>& candidates);

// The link between a replica and a ps, from the replica's side.
struct LinkModel {
  double up_bytes_per_s = 0;    // replica -> ps; 0 = no link (memory: in-process runs)
  double down_bytes_per_s = 0;  // ps -> replica
  double latency_s = 0;         // one round trip
  // How the two directions share the link when both carry data (the probe's
  // LinkMeasurement::two_way_factor): 1 full duplex, 2 they take turns.
  double two_way = 1;
};

// One variable of the run; fixed: it travels fp32 whatever the choice
// (--size_to_binarize, --quantize_logits=false), as the fixed plans do.
struct ChoiceVariable {
  std::string name;
  uint64_t size = 0;
  bool fixed = false;
};

struct ChoiceInput {
  std::vector<ChoiceVariable> variables;
  std::vector<std::string> candidates;  // canonical specs, the auto spec's order
  std::vector<CodecCost> costs;         // of every candidate, and of "fp32" when a variable is fixed
  LinkModel link;
  int replicas = 1, num_ps = 1;
};

// The model's estimate of one plan's communication part of a step, seconds
// (perf_model.py with overlap 0): the busiest link's two directions, the
// codecs' compute, and one round trip each way.
//   u = k * sum(up_v) / up_rate, d = k * sum(down_v) / down_rate,
//           k = max(1, R / P): a ps link carries R / P replicas' payloads;
//   link  = max(u, d) + (two_way - 1) * min(u, d): the busier direction on a
//           full-duplex link, both in turn where the probe found the
//           directions slowing each other (LinkModel::two_way);
//   codec = encode + decode + server: sum_v encode_v, sum_v decode_v and
//           sum_v (R / 2) sum2_v / P (one ps's share);
//   total = link + codec + 2 * latency.
// The parts are kept for a finer step model than this sum, which ranks the
// plans before any step has run: experiments/network/auto_report.py
// predicts a measured step from them, with the upload, the ps's sums and
// the download streamed shard by shard (the slowest of the three sets the
// pace).
struct PlanEstimate {
  double link_s = 0, codec_s = 0, total_s = 0;
  double up_s = 0, down_s = 0;                     // u and d
  double encode_s = 0, decode_s = 0, server_s = 0;  // codec's parts
  uint64_t up_bytes = 0, down_bytes = 0;           // per replica per step
};

struct CodecChoice {
  std::vector<std::string> plan;             // per variable, canonical specs
  PlanEstimate estimate;                     // of the plan
  std::vector<PlanEstimate> uniform;         // every candidate on every variable it may take, per candidate
};

// Every variable's codec: the plan with the smallest estimate found by
// starting from the best uniform plan and changing one variable at a time
// (largest first) while the estimate drops by more than 0.1%, at most 8
// passes; deterministic. The first candidate is the default: another
// uniform plan replaces it only when 5% faster, so calibration noise does
// not trade precision for nothing; and without a link (both rates 0) there
// are no bytes to save and the first candidate is the plan. Fixed variables
// stay "fp32". Throws std::invalid_argument when there are
// no candidates, a candidate or "fp32" (for a fixed variable) without a
// cost, or a replica or ps count below 1.
CodecChoice choose_codecs(const ChoiceInput& in);

// The estimate of a given plan (for the report, and the tests).
PlanEstimate estimate_plan(const ChoiceInput& in, const std::vector<std::string>& plan);

}  // namespace terngrad::comm
