// A link's rate as people write it: tc's syntax ("100mbit", "1gbit",
// "12MBps" = megabytes per second, as tc reads it), for the emulated links
// (tg-cluster --link_rate) and for the rate --codec=auto assumes
// (--auto_link_rate).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace terngrad::comm {

// What is wrong with text as a rate, "" when it is one (its bits per second
// in *bps). A unit is required: tc reads a bare number as bits per second,
// which is never what "100" meant. Accepts 10kbit to 100gbit.
std::string link_rate_problem(const std::string& text, uint64_t* bps = nullptr);

// What is wrong with text as a schedule of rates, "KEY:RATE[,KEY:RATE...]"
// with keys ascending, naming the entry; "" when it is one (the (key, bits
// per second) pairs in *changes). Key int64_t: global steps >= 1
// (STEP:RATE, --auto_link_changes); double: seconds > 0 (SECS:RATE,
// tg-cluster --link_rate_changes).
template <class Key>
std::string rate_schedule_problem(const std::string& text, std::vector<std::pair<Key, uint64_t>>* changes);

// The STEP:RATE schedule of --auto_link_changes (rate_schedule_problem).
inline std::string link_changes_problem(const std::string& text,
                                        std::vector<std::pair<int64_t, uint64_t>>* changes = nullptr) {
  return rate_schedule_problem<int64_t>(text, changes);
}

}  // namespace terngrad::comm
