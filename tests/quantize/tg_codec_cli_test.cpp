// tg-codec driven as a user would drive it: real files in a fresh temporary
// directory, the real binary (TG_CODEC_BIN), exit codes and messages. The
// library is linked too, so every payload and decoded value the tool
// produces is compared byte for byte with what the API produces.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "terngrad/quantize/codec.h"

namespace {

namespace fs = std::filesystem;
namespace q = terngrad::quantize;

using Bytes = std::vector<uint8_t>;

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal (a crash)
  std::string out;
  std::string err;
};

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

Bytes read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << p;
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << p;
}

Bytes float_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> bytes_floats(const Bytes& b, size_t offset) {
  EXPECT_EQ((b.size() - offset) % 4, 0u);
  std::vector<float> v((b.size() - offset) / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data() + offset, v.size() * 4);
  return v;
}

std::string shape_repr(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// A .npy file built here independently of the tool, the way NumPy lays it
// out: magic, version, little-endian header length (2 bytes for 1.0, 4 for
// 2.0/3.0), dict text padded with spaces and '\n' to a multiple of 64.
Bytes make_npy(const std::string& dict, const Bytes& data, int major = 1) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t unpadded = 8 + len_bytes + dict.size() + 1;
  const size_t pad = 64 - unpadded % 64;
  const size_t header_len = dict.size() + pad + 1;
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t i = 0; i < len_bytes; ++i) b.push_back(static_cast<uint8_t>(header_len >> (8 * i)));
  b.insert(b.end(), dict.begin(), dict.end());
  b.insert(b.end(), pad, ' ');
  b.push_back('\n');
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string f4_dict(const std::vector<uint64_t>& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_repr(shape) + ", }";
}

Bytes make_f4_npy(const std::vector<uint64_t>& shape, const std::vector<float>& v, int major = 1) {
  return make_npy(f4_dict(shape), float_bytes(v), major);
}

std::vector<float> normal_tensor(size_t n, uint32_t seed, float sigma = 0.01f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Bytes library_encode(const std::vector<float>& v, const q::EncodeParams& p) {
  Bytes out(q::max_encoded_bytes(v.size()));
  out.resize(q::encode(v, p, out));
  return out;
}

std::vector<float> library_decode(const Bytes& payload) {
  std::vector<float> v(q::inspect(payload).count);
  q::decode(payload, v);
  return v;
}

// The value after "key:" on the line starting with it, trimmed; "" if absent.
std::string field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::string v = line.substr(key.size() + 1);
    v.erase(0, v.find_first_not_of(' '));
    return v;
  }
  return "";
}

// The message the library gives for a payload, to compare with the tool's.
std::string codec_message(const Bytes& payload) {
  try {
    q::inspect(payload);
  } catch (const q::CodecError& e) {
    return e.what();
  }
  ADD_FAILURE() << "payload unexpectedly valid";
  return "<valid>";
}

class TgCodecCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tg_codec_cli_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs "tg-codec ARGS" with ARGS already shell-quoted where needed.
  RunResult run(const std::string& args) const {
    const fs::path out = dir_ / ".stdout", err = dir_ / ".stderr";
    const std::string cmd = shell_quote(TG_CODEC_BIN) + " " + args + " >" +
                            shell_quote(out.string()) + " 2>" + shell_quote(err.string());
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const Bytes o = read_bytes(out), e = read_bytes(err);
    r.out.assign(o.begin(), o.end());
    r.err.assign(e.begin(), e.end());
    fs::remove(out);
    fs::remove(err);
    return r;
  }

  // Names in the directory: checks that failed writes leave no temp files.
  std::set<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    return names;
  }

  std::string q_path(const std::string& name) const { return shell_quote(path(name)); }

  fs::path dir_;
};

std::string describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "stderr:\n" + r.err;
}

// ---------------------------------------------------------------------------
// Round trips and agreement with the library

TEST_F(TgCodecCli, TernaryTensorRoundTripsExactlyWithClipZero) {
  // Values already in {-s, 0, +s}: with clip 0 the scale is max|g| = s and
  // every nonzero has keep probability 1, so decode(encode(x)) == x.
  std::mt19937 rng(7);
  std::vector<float> v(1001);  // not a multiple of 4: exercises the padding
  for (float& x : v) x = 0.75f * static_cast<float>(static_cast<int>(rng() % 3) - 1);
  write_bytes(path("g.npy"), make_f4_npy({7, 11, 13}, v));

  const RunResult enc = run("encode " + q_path("g.npy") + " " + q_path("g.tgrd") + " --clip 0");
  ASSERT_EQ(enc.exit_code, 0) << describe(enc);
  EXPECT_EQ(field(enc.out, "elements"), "1001");
  EXPECT_EQ(field(enc.out, "scale").rfind("0.75 ", 0), 0u) << enc.out;
  EXPECT_EQ(field(enc.out, "bytes in"), "4004");
  EXPECT_EQ(field(enc.out, "bytes out"), std::to_string(40 + 251));

  const RunResult dec =
      run("decode " + q_path("g.tgrd") + " " + q_path("back.npy") + " --shape 7,11,13");
  ASSERT_EQ(dec.exit_code, 0) << describe(dec);
  EXPECT_EQ(read_bytes(path("back.npy")), make_f4_npy({7, 11, 13}, v));
}

TEST_F(TgCodecCli, EncodeOutputEqualsLibraryEncode) {
  const std::vector<float> v = normal_tensor(10007, 1);
  write_bytes(path("g.npy"), make_f4_npy({v.size()}, v));
  const q::TensorStats st = q::compute_stats(v);
  const float local = q::local_scale(st, 2.5f);

  struct Case {
    std::string args;
    q::EncodeParams params;
  };
  std::vector<Case> cases;
  cases.push_back({"", {}});
  {
    q::EncodeParams p;
    p.clip_factor = 1.5f;
    p.seed = 123;
    p.step = 7;
    p.tensor_id = 3;
    cases.push_back({"--clip 1.5 --seed 123 --step 7 --tensor-id 3", p});
  }
  {
    q::EncodeParams p;
    p.clip_factor = 0.0f;
    p.seed = 0xdeadbeefcafeULL;
    p.step = 4294967295u;
    cases.push_back({"--clip=0 --seed=0xdeadbeefcafe --step 4294967295", p});
  }
  {
    q::EncodeParams p;
    p.seed = 9;
    p.shared_scale = local * 1.25f;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(*p.shared_scale));
    cases.push_back({std::string("--seed 9 --shared-scale ") + buf, p});
  }
  {
    q::EncodeParams p;
    p.seed = 5;
    p.rounding = q::Rounding::kNearest;
    cases.push_back({"--seed 5 --round nearest", p});
    q::EncodeParams s = p;
    s.rounding = q::Rounding::kStochastic;
    cases.push_back({"--seed 5 --round=stochastic", s});
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].args);
    const std::string out = "g" + std::to_string(i) + ".tgrd";
    // Options after the positionals here, before them in the sum test.
    const RunResult r = run("encode " + q_path("g.npy") + " " + q_path(out) + " " + cases[i].args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const Bytes expected = library_encode(v, cases[i].params);
    EXPECT_EQ(read_bytes(path(out)), expected);
    EXPECT_EQ(field(r.out, "bytes out"), std::to_string(expected.size()));
    EXPECT_EQ(field(r.out, "elements"), "10007");
  }
  // The summary says which scale was used and why.
  const RunResult shared = run("encode " + q_path("g.npy") + " " + q_path("s.tgrd") +
                               " --shared-scale 1");
  ASSERT_EQ(shared.exit_code, 0) << describe(shared);
  EXPECT_NE(field(shared.out, "scale").find("shared"), std::string::npos) << shared.out;
  const RunResult clipped = run("encode " + q_path("g.npy") + " " + q_path("c.tgrd"));
  EXPECT_NE(field(clipped.out, "scale").find("clipped"), std::string::npos) << clipped.out;
}

TEST_F(TgCodecCli, RawAndNpyInputsGiveIdenticalPayloads) {
  const std::vector<float> v = normal_tensor(999, 2);
  write_bytes(path("g.npy"), make_f4_npy({27, 37}, v));
  write_bytes(path("g.f32"), float_bytes(v));
  write_bytes(path("npy_named.dat"), make_f4_npy({999}, v));
  write_bytes(path("raw_named.npy"), float_bytes(v));
  write_bytes(path("g_v2.npy"), make_f4_npy({999}, v, 2));
  write_bytes(path("g_v3.npy"), make_f4_npy({3, 333}, v, 3));

  const std::vector<std::string> inputs = {"g.npy", "g.f32", "npy_named.dat --format npy",
                                           "raw_named.npy --format raw", "g_v2.npy", "g_v3.npy"};
  q::EncodeParams p;
  p.seed = 5;
  const Bytes expected = library_encode(v, p);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE(inputs[i]);
    const std::string out = "p" + std::to_string(i) + ".tgrd";
    const RunResult r = run("encode " + path(inputs[i]) + " " + q_path(out) + " --seed 5");
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(read_bytes(path(out)), expected);
  }
}

TEST_F(TgCodecCli, DecodeShapeWritesNpyHeaderAndLibraryValues) {
  const std::vector<float> v = normal_tensor(77, 3);
  q::EncodeParams p;
  p.seed = 11;
  const Bytes payload = library_encode(v, p);
  write_bytes(path("p.tgrd"), payload);
  const std::vector<float> decoded = library_decode(payload);

  const RunResult r = run("decode " + q_path("p.tgrd") + " " + q_path("o.npy") + " --shape 7,11");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Bytes o = read_bytes(path("o.npy"));
  ASSERT_GE(o.size(), 10u);
  const Bytes magic = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  EXPECT_TRUE(std::equal(magic.begin(), magic.end(), o.begin()));
  const size_t header_len = o[8] | (size_t{o[9]} << 8);
  ASSERT_LE(10 + header_len, o.size());
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header(o.begin() + 10, o.begin() + 10 + static_cast<ptrdiff_t>(header_len));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (7, 11), }";
  EXPECT_EQ(header.substr(0, dict.size()), dict);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(header.find_first_not_of(' ', dict.size()), header.size() - 1) << header;
  EXPECT_EQ(bytes_floats(o, 10 + header_len), decoded);

  // A header long enough that the 64-byte padding rule is visible.
  ASSERT_EQ(run("decode " + q_path("p.tgrd") + " " + q_path("rank9.npy") +
                " --shape 1,1,1,1,1,1,1,7,11")
                .exit_code,
            0);
  EXPECT_EQ(read_bytes(path("rank9.npy")), make_f4_npy({1, 1, 1, 1, 1, 1, 1, 7, 11}, decoded));

  // Default 1-D shape; raw output by extension or by --format.
  ASSERT_EQ(run("decode " + q_path("p.tgrd") + " " + q_path("flat.npy")).exit_code, 0);
  EXPECT_EQ(read_bytes(path("flat.npy")), make_f4_npy({77}, decoded));
  ASSERT_EQ(run("decode " + q_path("p.tgrd") + " " + q_path("o.f32")).exit_code, 0);
  EXPECT_EQ(read_bytes(path("o.f32")), float_bytes(decoded));
  ASSERT_EQ(run("decode " + q_path("p.tgrd") + " " + q_path("o2.npy") + " --format raw").exit_code, 0);
  EXPECT_EQ(read_bytes(path("o2.npy")), float_bytes(decoded));

  // A shape with the wrong element count is refused and writes nothing.
  const RunResult wrong = run("decode " + q_path("p.tgrd") + " " + q_path("w.npy") + " --shape 7,12");
  EXPECT_EQ(wrong.exit_code, 1) << describe(wrong);
  EXPECT_NE(wrong.err.find(path("p.tgrd")), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("--shape 7,12"), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("77"), std::string::npos) << wrong.err;
  EXPECT_FALSE(fs::exists(path("w.npy")));
}

TEST_F(TgCodecCli, AccumulateAddsIntoExistingFileKeepingItsShape) {
  const std::vector<float> v = normal_tensor(100, 4);
  q::EncodeParams p;
  p.seed = 3;
  const Bytes payload = library_encode(v, p);
  write_bytes(path("p.tgrd"), payload);
  std::vector<float> acc = normal_tensor(100, 5, 1.0f);
  write_bytes(path("acc.npy"), make_f4_npy({5, 20}, acc));
  write_bytes(path("acc.f32"), float_bytes(acc));

  std::vector<float> expected = acc;
  q::decode_accumulate(payload, expected);
  const RunResult r = run("decode " + q_path("p.tgrd") + " " + q_path("acc.npy") + " --accumulate");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(read_bytes(path("acc.npy")), make_f4_npy({5, 20}, expected));
  q::decode_accumulate(payload, expected);
  ASSERT_EQ(run("decode --accumulate " + q_path("p.tgrd") + " " + q_path("acc.npy")).exit_code, 0);
  EXPECT_EQ(read_bytes(path("acc.npy")), make_f4_npy({5, 20}, expected));

  std::vector<float> raw_expected = acc;
  q::decode_accumulate(payload, raw_expected);
  ASSERT_EQ(run("decode " + q_path("p.tgrd") + " " + q_path("acc.f32") + " --accumulate").exit_code, 0);
  EXPECT_EQ(read_bytes(path("acc.f32")), float_bytes(raw_expected));

  // Element count mismatch: refused, the file is untouched.
  const Bytes small = make_f4_npy({99}, std::vector<float>(99, 1.0f));
  write_bytes(path("small.npy"), small);
  const RunResult mismatch = run("decode " + q_path("p.tgrd") + " " + q_path("small.npy") + " --accumulate");
  EXPECT_EQ(mismatch.exit_code, 1) << describe(mismatch);
  EXPECT_NE(mismatch.err.find(path("small.npy")), std::string::npos) << mismatch.err;
  EXPECT_NE(mismatch.err.find("99"), std::string::npos) << mismatch.err;
  EXPECT_EQ(read_bytes(path("small.npy")), small);

  const RunResult missing = run("decode " + q_path("p.tgrd") + " " + q_path("none.npy") + " --accumulate");
  EXPECT_EQ(missing.exit_code, 1) << describe(missing);
  EXPECT_NE(missing.err.find(path("none.npy")), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(path("none.npy")));

  const RunResult both = run("decode " + q_path("p.tgrd") + " " + q_path("acc.npy") +
                             " --accumulate --shape 100");
  EXPECT_EQ(both.exit_code, 2) << describe(both);
  EXPECT_NE(both.err.find("--shape"), std::string::npos) << both.err;
}

TEST_F(TgCodecCli, InspectPrintsEveryHeaderField) {
  const std::vector<float> v = normal_tensor(1234, 6);
  q::EncodeParams p;
  p.seed = 42;
  p.step = 7;
  p.tensor_id = 3;
  p.shared_scale = 0.5f;
  const Bytes payload = library_encode(v, p);
  write_bytes(path("p.tgrd"), payload);
  const q::PayloadHeader h = q::inspect(payload);
  const std::vector<float> decoded = library_decode(payload);
  uint64_t plus = 0, zero = 0, minus = 0;
  for (float x : decoded) (x > 0 ? plus : x < 0 ? minus : zero)++;
  ASSERT_GT(plus, 0u);
  ASSERT_GT(minus, 0u);

  const RunResult r = run("inspect " + q_path("p.tgrd") + " --dump 6");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(field(r.out, "magic"), "TGRD");
  EXPECT_EQ(field(r.out, "version"), "2 (random stream philox7x16)");  // the default stream
  EXPECT_EQ(field(r.out, "codec").substr(0, 2), "1 ");
  EXPECT_EQ(field(r.out, "flags"), "0x01 (shared-scale)");
  EXPECT_EQ(field(r.out, "header bytes"), "40");
  EXPECT_EQ(field(r.out, "count"), "1234");
  EXPECT_EQ(std::strtof(field(r.out, "scale").c_str(), nullptr), h.scale);
  EXPECT_EQ(h.scale, 0.5f);
  EXPECT_EQ(field(r.out, "tensor id"), "3");
  EXPECT_EQ(field(r.out, "seed"), "42");
  EXPECT_EQ(field(r.out, "step"), "7");
  char crc[32];
  std::snprintf(crc, sizeof crc, "0x%08x (ok)", static_cast<unsigned>(q::load_le32(payload.data() + 36)));
  EXPECT_EQ(field(r.out, "header crc"), crc);
  EXPECT_EQ(field(r.out, "body bytes"), std::to_string(payload.size() - 40));
  const std::string codes = field(r.out, "codes");
  EXPECT_EQ(codes.rfind("+s " + std::to_string(plus) + " (", 0), 0u) << codes;
  EXPECT_NE(codes.find("  0 " + std::to_string(zero) + " ("), std::string::npos) << codes;
  EXPECT_NE(codes.find("  -s " + std::to_string(minus) + " ("), std::string::npos) << codes;
  for (int i = 0; i < 6; ++i) {
    const std::string key = "[" + std::to_string(i) + "] ";
    const size_t at = r.out.find("\n" + key);
    ASSERT_NE(at, std::string::npos) << r.out;
    EXPECT_EQ(std::strtof(r.out.c_str() + at + 1 + key.size(), nullptr), decoded[i]) << key;
  }
  EXPECT_EQ(r.out.find("\n[6] "), std::string::npos);

  // Without sharing the flags read 0x00.
  write_bytes(path("plain.tgrd"), library_encode(v, {}));
  const RunResult plain = run("inspect " + q_path("plain.tgrd"));
  ASSERT_EQ(plain.exit_code, 0) << describe(plain);
  EXPECT_EQ(field(plain.out, "flags"), "0x00 (none)");
  EXPECT_EQ(plain.out.find("[0] "), std::string::npos);

  // Nearest rounding is named, with the shared scale when both are set.
  q::EncodeParams nearest;
  nearest.rounding = q::Rounding::kNearest;
  nearest.shared_scale = 1.0f;
  write_bytes(path("nearest.tgrd"), library_encode(v, nearest));
  const RunResult near = run("inspect " + q_path("nearest.tgrd"));
  ASSERT_EQ(near.exit_code, 0) << describe(near);
  EXPECT_EQ(field(near.out, "flags"), "0x03 (shared-scale, nearest-rounding)");
  EXPECT_EQ(field(near.out, "seed"), "0");
}

TEST_F(TgCodecCli, StatsMatchesLibrary) {
  const std::vector<float> v = normal_tensor(5000, 8, 0.02f);
  write_bytes(path("g.npy"), make_f4_npy({50, 100}, v));
  const q::TensorStats st = q::compute_stats(v);
  const RunResult r = run("stats " + q_path("g.npy") + " --clip 1");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(field(r.out, "shape"), "(50, 100)");
  EXPECT_EQ(field(r.out, "elements"), "5000");
  EXPECT_NEAR(std::strtod(field(r.out, "mean").c_str(), nullptr), st.mean, 1e-8 * st.stddev + 1e-12);
  EXPECT_NEAR(std::strtod(field(r.out, "stddev").c_str(), nullptr), st.stddev, 1e-8 * st.stddev);
  EXPECT_EQ(std::strtof(field(r.out, "max|g|").c_str(), nullptr), st.max_abs);
  EXPECT_EQ(std::strtof(field(r.out, "scale (clip 0)").c_str(), nullptr), q::local_scale(st, 0.0f));
  EXPECT_EQ(std::strtof(field(r.out, "scale (clip 2.5)").c_str(), nullptr), q::local_scale(st, 2.5f));
  EXPECT_EQ(std::strtof(field(r.out, "scale (clip 1)").c_str(), nullptr), q::local_scale(st, 1.0f));
  EXPECT_LT(q::local_scale(st, 2.5f), q::local_scale(st, 0.0f));  // the clip really bites
}

TEST_F(TgCodecCli, SumOfSharedScalePayloadsMatchesSumShared) {
  std::vector<std::vector<float>> grads;
  float shared = 0.0f;
  for (uint32_t w = 0; w < 3; ++w) {
    grads.push_back(normal_tensor(301, 20 + w));
    shared = std::max(shared, q::local_scale(q::compute_stats(grads.back()), 2.5f));
  }
  char scale_text[32];
  std::snprintf(scale_text, sizeof scale_text, "%.9g", static_cast<double>(shared));
  std::vector<Bytes> payloads;
  std::string args;
  for (uint32_t w = 0; w < 3; ++w) {
    const std::string in = "g" + std::to_string(w) + ".npy", out = "p" + std::to_string(w) + ".tgrd";
    write_bytes(path(in), make_f4_npy({301}, grads[w]));
    const RunResult r = run("encode --seed " + std::to_string(100 + w) + " --shared-scale " +
                            scale_text + " " + q_path(in) + " " + q_path(out));
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    q::EncodeParams p;
    p.seed = 100 + w;
    p.shared_scale = shared;
    payloads.push_back(library_encode(grads[w], p));
    ASSERT_EQ(read_bytes(path(out)), payloads.back());
    args += " " + q_path(out);
  }
  std::vector<std::span<const uint8_t>> spans(payloads.begin(), payloads.end());
  std::vector<int16_t> counts(301, 0);
  const float scale = q::sum_shared(spans, counts);
  std::vector<float> expected(301);
  for (size_t i = 0; i < counts.size(); ++i) expected[i] = scale * static_cast<float>(counts[i]);
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());

  const RunResult r = run("sum " + q_path("sum.npy") + args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(read_bytes(path("sum.npy")), make_f4_npy({301}, expected));
  EXPECT_EQ(std::strtof(field(r.out, "shared scale").c_str(), nullptr), scale);
  EXPECT_EQ(field(r.out, "count range"),
            "[" + std::to_string(*lo) + ", " + std::to_string(*hi) + "]");
  EXPECT_EQ(field(r.out, "payloads"), "3");

  // A payload with its own scale cannot join the sum; the message names it.
  write_bytes(path("own.tgrd"), library_encode(grads[0], {}));
  const RunResult bad = run("sum " + q_path("bad.npy") + args + " " + q_path("own.tgrd"));
  EXPECT_EQ(bad.exit_code, 1) << describe(bad);
  EXPECT_EQ(bad.err.rfind("tg-codec: " + path("own.tgrd") + ": ", 0), 0u) << bad.err;
  EXPECT_FALSE(fs::exists(path("bad.npy")));

  // So can one of another length, even with the same scale.
  q::EncodeParams p;
  p.shared_scale = shared;
  write_bytes(path("short.tgrd"), library_encode(std::vector<float>(300, 0.0f), p));
  const RunResult len = run("sum " + q_path("bad.npy") + args + " " + q_path("short.tgrd"));
  EXPECT_EQ(len.exit_code, 1) << describe(len);
  EXPECT_EQ(len.err.rfind("tg-codec: " + path("short.tgrd") + ": ", 0), 0u) << len.err;
  EXPECT_NE(len.err.find("300"), std::string::npos) << len.err;
  EXPECT_FALSE(fs::exists(path("bad.npy")));
}

// ---------------------------------------------------------------------------
// Data errors: exit 1, "tg-codec: <file>: <problem>", nothing written

class TgCodecCliErrors : public TgCodecCli {
 protected:
  // Runs a command expected to fail on file `culprit`; returns stderr.
  std::string expect_data_error(const std::string& args, const std::string& culprit) {
    const auto before = listing();
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << describe(r);
    EXPECT_EQ(r.err.rfind("tg-codec: " + path(culprit) + ": ", 0), 0u) << args << "\n" << r.err;
    EXPECT_EQ(listing(), before) << "failed command left files behind: " << args;
    return r.err;
  }
};

TEST_F(TgCodecCliErrors, TruncatedAndCorruptPayloads) {
  const std::vector<float> v = normal_tensor(100, 9);
  const Bytes good = library_encode(v, {});
  Bytes truncated(good.begin(), good.end() - 1);
  write_bytes(path("trunc.tgrd"), truncated);
  Bytes short_header(good.begin(), good.begin() + 20);
  write_bytes(path("short.tgrd"), short_header);
  Bytes flipped = good;
  flipped[20] ^= 0x01;  // tensor id byte: caught by the header CRC
  write_bytes(path("flip.tgrd"), flipped);
  Bytes bad_code = good;
  bad_code[40] = 0xFF;  // reserved code 0b11
  write_bytes(path("code.tgrd"), bad_code);

  for (const auto& [name, bytes] : std::vector<std::pair<std::string, Bytes>>{
           {"trunc.tgrd", truncated}, {"short.tgrd", short_header}, {"flip.tgrd", flipped},
           {"code.tgrd", bad_code}}) {
    SCOPED_TRACE(name);
    const std::string want = codec_message(bytes);
    std::string err = expect_data_error("inspect " + q_path(name), name);
    EXPECT_NE(err.find(want), std::string::npos) << err;
    err = expect_data_error("decode " + q_path(name) + " " + q_path("out.npy"), name);
    EXPECT_NE(err.find(want), std::string::npos) << err;
  }
  expect_data_error("inspect " + q_path("missing.tgrd"), "missing.tgrd");
}

TEST_F(TgCodecCliErrors, BadNpyInputs) {
  const std::vector<float> v = normal_tensor(10, 10);
  write_bytes(path("f8.npy"),
              make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (10,), }", Bytes(80, 0)));
  write_bytes(path("be.npy"),
              make_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (10,), }", Bytes(40, 0)));
  write_bytes(path("fortran.npy"),
              make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 5), }", float_bytes(v)));
  Bytes short_data = make_f4_npy({10}, v);
  short_data.resize(short_data.size() - 3);
  write_bytes(path("short.npy"), short_data);
  Bytes long_data = make_f4_npy({10}, v);
  long_data.insert(long_data.end(), 4, 0);
  write_bytes(path("long.npy"), long_data);
  Bytes magic = make_f4_npy({10}, v);
  magic[1] = 'X';
  write_bytes(path("magic.npy"), magic);
  Bytes version = make_f4_npy({10}, v);
  version[6] = 4;
  write_bytes(path("version.npy"), version);
  write_bytes(path("garbled.npy"), make_npy("{'descr': '<f4', 'shape': (10,)", float_bytes(v)));
  write_bytes(path("odd.f32"), Bytes(10, 0));
  // Found by reviewing fuzz/fuzz_npy's parser: 100k nested '[' overflowed the stack.
  write_bytes(path("deep.npy"), make_npy("{'descr': " + std::string(100000, '[') + "}", Bytes(), 2));

  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"f8.npy", {"'<f8'", "astype(np.float32)"}},
      {"be.npy", {"'>f4'"}},
      {"fortran.npy", {"fortran_order"}},
      {"short.npy", {"shorter", "(10,)"}},
      {"long.npy", {"longer"}},
      {"magic.npy", {"magic"}},
      {"version.npy", {"version 4.0"}},
      {"garbled.npy", {"malformed"}},
      {"odd.f32", {"multiple of 4"}},
      {"deep.npy", {"malformed", "nested deeper than 32 levels"}},
      {"absent.npy", {"No such file"}},
  };
  for (const auto& [name, needles] : cases) {
    SCOPED_TRACE(name);
    for (const std::string cmd : {"encode", "stats"}) {
      const std::string out = cmd == "encode" ? " " + q_path("o.tgrd") : "";
      const std::string err = expect_data_error(cmd + " " + q_path(name) + out, name);
      for (const std::string& n : needles) EXPECT_NE(err.find(n), std::string::npos) << err;
    }
  }
}

TEST_F(TgCodecCliErrors, NonFiniteInputNamesTheElement) {
  std::vector<float> v = normal_tensor(1000, 11);
  v[137] = std::numeric_limits<float>::quiet_NaN();
  write_bytes(path("nan.npy"), make_f4_npy({1000}, v));
  std::string err = expect_data_error("encode " + q_path("nan.npy") + " " + q_path("o.tgrd"), "nan.npy");
  EXPECT_NE(err.find("137"), std::string::npos) << err;
  err = expect_data_error("stats " + q_path("nan.npy"), "nan.npy");
  EXPECT_NE(err.find("137"), std::string::npos) << err;

  v[137] = 0.0f;
  v[999] = -std::numeric_limits<float>::infinity();
  write_bytes(path("inf.f32"), float_bytes(v));
  err = expect_data_error("encode " + q_path("inf.f32") + " " + q_path("o.tgrd"), "inf.f32");
  EXPECT_NE(err.find("999"), std::string::npos) << err;
}

TEST_F(TgCodecCliErrors, SharedScaleBelowLocalScaleIsRefused) {
  const std::vector<float> v = normal_tensor(100, 12);
  write_bytes(path("g.npy"), make_f4_npy({100}, v));
  const std::string err = expect_data_error(
      "encode " + q_path("g.npy") + " " + q_path("o.tgrd") + " --shared-scale 1e-9", "g.npy");
  EXPECT_NE(err.find("scale"), std::string::npos) << err;
}

// ---------------------------------------------------------------------------
// Usage errors: exit 2, the message names the option and value

TEST_F(TgCodecCli, BadOptionsAreUsageErrors) {
  write_bytes(path("g.npy"), make_f4_npy({4}, {1, 2, 3, 4}));
  write_bytes(path("p.tgrd"), library_encode({1, 2, 3, 4}, {}));
  const std::string enc = "encode " + q_path("g.npy") + " " + q_path("o.tgrd");
  const std::string dec = "decode " + q_path("p.tgrd") + " " + q_path("o.npy");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {enc + " --clip abc", {"--clip", "'abc'"}},
      {enc + " --clip -1", {"--clip", "'-1'"}},
      {enc + " --clip=nan", {"--clip", "'nan'"}},
      {enc + " --clip 2.5x", {"--clip", "'2.5x'"}},
      {enc + " --clip", {"--clip", "needs a value"}},
      {enc + " --clip --seed 1", {"--clip", "needs a value"}},
      {enc + " --clip 1 --clip 2", {"--clip", "more than once"}},
      {enc + " --seed 1.5", {"--seed", "'1.5'"}},
      {enc + " --seed -1", {"--seed", "'-1'"}},
      {enc + " --seed 18446744073709551616", {"--seed", "'18446744073709551616'"}},
      {enc + " --step 4294967296", {"--step", "'4294967296'"}},
      {enc + " --tensor-id x", {"--tensor-id", "'x'"}},
      {enc + " --shared-scale -0.5", {"--shared-scale", "'-0.5'"}},
      {enc + " --shared-scale inf", {"--shared-scale", "'inf'"}},
      {enc + " --format xyz", {"--format", "'xyz'"}},
      {enc + " --round up", {"--round", "'up'", "nearest"}},
      {enc + " --bogus 1", {"--bogus"}},
      {enc + " -x", {"'-x'"}},
      {enc + " extra", {"extra"}},
      {"encode " + q_path("g.npy"), {"missing"}},
      {dec + " --shape 3,,4", {"--shape", "'3,,4'"}},
      {dec + " --shape abc", {"--shape", "'abc'"}},
      {dec + " --accumulate=yes", {"--accumulate"}},
      {dec + " --dump 3", {"--dump"}},
      {"inspect " + q_path("p.tgrd") + " --dump x", {"--dump", "'x'"}},
      {"inspect", {"missing"}},
      {"sum " + q_path("s.npy"), {"missing"}},
      {"stats " + q_path("g.npy") + " --clip -2", {"--clip", "'-2'"}},
      {"frobnicate", {"frobnicate"}},
      {"", {"usage"}},
  };
  const auto before = listing();
  for (const auto& [args, needles] : cases) {
    SCOPED_TRACE(args);
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
  }
  EXPECT_EQ(listing(), before);
}

// repack writes what encode --pack writes; a bad --pack or a corrupt input
// is refused (exit 2 and 1) and OUT is not created.
TEST_F(TgCodecCli, RepackWritesTheEncodeBytesOfTheOtherPacking) {
  const std::vector<float> v = normal_tensor(30011, 4);
  write_bytes(path("g.npy"), make_f4_npy({v.size()}, v));
  q::EncodeParams p;
  p.seed = 21;
  for (const char* from : {"2bit", "base3", "entropy"}) {
    const std::string in = std::string(from) + ".tgrd";
    ASSERT_EQ(run("encode " + q_path("g.npy") + " " + q_path(in) + " --seed 21 --pack " + from).exit_code, 0);
    for (const char* to : {"2bit", "base3", "entropy"}) {
      SCOPED_TRACE(std::string(from) + " -> " + to);
      const std::string out = std::string(from) + "-" + to + ".tgrd";
      const RunResult r = run("repack " + q_path(in) + " " + q_path(out) + " --pack " + to);
      ASSERT_EQ(r.exit_code, 0) << describe(r);
      p.packing = *q::parse_packing(to);
      EXPECT_EQ(read_bytes(path(out)), library_encode(v, p));
    }
  }
  EXPECT_EQ(run("repack " + q_path("2bit.tgrd") + " " + q_path("x.tgrd") + " --pack 3bit").exit_code, 2);
  EXPECT_EQ(run("repack " + q_path("2bit.tgrd") + " " + q_path("x.tgrd")).exit_code, 2);
  Bytes bad = read_bytes(path("entropy.tgrd"));
  bad[q::kHeaderCountOffset] ^= 1;
  write_bytes(path("bad.tgrd"), bad);
  const RunResult r = run("repack " + q_path("bad.tgrd") + " " + q_path("x.tgrd") + " --pack 2bit");
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.err.find("bad.tgrd"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("x.tgrd")));
}

TEST_F(TgCodecCli, HelpForEveryCommand) {
  for (const std::string cmd : {"encode", "decode", "inspect", "repack", "stats", "sum"}) {
    SCOPED_TRACE(cmd);
    const RunResult r = run(cmd + " --help");
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.out.rfind("usage: tg-codec " + cmd + " ", 0), 0u) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
    // --help wins over whatever else is wrong on the line.
    EXPECT_EQ(run(cmd + " --bogus -h").exit_code, 0);
  }
  const RunResult top = run("--help");
  EXPECT_EQ(top.exit_code, 0);
  for (const std::string cmd : {"encode", "decode", "inspect", "repack", "stats", "sum"})
    EXPECT_NE(top.out.find("tg-codec " + cmd), std::string::npos) << top.out;
}

TEST_F(TgCodecCli, EmptyTensorEncodesToHeaderOnlyPayload) {
  write_bytes(path("e.npy"), make_f4_npy({0}, {}));
  const RunResult r = run("encode " + q_path("e.npy") + " " + q_path("e.tgrd"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(read_bytes(path("e.tgrd")), library_encode({}, {}));
  EXPECT_EQ(read_bytes(path("e.tgrd")).size(), 40u);
  ASSERT_EQ(run("decode " + q_path("e.tgrd") + " " + q_path("e2.npy")).exit_code, 0);
  EXPECT_EQ(read_bytes(path("e2.npy")), make_f4_npy({0}, {}));
}

}  // namespace
