// tg-sum-vector: writes the sum payload encode_sum(..., SumPacking::kEntropy)
// makes of a file of int16 counts, so reference_encoder.py can compare the
// C++ codec-6 (or its codec-2 fallback) bytes with its own. Test-only: the
// tg-codec tool sums payloads into floats and has no counts input.
//
//   tg-sum-vector COUNTS.i16 R SCALE TENSOR_ID STEP OUT
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <iterator>
#include <vector>

#include "terngrad/quantize/ternary_sum.h"

int main(int argc, char** argv) {
  namespace tq = terngrad::quantize;
  if (argc != 7) {
    std::fprintf(stderr, "usage: tg-sum-vector COUNTS.i16 R SCALE TENSOR_ID STEP OUT\n");
    return 2;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) throw std::runtime_error(std::string("cannot read ") + argv[1]);
    std::vector<int16_t> counts(raw.size() / 2);
    for (size_t i = 0; i < counts.size(); ++i)  // little-endian int16, as Python's struct "<h"
      counts[i] = static_cast<int16_t>(static_cast<uint8_t>(raw[2 * i]) | (static_cast<uint8_t>(raw[2 * i + 1]) << 8));
    const auto r = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
    const float scale = std::strtof(argv[3], nullptr);
    const auto tensor_id = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
    const auto step = static_cast<uint32_t>(std::strtoul(argv[5], nullptr, 10));
    std::vector<uint8_t> out(tq::sum_payload_bytes(counts.size(), r));
    out.resize(tq::encode_sum(counts, scale, r, tensor_id, step, tq::SumPacking::kEntropy, out));
    std::ofstream o(argv[6], std::ios::binary);
    o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (!o) throw std::runtime_error(std::string("cannot write ") + argv[6]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-sum-vector: %s\n", e.what());
    return 1;
  }
  return 0;
}
