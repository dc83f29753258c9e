// Packed payloads on the device: base-3 (codec 4) and rANS entropy-coded
// (codec 5), producing and accepting exactly the bytes of the CPU reference
// (packed_cpu.cpp, entropy_payload.cpp, rans_block.cpp; FORMAT.md).
//
// Encode, after the stats pass wrote the codec-4 header (stats_kernels.cu):
//   symbols_kernel       one CUDA block per rANS block (2^14 symbols, 81920
//                        elements): each thread turns 20 elements into 5
//                        codec-1 code bytes (encode_byte: the same Philox
//                        words) and those into 4 base-3 symbols, written as
//                        the base-3 body; with entropy coding, the block's
//                        counts of 0, +, - (a block reduction);
//   rans_encode_kernel   one warp per rANS block: the model (lane 0 runs the
//                        CPU's quantize_element_probs / symbol_frequencies,
//                        the warp the cumulative sums and make_enc_symbol),
//                        then lane l codes symbols l, l+K, ... last to first,
//                        as the CPU's lanes do; a row's words go back to front
//                        in lane order (ballot + prefix popcount), so the
//                        stream read forward is rows ascending, lanes
//                        ascending within a row, exactly the CPU's; then the
//                        final states in front, lane 0 first;
//   entropy_finish_kernel  one block: the streams' offsets (a block scan),
//                        the CPU's choice (rANS iff strictly smaller than
//                        base-3), and then the entropy header and directory;
//   entropy_copy_kernel  the streams after the directory.
// The base-3 body stays when rANS loses: it is the fallback payload.
//
// Decode (*_any_async, decode_kernels.cu): any_header_kernel checks whichever
// header the codec id names (check_header, or the CPU's base-3 and entropy
// checks with their messages' values), then base3_validate_kernel (codec 4),
// entropy_directory_kernel, entropy_decode_kernel (one warp per rANS block,
// slot table and the staged stream in shared memory, symbols to scratch) and
// entropy_padding_kernel (codec 5), then symbols_body_kernel writes the
// output only if nothing was recorded.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <string>

#include "device_state.cuh"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::cuda {

using terngrad::device::grid_stride_range;

namespace detail {

namespace {

namespace qr = ::terngrad::quantize::rans;

constexpr uint32_t kBlockSymbols = 1u << qr::kEncoderBlockLog2;
static_assert(kBlockSymbols == kEncodeBlockSymbols, "device_state.cuh sizes the stream slots for this block");
static_assert(kStreamSlotBytes == 4 * qr::kMaxLanes + 2 * kBlockSymbols, "a slot holds a block's largest stream");
constexpr uint32_t kAlphabet = 3;
constexpr uint32_t kGroup = kBase3Elements;  // 5
constexpr uint32_t kSymbols = 243;           // 3^5
static_assert(qr::group_for_alphabet(kAlphabet) == kGroup, "codec 5 groups 5 trits per symbol");
static_assert(kSymbols <= 256, "the cumulative sums give each of 32 lanes 8 symbols");
constexpr uint32_t kEntryBytes = 4 + 2 * kAlphabet;  // Layout::entry_bytes()
constexpr int kSymbolsThreads = 256;
// The symbols kernel cuts a rANS block into kSubBlocks CUDA blocks of one
// unit (20 elements, 4 symbols) per thread, so that mid-sized tensors still
// fill the device; their counts meet in the rANS block's by integer atomics.
constexpr uint32_t kSubBlocks = kBlockSymbols / 4 / kSymbolsThreads;  // 16
static_assert(kSubBlocks * kSymbolsThreads * 4 == kBlockSymbols, "sub-blocks tile a rANS block");
constexpr int kFinishThreads = 1024;
constexpr int kBodyThreads = 256;
// A block's stream is read from shared memory when it fits (a typical block
// of gradient codes takes well under 1.6 bits per element: <= 16 KiB), from
// global memory otherwise.
constexpr uint32_t kStageBytes = 16384;

// ---------------------------------------------------------------- encode

// Base-3 value of the five 2-bit codes at bits 10m .. 10m+9 of w (code j of
// the group at bits 2j): packed_cpu.cpp's kCodeLut for valid codes.
__device__ __forceinline__ uint32_t base3_of(uint64_t w, int m) {
  const uint32_t v = static_cast<uint32_t>(w >> (10 * m));
  return (v & 3u) + 3u * ((v >> 2) & 3u) + 9u * ((v >> 4) & 3u) + 27u * ((v >> 6) & 3u) + 81u * ((v >> 8) & 3u);
}

// Sub-block t of rANS block b = blockIdx.x / kSubBlocks: one unit of 20
// elements (5 code bytes, 4 symbols) per thread. kVec: x is 16-byte aligned,
// so a whole unit is five float4 loads. kCount: adds the block's + and -
// codes to counts[3b + 1], counts[3b + 2] (zeroed before the launch).
template <bool kCount, bool kVec>
__global__ void __launch_bounds__(kSymbolsThreads, 4)
    symbols_kernel(const float* __restrict__ x, uint64_t n, uint8_t* __restrict__ syms,
                   uint32_t* __restrict__ counts, const Workspace::Device* dev, RngStream rng, bool nearest) {
  // NaN/Inf input or a refused shared scale: no header was written, no body
  // either. Read once for the block: all its threads reach the reduction below.
  __shared__ int go;
  if (threadIdx.x == 0) go = error_pending(dev) ? 0 : 1;
  __syncthreads();
  if (go == 0) return;
  const float scale = dev->view.scale;
  const bool all_zero = !(scale > 0.0f);  // every code 0, as encode_byte would give (pack_kernel's shortcut)
  const TernaryQuantizer q = make_quantizer(scale);
  const uint64_t nsym = base3_body_bytes(n);
  const uint64_t b = blockIdx.x / kSubBlocks;
  const uint32_t first_unit = (blockIdx.x % kSubBlocks) * kSymbolsThreads;
  const uint64_t s0 = b * kBlockSymbols;
  const uint64_t left = nsym - s0;
  const uint32_t bsym = static_cast<uint32_t>(left < kBlockSymbols ? left : kBlockSymbols);
  const uint32_t units = (bsym + 3) / 4;
  if (first_unit >= units) return;  // the last rANS block's empty tail: uniform for the block
  uint32_t plus = 0, minus = 0;
  {
    const uint32_t u = first_unit + threadIdx.x;  // may pass `units`: then it writes and counts nothing
    const uint64_t unit = s0 / 4 + u;
    const uint64_t e0 = 20 * unit;  // first element; code bytes 5 unit .. 5 unit + 4
    uint64_t w = 0;
    if (!all_zero && u < units) {
      float v[20];
      if (kVec && e0 + 20 <= n) {
        const float4* p = reinterpret_cast<const float4*>(x + e0);
#pragma unroll
        for (int j = 0; j < 5; ++j) {
          const float4 f = p[j];
          v[4 * j] = f.x;
          v[4 * j + 1] = f.y;
          v[4 * j + 2] = f.z;
          v[4 * j + 3] = f.w;
        }
      } else {
        // Absent elements pass 0.0f and become code 0: the zero padding.
#pragma unroll
        for (int j = 0; j < 20; ++j) v[j] = e0 + j < n ? x[e0 + j] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 5; ++j) {
        const uint64_t k = 5 * unit + j;  // code byte k of the payload, exactly codec 1's body byte k
        if (4 * k >= n) break;            // wholly absent: its codes stay 0
        const uint32_t byte = nearest ? encode_byte_nearest(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3], q)
                                      : encode_byte(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3], q, rng, k);
        w |= uint64_t{byte} << (8 * j);
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m)
      if (4 * u + m < bsym) syms[s0 + 4 * u + m] = static_cast<uint8_t>(base3_of(w, m));
    // Units past the block's last symbol hold only absent elements: w = 0.
    if (kCount) {
      plus += __popcll(w & 0x5555555555ull);
      minus += __popcll(w & 0xAAAAAAAAAAull);
    }
  }
  if constexpr (kCount) {
    using Reduce = cub::BlockReduce<uint32_t, kSymbolsThreads>;
    __shared__ typename Reduce::TempStorage tmp;
    const uint32_t p = Reduce(tmp).Sum(plus);
    __syncthreads();
    const uint32_t mi = Reduce(tmp).Sum(minus);
    if (threadIdx.x == 0) {
      // Integer sums: the same totals in any order. rans_encode_kernel derives
      // the zeros (padding digits count as the zero value, as on the CPU).
      atomicAdd(&counts[3 * b + 1], p);
      atomicAdd(&counts[3 * b + 2], mi);
    }
  }
}

// Lane l's share of the cumulative frequencies: symbols 8l .. 8l+7. Writes
// cum[s] for s < kSymbols (an exclusive warp scan; integer sums, so any order
// gives the CPU's values) and returns nothing else; the caller syncs.
template <class PerSymbol>
__device__ __forceinline__ void warp_cumulative(const uint16_t* freq, unsigned lane, PerSymbol&& per_symbol) {
  uint32_t local = 0;
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t s = 8 * lane + k;
    if (s < kSymbols) local += freq[s];
  }
  uint32_t incl = local;
#pragma unroll
  for (unsigned o = 1; o < 32; o <<= 1) {
    const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl += v;
  }
  uint32_t c = incl - local;
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t s = 8 * lane + k;
    if (s < kSymbols) {
      per_symbol(s, freq[s], c);
      c += freq[s];
    }
  }
}

// One warp per block of 2^14 symbols; the stream ends at the end of the
// block's slot (rans_encode_block's stream_end).
__global__ void __launch_bounds__(32)
    rans_encode_kernel(const uint8_t* __restrict__ syms, uint64_t n, uint32_t lanes,
                       const uint32_t* __restrict__ counts, uint16_t* __restrict__ probs,
                       uint8_t* __restrict__ slots, uint32_t* __restrict__ stream_bytes, Workspace::Device* dev,
                       uint32_t op) {
  __shared__ uint8_t sh_syms[kBlockSymbols];
  __shared__ qr::EncSymbol sh_enc[kSymbols];
  __shared__ uint16_t sh_freq[256];
  const unsigned lane = threadIdx.x;
  int go = 0;
  if (lane == 0) go = error_pending(dev) ? 0 : 1;
  if (__shfl_sync(0xFFFFFFFFu, go, 0) == 0) return;  // warp-uniform exit

  const uint64_t b = blockIdx.x;
  const uint64_t nsym = base3_body_bytes(n);
  const uint64_t s0 = b * kBlockSymbols;
  const uint64_t left = nsym - s0;
  const uint32_t count = static_cast<uint32_t>(left < kBlockSymbols ? left : kBlockSymbols);
  for (uint32_t i = lane; i < count; i += 32) sh_syms[i] = syms[s0 + i];

  // The model, with the CPU's own functions (write_entropy_body / BlockModel::build).
  int ok = 0;
  if (lane == 0) {
    const uint32_t plus = counts[3 * b + 1], minus = counts[3 * b + 2];
    const uint32_t c[kAlphabet] = {kGroup * count - plus - minus, plus, minus};
    uint16_t q[kAlphabet];
    ok = qr::quantize_element_probs(c, kAlphabet, qr::element_prob_bits(kGroup), q) &&
                 qr::symbol_frequencies(q, kAlphabet, kGroup, sh_freq)
             ? 1
             : 0;
    if (ok)
      for (uint32_t v = 0; v < kAlphabet; ++v) probs[3 * b + v] = q[v];
  }
  if (__shfl_sync(0xFFFFFFFFu, ok, 0) == 0) {
    // FORMAT.md proves this impossible: a bug, reported as the CPU does.
    if (lane == 0 && claim_error(dev, op, Errc::kInvalidArgument) == 1) dev->view.err.detail = kEntropyModelDetail;
    return;
  }
  __syncwarp();
  warp_cumulative(sh_freq, lane,
                  [&](uint32_t s, uint32_t f, uint32_t c) { sh_enc[s] = qr::make_enc_symbol(f, c); });
  __syncwarp();

  // rans_encode_block: rows last to first; within a row the CPU runs lanes
  // K-1 .. 0, each storing its word in front of those written so far, so the
  // row's words lie lane-ascending in front of the later rows' words.
  uint32_t x = qr::kStateLow;
  uint8_t* const slot_end = slots + (b + 1) * kStreamSlotBytes;
  uint32_t written = 0;  // word bytes at the end of the slot
  const uint32_t rows = (count + lanes - 1) / lanes;
  const unsigned below = (1u << lane) - 1u;
  // The symbol of a row does not depend on the state: the next row's is
  // fetched while this one's step runs (a lane outside a row keeps a copy of
  // symbol 0's constants and does not use it).
  auto fetch = [&](uint32_t r) {
    const uint32_t base = r * lanes;
    const uint32_t in_row = count - base < lanes ? count - base : lanes;
    return sh_enc[lane < in_row ? sh_syms[base + lane] : 0];
  };
  qr::EncSymbol next = fetch(rows - 1);
  for (uint32_t r = rows; r-- > 0;) {
    const uint32_t base = r * lanes;
    const uint32_t in_row = count - base < lanes ? count - base : lanes;
    const qr::EncSymbol cur = next;
    if (r > 0) next = fetch(r - 1);
    bool emit = false;
    uint16_t word = 0;
    if (lane < in_row) emit = qr::rans_encode_step(x, cur, &word);
    const unsigned mask = __ballot_sync(0xFFFFFFFFu, emit);
    const uint32_t cnt = __popc(mask);
    if (emit) {
      // slot_end is 2-byte aligned (256-aligned scratch, even slot size).
      uint8_t* p = slot_end - written - 2 * cnt + 2 * __popc(mask & below);
      *reinterpret_cast<uint16_t*>(p) = word;  // little-endian, as the CPU's two byte stores
    }
    written += 2 * cnt;
  }
  // The lanes' final states in front of the words, lane 0 first.
  const uint32_t used = count < lanes ? count : lanes;
  uint8_t* const front = slot_end - written - 4 * used;
  if (lane < used) store_le32(front + 4 * lane, x);
  if (lane == 0) stream_bytes[b] = written + 4 * used;
}

// One block: offsets, the verdict, the header and the directory.
__global__ void __launch_bounds__(kFinishThreads)
    entropy_finish_kernel(uint8_t* __restrict__ out, uint64_t n, uint32_t lanes,
                          const uint32_t* __restrict__ stream_bytes, const uint16_t* __restrict__ probs,
                          uint64_t* __restrict__ offsets, Workspace::Device* dev) {
  using Scan = cub::BlockScan<unsigned long long, kFinishThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int go;
  if (threadIdx.x == 0) go = error_pending(dev) ? 0 : 1;
  __syncthreads();
  if (go == 0) return;
  const uint64_t nsym = base3_body_bytes(n);
  const uint64_t m = (nsym + kBlockSymbols - 1) / kBlockSymbols;
  const uint64_t head = kEntropyHeaderBytes + m * kEntryBytes;
  unsigned long long running = 0;
  for (uint64_t c0 = 0; c0 < m; c0 += kFinishThreads) {
    const uint64_t j = c0 + threadIdx.x;
    const unsigned long long v = j < m ? stream_bytes[j] : 0ull;
    unsigned long long prefix = 0, aggregate = 0;
    Scan(tmp).ExclusiveSum(v, prefix, aggregate);
    if (j < m) offsets[j] = head + running + prefix;
    running += aggregate;
    __syncthreads();  // tmp is reused
  }
  const uint64_t total = head + running;
  const uint64_t base3 = kHeaderBytes + nsym;
  // The CPU writes the entropy body only into base3 - 1 bytes: rANS wins iff strictly smaller.
  const bool entropy = total < base3;
  if (threadIdx.x == 0) {
    dev->view.encoded_bytes = entropy ? total : base3;
    dev->encode_entropy = entropy ? 1u : 0u;
  }
  if (!entropy) return;  // the codec-4 header and base-3 body are the payload
  if (threadIdx.x == 0) {
    // The fields of the codec-4 header the stats pass wrote (flags, scale,
    // seed field as encode_packed's); nobody else touches bytes [0, 52).
    EntropyHeader h;
    h.codec = kCodecTernaryEntropy;
    h.flags = out[kHeaderFlagsOffset];
    h.count = n;
    h.scale_bits = load_le32(out + kHeaderScaleOffset);
    h.tensor_id = load_le32(out + kHeaderTensorIdOffset);
    h.seed_field = load_le64(out + kHeaderSeedOffset);
    h.step = load_le32(out + kHeaderStepOffset);
    h.lanes = lanes;
    h.block_log2 = qr::kEncoderBlockLog2;
    h.group = kGroup;
    h.length = total;
    h.version = out[kHeaderVersionOffset];
    write_entropy_header(out, h);
  }
  for (uint64_t j = threadIdx.x; j < m; j += kFinishThreads) {
    uint8_t* d = out + kEntropyHeaderBytes + j * kEntryBytes;
    store_le32(d, stream_bytes[j]);
    for (uint32_t v = 0; v < kAlphabet; ++v) {
      const uint16_t q = probs[3 * j + v];
      d[4 + 2 * v] = static_cast<uint8_t>(q);
      d[5 + 2 * v] = static_cast<uint8_t>(q >> 8);
    }
  }
}

// Block j's stream from its slot to its place after the directory.
__global__ void __launch_bounds__(256)
    entropy_copy_kernel(uint8_t* __restrict__ out, const uint8_t* __restrict__ slots,
                        const uint32_t* __restrict__ stream_bytes, const uint64_t* __restrict__ offsets,
                        const Workspace::Device* dev) {
  if (error_pending(dev) || dev->encode_entropy == 0) return;
  const uint64_t j = blockIdx.x;
  const uint32_t len = stream_bytes[j];
  const uint8_t* src = slots + (j + 1) * kStreamSlotBytes - len;
  uint8_t* dst = out + offsets[j];
  for (uint32_t i = threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
}

// When base-3 won: the symbols from scratch into the codec-4 body.
__global__ void base3_fallback_kernel(uint8_t* __restrict__ body, const uint8_t* __restrict__ symbols,
                                      uint64_t nsym, const Workspace::Device* dev) {
  if (error_pending(dev) || dev->encode_entropy != 0) return;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < nsym; i += uint64_t{gridDim.x} * blockDim.x)
    body[i] = symbols[i];
}

// ---------------------------------------------------------------- decode

// check_base3_header (packed_cpu.cpp), in its order.
__device__ Base3Fault base3_header_fault(const uint8_t* p, size_t size) {
  if (size < kHeaderBytes) return Base3Fault::kTooShort;
  if (load_le32(p) != kMagicLe32) return Base3Fault::kBadMagic;
  if (!known_drawn_version(p[kHeaderVersionOffset])) return Base3Fault::kBadVersion;
  if (p[kHeaderSizeOffset] != kHeaderBytes) return Base3Fault::kBadHeaderSize;
  if ((header_flags(p) & ~kKnownFlags) != 0) return Base3Fault::kUnknownFlags;
  if (load_le32(p + kHeaderCrcOffset) != crc32_ieee(p, kHeaderCrcOffset)) return Base3Fault::kBadCrc;
  const uint32_t sb = header_scale_bits(p);
  if ((sb >> 31) != 0 || (sb & 0x7F800000u) == 0x7F800000u) return Base3Fault::kBadScale;
  const uint64_t n = header_count(p);
  if (n > (uint64_t{1} << 62) || size - kHeaderBytes != base3_body_bytes(n)) return Base3Fault::kLengthMismatch;
  return Base3Fault::kNone;
}

// check_entropy_header (entropy_payload.cpp) for codec 5 up to the directory
// sum, which entropy_directory_kernel checks; u0, u1, u2: the message's values.
__device__ EntropyFault entropy_header_fault(const uint8_t* p, size_t size, unsigned long long* u0,
                                             unsigned long long* u1, uint32_t* u2) {
  if (size < kEntropyHeaderBytes) {
    *u0 = size;
    return EntropyFault::kTooShort;
  }
  if (load_le32(p + kHeaderMagicOffset) != kMagicLe32) return EntropyFault::kBadMagic;
  if (!known_drawn_version(p[kHeaderVersionOffset])) {
    *u0 = p[kHeaderVersionOffset];
    return EntropyFault::kBadVersion;
  }
  if (p[kHeaderCodecOffset] != kCodecTernaryEntropy) return EntropyFault::kBadCodec;  // dispatched on: unreachable
  if (p[kHeaderSizeOffset] != kEntropyHeaderBytes) {
    *u0 = p[kHeaderSizeOffset];
    return EntropyFault::kBadHeaderSize;
  }
  if (load_le32(p + kEntropyCrcOffset) != crc32_ieee(p, kEntropyCrcOffset)) return EntropyFault::kBadCrc;
  const EntropyHeader h = read_entropy_header(p);
  if ((h.scale_bits >> 31) != 0 || (h.scale_bits & 0x7F800000u) == 0x7F800000u) {
    *u0 = h.scale_bits;
    return EntropyFault::kBadScale;
  }
  if (h.count > (uint64_t{1} << 62)) {
    *u0 = h.count;
    return EntropyFault::kCountTooLarge;
  }
  if (h.lanes < 1 || h.lanes > qr::kMaxLanes) {
    *u0 = h.lanes;
    return EntropyFault::kBadLanes;
  }
  if (h.block_log2 < qr::kMinBlockLog2 || h.block_log2 > qr::kMaxBlockLog2) {
    *u0 = h.block_log2;
    return EntropyFault::kBadBlockLog2;
  }
  if (h.group != kGroup) {
    *u0 = h.group;
    return EntropyFault::kBadGroup;
  }
  if (p[kEntropyReservedOffset] != 0) {
    *u0 = p[kEntropyReservedOffset];
    return EntropyFault::kReservedByte;
  }
  if (h.length != size) {
    *u0 = h.length;
    *u1 = size;
    return EntropyFault::kLengthMismatch;
  }
  const qr::Layout l{h.count, kAlphabet, kGroup, h.lanes, h.block_log2};
  if (l.blocks() > (size - kEntropyHeaderBytes) / l.entry_bytes()) {
    *u0 = h.count;
    *u1 = size;
    *u2 = h.block_log2;
    return EntropyFault::kDirectoryTooLarge;
  }
  return EntropyFault::kNone;
}

// One thread. The CPU's dispatch (is_symbol_packed: magic and codec 4 or 5),
// then that codec's header checks; records the codec for the later kernels.
__global__ void any_header_kernel(const uint8_t* __restrict__ p, size_t size, uint64_t n, Workspace::Device* dev,
                                  uint32_t op, bool track_counts_scale) {
  if (error_pending(dev)) return;  // an earlier unchecked error: this op does nothing
  dev->payload_codec = 0;
  const bool packed = size > kHeaderCodecOffset && load_le32(p) == kMagicLe32 &&
                      (p[kHeaderCodecOffset] == kCodecTernaryBase3 || p[kHeaderCodecOffset] == kCodecTernaryEntropy);
  if (!packed) {
    // Codec 1 (or garbage): header_kernel's checks.
    const HeaderFault fault = check_header(p, size);
    if (fault != HeaderFault::kNone) {
      if (claim_error(dev, op, Errc::kMalformedPayload) == 1) {
        dev->view.err.detail = static_cast<int>(fault);
        dev->view.err.u0 = size >= kHeaderCountOffset + sizeof(uint64_t) ? header_count(p) : 0;
        dev->view.err.u1 = size;
      }
      return;
    }
    if (accept_header(dev, op, header_count(p), n, header_scale_bits(p), track_counts_scale))
      dev->payload_codec = kCodecTernary2Bit;
    return;
  }
  if (p[kHeaderCodecOffset] == kCodecTernaryBase3) {
    const Base3Fault fault = base3_header_fault(p, size);
    if (fault != Base3Fault::kNone) {
      if (claim_error(dev, op, Errc::kMalformedPayload) == 1) {
        dev->view.err.detail = kBase3HeaderDetail + static_cast<int>(fault);
        dev->view.err.u0 = size >= kHeaderBytes ? header_count(p) : 0;
        dev->view.err.u1 = size;
      }
      return;
    }
    if (accept_header(dev, op, header_count(p), n, header_scale_bits(p), track_counts_scale))
      dev->payload_codec = kCodecTernaryBase3;
    return;
  }
  unsigned long long u0 = 0, u1 = 0;
  uint32_t u2 = 0;
  const EntropyFault fault = entropy_header_fault(p, size, &u0, &u1, &u2);
  if (fault != EntropyFault::kNone) {
    if (claim_error(dev, op, Errc::kMalformedPayload) == 1) {
      dev->view.err.detail = kEntropyHeaderDetail + static_cast<int>(fault);
      dev->view.err.u0 = u0;
      dev->view.err.u1 = u1;
      dev->view.err.u2 = u2;
    }
    return;
  }
  // The directory's sum, the flags and the count: entropy_directory_kernel.
  dev->payload_lanes = p[kEntropyLanesOffset];
  dev->payload_block_log2 = p[kEntropyBlockLog2Offset];
  dev->payload_codec = kCodecTernaryEntropy;
}

__device__ __forceinline__ void record_header_fault(Workspace::Device* dev, uint32_t op, EntropyFault f,
                                                    unsigned long long u0, unsigned long long u1) {
  if (claim_error(dev, op, Errc::kMalformedPayload) == 1) {
    dev->view.err.detail = kEntropyHeaderDetail + static_cast<int>(f);
    dev->view.err.u0 = u0;
    dev->view.err.u1 = u1;
  }
}

// One block, codec 5 only: the streams' offsets (block scan of the
// directory), then check_entropy_header's directory sum, check_symbol_header's
// flags, and the count and scale checks of every decoder, in the CPU's order.
// Offsets are written only when the count is the caller's n, so they fit the
// workspace's scratch.
__global__ void __launch_bounds__(kFinishThreads)
    entropy_directory_kernel(const uint8_t* __restrict__ p, size_t size, uint64_t n, uint64_t* __restrict__ offsets,
                             Workspace::Device* dev, uint32_t op, bool track_counts_scale) {
  using Scan = cub::BlockScan<unsigned long long, kFinishThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int go;
  if (threadIdx.x == 0) go = !error_pending(dev) && dev->payload_codec == kCodecTernaryEntropy;
  __syncthreads();
  if (go == 0) return;
  const uint64_t count = header_count(p);
  const qr::Layout l{count, kAlphabet, kGroup, dev->payload_lanes, dev->payload_block_log2};
  const uint64_t m = l.blocks();  // the header kernel checked the directory fits the payload
  const uint64_t head = kEntropyHeaderBytes + l.directory_bytes();
  const bool write = count == n;
  unsigned long long running = 0;
  for (uint64_t c0 = 0; c0 < m; c0 += kFinishThreads) {
    const uint64_t j = c0 + threadIdx.x;
    const unsigned long long v = j < m ? load_le32(p + kEntropyHeaderBytes + j * kEntryBytes) : 0ull;
    unsigned long long prefix = 0, aggregate = 0;
    Scan(tmp).ExclusiveSum(v, prefix, aggregate);
    if (write && j < m) offsets[j] = head + running + prefix;
    running += aggregate;
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  if (write) offsets[m] = head + running;
  const uint64_t body = size - head;
  if (running != body) {
    record_header_fault(dev, op, EntropyFault::kStreamsMismatch, running, body);
    return;
  }
  if ((header_flags(p) & ~kKnownFlags) != 0) {
    record_header_fault(dev, op, EntropyFault::kUnknownFlags, 0, 0);
    return;
  }
  accept_header(dev, op, count, n, header_scale_bits(p), track_counts_scale);
}

__device__ __forceinline__ void record_block_fault(Workspace::Device* dev, uint32_t op, uint64_t block,
                                                   uint64_t blocks, EntropyBlockFault f) {
  // Every writer of this operation writes the same detail and block count;
  // the smallest block wins, as the CPU reports its first faulty block.
  if (claim_error(dev, op, Errc::kInvalidCode) != 0) {
    dev->view.err.detail = kEntropyBlockDetail;
    dev->view.err.u0 = blocks;
    atomicMax(&dev->view.err.inv_key, ~((static_cast<unsigned long long>(block) << 4) | static_cast<unsigned>(f)));
  }
}

// One warp per rANS block (grid-stride over blocks): rans_decode_block with
// the warp's lanes as the CPU's lanes; symbols to scratch.
__global__ void __launch_bounds__(32)
    entropy_decode_kernel(const uint8_t* __restrict__ p, uint64_t n, const uint64_t* __restrict__ offsets,
                          uint8_t* __restrict__ syms_out, Workspace::Device* dev, uint32_t op) {
  __shared__ uint8_t slot_symbol[qr::kProbScale];
  __shared__ uint8_t stage[kStageBytes];
  __shared__ uint16_t freq[256];
  __shared__ uint32_t cum[256];
  const unsigned lane = threadIdx.x;
  int go = 0;
  if (lane == 0) go = !error_pending(dev) && dev->payload_codec == kCodecTernaryEntropy;
  if (__shfl_sync(0xFFFFFFFFu, go, 0) == 0) return;
  const uint32_t lanes = dev->payload_lanes;
  const uint32_t block_log2 = dev->payload_block_log2;
  const qr::Layout l{n, kAlphabet, kGroup, lanes, block_log2};  // n == the header's count (checked)
  const uint64_t m = l.blocks();
  const uint32_t e = qr::element_prob_bits(kGroup);
  const unsigned below = (1u << lane) - 1u;
  for (uint64_t j = blockIdx.x; j < m; j += gridDim.x) {
    __syncwarp();  // the previous block's readers of the shared tables are done
    int fault = 0;
    if (lane == 0) {
      const uint8_t* d = p + kEntropyHeaderBytes + j * kEntryBytes;
      uint16_t q[kAlphabet];
      for (uint32_t v = 0; v < kAlphabet; ++v) q[v] = static_cast<uint16_t>(d[4 + 2 * v] | (d[5 + 2 * v] << 8));
      if (!qr::element_probs_valid(q, kAlphabet, e))
        fault = static_cast<int>(EntropyBlockFault::kBadProbs);
      else if (!qr::symbol_frequencies(q, kAlphabet, kGroup, freq))
        fault = static_cast<int>(EntropyBlockFault::kBadModel);
    }
    fault = __shfl_sync(0xFFFFFFFFu, fault, 0);
    if (fault != 0) {
      if (lane == 0) record_block_fault(dev, op, j, m, static_cast<EntropyBlockFault>(fault));
      continue;
    }
    __syncwarp();
    warp_cumulative(freq, lane, [&](uint32_t s, uint32_t, uint32_t c) { cum[s] = c; });
    __syncwarp();
    // The slot table (build_slot_table): symbol by symbol, the warp fills its
    // f slots. The frequencies sum to 2^14, so every slot is written.
    for (uint32_t s = 0; s < kSymbols; ++s) {
      const uint32_t f = freq[s], c = cum[s];
      for (uint32_t i = lane; i < f; i += 32) slot_symbol[c + i] = static_cast<uint8_t>(s);
    }

    const uint32_t count = l.block_symbols(j);
    const uint32_t used = count < lanes ? count : lanes;
    const uint64_t bytes = offsets[j + 1] - offsets[j];
    const uint8_t* stream = p + offsets[j];
    if (bytes < 4ull * used)
      fault = static_cast<int>(EntropyBlockFault::kStreamTooShort);
    else if ((bytes - 4ull * used) % 2 != 0)
      fault = static_cast<int>(EntropyBlockFault::kOddStream);
    uint32_t x = qr::kStateLow;
    if (fault == 0) {
      if (lane < used) x = load_le32(stream + 4 * lane);
      if (__any_sync(0xFFFFFFFFu, lane < used && x < qr::kStateLow))
        fault = static_cast<int>(EntropyBlockFault::kBadState);
    }
    if (fault != 0) {
      if (lane == 0) record_block_fault(dev, op, j, m, static_cast<EntropyBlockFault>(fault));
      continue;
    }
    const uint64_t nwords = (bytes - 4ull * used) / 2;
    const uint8_t* words = stream + 4ull * used;
    if (2 * nwords <= kStageBytes) {
      for (uint32_t i = lane; i < 2 * nwords; i += 32) stage[i] = words[i];
      words = stage;
    }
    __syncwarp();  // slot table and stage complete

    uint8_t* const out = syms_out + (j << block_log2);
    uint64_t wi = 0;
    const uint32_t rows = (count + lanes - 1) / lanes;
    for (uint32_t r = 0; r < rows; ++r) {
      const uint32_t base = r * lanes;
      const uint32_t in_row = count - base < lanes ? count - base : lanes;
      bool need = false;
      if (lane < in_row) {
        const uint32_t sym = slot_symbol[x & (qr::kProbScale - 1)];
        out[base + lane] = static_cast<uint8_t>(sym);
        x = qr::rans_decode_advance(x, freq[sym], cum[sym]);
        need = x < qr::kStateLow;
      }
      // The row's words, read forward in lane order.
      const unsigned mask = __ballot_sync(0xFFFFFFFFu, need);
      bool lack = false;
      if (need) {
        const uint64_t idx = wi + __popc(mask & below);
        if (idx < nwords)
          x = (x << qr::kWordBits) | uint32_t{words[2 * idx]} | (uint32_t{words[2 * idx + 1]} << 8);
        else
          lack = true;
      }
      wi += __popc(mask);
      if (__any_sync(0xFFFFFFFFu, lack)) {
        fault = static_cast<int>(EntropyBlockFault::kOverrun);
        break;
      }
    }
    if (fault == 0 && wi != nwords) fault = static_cast<int>(EntropyBlockFault::kTrailingWords);
    if (fault == 0 && __any_sync(0xFFFFFFFFu, lane < used && x != qr::kStateLow))
      fault = static_cast<int>(EntropyBlockFault::kFinalState);
    if (fault != 0 && lane == 0) record_block_fault(dev, op, j, m, static_cast<EntropyBlockFault>(fault));
  }
}

// One thread, after every block decoded cleanly: the last symbol's digits
// beyond the last element hold the zero value (read_entropy_symbols).
__global__ void entropy_padding_kernel(uint64_t n, const uint8_t* __restrict__ syms, Workspace::Device* dev,
                                       uint32_t op) {
  if (error_pending(dev) || dev->payload_codec != kCodecTernaryEntropy) return;
  const uint64_t nsym = base3_body_bytes(n);
  if (nsym == 0) return;
  uint32_t s = syms[nsym - 1];
  const uint64_t used = n - (nsym - 1) * kGroup;
  for (uint32_t j = 0; j < kGroup; ++j, s /= kAlphabet) {
    if (j >= used && s % kAlphabet != 0) {
      if (claim_error(dev, op, Errc::kInvalidCode) == 1) {
        dev->view.err.detail = kEntropyPaddingDetail;
        dev->view.err.u0 = j;
        dev->view.err.u1 = s % kAlphabet;
      }
      return;
    }
  }
}

// Codec 4: every body byte <= 242, the last one's padding digits 0
// (first_bad_symbol); the smallest bad byte is reported.
__global__ void __launch_bounds__(kBodyThreads)
    base3_validate_kernel(const uint8_t* __restrict__ body, uint64_t n, Workspace::Device* dev, uint32_t op) {
  if (error_pending(dev) || dev->payload_codec != kCodecTernaryBase3) return;
  const uint64_t nsym = base3_body_bytes(n);
  const uint32_t used = static_cast<uint32_t>(n % kGroup);
  const uint32_t limit = used == 0 ? kSymbols : qr::pow_u32(kAlphabet, used);
  unsigned long long first = ~0ull;
  for (const uint64_t k : grid_stride_range(nsym)) {
    const uint32_t v = body[k];
    if (v > kBase3MaxByte || (k == nsym - 1 && v >= limit)) {
      const unsigned long long key = (static_cast<unsigned long long>(k) << 8) | v;
      if (key < first) first = key;
    }
  }
  if (first != ~0ull && claim_error(dev, op, Errc::kInvalidCode) != 0) {
    dev->view.err.detail = kBase3BodyDetail;
    dev->view.err.u0 = n;
    atomicMax(&dev->view.err.inv_key, ~first);
  }
}

// The output from validated symbols (expand_symbols / add_symbol_codes):
// values {0, s, -s} by digit, as the CPU's table. Kind 0 decode, 1
// accumulate, 2 counts. kVec: out aligned for float4 / short4 (a unit of 20
// elements is five of them).
template <int kKind, bool kVec, typename T>
__global__ void __launch_bounds__(kBodyThreads)
    symbols_body_kernel(const uint8_t* __restrict__ payload_syms, const uint8_t* __restrict__ scratch_syms,
                        uint64_t n, T* __restrict__ out, const Workspace::Device* dev) {
  if (error_pending(dev)) return;  // a bad header or body: write nothing
  const uint32_t codec = dev->payload_codec;
  if (codec != kCodecTernaryBase3 && codec != kCodecTernaryEntropy) return;
  const uint8_t* syms = codec == kCodecTernaryBase3 ? payload_syms : scratch_syms;
  const float s = dev->payload_scale;
  const uint64_t nsym = base3_body_bytes(n);
  const uint64_t units = (nsym + 3) / 4;
  for (const uint64_t u : grid_stride_range(units)) {
    const uint64_t e0 = 20 * u;
    if (kVec && e0 + 20 <= n) {
      int sg[20];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        uint32_t d = syms[4 * u + m];
#pragma unroll
        for (int j = 0; j < 5; ++j, d /= 3) {
          const uint32_t digit = d % 3;
          sg[5 * m + j] = digit == 1 ? 1 : (digit == 2 ? -1 : 0);
        }
      }
      if constexpr (kKind == 2) {
        short4* o = reinterpret_cast<short4*>(out) + 5 * u;
#pragma unroll
        for (int j = 0; j < 5; ++j) {
          short4 c = o[j];
          c.x = static_cast<int16_t>(c.x + sg[4 * j]);
          c.y = static_cast<int16_t>(c.y + sg[4 * j + 1]);
          c.z = static_cast<int16_t>(c.z + sg[4 * j + 2]);
          c.w = static_cast<int16_t>(c.w + sg[4 * j + 3]);
          o[j] = c;
        }
      } else {
        float4* o = reinterpret_cast<float4*>(out) + 5 * u;
#pragma unroll
        for (int j = 0; j < 5; ++j) {
          float4 v;
          v.x = sg[4 * j] == 0 ? 0.0f : (sg[4 * j] > 0 ? s : -s);
          v.y = sg[4 * j + 1] == 0 ? 0.0f : (sg[4 * j + 1] > 0 ? s : -s);
          v.z = sg[4 * j + 2] == 0 ? 0.0f : (sg[4 * j + 2] > 0 ? s : -s);
          v.w = sg[4 * j + 3] == 0 ? 0.0f : (sg[4 * j + 3] > 0 ? s : -s);
          if constexpr (kKind == 1) {
            const float4 a = o[j];
            v.x = a.x + v.x;
            v.y = a.y + v.y;
            v.z = a.z + v.z;
            v.w = a.w + v.w;
          }
          o[j] = v;
        }
      }
    } else {
      const uint64_t e1 = e0 + 20 < n ? e0 + 20 : n;
      for (uint64_t i = e0; i < e1; ++i) {
        uint32_t d = syms[i / 5];
        for (uint64_t j = i % 5; j > 0; --j) d /= 3;
        const uint32_t digit = d % 3;
        if constexpr (kKind == 2) {
          out[i] = static_cast<int16_t>(out[i] + (digit == 1 ? 1 : (digit == 2 ? -1 : 0)));
        } else {
          const float v = digit == 0 ? 0.0f : (digit == 1 ? s : -s);
          if constexpr (kKind == 1)
            out[i] = out[i] + v;
          else
            out[i] = v;
        }
      }
    }
  }
}

template <int kKind, bool kVec, typename T>
void launch_symbols_body(const uint8_t* payload_syms, const uint8_t* scratch_syms, uint64_t n, T* out,
                         const Workspace::Device* dev, cudaStream_t stream) {
  static const int resident =
      resident_blocks(reinterpret_cast<const void*>(&symbols_body_kernel<kKind, kVec, T>), kBodyThreads);
  const unsigned grid = grid_for((base3_body_bytes(n) + 3) / 4, kBodyThreads, resident);
  symbols_body_kernel<kKind, kVec, T><<<grid, kBodyThreads, 0, stream>>>(payload_syms, scratch_syms, n, out, dev);
  TG_CHECK_LAUNCH("symbols_body_kernel");
}

template <int kKind, typename T>
void launch_symbols_body_aligned(const uint8_t* payload_syms, const uint8_t* scratch_syms, uint64_t n, T* out,
                                 const Workspace::Device* dev, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(out) % (4 * sizeof(T)) == 0)
    launch_symbols_body<kKind, true, T>(payload_syms, scratch_syms, n, out, dev, stream);
  else
    launch_symbols_body<kKind, false, T>(payload_syms, scratch_syms, n, out, dev, stream);
}

template <bool kCount, bool kVec>
void launch_symbols(const float* d_x, uint64_t n, uint8_t* syms, uint32_t* counts, const Workspace::Device* dev,
                    const RngStream& rng, bool nearest, unsigned blocks, cudaStream_t stream) {
  symbols_kernel<kCount, kVec><<<blocks, kSymbolsThreads, 0, stream>>>(d_x, n, syms, counts, dev, rng, nearest);
  TG_CHECK_LAUNCH("symbols_kernel");
}

}  // namespace

void launch_packed_encode(const float* d_x, uint64_t n, bool entropy, const RngStream& rng, bool nearest,
                          uint8_t* d_out, Workspace& ws, cudaStream_t stream, uint32_t op) {
  const uint64_t nsym = base3_body_bytes(n);
  const uint64_t blocks = (nsym + kBlockSymbols - 1) / kBlockSymbols;
  if (blocks == 0) return;
  if (blocks > 0x7FFFFFFFull)
    fail(Errc::kInvalidArgument, "tensor of " + std::to_string(n) + " elements is too large for the packed encode");
  const unsigned grid = static_cast<unsigned>(blocks);
  const PackedScratch sc = packed_scratch_of(ws);
  Workspace::Device* dev = ws.device();
  // Codec 4: the symbols are the payload's body. Codec 5: scratch, copied
  // into the body only if base-3 wins (nothing past a rANS payload is written).
  uint8_t* syms = entropy ? sc.symbols : d_out + kHeaderBytes;
  const bool vec = reinterpret_cast<uintptr_t>(d_x) % alignof(float4) == 0;
  if (blocks * kSubBlocks > 0x7FFFFFFFull)
    fail(Errc::kInvalidArgument, "tensor of " + std::to_string(n) + " elements is too large for the packed encode");
  const unsigned sym_grid = static_cast<unsigned>(blocks * kSubBlocks);
  if (entropy) {
    TG_CUDA_CHECK(cudaMemsetAsync(sc.counts, 0, 3 * sizeof(uint32_t) * blocks, stream));
    if (vec)
      launch_symbols<true, true>(d_x, n, syms, sc.counts, dev, rng, nearest, sym_grid, stream);
    else
      launch_symbols<true, false>(d_x, n, syms, sc.counts, dev, rng, nearest, sym_grid, stream);
  } else {
    if (vec)
      launch_symbols<false, true>(d_x, n, syms, sc.counts, dev, rng, nearest, sym_grid, stream);
    else
      launch_symbols<false, false>(d_x, n, syms, sc.counts, dev, rng, nearest, sym_grid, stream);
    return;
  }
  const uint32_t lanes = qr::encoder_lanes(nsym);
  rans_encode_kernel<<<grid, 32, 0, stream>>>(syms, n, lanes, sc.counts, sc.probs, sc.slots, sc.bytes, dev, op);
  TG_CHECK_LAUNCH("rans_encode_kernel");
  entropy_finish_kernel<<<1, kFinishThreads, 0, stream>>>(d_out, n, lanes, sc.bytes, sc.probs, sc.offsets, dev);
  TG_CHECK_LAUNCH("entropy_finish_kernel");
  entropy_copy_kernel<<<grid, 256, 0, stream>>>(d_out, sc.slots, sc.bytes, sc.offsets, dev);
  TG_CHECK_LAUNCH("entropy_copy_kernel");
  {
    static const int resident = resident_blocks(reinterpret_cast<const void*>(&base3_fallback_kernel), kBodyThreads);
    base3_fallback_kernel<<<grid_for(nsym, kBodyThreads, resident), kBodyThreads, 0, stream>>>(
        d_out + kHeaderBytes, sc.symbols, nsym, dev);
    TG_CHECK_LAUNCH("base3_fallback_kernel");
  }
}

void launch_any_header(const uint8_t* d_payload, size_t payload_bytes, uint64_t n, Workspace& ws, uint32_t op,
                       bool track_counts_scale, cudaStream_t stream) {
  any_header_kernel<<<1, 1, 0, stream>>>(d_payload, payload_bytes, n, ws.device(), op, track_counts_scale);
  TG_CHECK_LAUNCH("any_header_kernel");
}

void launch_packed_validate(const uint8_t* d_payload, size_t payload_bytes, uint64_t n, Workspace& ws, uint32_t op,
                            bool track_counts_scale, cudaStream_t stream) {
  const PackedScratch sc = packed_scratch_of(ws);
  Workspace::Device* dev = ws.device();
  entropy_directory_kernel<<<1, kFinishThreads, 0, stream>>>(d_payload, payload_bytes, n, sc.offsets, dev, op,
                                                             track_counts_scale);
  TG_CHECK_LAUNCH("entropy_directory_kernel");
  if (n == 0) return;
  {
    static const int resident = resident_blocks(reinterpret_cast<const void*>(&base3_validate_kernel), kBodyThreads);
    const unsigned grid = grid_for(base3_body_bytes(n), kBodyThreads, resident);
    base3_validate_kernel<<<grid, kBodyThreads, 0, stream>>>(d_payload + kHeaderBytes, n, dev, op);
    TG_CHECK_LAUNCH("base3_validate_kernel");
  }
  {
    // One warp per rANS block, as many as fit at once; a payload's block count
    // is read on the device (blocks of 2^4 .. 2^20 symbols), the loop covers it.
    static const int resident = resident_blocks(reinterpret_cast<const void*>(&entropy_decode_kernel), 32);
    const uint64_t most = decode_blocks_max(n);
    const uint64_t cap = static_cast<uint64_t>(sm_count()) * resident;
    const unsigned grid = static_cast<unsigned>(most < cap ? most : cap);
    entropy_decode_kernel<<<grid, 32, 0, stream>>>(d_payload, n, sc.offsets, sc.slots, dev, op);
    TG_CHECK_LAUNCH("entropy_decode_kernel");
  }
  entropy_padding_kernel<<<1, 1, 0, stream>>>(n, sc.slots, dev, op);
  TG_CHECK_LAUNCH("entropy_padding_kernel");
}

void launch_packed_body(const uint8_t* d_payload, uint64_t n, int kind, void* d_out, Workspace& ws,
                        cudaStream_t stream) {
  if (n == 0) return;
  const PackedScratch sc = packed_scratch_of(ws);
  const uint8_t* payload_syms = d_payload + kHeaderBytes;
  const Workspace::Device* dev = ws.device();
  if (kind == 0)
    launch_symbols_body_aligned<0>(payload_syms, sc.slots, n, static_cast<float*>(d_out), dev, stream);
  else if (kind == 1)
    launch_symbols_body_aligned<1>(payload_syms, sc.slots, n, static_cast<float*>(d_out), dev, stream);
  else
    launch_symbols_body_aligned<2>(payload_syms, sc.slots, n, static_cast<int16_t*>(d_out), dev, stream);
}

}  // namespace detail

}  // namespace terngrad::quantize::cuda
