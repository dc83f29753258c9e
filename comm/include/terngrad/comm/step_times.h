// Where a replica's sync step goes, as it reports it to the ps (PushHeader
// step_ms) so that the chief can log the mean over every replica: the
// step's time and its parts, in milliseconds, in this order.
#pragma once

#include <array>
#include <cstddef>

namespace terngrad::comm {

inline constexpr std::array<const char*, 8> kStepTimeNames = {"step",  "compute", "encode", "push",
                                                              "wait",  "pull",    "decode", "apply"};
inline constexpr size_t kStepTimeFields = kStepTimeNames.size();

}  // namespace terngrad::comm
