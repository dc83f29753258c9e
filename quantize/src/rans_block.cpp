// The CPU rANS block coder (rans_block.h). Scalar on purpose: K lanes
// interleave, so consecutive steps touch different states and the loop is
// throughput-bound rather than latency-bound; the word emission is
// branch-free (a word is always stored, the pointer moves only when it is
// real), because whether a step emits is close to a coin flip.
#include "rans_block.h"

#include <cstring>

namespace terngrad::quantize::detail {

using namespace rans;

bool BlockModel::build(const uint16_t* q, uint32_t alphabet, uint32_t group) {
  symbols = pow_u32(alphabet, group);
  if (!symbol_frequencies(q, alphabet, group, freq)) return false;
  uint32_t c = 0;
  for (uint32_t s = 0; s < symbols; ++s) {
    cum[s] = c;
    c += freq[s];
  }
  cum[symbols] = c;
  return c == kProbScale;
}

void BlockModel::build_slot_table(uint8_t* slot_symbol) const {
  for (uint32_t s = 0; s < symbols; ++s)
    if (freq[s] != 0) std::memset(slot_symbol + cum[s], static_cast<int>(s), freq[s]);
}

namespace {
// One step on state x; the word is stored unconditionally in front of w and
// kept (w moves) only when the state sheds it.
inline uint8_t* encode_one(const EncSymbol& e, uint32_t& x, uint8_t* w) {
  uint32_t s = x;
  w[-2] = static_cast<uint8_t>(s);
  w[-1] = static_cast<uint8_t>(s >> 8);
  const bool emit = s >= e.x_max && e.freq != kProbScale;
  w -= emit ? 2 : 0;
  s = emit ? s >> kWordBits : s;
  const uint32_t q = div_by_magic(s, e.magic);
  x = (q << kProbBits) + (s - q * e.freq) + e.cum;
  return w;
}
}  // namespace

uint8_t* rans_encode_row(const uint8_t* syms, uint32_t row_base, uint32_t in_row, const BlockModel& model,
                         uint32_t* x, uint8_t* w) {
  for (uint32_t l = in_row; l-- > 0;) {
    const uint32_t s = syms[row_base + l];
    w = encode_one(make_enc_symbol(model.freq[s], model.cum[s]), x[l], w);
  }
  return w;
}

uint8_t* rans_write_states(const uint32_t* x, uint32_t used_lanes, uint8_t* w) {
  w -= 4 * used_lanes;
  for (uint32_t l = 0; l < used_lanes; ++l) store_le32(w + 4 * l, x[l]);
  return w;
}

size_t rans_encode_portable(const uint8_t* syms, uint32_t count, uint32_t lanes, const BlockModel& model,
                            uint8_t* stream_end) {
  EncSymbol enc[kMaxSymbols + 1];
  for (uint32_t s = 0; s < model.symbols; ++s)
    if (model.freq[s] != 0) enc[s] = make_enc_symbol(model.freq[s], model.cum[s]);
  uint32_t x[kMaxLanes];
  for (uint32_t l = 0; l < lanes; ++l) x[l] = kStateLow;
  uint8_t* w = stream_end;  // words grow downwards
  const uint32_t rows = (count + lanes - 1) / lanes;
  for (uint32_t r = rows; r-- > 0;) {
    const uint32_t base = r * lanes;
    const uint32_t in_row = count - base < lanes ? count - base : lanes;
    for (uint32_t l = in_row; l-- > 0;) w = encode_one(enc[syms[base + l]], x[l], w);
  }
  return static_cast<size_t>(stream_end - rans_write_states(x, count < lanes ? count : lanes, w));
}

const char* block_fault_name(BlockFault f) {
  switch (f) {
    case BlockFault::kNone: return "no fault";
    case BlockFault::kStreamTooShort: return "stream shorter than its lanes' initial states";
    case BlockFault::kOddStream: return "stream holds a partial 16-bit word";
    case BlockFault::kBadState: return "an initial lane state is below 2^16";
    case BlockFault::kOverrun: return "the symbols need more words than the stream holds (truncated stream)";
    case BlockFault::kTrailingWords: return "words left over after the last symbol";
    case BlockFault::kFinalState: return "a lane does not end in the encoders' initial state 2^16 (corrupt stream)";
  }
  return "unknown fault";
}

BlockFault rans_decode_start(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes, uint32_t* x) {
  const uint32_t used = count < lanes ? count : lanes;
  if (bytes < 4ull * used) return BlockFault::kStreamTooShort;
  if ((bytes - 4ull * used) % 2 != 0) return BlockFault::kOddStream;
  for (uint32_t l = 0; l < used; ++l) {
    x[l] = load_le32(stream + 4 * l);
    if (x[l] < kStateLow) return BlockFault::kBadState;
  }
  return BlockFault::kNone;
}

BlockFault rans_decode_rows(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                            const BlockModel& model, const uint8_t* slot_symbol, uint32_t row_begin, uint64_t wi,
                            uint32_t* x, uint8_t* syms) {
  const uint32_t used = count < lanes ? count : lanes;
  const uint8_t* words = stream + 4ull * used;
  const uint64_t nwords = (bytes - 4ull * used) / 2;
  bool overrun = false;
  const uint32_t rows = (count + lanes - 1) / lanes;
  for (uint32_t r = row_begin; r < rows; ++r) {
    const uint32_t base = r * lanes;
    const uint32_t in_row = count - base < lanes ? count - base : lanes;
    for (uint32_t l = 0; l < in_row; ++l) {
      uint32_t s = x[l];
      const uint32_t slot = s & (kProbScale - 1);
      const uint32_t sym = slot_symbol[slot];
      syms[base + l] = static_cast<uint8_t>(sym);
      s = model.freq[sym] * (s >> kProbBits) + slot - model.cum[sym];
      const bool need = s < kStateLow;
      // Read the next word when there is one, a harmless byte pair otherwise
      // (the overrun is reported, the value never used).
      const bool have = wi < nwords;
      const uint8_t* src = have ? words + 2 * wi : stream;
      const uint32_t word = uint32_t{src[0]} | (uint32_t{src[1]} << 8);
      overrun |= need && !have;
      s = need ? (s << kWordBits) | word : s;
      wi += need ? 1 : 0;
      x[l] = s;
    }
    if (overrun) return BlockFault::kOverrun;
  }
  if (wi != nwords) return BlockFault::kTrailingWords;
  for (uint32_t l = 0; l < used; ++l)
    if (x[l] != kStateLow) return BlockFault::kFinalState;
  return BlockFault::kNone;
}

BlockFault rans_decode_block(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                             const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms) {
  uint32_t x[kMaxLanes];
  const BlockFault f = rans_decode_start(stream, bytes, count, lanes, x);
  if (f != BlockFault::kNone) return f;
  return rans_decode_rows(stream, bytes, count, lanes, model, slot_symbol, 0, 0, x, syms);
}

}  // namespace terngrad::quantize::detail
