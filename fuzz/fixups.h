// Integrity fields a fuzz target may recompute before handing the input on.
// Without them nearly every mutation dies at a CRC or a length check, and
// the parsers behind those checks never see a corrupt body; with them the
// fuzzer reaches the field parsing. Each target takes a mode bit for it, so
// the checks themselves stay fuzzed too.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <vector>

#include "terngrad/quantize/bucketed.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/format.h"

namespace terngrad::fuzz {

inline bool is_entropy_coded(const std::vector<uint8_t>& p) {
  return p.size() >= quantize::kEntropyHeaderBytes && (p[quantize::kHeaderCodecOffset] == quantize::kCodecTernaryEntropy ||
                                                      p[quantize::kHeaderCodecOffset] == quantize::kCodecTernarySumEntropy);
}

// The TGRD header's CRC, when there is a header: bytes 36-39 of the 40-byte
// header (codec 1, 2 and 4 payloads), bytes 44-47 of the 48-byte one (codec
// 3, bucketed), bytes 48-51 of the 52-byte one (codecs 5 and 6, entropy-
// coded), told by the codec id byte.
inline void fix_tgrd_crc(std::vector<uint8_t>& p) {
  if (is_entropy_coded(p)) {
    quantize::store_le32(p.data() + quantize::kEntropyCrcOffset, quantize::crc32_ieee(p.data(), quantize::kEntropyCrcOffset));
    return;
  }
  if (p.size() >= quantize::kBucketedHeaderBytes && p[quantize::kHeaderCodecOffset] == quantize::kCodecTernaryBucketed) {
    quantize::store_le32(p.data() + quantize::kBucketedCrcOffset,
                         quantize::crc32_ieee(p.data(), quantize::kBucketedCrcOffset));
    return;
  }
  if (p.size() < quantize::kHeaderBytes) return;
  quantize::store_le32(p.data() + quantize::kHeaderCrcOffset,
                       quantize::crc32_ieee(p.data(), quantize::kHeaderCrcOffset));
}

// The whole-payload length field of an entropy-coded header (bytes 40-47),
// which a mutation that grows or cuts the streams otherwise always breaks.
// Before fix_tgrd_crc(): the CRC covers it.
inline void fix_entropy_length(std::vector<uint8_t>& p) {
  if (is_entropy_coded(p)) quantize::store_le64(p.data() + quantize::kEntropyLengthOffset, p.size());
}

// A checkpoint file (train/include/terngrad/train/checkpoint.h): the u64
// total length at offset 16 and the CRC-32 trailer over everything before it.
inline void fix_checkpoint_length(std::vector<uint8_t>& f) {
  if (f.size() < 24) return;
  quantize::store_le64(f.data() + 16, f.size());
}
inline void fix_checkpoint_crc(std::vector<uint8_t>& f) {
  if (f.size() < 4) return;
  const uLong crc = crc32(0, f.data(), static_cast<uInt>(f.size() - 4));
  quantize::store_le32(f.data() + f.size() - 4, static_cast<uint32_t>(crc));
}

}  // namespace terngrad::fuzz
