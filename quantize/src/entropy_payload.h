// Private: the part of the entropy-coded payloads (codec ids 5 and 6) that
// does not care what a symbol means: the block directory and the blocks'
// rANS streams, written from symbols and read back to symbols, on threads.
// packed_cpu.cpp (codec 5: trits of a worker's payload) and
// entropy_sum_cpu.cpp (codec 6: counts of a ps's sum) give the symbols and
// the header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "terngrad/quantize/entropy_format.h"

namespace terngrad::quantize::detail {

// Symbols of a payload being encoded, with every block's element-value
// counts (blocks() * alphabet of them, block-major).
struct SymbolStream {
  rans::Layout layout;
  std::vector<uint8_t> symbols;   // layout.symbols()
  std::vector<uint32_t> counts;   // [block][value]
};

// Writes the directory and streams of `in` at out + kEntropyHeaderBytes
// when the whole payload fits in out.size() bytes; returns the payload's
// length, or 0 when it would not fit (the caller then writes its fixed-size
// form). Writes no header.
size_t write_entropy_body(const SymbolStream& in, std::span<uint8_t> out);

// The checked header of an entropy payload, ready to decode.
struct EntropyView {
  EntropyHeader header;
  rans::Layout layout;
  uint32_t zero_digit = 0;  // the value padding digits must hold
};

// Checks what the header says about itself and the payload's length
// (magic, version, codec == expect_codec, header size, CRC, lanes, block
// size, group == the alphabet's, reserved byte, length field == actual,
// directory within the payload). alphabet: the element values this codec
// has (3 for codec 5, 2R+1 for codec 6, which reads R first). Throws
// CodecError(kMalformedPayload) naming the field and value.
EntropyView check_entropy_header(std::span<const uint8_t> payload, uint8_t expect_codec, uint32_t alphabet,
                                 uint32_t zero_digit);

// Decodes every block into symbols (layout.symbols() bytes), checking each
// block's probabilities, stream and the padding digits; throws
// CodecError(kInvalidCode) naming the block and the fault. On a throw the
// symbols are garbage (callers have not written their output yet).
void read_entropy_symbols(std::span<const uint8_t> payload, const EntropyView& view, uint8_t* symbols);

}  // namespace terngrad::quantize::detail
