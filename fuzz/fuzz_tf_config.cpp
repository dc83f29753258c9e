// The cluster description (comm/cluster.h): TF_CONFIG JSON through
// parse_tf_config(), or the TernGrad scripts' flags through
// cluster_from_flags(). An accepted spec must pass validate_cluster() and
// answer every query about its tasks without throwing.
//
// Input: mode byte; bit 0 clear: the rest is TF_CONFIG text; set: four
// pieces (fuzz_input.h) job name, ps hosts, worker hosts, chief host, with
// the task index from the mode byte's upper bits.
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "outcome.h"
#include "terngrad/comm/cluster.h"

namespace {
std::string text(terngrad::fuzz::Bytes b) { return std::string(b.begin(), b.end()); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tc = terngrad::comm;
  using namespace terngrad::fuzz;
  Bytes in(data, size);
  const uint8_t mode = take_u8(in);
  tc::ClusterSpec spec;
  if (mode & 0x01) {
    const std::vector<Bytes> p = split_pieces(in, 4);
    const int task = (mode >> 1) - 8;  // -8 .. 119: negative indices are inputs too
    if (!accepts([&] { spec = tc::cluster_from_flags(text(p[0]), task, text(p[1]), text(p[2]), text(p[3])); }))
      return 0;
  } else {
    const std::string_view json(reinterpret_cast<const char*>(in.data()), in.size());
    if (!accepts([&] { spec = tc::parse_tf_config(json); })) return 0;
  }
  must_accept("validate_cluster", [&] {
    tc::validate_cluster(spec);
    (void)spec.task_name();
    (void)spec.own_address().str();
    (void)spec.ps_addresses();
    for (int r = 0; r < spec.num_replicas(); ++r) (void)spec.replica_address(r).str();
  });
  return 0;
}
