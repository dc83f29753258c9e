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

// Codes a payload's blocks as their symbols come (from several threads, one
// block each), then lays out directory and streams. Each block is coded
// while its symbols are still in cache: the producer fills a block's symbols
// and element-value counts (padding digits counted as the zero value) and
// calls code_block() at once.
class EntropyWriter {
 public:
  explicit EntropyWriter(const rans::Layout& layout);
  // Block j's rANS stream from its symbols (layout.block_symbols(j) of them)
  // and counts (layout.alphabet of them). Distinct j may run concurrently.
  void code_block(uint64_t j, const uint8_t* symbols, const uint32_t* counts);
  // Writes directory and streams at out + kEntropyHeaderBytes when the whole
  // payload fits in out.size() bytes and returns its length; returns 0 (out
  // untouched) when it would not fit. Writes no header. Every block must
  // have been coded.
  size_t finish(std::span<uint8_t> out);

 private:
  rans::Layout layout_;
  uint64_t slot_ = 0;                 // scratch bytes per block: the most a stream takes
  std::vector<uint32_t> bytes_;       // [block] stream length
  std::vector<uint16_t> probs_;       // [block][value] element probabilities
  std::vector<uint8_t> model_failed_; // [block]
  uint8_t* scratch_ = nullptr;        // block j's stream ends at scratch_ + (j + 1) * slot_
};

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
