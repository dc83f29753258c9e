// The optimizer's scalar state as bytes (for checkpoint blobs):
//   u32 magic "TGOS" | u32 version 1 | u32 name length | name | i64 steps
// all little-endian. The name guards against restoring Adam's step count
// into a different optimizer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace terngrad::train::detail {

std::vector<uint8_t> pack_state(const std::string& optimizer, int64_t steps);

// Returns the step count; throws std::invalid_argument naming what is wrong.
int64_t unpack_state(const std::string& optimizer, std::span<const uint8_t> blob);

}  // namespace terngrad::train::detail
