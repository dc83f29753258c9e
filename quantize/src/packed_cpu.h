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

// repack() (codec.h).
size_t repack_payload(std::span<const uint8_t> payload, Packing to, std::span<uint8_t> out);

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
// The same for elements [i0, i1) only, counts[0] being element i0's.
void add_symbol_codes_range(const SymbolPayload& sp, uint64_t i0, uint64_t i1, int16_t* counts);
// And of a 2-bit body (decode_cpu.cpp).
void add_codes_range(const uint8_t* body, uint64_t i0, uint64_t i1, int16_t* counts);

// The payloads of one sum of n elements, every one validated whole before
// anything is summed (sum_shared, sum_payloads): headers[p], and symbols[p]
// opened to its base-3 symbols for a packed payload (codec 4, 5; .symbols
// null for a 2-bit one). Same scale and count n, or CodecError naming the
// payload (what: the caller, for the messages).
struct OpenedSum {
  std::vector<SymbolPayload> symbols;
  std::vector<PayloadHeader> headers;
};
OpenedSum open_for_sum(std::span<const std::span<const uint8_t>> payloads, uint64_t n, const char* what);

}  // namespace terngrad::quantize::detail
