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

// The run ended normally while this process still had work (a backup worker
// after the chief finished): exit cleanly.
class RunEnded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace terngrad::comm
