// How this process's gRPC reads its sockets. gRPC 1.51 (Debian 12) reads a
// socket as soon as any bytes arrive: a stream's 256 KiB shard crossing a
// paced 1 Gbit/s link woke the ps's and the replicas' pollers every few KiB.
// Two of its experiments read whole HTTP/2 frames instead: the transport tells
// TCP how many bytes the frame still needs (tcp_frame_size_tuning), and TCP
// asks the kernel to wake it only once they are in (tcp_rcv_lowat, the
// socket's SO_RCVLOWAT). Over loopback, where bytes arrive as fast as they
// are written, there is nothing to wait for, and the runs were slower with
// them. Measured in issue 35 (docs/distributed.md).
#pragma once

#include <string>

#include "terngrad/comm/cluster.h"

namespace terngrad::comm {

// The experiments read_whole_grpc_frames() turns on, as GRPC_EXPERIMENTS lists them.
inline constexpr const char* kWholeFrameReadExperiments = "tcp_frame_size_tuning,tcp_rcv_lowat";

// Whether the cluster's tasks talk over a network: some task's address (ps,
// chief, worker, evaluator) is not a loopback one (credentials.h's rule).
bool crosses_a_network(const ClusterSpec& cluster);

// Sets GRPC_EXPERIMENTS to kWholeFrameReadExperiments unless the environment
// has it already: a user's list, even an empty one (none), is kept. gRPC reads
// the variable once, at its first connection, so call it before the process's
// first gRPC call; later it changes nothing. Returns the list now in effect.
// Not thread-safe (it writes the environment): call it at the start of main.
std::string read_whole_grpc_frames();

}  // namespace terngrad::comm
