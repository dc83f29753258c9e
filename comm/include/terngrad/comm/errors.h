// How the distributed layer reports the end of a run to a process.
#pragma once

#include <stdexcept>
#include <string>

namespace terngrad::comm {

// A peer died, never joined, cannot be reached, or refused a request (bad
// layout, malformed payload); the message names the peer and what happened.
// The process should exit with an error.
class PeerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Sync runs: a ps restarted (empty), or the chief rewound the run after one
// did. The step in progress cannot complete: the chief rewinds every ps to its
// latest checkpoint (WorkerClient::rewind_run), every replica restores that
// checkpoint and goes on from its step (WorkerClient::rejoin_rewound_run).
// Uncaught, it ends the process as any PeerError does.
class PsRestarted : public PeerError {
 public:
  using PeerError::PeerError;
};

// The run ended normally while this process still had work (a backup worker
// after the chief finished): exit cleanly.
class RunEnded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace terngrad::comm
