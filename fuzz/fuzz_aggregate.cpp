// The ps's sum: the registry codec's aggregate() of two payloads straight
// from the wire (not validated first: aggregate() must refuse bad ones
// itself), then decode_aggregate() of its result, which must accept it; and
// decode_aggregate() of a third, fuzzed aggregate, as a worker receives it.
//
// Input: mode byte (bits 0-1 and 3-7: the codec, codec_choice.h's codec_index;
// bit 2: recompute the TGRD header CRCs), u16 element count n, then three pieces
// (fuzz_input.h): payload 1, payload 2, an aggregate.
#include <span>
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
  const std::vector<Bytes> pieces = split_pieces(in, 3);
  std::vector<uint8_t> a(pieces[0].begin(), pieces[0].end());
  std::vector<uint8_t> b(pieces[1].begin(), pieces[1].end());
  std::vector<uint8_t> agg(pieces[2].begin(), pieces[2].end());
  if (mode & 0x04) {
    fix_tgrd_crc(a);
    fix_tgrd_crc(b);
    fix_tgrd_crc(agg);
  }
  const terngrad::comm::GradientCodec& codec = codec_for_mode(codec_index(mode));

  const std::span<const uint8_t> payloads[] = {a, b};
  std::vector<uint8_t> sum;
  std::vector<float> out(n);
  const RoundSums sums(codec, n);  // multi-round codecs decode with the step's round sums
  if (accepts([&] { codec.aggregate(payloads, n, sum); }))
    must_accept("decode_aggregate", [&] { codec.decode_aggregate_with(sum, sums.ctx, out); });
  // One payload alone is the other path aggregate() takes.
  if (accepts([&] { codec.aggregate(std::span(payloads, 1), n, sum); }))
    must_accept("decode_aggregate", [&] { codec.decode_aggregate_with(sum, sums.ctx, out); });
  accepts([&] { codec.decode_aggregate_with(agg, sums.ctx, out); });
  return 0;
}
