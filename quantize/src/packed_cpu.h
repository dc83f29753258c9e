// Private: a worker's ternary payload packed below two bits per element,
// base-3 (codec 4) or entropy-coded (codec 5). Both carry the same symbols:
// a base-3 byte per 5 elements, digit = the element's 2-bit code as a number.
// codec.h's entry points dispatch here on EncodeParams::packing and on the
// payload's codec id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "terngrad/quantize/codec.h"

namespace terngrad::quantize::detail {

// Encodes x (a slice at params.element_offset of the tensor the scale
// belongs to) as params.packing (kBase3 or kEntropy) with header flags
// `flags`; out holds max_encoded_bytes(n, packing). Returns the bytes written.
size_t encode_packed(std::span<const float> x, float scale, uint8_t flags, const EncodeParams& params,
                     std::span<uint8_t> out);

// True if the payload's codec id is 4 or 5 (nothing else is checked).
bool is_symbol_packed(std::span<const uint8_t> payload);

// A validated codec 4 or 5 payload as its base-3 symbols (the body of a
// codec-4 payload, or the decoded blocks of a codec-5 one).
struct SymbolPayload {
  PayloadHeader header;
  std::vector<uint8_t> decoded;  // codec 5's symbols; empty for codec 4
  const uint8_t* symbols = nullptr;
};
// Validates the header (and codec 5's directory) only: cheap, before
// anything is sized from the element count.
PayloadHeader check_symbol_header(std::span<const uint8_t> payload);
// Validates all of it (header, every symbol, padding); throws CodecError.
// With expect_count, a payload of another element count is refused (naming
// `what`) before its body is decoded: an entropy-coded payload of B bytes
// can describe thousands of times B elements, so callers that know the size
// say it and nothing is allocated from an untrusted count.
SymbolPayload open_symbol_payload(std::span<const uint8_t> payload, std::optional<uint64_t> expect_count = {},
                                  const char* what = "output");

// out = (or +=) scale * the elements of the symbols.
void expand_symbols(const SymbolPayload& sp, bool accumulate, std::span<float> out);
// counts += the elements' signed codes.
void add_symbol_codes(const SymbolPayload& sp, int16_t* counts);

}  // namespace terngrad::quantize::detail
