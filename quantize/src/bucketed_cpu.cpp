// Bucketed TernGrad on the CPU (bucketed.h; format: FORMAT.md, codec id 3).
//
// Speed: the encoder makes one pass over a bucket for its max|g| and, while
// the bucket is still in L1, quantizes it with the same encode kernel plain
// TernGrad uses (the level's KernelTable: hand-written AVX-512, Highway AVX2,
// portable), called once per bucket with that bucket's quantizer. Buckets
// start at multiples of 4 elements, so each is a whole run of body bytes and
// the kernel's Philox counters (block_offset = first element / 4) are the
// absolute ones. The decoder validates everything, then runs the level's
// decode kernel once per bucket with that bucket's scale. Groups of buckets
// run on the OpenMP threads for large tensors, as the other passes do.
#include "terngrad/quantize/bucketed.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <string>

#include "cpu_kernels.h"
#include "messages.h"
#include "terngrad/quantize/codec.h"

namespace terngrad::quantize {

namespace {

// ---------------------------------------------------------------- bucket max
// max(|x| bit patterns) over a bucket: the bit pattern of max|x| for finite x.
// An integer max, so it is exact and vectorizes (vpmaxud) without float NaN
// rules; compiled per target and picked by the SIMD level in use.
#define TG_BUCKET_INLINE inline __attribute__((always_inline))
TG_BUCKET_INLINE uint32_t max_abs_bits_impl(const float* x, uint64_t len) {
  uint32_t m = 0;
  for (uint64_t i = 0; i < len; ++i) m = std::max(m, float_bits(x[i]) & kAbsMask);
  return m;
}
uint32_t max_abs_bits_portable(const float* x, uint64_t len) { return max_abs_bits_impl(x, len); }
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint32_t max_abs_bits_avx2(const float* x, uint64_t len) {
  return max_abs_bits_impl(x, len);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) uint32_t max_abs_bits_avx512(const float* x,
                                                                                           uint64_t len) {
  return max_abs_bits_impl(x, len);
}
#endif

using MaxAbsFn = uint32_t (*)(const float*, uint64_t);
MaxAbsFn max_abs_kernel() {
#if defined(__x86_64__)
  switch (cpu_simd_level()) {
    case SimdLevel::kAvx512: return max_abs_bits_avx512;
    case SimdLevel::kAvx2: return max_abs_bits_avx2;
    default: break;
  }
#endif
  return max_abs_bits_portable;
}

// Buckets per parallel block: about 64 Ki elements, as the plain encoder's blocks.
uint64_t buckets_per_block(uint32_t bucket) { return std::max<uint64_t>(1, (uint64_t{1} << 16) / bucket); }

// Buckets a slice of n elements whose first element is `first` into its bucket touches.
uint64_t used_slots(uint64_t n, uint64_t first, uint32_t bucket) { return n == 0 ? 0 : (first + n + bucket - 1) / bucket; }

// Element range [e0, e1) of the payload that slot j covers.
struct SlotRange {
  uint64_t e0, e1;
};
SlotRange slot_range(uint64_t j, uint64_t n, uint64_t first, uint32_t bucket) {
  return {j == 0 ? 0 : j * bucket - first, std::min(n, (j + 1) * bucket - first)};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

[[noreturn]] void malformed(size_t bytes, const std::string& what) {
  throw CodecError(Errc::kMalformedPayload,
                   "malformed bucketed payload (" + std::to_string(bytes) + " bytes): " + what);
}

size_t require_buffer(uint64_t count, uint32_t bucket, std::span<uint8_t> out) {
  const size_t bytes = bucketed_payload_bytes(count, bucket);
  if (out.size() < bytes)
    throw CodecError(Errc::kBufferTooSmall, "output buffer has " + std::to_string(out.size()) + " bytes, " +
                                                std::to_string(count) + " elements with bucket=" +
                                                std::to_string(bucket) + " need " + std::to_string(bytes));
  return bytes;
}

void write_bucketed_header(uint8_t* h, uint64_t count, uint32_t bucket, uint32_t first, const BucketedEncodeParams& p) {
  store_le32(h + kHeaderMagicOffset, kMagicLe32);
  h[kHeaderVersionOffset] = static_cast<uint8_t>(p.stream);
  h[kHeaderCodecOffset] = kCodecTernaryBucketed;
  h[kHeaderFlagsOffset] = 0;
  h[kHeaderSizeOffset] = static_cast<uint8_t>(kBucketedHeaderBytes);
  store_le64(h + kHeaderCountOffset, count);
  store_le32(h + kBucketedBucketOffset, bucket);
  store_le32(h + kHeaderTensorIdOffset, p.tensor_id);
  store_le64(h + kHeaderSeedOffset, p.seed);
  store_le32(h + kHeaderStepOffset, p.step);
  store_le32(h + kBucketedFirstOffset, first);
  store_le32(h + kBucketedReservedOffset, 0);
  store_le32(h + kBucketedCrcOffset, crc32_ieee(h, kBucketedCrcOffset));
}

// A payload whose every byte has been checked (parse()).
struct Parsed {
  BucketedHeader h;
  uint64_t used = 0, slots = 0;
  const uint8_t* scales = nullptr;
  const uint8_t* body = nullptr;
};

// Every check of FORMAT.md's "A decoder rejects" for codec 3, in that order.
Parsed parse(std::span<const uint8_t> payload, uint32_t bucket) {
  const size_t len = payload.size();
  if (len < kBucketedHeaderBytes)
    malformed(len, "shorter than the " + std::to_string(kBucketedHeaderBytes) + "-byte header");
  const uint8_t* p = payload.data();
  if (const uint32_t m = load_le32(p + kHeaderMagicOffset); m != kMagicLe32)
    malformed(len, "bad magic " + hex32(m) + " (expected \"TGRD\")");
  if (!known_drawn_version(p[kHeaderVersionOffset]))
    malformed(len, "unsupported format version " + std::to_string(p[kHeaderVersionOffset]) + " (expected 1 or 2)");
  if (p[kHeaderCodecOffset] != kCodecTernaryBucketed)
    malformed(len, "codec id " + std::to_string(p[kHeaderCodecOffset]) + " is not 3 (bucketed ternary)");
  if (p[kHeaderSizeOffset] != kBucketedHeaderBytes)
    malformed(len, "header size field " + std::to_string(p[kHeaderSizeOffset]) + " is not 48");
  if (p[kHeaderFlagsOffset] != 0)
    malformed(len, "flags " + std::to_string(p[kHeaderFlagsOffset]) + " are not 0 (bucketed scales are never shared)");
  if (const uint32_t want = crc32_ieee(p, kBucketedCrcOffset), got = load_le32(p + kBucketedCrcOffset); want != got)
    malformed(len, "header CRC-32 " + hex32(got) + " does not match the header (" + hex32(want) + ")");
  if (const uint32_t r = load_le32(p + kBucketedReservedOffset); r != 0)
    malformed(len, "reserved bytes 40-43 are " + hex32(r) + " (must be 0)");
  Parsed out;
  BucketedHeader& h = out.h;
  h.count = load_le64(p + kHeaderCountOffset);
  h.bucket = load_le32(p + kBucketedBucketOffset);
  h.first = load_le32(p + kBucketedFirstOffset);
  h.tensor_id = load_le32(p + kHeaderTensorIdOffset);
  h.seed = load_le64(p + kHeaderSeedOffset);
  h.step = load_le32(p + kHeaderStepOffset);
  if (h.bucket < kMinBucket || h.bucket > kMaxBucket || h.bucket % 4 != 0)
    malformed(len, "bucket size " + std::to_string(h.bucket) + " is not a multiple of 4 in [4, 2^30]");
  if (h.bucket != bucket)
    malformed(len, "bucket size " + std::to_string(h.bucket) + " differs from the decoder's bucket=" +
                       std::to_string(bucket));
  if (h.first % 4 != 0 || h.first >= h.bucket)
    malformed(len, "first bucket offset " + std::to_string(h.first) + " is not a multiple of 4 below the bucket size " +
                       std::to_string(h.bucket));
  if (h.count > (uint64_t{1} << 62))
    malformed(len, "element count " + std::to_string(h.count) + " is implausibly large");
  if (const size_t want = bucketed_payload_bytes(h.count, h.bucket); len != want)
    malformed(len, "the header's " + std::to_string(h.count) + " elements take exactly " + std::to_string(want) +
                       " bytes (truncated or padded payload)");
  out.slots = bucketed_scale_slots(h.count, h.bucket);
  out.used = used_slots(h.count, h.first, h.bucket);
  out.scales = p + kBucketedHeaderBytes;
  out.body = out.scales + 4 * out.slots;
  for (uint64_t j = 0; j < out.slots; ++j) {
    const uint32_t bits = load_le32(out.scales + 4 * j);
    if (j >= out.used) {
      if (bits != 0) malformed(len, "unused scale slot " + std::to_string(j) + " holds " + hex32(bits) + " (must be 0)");
    } else if ((bits >> 31) != 0 || (bits & kExpAllOnes) == kExpAllOnes) {
      const float v = bits_float(bits);
      malformed(len, "scale " + std::to_string(j) + " is " +
                         (std::isnan(v) ? "NaN" : std::isinf(v) ? "infinite" : "negative") + " (" + hex32(bits) + ")");
    }
  }
  if (const uint64_t bad = detail::first_bad_byte(out.body, h.count); bad != detail::kNoBadByte) {
    const bool padding = bad == body_bytes(h.count) - 1 && invalid_code_mask(out.body[bad]) == 0;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", out.body[bad]);
    throw CodecError(Errc::kInvalidCode,
                     "corrupt bucketed payload: body byte " + std::to_string(bad) + " (" + hex + ") " +
                         (padding ? "has nonzero padding bits beyond element " + std::to_string(h.count - 1)
                                  : "holds the reserved code 0b11"));
  }
  // A bucket of scale 0 encodes only zeros; a code there would decode to
  // +-0 harmlessly but is not what any encoder writes, so it is refused.
  for (uint64_t j = 0; j < out.used; ++j) {
    if (load_le32(out.scales + 4 * j) != 0) continue;
    const SlotRange r = slot_range(j, h.count, h.first, h.bucket);
    for (uint64_t k = r.e0 / 4; k < body_bytes(r.e1); ++k)
      if (out.body[k] != 0)
        throw CodecError(Errc::kInvalidCode, "corrupt bucketed payload: body byte " + std::to_string(k) +
                                                 " holds a nonzero code in bucket slot " + std::to_string(j) +
                                                 ", whose scale is 0");
  }
  return out;
}

void decode_into(std::span<const uint8_t> payload, uint32_t bucket, std::span<float> out, bool accumulate) {
  const Parsed p = parse(payload, bucket);
  if (out.size() != p.h.count)
    throw CodecError(Errc::kInvalidArgument, std::string(accumulate ? "accumulator" : "output") + " has " +
                                                 std::to_string(out.size()) + " elements but the payload holds " +
                                                 std::to_string(p.h.count));
  auto* kernel = detail::kernels().decode_bytes;
  const uint64_t per = buckets_per_block(bucket), blocks = (p.used + per - 1) / per;
  float* o = out.data();
  detail::for_each_block(p.h.count, blocks, [&](uint64_t b) {
    for (uint64_t j = b * per; j < std::min(p.used, (b + 1) * per); ++j) {
      const SlotRange r = slot_range(j, p.h.count, p.h.first, bucket);
      const float scale = bits_float(load_le32(p.scales + 4 * j));
      const uint64_t len = r.e1 - r.e0;
      kernel(p.body + r.e0 / 4, len, 0, body_bytes(len), scale, accumulate, o + r.e0);
    }
  });
}

}  // namespace

void check_bucket_size(uint32_t bucket) {
  if (bucket < kMinBucket || bucket > kMaxBucket || bucket % 4 != 0)
    throw CodecError(Errc::kInvalidArgument,
                     "bucket=" + std::to_string(bucket) + " must be a multiple of 4 in [4, 2^30]");
}

uint64_t bucketed_scale_slots(uint64_t n, uint32_t bucket) {
  check_bucket_size(bucket);
  return n == 0 ? 0 : (n + bucket - 4 + bucket - 1) / bucket;
}

size_t bucketed_payload_bytes(uint64_t n, uint32_t bucket) {
  if (n > (uint64_t{1} << 62))
    throw CodecError(Errc::kInvalidArgument, "element count " + std::to_string(n) + " is too large");
  return kBucketedHeaderBytes + 4 * bucketed_scale_slots(n, bucket) + body_bytes(n);
}

size_t encode_bucketed_slice(std::span<const float> x, const TensorStats& stats, const BucketedEncodeParams& params,
                             uint64_t begin, uint64_t count, std::span<uint8_t> out) {
  const uint32_t B = params.bucket;
  check_bucket_size(B);
  if (!(params.clip_factor >= 0.0f) || !std::isfinite(params.clip_factor))
    throw CodecError(Errc::kInvalidArgument,
                     "clip factor " + detail::fmt_num(params.clip_factor) + " must be finite and >= 0");
  const uint64_t N = x.size();
  if (begin % 4 != 0 || begin > N || count > N - begin)
    throw CodecError(Errc::kInvalidArgument, "slice [" + std::to_string(begin) + ", +" + std::to_string(count) +
                                                 ") is not 4-aligned inside the tensor's " + std::to_string(N) +
                                                 " elements");
  if (stats.count != N)
    throw CodecError(Errc::kInvalidArgument, "stats describe " + std::to_string(stats.count) +
                                                 " elements but the tensor has " + std::to_string(N));
  const size_t bytes = require_buffer(count, B, out);
  const uint64_t first = begin % B, used = used_slots(count, first, B), slots = bucketed_scale_slots(count, B);
  uint8_t* h = out.data();
  write_bucketed_header(h, count, B, static_cast<uint32_t>(first), params);
  uint8_t* scales = h + kBucketedHeaderBytes;
  uint8_t* body = scales + 4 * slots;
  for (uint64_t j = used; j < slots; ++j) store_le32(scales + 4 * j, 0);  // the unused slot: +0.0

  auto* kernel = detail::kernels().encode_bytes;
  const MaxAbsFn max_abs = max_abs_kernel();
  const uint64_t per = buckets_per_block(B), blocks = (used + per - 1) / per, end = begin + count;
  const uint64_t bucket0 = begin / B;
  const float* data = x.data();
  std::atomic<bool> non_finite{false};
  detail::for_each_block(count, blocks, [&](uint64_t blk) {
    for (uint64_t j = blk * per; j < std::min(used, (blk + 1) * per); ++j) {
      // The whole bucket decides the scale, also where the slice cuts it.
      const uint64_t b0 = (bucket0 + j) * B, b1 = std::min<uint64_t>(b0 + B, N);
      const uint32_t mbits = max_abs(data + b0, b1 - b0);
      if (mbits >= kExpAllOnes) non_finite.store(true, std::memory_order_relaxed);
      TensorStats bs;  // the bucket's own max with the tensor's sigma (FORMAT.md step 2)
      bs.count = b1 - b0;
      bs.stddev = stats.stddev;
      bs.max_abs = bits_float(mbits);
      const float scale = scale_from_stats(bs, params.clip_factor);
      store_le32(scales + 4 * j, float_bits(scale));
      const uint64_t e0 = std::max(b0, begin), e1 = std::min(b1, end), len = e1 - e0;
      const RngStream rng{params.seed, params.step, params.tensor_id, e0 / 4, params.stream};
      kernel(data + e0, len, 0, body_bytes(len), make_quantizer(scale), rng, body + (e0 - begin) / 4);
    }
  });
  // compute_stats() has refused NaN/Inf already; stats from elsewhere may not have.
  if (non_finite.load()) {
    for (uint64_t i = bucket0 * B; i < std::min<uint64_t>(N, (bucket0 + used) * B); ++i)
      if (!std::isfinite(data[i]))
        throw CodecError(Errc::kNonFinite, "input element " + std::to_string(i) + " of " + std::to_string(N) +
                                               " is " + (std::isnan(data[i]) ? "NaN" : "Inf") +
                                               ": TernGrad needs finite gradients");
  }
  return bytes;
}

size_t encode_bucketed(std::span<const float> x, const BucketedEncodeParams& params, std::span<uint8_t> out) {
  require_buffer(x.size(), params.bucket, out);  // before the stats pass: fail fast
  return encode_bucketed_slice(x, compute_stats(x), params, 0, x.size(), out);
}

BucketedHeader inspect_bucketed(std::span<const uint8_t> payload, uint32_t bucket) {
  check_bucket_size(bucket);
  return parse(payload, bucket).h;
}

void decode_bucketed(std::span<const uint8_t> payload, uint32_t bucket, std::span<float> out) {
  check_bucket_size(bucket);
  decode_into(payload, bucket, out, false);
}

void decode_bucketed_accumulate(std::span<const uint8_t> payload, uint32_t bucket, std::span<float> out) {
  check_bucket_size(bucket);
  decode_into(payload, bucket, out, true);
}

}  // namespace terngrad::quantize
