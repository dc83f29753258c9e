// The C API's "auto" (terngrad.h, comm/codec_choice.h): the candidates of an
// auto spec and the plan for a trainer's own variables and link.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "capi_internal.h"
#include "terngrad/comm/codec_choice.h"

using namespace terngrad::capi;
namespace tc = terngrad::comm;

extern "C" {

tg_status tg_auto_candidates(const char* auto_spec, int sync, char* buf, size_t capacity, size_t* out_length) {
  return guarded(__func__, Operation::kOther, [&] {
    require(auto_spec, "auto_spec");
    std::string text;
    for (const std::string& c : tc::parse_auto_codec(auto_spec, sync != 0).candidates) text += c + "\n";
    if (out_length != nullptr) *out_length = text.size();
    if (capacity <= text.size())
      throw ApiError(TG_ERR_BUFFER_TOO_SMALL, "capacity " + std::to_string(capacity) + " cannot hold the " +
                                                  std::to_string(text.size() + 1) +
                                                  " bytes of the candidates (with the NUL)");
    require(buf, "buf");
    std::memcpy(buf, text.c_str(), text.size() + 1);
  });
}

tg_status tg_auto_choose(const char* auto_spec, int sync, const uint64_t* sizes, const int* fixed, size_t count,
                         double up_bytes_per_s, double down_bytes_per_s, double round_trip_s, int replicas,
                         int num_ps, int* out_choice, double* out_estimate_s) {
  return guarded(__func__, Operation::kOther, [&] {
    require(auto_spec, "auto_spec");
    require_buffer(sizes, count, "sizes", "variables");
    require_buffer(out_choice, count, "out_choice", "variables");
    for (double r : {up_bytes_per_s, down_bytes_per_s, round_trip_s})
      if (!(r >= 0) || !std::isfinite(r))
        throw ApiError(TG_ERR_INVALID_ARGUMENT, "rates and the round trip must be finite and >= 0, got " +
                                                    std::to_string(r));
    tc::ChoiceInput in;
    in.candidates = tc::parse_auto_codec(auto_spec, sync != 0).candidates;
    for (size_t i = 0; i < count; ++i)
      in.variables.push_back({"variable " + std::to_string(i), sizes[i], fixed != nullptr && fixed[i] != 0});
    for (const std::string& s : tc::specs_to_cost(in.candidates)) in.costs.push_back(tc::measure_codec_cost(s));
    in.link = {up_bytes_per_s, down_bytes_per_s, round_trip_s};
    in.replicas = replicas;
    in.num_ps = num_ps;
    const tc::CodecChoice choice = tc::choose_codecs(in);
    for (size_t i = 0; i < count; ++i) {
      const auto at = std::find(in.candidates.begin(), in.candidates.end(), choice.plan[i]);
      out_choice[i] = at == in.candidates.end() ? -1 : static_cast<int>(at - in.candidates.begin());
    }
    if (out_estimate_s != nullptr) *out_estimate_s = choice.estimate.total_s;
  });
}

}  // extern "C"
