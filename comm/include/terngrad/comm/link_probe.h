// The chief's measurement of its link to a ps (--codec=auto): round trips of
// empty probes for the latency, then filler one way at a time until enough
// time or bytes have passed for the rate, then both ways at once on the same
// connection, as a sync step's pushes and pulls share it. rpc Probe changes
// nothing on the ps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "terngrad/comm/credentials.h"
#include "terngrad/comm/tls.h"

namespace terngrad::comm {

struct ProbeOptions {
  std::optional<Credential> credential;  // the chief's (replica 0), with a cluster secret
  TlsOptions tls;
  double timeout_s = 30;      // the whole probe; each call's deadline is what is left
  double min_seconds = 0.25;  // per direction: keep sending until this long has passed...
  uint64_t max_bytes = uint64_t{64} << 20;  // ...or this many bytes (per direction)
  uint32_t message_bytes = 1u << 20;        // filler per call, at most 4 MiB
  int latency_calls = 5;                    // empty round trips; the fastest is the latency
};

struct LinkMeasurement {
  double up_bytes_per_s = 0;    // to the ps
  double down_bytes_per_s = 0;  // from the ps
  double rtt_s = 0;             // an empty call's round trip
  // Both ways at once: the time the two directions' filler took together,
  // over the time the slower direction alone would take (from the rates
  // above). 1: full duplex, the directions do not slow each other; 2: they
  // take turns (each direction's acknowledgements queue behind the other's
  // data on a shaped link, the TCP two-way traffic effect). Clamped to [1, 2].
  double two_way_factor = 1;
  uint64_t up_bytes = 0, down_bytes = 0;  // the one-way phases' filler; the two-way phase sends as much again
  double seconds = 0;           // the probe's own wall time
};

// Throws PeerError naming the address and the call's status when the ps does
// not answer, refuses the probe, or the time runs out; std::invalid_argument
// for options out of range.
LinkMeasurement probe_link(const std::string& address, const ProbeOptions& options = {});

}  // namespace terngrad::comm
