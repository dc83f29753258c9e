// tg-fuzz-seeds: writes each fuzz target's starting corpus from valid inputs
// made by the library's own writers (encode, encode_sum, save_checkpoint,
// write_cifar10_batch, npy_header), so the seeds follow the formats as they
// are today instead of being binaries committed once and left to rot.
//
//   tg-fuzz-seeds <out_dir> <source_dir>
//
// writes <out_dir>/<target>/<name> for every target in fuzz/CMakeLists.txt;
// experiment configs are copied from <source_dir>/paper_configs.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "fixups.h"
#include "fuzz_input.h"
#include "ps_request_script.h"
#include "npy_io.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/ternary_sum.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/datasets.h"
#include "terngrad/train/image_codec.h"
#include "terngrad/train/tf_example.h"
#include "terngrad/train/tfrecord.h"

namespace fs = std::filesystem;
namespace tq = terngrad::quantize;
namespace tc = terngrad::comm;
namespace tr = terngrad::train;
using terngrad::fuzz::join_pieces;
using Buf = std::vector<uint8_t>;

namespace {

fs::path g_out;

void put(const std::string& target, const std::string& name, const Buf& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error((dir / name).string() + ": cannot write");
}
void put_text(const std::string& target, const std::string& name, const std::string& text) {
  put(target, name, Buf(text.begin(), text.end()));
}

Buf read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Buf(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

Buf cat(std::initializer_list<Buf> parts) {
  Buf out;
  for (const Buf& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Buf u16(uint16_t v) { return {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)}; }

// A small gradient with zeros, both signs and one clipped outlier.
std::vector<float> gradient(size_t n, float shift) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = (i % 3 == 0 ? 0.0f : 0.1f * static_cast<float>(i) - shift);
  if (n > 2) g[n / 2] = 5.0f;
  return g;
}

// gzip, as the IDX loader's gzopen expects (.gz files).
Buf gzip(const Buf& in) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  Buf out(deflateBound(&z, in.size()) + 32);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

Buf be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
          static_cast<uint8_t>(v)};
}

void codec_seeds() {
  // The mode byte of each: codec_choice.h's codec_index (18 = index 10, bucketed terngrad).
  const char* specs[] = {"fp32", "fp16", "terngrad:clip=2.5", "terngrad:clip=2.5,bucket=8"};
  const uint8_t modes[] = {0, 1, 2, 18};
  for (uint8_t c = 0; c < 4; ++c) {
    auto codec = tc::make_codec(specs[c]);
    for (size_t n : {0, 1, 5, 8, 13}) {
      const auto g1 = gradient(n, 0.3f), g2 = gradient(n, -0.2f);
      tc::EncodeContext ctx;
      ctx.tensor_id = 3;
      ctx.step = 7;
      if (codec->wants_shared_scale()) ctx.shared_scale = std::max(codec->local_scale(g1), codec->local_scale(g2));
      Buf p1(codec->payload_bytes(n)), p2(codec->payload_bytes(n));
      ctx.seed = 1;
      codec->encode(g1, ctx, p1);
      ctx.seed = 2;
      codec->encode(g2, ctx, p2);
      const char* names[] = {"fp32", "fp16", "terngrad", "terngrad-bucket8"};
      const std::string name = std::string(names[c]) + "-n" + std::to_string(n);
      put("codec_payload", name, cat({{modes[c]}, u16(static_cast<uint16_t>(n)), p1}));
      const std::span<const uint8_t> both[] = {p1, p2};
      Buf sum;
      codec->aggregate(both, n, sum);
      put("aggregate", name, cat({{modes[c]}, u16(static_cast<uint16_t>(n)), join_pieces({p1, p2, sum})}));
    }
  }
  // PowerSGD (index 11, mode 19): a pre-round summed, then the payloads.
  auto psgd = tc::make_codec("powersgd:rank=2,rows=4");
  for (size_t n : {8, 16}) {
    const auto g1 = gradient(n, 0.3f), g2 = gradient(n, -0.2f);
    tc::EncodeContext ctx;
    ctx.tensor_id = 3;
    ctx.step = 7;
    std::vector<float> p(psgd->presum_floats(0, n)), q(p.size());
    psgd->presum(0, g1, ctx, p);
    psgd->presum(0, g2, ctx, q);
    for (size_t i = 0; i < p.size(); ++i) p[i] += q[i];
    ctx.presums = {p};
    Buf p1(psgd->payload_bytes(n)), p2(psgd->payload_bytes(n));
    psgd->encode(g1, ctx, p1);
    psgd->encode(g2, ctx, p2);
    const std::string name = "powersgd-n" + std::to_string(n);
    put("codec_payload", name, cat({{19}, u16(static_cast<uint16_t>(n)), p1}));
    const std::span<const uint8_t> both[] = {p1, p2};
    Buf sum;
    psgd->aggregate(both, n, sum);
    put("aggregate", name, cat({{19}, u16(static_cast<uint16_t>(n)), join_pieces({p1, p2, sum})}));
  }
}

void quantize_seeds() {
  // Both random streams: format version 2 (the default) and version 1.
  for (size_t n : {0, 1, 4, 7, 33}) {
    const auto g = gradient(n, 0.1f);
    for (tq::RandomStream stream : {tq::RandomStream::kPhilox7Half16, tq::RandomStream::kPhilox10Word32}) {
      tq::EncodeParams p;
      p.seed = 9;
      p.step = 2;
      p.stream = stream;
      Buf out(tq::max_encoded_bytes(n));
      tq::encode(g, p, out);
      put("quantize_format", "n" + std::to_string(n) + "_v" + std::to_string(out[tq::kHeaderVersionOffset]),
          cat({{0}, out}));
    }
  }
  for (uint32_t r : {1u, 2u, 4u, 8u}) {
    std::vector<int16_t> counts;
    for (int i = 0; i < 11; ++i) counts.push_back(static_cast<int16_t>(static_cast<int>(i % (2 * r + 1)) - static_cast<int>(r)));
    Buf out(tq::sum_payload_bytes(counts.size(), r));
    tq::encode_sum(counts, 0.25f, r, 5, 6, out);
    put("sum_payload", "r" + std::to_string(r), cat({{0}, out}));
  }
  // Codecs 4 and 5 (base-3, entropy-coded): the same encoder with another
  // packing. 400 elements are the fewest where entropy coding comes out
  // smaller than base-3 for this gradient; 5000 take several lanes.
  for (size_t n : {size_t{7}, size_t{400}, size_t{5000}}) {
    const auto g = gradient(n, 0.1f);
    for (tq::Packing pk : {tq::Packing::kBase3, tq::Packing::kEntropy}) {
      tq::EncodeParams p;
      p.seed = 9;
      p.step = 2;
      p.packing = pk;
      Buf out(tq::max_encoded_bytes(n, pk));
      out.resize(tq::encode(g, p, out));
      const std::string name = std::string(tq::packing_name(pk)) + "_n" + std::to_string(n) + "_codec" +
                               std::to_string(out[tq::kHeaderCodecOffset]);
      put("quantize_format", name, cat({{0}, out}));
      put("quantize_format", name + "_fixups", cat({{3}, out}));
    }
  }
  // Codec 6 (entropy-coded sum): mostly-zero counts, for R with 5, 3, 2 and 1
  // digits per symbol.
  for (uint32_t r : {1u, 2u, 4u, 8u}) {
    std::vector<int16_t> counts(600, 0);
    for (size_t i = 0; i < counts.size(); i += 7) counts[i] = static_cast<int16_t>(static_cast<int>(i % (2 * r + 1)) - static_cast<int>(r));
    Buf out(tq::sum_payload_bytes(counts.size(), r));
    out.resize(tq::encode_sum(counts, 0.25f, r, 5, 6, tq::SumPacking::kEntropy, out));
    const std::string name = "entropy_r" + std::to_string(r) + "_codec" + std::to_string(out[tq::kHeaderCodecOffset]);
    put("sum_payload", name, cat({{0}, out}));
    put("sum_payload", name + "_fixups", cat({{3}, out}));
  }
}

void npy_seeds() {
  const std::vector<std::vector<uint64_t>> shapes = {{}, {0}, {3}, {2, 3}, {1, 2, 2}};
  int i = 0;
  for (const auto& shape : shapes) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    Buf file = terngrad::tools::npy_header(shape);
    for (uint64_t k = 0; k < n; ++k) {
      const float v = 0.5f * static_cast<float>(k) - 1.0f;
      const auto* b = reinterpret_cast<const uint8_t*>(&v);
      file.insert(file.end(), b, b + 4);
    }
    put("npy", "shape" + std::to_string(i++), file);
  }
}

void idx_seeds() {
  for (uint32_t count : {0u, 1u, 3u}) {
    const uint32_t rows = 3, cols = 2;
    Buf images = cat({be32(0x00000803), be32(count), be32(rows), be32(cols)});
    Buf labels = cat({be32(0x00000801), be32(count)});
    for (uint32_t i = 0; i < count; ++i) {
      for (uint32_t p = 0; p < rows * cols; ++p) images.push_back(static_cast<uint8_t>(40 * i + p));
      labels.push_back(static_cast<uint8_t>(i % 10));
    }
    put("idx", "plain" + std::to_string(count), join_pieces({images, labels}));
    put("idx", "gzip" + std::to_string(count), join_pieces({gzip(images), gzip(labels)}));
  }
}

// TFRecord: the first byte is the mode (bit 0 skip, bit 1 fix CRCs), the rest the
// file: PNG, raw and bad-label Examples, an empty record, a truncated tail.
void tfrecord_seeds() {
  const tr::Dataset d = tr::make_synthetic(2, 4, 3, 1, 10, 1);
  std::string file;
  for (int64_t i = 0; i < d.count; ++i) {
    tr::Image img;
    img.height = d.height, img.width = d.width, img.channels = d.channels;
    img.pixels.assign(d.image(i), d.image(i) + d.image_bytes());
    const std::vector<uint8_t> png = tr::encode_png(img);
    file += tr::frame_tfrecord(tr::make_tf_example({reinterpret_cast<const char*>(png.data()), png.size()}, "png",
                                                   d.labels[i], d.height, d.width, d.channels));
    file += tr::frame_tfrecord(tr::make_tf_example({reinterpret_cast<const char*>(img.pixels.data()), img.pixels.size()},
                                                   "raw", d.labels[i], d.height, d.width, d.channels));
  }
  for (uint8_t mode : {0, 1, 2, 3}) {
    Buf b = {mode};
    b.insert(b.end(), file.begin(), file.end());
    put("tfrecord", "examples" + std::to_string(mode), b);
    const std::string odd = file + tr::frame_tfrecord("") + tr::frame_tfrecord(tr::make_tf_example("x", "raw", 11, 1, 1, 1));
    Buf c = {mode};
    c.insert(c.end(), odd.begin(), odd.end() - 3);
    put("tfrecord", "tail" + std::to_string(mode), c);
  }
}

void data_file_seeds(const fs::path& scratch) {
  // CIFAR-10: one and two records of a synthetic set.
  const tr::Dataset d = tr::make_synthetic(2, 32, 32, 3, 10, 1);
  for (int64_t count : {1, 2}) {
    const fs::path p = scratch / ("batch" + std::to_string(count) + ".bin");
    tr::write_cifar10_batch(p.string(), d, 0, count);
    put("cifar10", "records" + std::to_string(count), read_all(p));
  }
  // Checkpoints: tensors of several ranks, a blob, metadata; and an empty one.
  tr::TensorMap tensors;
  tr::Tensor w;
  w.shape = {2, 3};
  w.data = {1, 2, 3, 4, 5, 6};
  tensors["w"] = w;
  tr::Tensor s;
  s.shape = {};
  s.data = {0.5f};
  tensors["scalar"] = s;
  tr::BlobMap blobs;
  blobs["rng"] = tr::pack_int64s({1, -2, 3});
  const std::string full = tr::save_checkpoint((scratch / "ck").string(), 12, tensors, blobs, 0, "{\"net\":\"lenet\"}");
  const std::string empty = tr::save_checkpoint((scratch / "ck").string(), 13, {}, {}, 0, "");
  for (uint8_t mode : {0, 3}) {
    put("checkpoint", "full-mode" + std::to_string(mode), cat({{mode}, read_all(full)}));
    put("checkpoint", "empty-mode" + std::to_string(mode), cat({{mode}, read_all(empty)}));
  }
}

void text_seeds(const fs::path& source) {
  put_text("tf_config", "worker",
           std::string(1, '\0') +
               R"({"cluster":{"ps":["localhost:2222"],"worker":["localhost:2223","h2:2224"]},"task":{"type":"worker","index":1}})");
  put_text("tf_config", "chief",
           std::string(1, '\0') +
               R"({"cluster":{"chief":["[::1]:2220"],"ps":["a:1","b:2"],"worker":["c:3"],"evaluator":["d:4"]},"task":{"type":"ps","index":1}})");
  // Flags: mode bit 0 set, task index (mode >> 1) - 8 = 1.
  put("tf_config", "flags", cat({{static_cast<uint8_t>((9 << 1) | 1)},
                                 join_pieces({Buf{'w', 'o', 'r', 'k', 'e', 'r'},
                                              [] { std::string s = "ps0:2222,ps1:2222"; return Buf(s.begin(), s.end()); }(),
                                              [] { std::string s = "w0:2223,w1:2223"; return Buf(s.begin(), s.end()); }(),
                                              Buf{}})}));
  put_text("json", "object", R"({"a":[1,-2,3.5e-3,true,false,null],"b":{"c":"d\u00e9\n"},"u":18446744073709551615})");
  put_text("json", "number", "12345678901234567890");
  put_text("json", "nested", "[[[[{}]]],[]]");
  int i = 0;
  for (const auto& e : fs::recursive_directory_iterator(source / "paper_configs"))
    if (e.path().extension() == ".pbtxt") put("experiment_config", "paper" + std::to_string(i++), read_all(e.path()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: tg-fuzz-seeds <out_dir> <source_dir>\n";
    return 2;
  }
  try {
    g_out = argv[1];
    const fs::path scratch = g_out / ".scratch";
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    codec_seeds();
    quantize_seeds();
    npy_seeds();
    idx_seeds();
    tfrecord_seeds();
    data_file_seeds(scratch);
    text_seeds(argv[2]);
    // The ps's request scripts: a whole step, sync and async, with and without a secret.
    for (bool secret : {true, false})
      for (bool async : {false, true})
        put("ps_requests", std::string("run") + (secret ? "_secret" : "_open") + (async ? "_async" : "_sync"),
            terngrad::testing::make_seed_script(secret, async));
    put("ps_requests", "run_secret_sync_server_ef", terngrad::testing::make_seed_script(true, false, true));
    fs::remove_all(scratch);
  } catch (const std::exception& e) {
    std::cerr << "tg-fuzz-seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
