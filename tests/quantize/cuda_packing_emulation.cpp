// NOT BUILT BY CMAKE: a manual check written while the CUDA packed codec
// (quantize/cuda/packed_kernels.cu) was developed on a machine without a GPU.
// It re-states the kernels' algorithms on the host, one warp as a loop over 32
// lanes and a ballot as a bit mask (symbols_kernel's sub-blocks and counts,
// rans_encode_kernel's row order with ballot + prefix popcount and its warp
// scan, entropy_finish_kernel, entropy_decode_kernel's slot table and reads),
// and compares with the CPU codec: payload bytes for sizes 0 .. 3e6+7, both
// roundings, both clips, sparse / dense / gradient data, slices; symbols and
// fault verdicts (block index and kind) for ~3500 corrupted payloads. It
// checks the transcription's reasoning, not the compiled kernels:
// cuda_packing_test.cpp does that on a device.
//
//   g++ -std=c++20 -O2 -I quantize/include tests/quantize/cuda_packing_emulation.cpp \
//       build/quantize/libterngrad_quantize.a -fopenmp -o /tmp/emu && /tmp/emu
// Host emulation of packed_kernels.cu's algorithms (a warp = a loop over 32
// lanes; ballots as masks), checked against the CPU codec's bytes.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <algorithm>
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/entropy_format.h"
namespace tq = terngrad::quantize;
namespace qr = terngrad::quantize::rans;
using namespace tq;
constexpr uint32_t kBS = 16384, kSlot = 4*32 + 2*kBS;

static uint32_t base3_of(uint64_t w, int m) {
  const uint32_t v = (uint32_t)(w >> (10 * m));
  return (v & 3u) + 3u * ((v >> 2) & 3u) + 9u * ((v >> 4) & 3u) + 27u * ((v >> 6) & 3u) + 81u * ((v >> 8) & 3u);
}

std::vector<uint8_t> sim_encode(const std::vector<float>& xv, const EncodeParams& params) {
  const uint64_t n = xv.size();
  const float* x = xv.data();
  std::vector<uint8_t> out(max_encoded_bytes(n, params.packing), 0xA5);
  const TensorStats st = compute_stats(xv);
  const float scale = resolve_scale(st, params);
  const bool nearest = params.rounding == Rounding::kNearest;
  const uint8_t flags = (params.shared_scale ? kFlagSharedScale : 0) | (nearest ? kFlagNearest : 0);
  detail::write_header_layout(out.data(), kCodecTernaryBase3, flags, n, float_bits(scale), params.tensor_id, nearest ? 0 : params.seed, params.step);
  if (n == 0) return std::vector<uint8_t>(out.begin(), out.begin() + 40);
  const RngStream rng{params.seed, params.step, params.tensor_id, params.element_offset / 4};
  const bool all_zero = !(scale > 0.0f);
  const TernaryQuantizer q = make_quantizer(scale);
  const uint64_t nsym = base3_body_bytes(n);
  const uint64_t blocks = (nsym + kBS - 1) / kBS;
  uint8_t* syms = out.data() + 40;
  std::vector<uint32_t> counts(3 * blocks);
  // K1: sub-blocks of 256 units, counts by (integer) atomics
  for (uint64_t g = 0; g < blocks * 16; ++g) {
    const uint64_t b = g / 16; const uint32_t first_unit = (g % 16) * 256;
    const uint64_t s0 = b * kBS, left = nsym - s0;
    const uint32_t bsym = (uint32_t)(left < kBS ? left : kBS);
    const uint32_t units = (bsym + 3) / 4;
    if (first_unit >= units) continue;
    uint32_t plus = 0, minus = 0;
    for (uint32_t t = 0; t < 256; ++t) {
      const uint32_t u = first_unit + t;
      const uint64_t unit = s0 / 4 + u, e0 = 20 * unit;
      uint64_t w = 0;
      if (!all_zero && u < units) {
        float v[20];
        for (int j = 0; j < 20; ++j) v[j] = e0 + j < n ? x[e0 + j] : 0.0f;
        for (int j = 0; j < 5; ++j) {
          const uint64_t k = 5 * unit + j;
          if (4 * k >= n) break;
          const uint32_t byte = nearest ? encode_byte_nearest(v[4*j], v[4*j+1], v[4*j+2], v[4*j+3], q) : encode_byte(v[4*j], v[4*j+1], v[4*j+2], v[4*j+3], q, rng, k);
          w |= uint64_t{byte} << (8 * j);
        }
      }
      for (int m = 0; m < 4; ++m) if (4 * u + m < bsym) syms[s0 + 4 * u + m] = (uint8_t)base3_of(w, m);
      plus += __builtin_popcountll(w & 0x5555555555ull);
      minus += __builtin_popcountll(w & 0xAAAAAAAAAAull);
    }
    counts[3*b+1] += plus; counts[3*b+2] += minus;
  }
  if (params.packing == Packing::kBase3) return out;
  // K2
  const uint32_t lanes = qr::encoder_lanes(nsym);
  std::vector<uint8_t> slots(blocks * kSlot);
  std::vector<uint16_t> probs(3 * blocks);
  std::vector<uint32_t> sbytes(blocks);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t s0 = b * kBS, left = nsym - s0;
    const uint32_t count = (uint32_t)(left < kBS ? left : kBS);
    uint8_t sh_syms[kBS]; for (uint32_t i = 0; i < count; ++i) sh_syms[i] = syms[s0 + i];
    uint16_t sh_freq[256]; qr::EncSymbol sh_enc[243];
    const uint32_t c[3] = {5 * count - counts[3*b+1] - counts[3*b+2], counts[3*b+1], counts[3*b+2]};
    uint16_t qq[3];
    bool ok = qr::quantize_element_probs(c, 3, qr::element_prob_bits(5), qq) && qr::symbol_frequencies(qq, 3, 5, sh_freq);
    if (!ok) { printf("model fail\n"); exit(1); }
    for (int v = 0; v < 3; ++v) probs[3*b+v] = qq[v];
    // warp_cumulative
    uint32_t local[32], incl[32];
    for (unsigned lane = 0; lane < 32; ++lane) { local[lane] = 0; for (uint32_t k = 0; k < 8; ++k) { uint32_t s = 8*lane+k; if (s < 243) local[lane] += sh_freq[s]; } incl[lane] = local[lane]; }
    for (unsigned o = 1; o < 32; o <<= 1) { uint32_t prev[32]; memcpy(prev, incl, sizeof prev); for (unsigned lane = 0; lane < 32; ++lane) { uint32_t v = lane >= o ? prev[lane - o] : prev[lane]; if (lane >= o) incl[lane] += v; } }
    for (unsigned lane = 0; lane < 32; ++lane) { uint32_t cc = incl[lane] - local[lane]; for (uint32_t k = 0; k < 8; ++k) { uint32_t s = 8*lane+k; if (s < 243) { sh_enc[s] = qr::make_enc_symbol(sh_freq[s], cc); cc += sh_freq[s]; } } }
    uint32_t xs[32]; for (auto& v : xs) v = qr::kStateLow;
    uint8_t* slot_end = slots.data() + (b + 1) * kSlot;
    uint32_t written = 0;
    const uint32_t rows = (count + lanes - 1) / lanes;
    for (uint32_t r = rows; r-- > 0;) {
      const uint32_t base = r * lanes, in_row = count - base < lanes ? count - base : lanes;
      bool emit[32] = {}; uint16_t word[32] = {};
      unsigned mask = 0;
      for (unsigned lane = 0; lane < 32; ++lane) { if (lane < in_row) emit[lane] = qr::rans_encode_step(xs[lane], sh_enc[sh_syms[base + lane]], &word[lane]); if (emit[lane]) mask |= 1u << lane; }
      const uint32_t cnt = __builtin_popcount(mask);
      for (unsigned lane = 0; lane < 32; ++lane) if (emit[lane]) { uint8_t* p = slot_end - written - 2*cnt + 2*__builtin_popcount(mask & ((1u << lane) - 1u)); memcpy(p, &word[lane], 2); }
      written += 2 * cnt;
    }
    const uint32_t used = count < lanes ? count : lanes;
    uint8_t* front = slot_end - written - 4*used;
    for (unsigned lane = 0; lane < used; ++lane) store_le32(front + 4*lane, xs[lane]);
    sbytes[b] = written + 4*used;
  }
  // K3
  const uint64_t m = blocks, head = 52 + m * 10;
  std::vector<uint64_t> offsets(m);
  uint64_t running = 0;
  for (uint64_t j = 0; j < m; ++j) { offsets[j] = head + running; running += sbytes[j]; }
  const uint64_t total = head + running, base3 = 40 + nsym;
  if (!(total < base3)) return out;
  EntropyHeader h; h.codec = kCodecTernaryEntropy; h.flags = out[6]; h.count = n; h.scale_bits = load_le32(out.data()+16); h.tensor_id = load_le32(out.data()+20); h.seed_field = load_le64(out.data()+24); h.step = load_le32(out.data()+32); h.lanes = lanes; h.block_log2 = 14; h.group = 5; h.length = total;
  write_entropy_header(out.data(), h);
  for (uint64_t j = 0; j < m; ++j) { uint8_t* d = out.data() + 52 + j*10; store_le32(d, sbytes[j]); for (int v = 0; v < 3; ++v) { d[4+2*v] = (uint8_t)probs[3*j+v]; d[5+2*v] = (uint8_t)(probs[3*j+v] >> 8); } }
  for (uint64_t j = 0; j < m; ++j) memcpy(out.data() + offsets[j], slots.data() + (j+1)*kSlot - sbytes[j], sbytes[j]);
  out.resize(total);
  return out;
}

// D2 emulation on a valid codec-5 payload: returns symbols (or fault code)
uint64_t g_fault_block = 0;
int sim_decode(const std::vector<uint8_t>& pv, uint64_t n, std::vector<uint8_t>& syms_out) {
  const uint8_t* p = pv.data();
  const uint32_t lanes = p[36], block_log2 = p[37];
  const qr::Layout l{n, 3, 5, lanes, block_log2};
  const uint64_t m = l.blocks();
  std::vector<uint64_t> offsets(m + 1); uint64_t run = 52 + l.directory_bytes();
  for (uint64_t j = 0; j < m; ++j) { offsets[j] = run; run += load_le32(p + 52 + j*10); } offsets[m] = run;
  syms_out.assign(l.symbols(), 0);
  for (uint64_t j = 0; j < m; ++j) {
    g_fault_block = j;
    uint16_t freq[256]; uint32_t cum[256]; uint8_t slot_symbol[16384];
    const uint8_t* d = p + 52 + j * 10; uint16_t q[3]; for (int v = 0; v < 3; ++v) q[v] = (uint16_t)(d[4+2*v] | (d[5+2*v] << 8));
    if (!qr::element_probs_valid(q, 3, 12)) return 7;
    if (!qr::symbol_frequencies(q, 3, 5, freq)) return 8;
    uint32_t local[32], incl[32];
    for (unsigned lane = 0; lane < 32; ++lane) { local[lane] = 0; for (uint32_t k = 0; k < 8; ++k) { uint32_t s = 8*lane+k; if (s < 243) local[lane] += freq[s]; } incl[lane] = local[lane]; }
    for (unsigned o = 1; o < 32; o <<= 1) { uint32_t prev[32]; memcpy(prev, incl, sizeof prev); for (unsigned lane = 0; lane < 32; ++lane) if (lane >= o) incl[lane] += prev[lane - o]; }
    for (unsigned lane = 0; lane < 32; ++lane) { uint32_t cc = incl[lane] - local[lane]; for (uint32_t k = 0; k < 8; ++k) { uint32_t s = 8*lane+k; if (s < 243) { cum[s] = cc; cc += freq[s]; } } }
    std::vector<int> hit(16384, 0);
    for (uint32_t s = 0; s < 243; ++s) for (uint32_t lane = 0; lane < 32; ++lane) for (uint32_t i = lane; i < freq[s]; i += 32) { slot_symbol[cum[s] + i] = (uint8_t)s; hit[cum[s] + i]++; }
    for (int i = 0; i < 16384; ++i) if (hit[i] != 1) { printf("slot hole\n"); return 99; }
    const uint32_t count = l.block_symbols(j), used = count < lanes ? count : lanes;
    const uint64_t bytes = offsets[j+1] - offsets[j];
    const uint8_t* stream = p + offsets[j];
    if (bytes < 4ull*used) return 1; if ((bytes - 4ull*used) % 2) return 2;
    uint32_t x[32]; for (unsigned lane = 0; lane < 32; ++lane) { x[lane] = qr::kStateLow; if (lane < used) x[lane] = load_le32(stream + 4*lane); if (lane < used && x[lane] < qr::kStateLow) return 3; }
    const uint64_t nwords = (bytes - 4ull*used)/2; const uint8_t* words = stream + 4ull*used;
    uint8_t* out = syms_out.data() + (j << block_log2);
    uint64_t wi = 0; const uint32_t rows = (count + lanes - 1) / lanes;
    for (uint32_t r = 0; r < rows; ++r) {
      const uint32_t base = r * lanes, in_row = count - base < lanes ? count - base : lanes;
      bool need[32] = {}; unsigned mask = 0;
      for (unsigned lane = 0; lane < 32; ++lane) if (lane < in_row) { uint32_t sym = slot_symbol[x[lane] & 16383]; out[base+lane] = (uint8_t)sym; x[lane] = qr::rans_decode_advance(x[lane], freq[sym], cum[sym]); need[lane] = x[lane] < qr::kStateLow; if (need[lane]) mask |= 1u << lane; }
      bool lack = false;
      for (unsigned lane = 0; lane < 32; ++lane) if (need[lane]) { uint64_t idx = wi + __builtin_popcount(mask & ((1u << lane) - 1)); if (idx < nwords) x[lane] = (x[lane] << 16) | words[2*idx] | (words[2*idx+1] << 8); else lack = true; }
      wi += __builtin_popcount(mask);
      if (lack) return 4;
    }
    if (wi != nwords) return 5;
    for (unsigned lane = 0; lane < used; ++lane) if (x[lane] != qr::kStateLow) return 6;
  }
  return 0;
}

std::vector<float> gradient(size_t n, uint64_t seed, float sigma = 1e-3f) {
  std::mt19937_64 gen(seed); std::normal_distribution<float> normal(2e-6f, sigma); std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  std::vector<float> x(n); for (auto& v : x) v = coin(gen) < 0.002f ? 30.0f * normal(gen) : normal(gen); return x;
}
std::vector<float> sparse(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed); std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  std::vector<float> x(n, 0.0f); for (auto& v : x) if (coin(gen) < 0.001f) v = coin(gen) < 0.5f ? -1.0f : 1.0f; return x;
}
std::vector<float> dense(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed); std::uniform_real_distribution<float> u(-1.0f, 1.0f); std::vector<float> x(n); for (auto& v : x) v = u(gen); return x;
}

const char* names[] = {"no fault", "stream shorter than its lanes' initial states", "stream holds a partial 16-bit word", "an initial lane state is below 2^16", "the symbols need more words than the stream holds (truncated stream)", "words left over after the last symbol", "a lane does not end in the encoders' initial state 2^16 (corrupt stream)", "element probabilities do not sum to 2^12", "element probabilities give no usable symbol model"};
int fault_check() {
  int bad = 0, cases = 0, accepted = 0;
  for (size_t n : {20001ul, 200003ul, 81925ul}) {
    auto x = gradient(n, n);
    EncodeParams p; p.packing = Packing::kEntropy; p.seed = 4;
    std::vector<uint8_t> good(max_encoded_bytes(n, p.packing)); good.resize(encode(x, p, good));
    const uint64_t m = (base3_body_bytes(n) + 16383) / 16384;
    const size_t dir_end = 52 + 10 * m;
    std::mt19937 rng(3);
    for (size_t i = 52; i < good.size(); i += (i < dir_end + 300 ? 1 : 13)) {
      auto bad_p = good;
      bool dir = i < dir_end;
      if (dir && (i - 52) % 10 < 4) continue;  // stream lengths: header-level verdicts
      bad_p[i] ^= (uint8_t)(1u << (rng() % 8));
      std::vector<float> out(n);
      std::string cpu_msg;
      try { decode(bad_p, out); } catch (const CodecError& e) { cpu_msg = e.what(); }
      std::vector<uint8_t> syms; int f = sim_decode(bad_p, n, syms);
      std::string sim_msg;
      if (f != 0) sim_msg = "entropy-coded payload, block " + std::to_string(g_fault_block) + " of " + std::to_string(m) + ": " + names[f];
      else {
        const uint64_t nsym = base3_body_bytes(n); uint32_t sv = syms[nsym - 1]; const uint64_t used = n - (nsym - 1) * 5;
        for (uint32_t j = 0; j < 5; ++j, sv /= 3) if (j >= used && sv % 3 != 0) { sim_msg = "entropy-coded payload: padding digit " + std::to_string(j) + " of the last symbol is " + std::to_string(sv % 3) + " instead of the zero value 0"; break; }
      }
      ++cases; if (cpu_msg.empty()) ++accepted;
      if (cpu_msg != sim_msg) { ++bad; if (bad < 10) printf("FAULT MISMATCH n=%zu byte %zu: cpu '%s' sim '%s'\n", n, i, cpu_msg.c_str(), sim_msg.c_str()); }
    }
  }
  printf("%d corrupt cases (%d accepted by the CPU), %d verdict mismatches\n", cases, accepted, bad);
  return bad;
}

int main() {
  if (fault_check()) return 1;
  int bad = 0, total = 0, ent = 0;
  for (size_t n : {0ul, 1ul, 2ul, 4ul, 5ul, 19ul, 20ul, 21ul, 1279ul, 1280ul, 1281ul, 5000ul, 81919ul, 81920ul, 81921ul, 163845ul, 409603ul, 1ul << 20, 3000007ul}) {
    for (int data = 0; data < 3; ++data) {
      const auto x = data == 0 ? gradient(n, n + 1) : data == 1 ? sparse(n, n + 2) : dense(n, n + 3);
      for (Packing pk : {Packing::kBase3, Packing::kEntropy}) for (Rounding r : {Rounding::kStochastic, Rounding::kNearest}) for (float clip : {0.0f, 2.5f}) {
        EncodeParams p; p.packing = pk; p.rounding = r; p.clip_factor = clip; p.seed = 0x0123456789ABCDEFull + n; p.step = 7; p.tensor_id = 3;
        std::vector<uint8_t> cpu(max_encoded_bytes(n, pk)); cpu.resize(encode(x, p, cpu));
        auto sim = sim_encode(x, p);
        ++total;
        if (sim != cpu) { ++bad; printf("MISMATCH n=%zu data=%d pk=%d r=%d clip=%g sizes %zu %zu\n", n, data, (int)pk, (int)r, clip, cpu.size(), sim.size()); }
        if (cpu.size() > 5 && cpu[5] == 5) {
          ++ent;
          std::vector<uint8_t> syms; int f = sim_decode(cpu, n, syms);
          std::vector<uint8_t> b3p = cpu; // compare symbols with base3 encoding
          EncodeParams p3 = p; p3.packing = Packing::kBase3; std::vector<uint8_t> b3(max_encoded_bytes(n, Packing::kBase3)); encode(x, p3, b3);
          if (f != 0 || memcmp(syms.data(), b3.data() + 40, syms.size()) != 0) { ++bad; printf("DECODE MISMATCH n=%zu fault %d\n", n, f); }
        }
      }
    }
  }
  // shared scale + slices
  {
    const size_t n = 500001; auto x = gradient(n, 4242); const TensorStats whole = compute_stats(x);
    for (uint64_t cut : {0ul, 4ul, 81924ul, 163844ul}) for (Packing pk : {Packing::kBase3, Packing::kEntropy}) {
      const uint64_t count = 300001 - cut % 7 * 4;
      EncodeParams p; p.packing = pk; p.seed = 77; p.element_offset = cut; p.shared_scale = 0.01f;
      std::vector<uint8_t> cpu(max_encoded_bytes(count, pk)); cpu.resize(encode_with_stats(std::span<const float>(x.data() + cut, count), whole, p, cpu));
      // sim: stats of the whole -> resolve_scale uses them; emulate by encoding slice with the same scale
      std::vector<float> sl(x.begin() + cut, x.begin() + cut + count);
      // resolve_scale(compute_stats(sl), p) = shared 0.01 (>= own?) -- shared scale dominates both
      auto sim = sim_encode(sl, p);
      ++total; if (sim != cpu) { ++bad; printf("SLICE MISMATCH cut=%lu pk=%d\n", cut, (int)pk); }
    }
  }
  printf("%d cases, %d entropy payloads decoded, %d bad\n", total, ent, bad);
  return bad != 0;
}
