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

// What is wrong with text as a schedule of rates, "STEP:RATE[,STEP:RATE...]"
// with steps >= 1 and ascending (--auto_link_changes), naming the entry; ""
// when it is one (the (step, bits per second) pairs in *changes).
std::string link_changes_problem(const std::string& text,
                                 std::vector<std::pair<int64_t, uint64_t>>* changes = nullptr);

}  // namespace terngrad::comm
