// Private: the CPU rANS block coder (FORMAT.md, "rANS"): one block's symbols
// <-> one block's stream, K interleaved lanes, the model of entropy_format.h.
// The payload code (entropy_cpu.cpp) cuts payloads into blocks and runs
// these on threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/quantize/entropy_format.h"

namespace terngrad::quantize::detail {

// A block's model, both ways: frequencies and cumulative frequencies per
// symbol, the encoder's per-symbol constants and the decoder's slot table.
struct BlockModel {
  uint32_t symbols = 0;                  // a^g
  uint16_t freq[rans::kMaxSymbols + 1];  // f_s (sum 2^14)
  uint32_t cum[rans::kMaxSymbols + 2];   // c_s = sum of f below s

  // From stored element probabilities q (already checked valid). Returns
  // false if the model breaks its invariants (impossible: FORMAT.md).
  bool build(const uint16_t* q, uint32_t alphabet, uint32_t group);
  void build_slot_table(uint8_t* slot_symbol) const;  // 2^14 bytes: slot -> symbol
};

// Encodes count symbols (each with freq > 0 in the model) with `lanes`
// lanes into the stream that ends at stream_end (the stream is written back
// to front: the caller's buffer must hold max_stream_bytes, plus 16 bytes of
// slack for the SIMD kernels' stores, before stream_end). Returns the
// stream's length; it occupies [stream_end - length, stream_end). The
// portable kernel; KernelTable::rans_encode holds the level's (the SIMD ones
// take 32 lanes and fall back to this for fewer).
size_t rans_encode_portable(const uint8_t* syms, uint32_t count, uint32_t lanes, const BlockModel& model,
                            uint8_t* stream_end);

// The scalar steps of one row: symbols row_base + l for l = in_row-1 .. 0 on
// states x[l], words back to front from w; returns the new w. The SIMD
// kernels run their partial last row (processed first) through it.
uint8_t* rans_encode_row(const uint8_t* syms, uint32_t row_base, uint32_t in_row, const BlockModel& model,
                         uint32_t* x, uint8_t* w);

// Writes the lanes' final states in front of the words at w, lane 0 first
// (the decoder's initial states); returns the stream's start.
uint8_t* rans_write_states(const uint32_t* x, uint32_t used_lanes, uint8_t* w);

// Why a block's stream does not decode.
enum class BlockFault : int {
  kNone = 0,
  kStreamTooShort,  // fewer bytes than its lanes' states
  kOddStream,       // the words after the states are not whole 16-bit words
  kBadState,        // an initial state below 2^16
  kOverrun,         // the symbols need more words than the stream holds
  kTrailingWords,   // words left over after the last symbol
  kFinalState,      // a lane does not end at 2^16, where every encoder starts
};
const char* block_fault_name(BlockFault f);

// Decodes count symbols of one block from stream[0, bytes) into syms. The
// portable kernel; KernelTable::rans_decode holds the level's. slot_symbol
// (build_slot_table) has kSlotTablePadding readable bytes past its 2^14 (the
// SIMD kernels gather 4 bytes at a slot).
BlockFault rans_decode_block(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                             const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms);
inline constexpr uint32_t kSlotTablePadding = 4;

// The pieces the SIMD decoders share with it: the lanes' initial states into
// x (the stream's length checks first), and the rows from row_begin on, with
// word wi next, to the end and the final checks.
BlockFault rans_decode_start(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes, uint32_t* x);
BlockFault rans_decode_rows(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                            const BlockModel& model, const uint8_t* slot_symbol, uint32_t row_begin, uint64_t wi,
                            uint32_t* x, uint8_t* syms);

}  // namespace terngrad::quantize::detail
