// A worker's payload as the ps receives it: the registry codec's validate()
// and, only when it accepted, decode_with() and decode_accumulate_with() (with
// round sums for multi-round codecs), which must
// then accept too (a validator weaker than its decoder is a bug the ps would
// trip over after keeping the payload).
//
// Input: mode byte (bits 0-1 and 3-7: the codec, codec_choice.h's codec_index;
// bit 2: recompute the TGRD header CRC), u16 element count n, payload.
#include <vector>

#include "codec_choice.h"
#include "fixups.h"
#include "fuzz_input.h"
#include "outcome.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace terngrad::fuzz;
  Bytes in(data, size);
  const uint8_t mode = take_u8(in);
  const uint64_t n = take_u16(in);
  std::vector<uint8_t> payload(in.begin(), in.end());
  if (mode & 0x04) fix_tgrd_crc(payload);
  const terngrad::comm::GradientCodec& codec = codec_for_mode(codec_index(mode));
  if (!accepts([&] { codec.validate(payload, n); })) return 0;
  std::vector<float> out(n, 1.0f);
  const RoundSums sums(codec, n);  // multi-round codecs decode with the step's round sums
  must_accept("decode", [&] { codec.decode_with(payload, sums.ctx, out); });
  must_accept("decode_accumulate", [&] { codec.decode_accumulate_with(payload, sums.ctx, out); });
  return 0;
}
