// Scheduling priority for a replica's communication. On a machine whose cores
// are all busy with forward and backward passes, a thread that has a push's
// bytes to send, or a sum to read, waits milliseconds for a core while the
// link idles (issue 35's traces: buckets queued 1-5 ms before their sender
// ran). A replica therefore lowers its compute thread's priority
// (TrainConfig::compute_nice); its communication threads keep the
// process's, and the kernel runs them as soon as they wake.
//
// Linux keeps a nice value per thread, and a new thread takes its creator's.
// So the communication threads are started from one long-lived thread that
// keeps the process's priority (comm_thread), never from the compute thread.
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace terngrad::comm {

// Starts the thread that starts communication threads, if it is not running:
// call it before lowering any thread's priority. Idempotent, thread-safe.
void start_comm_thread_spawner();

// fn on a new thread, started by that thread (which this starts if needed):
// it has the spawner's priority, whatever the caller's. Throws what
// std::thread's constructor throws.
std::thread comm_thread(std::function<void()> fn);

// Makes the calling thread `nice` steps less favoured by the scheduler (a
// Linux nice value per thread, 0..19; 0 does nothing). Returns "" or why it
// could not (the priority is then unchanged). Threads this one starts later
// take the lowered priority (OpenMP's, for example); comm_thread()'s do not.
std::string lower_this_thread_priority(int nice);

}  // namespace terngrad::comm
