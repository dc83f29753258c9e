// Encodes and decodes through the installed library; exits non-zero on any mismatch.
#include <terngrad/quantize/codec.h>

#include <cstdio>
#include <vector>

namespace {

namespace tq = terngrad::quantize;

// FORMAT.md's worked example of one format version: input, seed, the body
// bytes and what they decode to.
bool example_holds(tq::RandomStream stream, uint64_t seed, uint8_t byte0, const std::vector<float>& want) {
  const std::vector<float> g = {0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f};
  tq::EncodeParams p;
  p.clip_factor = 0.0f;
  p.seed = seed;
  p.step = 7;
  p.tensor_id = 3;
  p.stream = stream;
  std::vector<uint8_t> payload(tq::max_encoded_bytes(g.size()));
  tq::encode(g, p, payload);
  std::vector<float> out(g.size());
  tq::decode(payload, out);
  return out == want && payload.size() == 42 && payload[tq::kHeaderVersionOffset] == static_cast<uint8_t>(stream) &&
         payload[40] == byte0 && payload[41] == 0x04;
}

}  // namespace

int main() {
  if (!example_holds(tq::RandomStream::kPhilox10Word32, 42, 0x01, {2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.0f}) ||
      !example_holds(tq::RandomStream::kPhilox7Half16, 50, 0x19, {2.0f, -2.0f, 2.0f, 0.0f, 0.0f, 2.0f})) {
    std::fprintf(stderr, "consumer: installed codec disagrees with the FORMAT.md examples\n");
    return 1;
  }
  std::printf("consumer: installed terngrad::quantize encodes the FORMAT.md examples (versions 1 and 2) byte-exactly\n");
  return 0;
}
