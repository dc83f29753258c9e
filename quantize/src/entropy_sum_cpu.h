// Private: the entropy-coded ternary sum (codec 6); ternary_sum.h's entry
// points dispatch here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/ternary_sum.h"

namespace terngrad::quantize::detail {

// Writes counts (each already checked to lie in [-R, R]) as codec 6 into
// out when R <= kMaxEntropySumContributions and the payload fits out;
// returns its length, or 0 (nothing usable written: the caller writes codec 2).
size_t encode_sum_entropy(std::span<const int16_t> counts, float scale, uint32_t contributions, uint32_t tensor_id,
                          uint32_t step, std::span<uint8_t> out);

// The sum of R shared-scale payloads (codec 1, 4 or 5, already checked to
// share count n and one scale) straight to codec 6: per block, every
// payload's codes are added as count + 1 digits (4 at a time for 2-bit
// bodies), grouped into symbols and coded. Validates every body first.
// Returns 0 (out untouched) when R > 127 or codec 6 would not fit out.
size_t sum_to_entropy(std::span<const std::span<const uint8_t>> payloads, const PayloadHeader& first,
                      std::span<uint8_t> out);

// A validated codec-6 payload as its symbols.
struct SumView {
  SumHeader header;
  rans::Layout layout;
  std::vector<uint8_t> symbols;
};
// Validates all of it; throws CodecError naming the field, block or digit.
// With expect_count, another element count is refused before decoding.
SumView open_sum_entropy(std::span<const uint8_t> payload, std::optional<uint64_t> expect_count = {});
// out = scale * count per element (out.size() == count, checked by the caller).
void decode_sum_symbols(const SumView& sv, std::span<float> out);

}  // namespace terngrad::quantize::detail
