// Encodes and decodes through the installed library; exits non-zero on any mismatch.
#include <terngrad/quantize/codec.h>

#include <cstdio>
#include <vector>

int main() {
  namespace tq = terngrad::quantize;
  const std::vector<float> g = {0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f};
  tq::EncodeParams p;
  p.clip_factor = 0.0f;
  p.seed = 42;
  p.step = 7;
  p.tensor_id = 3;
  std::vector<uint8_t> payload(tq::max_encoded_bytes(g.size()));
  tq::encode(g, p, payload);
  std::vector<float> out(g.size());
  tq::decode(payload, out);
  const std::vector<float> want = {2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.0f};  // FORMAT.md worked example
  if (out != want || payload.size() != 42 || payload[40] != 0x01 || payload[41] != 0x04) {
    std::fprintf(stderr, "consumer: installed codec disagrees with the FORMAT.md example\n");
    return 1;
  }
  std::printf("consumer: installed terngrad::quantize encodes the FORMAT.md example byte-exactly\n");
  return 0;
}
