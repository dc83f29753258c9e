// The block directory and the blocks' streams of codecs 5 and 6
// (entropy_payload.h). Blocks are independent, so both directions run one
// block per task on all threads; only the directory's prefix sum is serial.
#include "entropy_payload.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "cpu_kernels.h"
#include "messages.h"
#include "rans_block.h"
#include "terngrad/quantize/error.h"

namespace terngrad::quantize::detail {

using namespace rans;

namespace {

[[noreturn]] void malformed(const std::string& what) {
  throw CodecError(Errc::kMalformedPayload, "malformed entropy-coded payload: " + what);
}

uint8_t* entry(uint8_t* payload, const Layout& l, uint64_t j) {
  return payload + kEntropyHeaderBytes + j * l.entry_bytes();
}
const uint8_t* entry(const uint8_t* payload, const Layout& l, uint64_t j) {
  return payload + kEntropyHeaderBytes + j * l.entry_bytes();
}

}  // namespace

EntropyWriter::EntropyWriter(const Layout& layout)
    : layout_(layout),
      slot_(layout.blocks() == 0 ? 0 : layout.max_stream_bytes(0) + 16),  // + the SIMD kernels' store slack
      bytes_(layout.blocks()),
      probs_(layout.blocks() * layout.alphabet),
      model_failed_(layout.blocks(), 0) {
  // One scratch per thread that writes payloads, reused: no page faults per step.
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < layout.blocks() * slot_) scratch.resize(layout.blocks() * slot_);
  scratch_ = scratch.data();
}

void EntropyWriter::code_block(uint64_t j, const uint8_t* symbols, const uint32_t* counts) {
  const uint32_t a = layout_.alphabet;
  uint16_t* q = probs_.data() + j * a;
  BlockModel model;
  if (!quantize_element_probs(counts, a, element_prob_bits(layout_.group), q) || !model.build(q, a, layout_.group)) {
    model_failed_[j] = 1;
    return;
  }
  bytes_[j] = static_cast<uint32_t>(
      kernels().rans_encode(symbols, layout_.block_symbols(j), layout_.lanes, model, scratch_ + (j + 1) * slot_));
}

size_t EntropyWriter::finish(std::span<uint8_t> out) {
  const Layout& l = layout_;
  const uint64_t m = l.blocks();
  const uint32_t a = l.alphabet;
  if (std::any_of(model_failed_.begin(), model_failed_.end(), [](uint8_t f) { return f != 0; }))
    // the invariants FORMAT.md proves; reaching this is a bug, not bad input
    throw CodecError(Errc::kInvalidArgument, "internal error: an entropy model broke its invariants");
  const uint64_t head = kEntropyHeaderBytes + l.directory_bytes();
  std::vector<uint64_t> offset(m + 1, head);
  for (uint64_t j = 0; j < m; ++j) offset[j + 1] = offset[j] + bytes_[j];
  const uint64_t total = offset[m];
  if (total > out.size()) return 0;
  uint8_t* p = out.data();
  detail::for_each_block(l.count, m, [&](uint64_t j) {
    uint8_t* d = entry(p, l, j);
    store_le32(d, bytes_[j]);
    for (uint32_t v = 0; v < a; ++v) {
      d[4 + 2 * v] = static_cast<uint8_t>(probs_[j * a + v]);
      d[5 + 2 * v] = static_cast<uint8_t>(probs_[j * a + v] >> 8);
    }
    std::memcpy(p + offset[j], scratch_ + (j + 1) * slot_ - bytes_[j], bytes_[j]);
  });
  return static_cast<size_t>(total);
}

EntropyView check_entropy_header(std::span<const uint8_t> payload, uint8_t expect_codec, uint32_t alphabet,
                                 uint32_t zero_digit) {
  const size_t size = payload.size();
  const uint8_t* p = payload.data();
  if (size < kEntropyHeaderBytes)
    malformed(std::to_string(size) + " bytes, shorter than the 52-byte header");
  if (load_le32(p + kHeaderMagicOffset) != kMagicLe32) malformed("bad magic (expected \"TGRD\")");
  // Codec 5's codes are drawn (version 1 or 2); codec 6's sums draw nothing.
  const uint8_t version = p[kHeaderVersionOffset];
  if (expect_codec == kCodecTernaryEntropy ? !known_drawn_version(version) : version != kFormatVersion)
    malformed("format version " + std::to_string(version) +
              (expect_codec == kCodecTernaryEntropy ? " (expected 1 or 2)" : " (expected 1)"));
  if (p[kHeaderCodecOffset] != expect_codec)
    malformed("codec id " + std::to_string(p[kHeaderCodecOffset]) + " (expected " + std::to_string(expect_codec) + ")");
  if (p[kHeaderSizeOffset] != kEntropyHeaderBytes)
    malformed("header size field " + std::to_string(p[kHeaderSizeOffset]) + " (expected 52)");
  if (load_le32(p + kEntropyCrcOffset) != crc32_ieee(p, kEntropyCrcOffset))
    malformed("header CRC-32 mismatch (corrupt header)");
  EntropyView v;
  v.header = read_entropy_header(p);
  const EntropyHeader& h = v.header;
  if ((h.scale_bits >> 31) != 0 || (h.scale_bits & 0x7F800000u) == 0x7F800000u)
    malformed("scale is negative, NaN or Inf (bits 0x" + [&] {
      char hex[9];
      std::snprintf(hex, sizeof hex, "%08x", h.scale_bits);
      return std::string(hex);
    }() + ")");
  if (h.count > (uint64_t{1} << 62)) malformed("element count " + std::to_string(h.count) + " above 2^62");
  if (h.lanes < 1 || h.lanes > kMaxLanes) malformed("lanes " + std::to_string(h.lanes) + " (expected 1..32)");
  if (h.block_log2 < kMinBlockLog2 || h.block_log2 > kMaxBlockLog2)
    malformed("log2 block symbols " + std::to_string(h.block_log2) + " (expected 4..20)");
  const uint32_t g = group_for_alphabet(alphabet);
  if (h.group != g)
    malformed("elements per symbol " + std::to_string(h.group) + " (expected " + std::to_string(g) + " for " +
              std::to_string(alphabet) + " element values)");
  if (p[kEntropyReservedOffset] != 0) malformed("reserved byte 39 is " + std::to_string(p[kEntropyReservedOffset]));
  if (h.length != size)
    malformed("length field says " + std::to_string(h.length) + " bytes, the payload has " + std::to_string(size) +
              (h.length < size ? " (padded payload: an entropy-coded payload is shorter than its buffer; pass only "
                                 "the bytes encode() returned, or payload_length())"
                               : " (truncated payload)"));
  v.layout = Layout{h.count, alphabet, g, h.lanes, h.block_log2};
  v.zero_digit = zero_digit;
  const Layout& l = v.layout;
  const uint64_t m = l.blocks();
  if (m > (size - kEntropyHeaderBytes) / l.entry_bytes())
    malformed(std::to_string(h.count) + " elements make " + std::to_string(m) + " blocks, whose directory does not fit " +
              std::to_string(size) + " bytes");
  uint64_t streams = 0;
  for (uint64_t j = 0; j < m; ++j) streams += load_le32(entry(p, l, j));
  const uint64_t body = size - kEntropyHeaderBytes - l.directory_bytes();
  if (streams != body)
    malformed("the directory's streams total " + std::to_string(streams) + " bytes, the payload holds " +
              std::to_string(body) + " after the directory");
  return v;
}

void read_entropy_symbols(std::span<const uint8_t> payload, const EntropyView& view, uint8_t* symbols) {
  const Layout& l = view.layout;
  const uint8_t* p = payload.data();
  const uint64_t m = l.blocks();
  const uint32_t a = l.alphabet, e = element_prob_bits(l.group);
  std::vector<uint64_t> offset(m + 1, kEntropyHeaderBytes + l.directory_bytes());
  for (uint64_t j = 0; j < m; ++j) offset[j + 1] = offset[j] + load_le32(entry(p, l, j));
  // Faults per block; the first block's is reported.
  constexpr int kBadProbs = -1, kBadModel = -2;
  std::vector<int> fault(m, 0);
  detail::for_each_block(l.count, m, [&](uint64_t j) {
    const uint8_t* d = entry(p, l, j);
    uint16_t q[kMaxAlphabet];
    for (uint32_t v = 0; v < a; ++v) q[v] = static_cast<uint16_t>(d[4 + 2 * v] | (d[5 + 2 * v] << 8));
    if (!element_probs_valid(q, a, e)) {
      fault[j] = kBadProbs;
      return;
    }
    BlockModel model;
    if (!model.build(q, a, l.group)) {
      fault[j] = kBadModel;
      return;
    }
    // build_slot_table fills every slot; only the padding the SIMD gathers
    // read past the table needs a value.
    uint8_t slot_symbol[kProbScale + kSlotTablePadding];
    std::memset(slot_symbol + kProbScale, 0, kSlotTablePadding);
    model.build_slot_table(slot_symbol);
    fault[j] = static_cast<int>(kernels().rans_decode(p + offset[j], offset[j + 1] - offset[j], l.block_symbols(j),
                                                      l.lanes, model, slot_symbol, symbols + (j << l.block_log2)));
  });
  for (uint64_t j = 0; j < m; ++j) {
    if (fault[j] == 0) continue;
    const std::string where = "entropy-coded payload, block " + std::to_string(j) + " of " + std::to_string(m) + ": ";
    std::string why;
    if (fault[j] == kBadProbs)
      why = "element probabilities do not sum to 2^" + std::to_string(e);
    else if (fault[j] == kBadModel)
      why = "element probabilities give no usable symbol model";
    else
      why = block_fault_name(static_cast<BlockFault>(fault[j]));
    throw CodecError(Errc::kInvalidCode, where + why);
  }
  // Digits beyond the last element are padding and hold the zero value.
  const uint64_t nsym = l.symbols();
  if (nsym > 0) {
    uint32_t s = symbols[nsym - 1];
    const uint64_t used = l.count - (nsym - 1) * l.group;
    for (uint32_t j = 0; j < l.group; ++j, s /= a)
      if (j >= used && s % a != view.zero_digit)
        throw CodecError(Errc::kInvalidCode, "entropy-coded payload: padding digit " + std::to_string(j) +
                                                 " of the last symbol is " + std::to_string(s % a) +
                                                 " instead of the zero value " + std::to_string(view.zero_digit));
  }
}

}  // namespace terngrad::quantize::detail
