// A script of requests to a parameter server, for fuzzing its request
// handling without a network: every call of the service, each a serialized
// protobuf request (so mutating the bytes mutates the messages), sent by a
// caller whose credentials and session the script also chooses, over an
// in-process channel to a fresh ParameterServer. The fuzz target
// (fuzz/fuzz_ps_requests.cpp) and a unit test (PsRequests.*) run the same
// scripts; make_seed_script() writes a well-formed run to start from.
//
// Layout: a mode byte (bit 0: the ps has a cluster secret; bit 1: async
// with an update rule; bit 2: 2 replicas, else 1), then up to kMaxCalls
// records: kind (1 byte, modulo the 9 calls), caller (1 byte: bits 0-1 the
// token: none, replica 0's, replica 1's, the observer's; bits 2-3 the
// session: none, A, B, C), then the request's pieces (fuzz_input.h's split:
// a 2-byte length and that many bytes each), 1 piece for unary calls and
// up to kMaxStreamMessages for the client streams (Init, Push), each parsed
// as that call's message type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace terngrad::testing {

inline constexpr size_t kMaxCalls = 24;
inline constexpr size_t kMaxStreamMessages = 6;

struct ScriptOutcome {
  size_t calls = 0;      // calls made
  size_t refused = 0;    // calls answered with an error status
  bool ps_alive = true;  // an authenticated Status answered after the script
  std::string detail;    // why ps_alive is false
};

// Runs a script against a fresh ps. Never throws for any input; a crash,
// sanitizer report or hang is the ps's bug.
ScriptOutcome run_ps_request_script(std::span<const uint8_t> script);

// A well-formed 2-replica run: Init, both Registers, scales, both pushes,
// pulls (one streamed), heartbeats, Status, Checkpoint, a link Probe and Shutdown;
// sync runs also a rewind with a new plan (--codec=auto chose again: another
// codec and fingerprint) and both Registers under it before the Shutdown.
// server_ef (sync only): the variable travels as server_ef(fp16), the Init
// carries a server state (a resumed run's) and the Checkpoint asks for the
// states after step 0, so the scripts reach the server-state paths too.
std::vector<uint8_t> make_seed_script(bool secret, bool async, bool server_ef = false);

}  // namespace terngrad::testing
