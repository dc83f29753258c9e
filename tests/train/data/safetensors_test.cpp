// safetensors export: round trip, header layout, and an independent check
// of the file with Python's json module.
#include <cstring>

#include "terngrad/train/safetensors.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

TEST(Safetensors, RoundTripKeepsOrderValuesAndMetadata) {
  TempDir t;
  const Tensor w = tensor({3, 2}, [](int64_t i) { return 0.5f * i - 1; });
  const Tensor b = tensor({2}, [](int64_t i) { return i ? -0.0f : 1e-30f; });
  const Tensor s = tensor({}, [](int64_t) { return 42.0f; });
  const std::vector<std::pair<std::string, const Tensor*>> list = {
      {"fc/weights", &w}, {"quote\"back\\slash\ttab/é", &b}, {"scalar", &s}};
  export_safetensors(t / "m.safetensors", list, {{"net", "lenet"}, {"note", "line\nbreak \"q\""}});
  EXPECT_EQ(list_dir(t.path()), std::vector<std::string>{"m.safetensors"});
  const SafetensorsFile f = read_safetensors(t / "m.safetensors");
  EXPECT_EQ(f.names, (std::vector<std::string>{"fc/weights", "quote\"back\\slash\ttab/é", "scalar"}));
  EXPECT_EQ(f.tensors.at("fc/weights").shape, w.shape);
  EXPECT_EQ(f.tensors.at("fc/weights").data, w.data);
  EXPECT_EQ(std::memcmp(f.tensors.at("quote\"back\\slash\ttab/é").data.data(), b.data.data(), 8), 0);  // -0.0 kept
  EXPECT_EQ(f.tensors.at("scalar").shape, Shape{});
  EXPECT_EQ(f.tensors.at("scalar").data, std::vector<float>{42.0f});
  EXPECT_EQ(f.metadata.at("net"), "lenet");
  EXPECT_EQ(f.metadata.at("note"), "line\nbreak \"q\"");
  EXPECT_EQ(f.header_length % 8, 0u);
  EXPECT_EQ(fs::file_size(t / "m.safetensors"), 8 + f.header_length + 4 * (6 + 2 + 1));
}

TEST(Safetensors, HeaderLayout) {
  TempDir t;
  const Tensor w = tensor({2, 2}, [](int64_t i) { return float(i); });
  std::map<std::string, Tensor> m;
  m["w"] = w;
  export_safetensors(t / "a.safetensors", m);
  const auto bytes = read_bytes(t / "a.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[i]} << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}");
  float v[4];
  std::memcpy(v, bytes.data() + 8 + n, 16);
  EXPECT_EQ(std::vector<float>(v, v + 4), w.data);
}

TEST(Safetensors, PythonJsonAcceptsTheHeader) {
  if (!have_python3()) GTEST_SKIP() << "python3 not available";
  TempDir t;
  const Tensor w = tensor({4, 3}, [](int64_t i) { return 0.125f * i; });
  const Tensor b = tensor({3}, [](int64_t i) { return -float(i); });
  const std::vector<std::pair<std::string, const Tensor*>> list = {{"conv1/weights", &w}, {"conv1/bi\"ases\n", &b}};
  export_safetensors(t / "m.safetensors", list, {{"steps", "1000"}, {"net", "le\\net"}});
  // An independent reader: Python's json and struct, following the spec.
  const std::string script = t / "check.py";
  std::ofstream(script) << R"(import json, struct, sys
data = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', data[:8])
assert n % 8 == 0, n
header = json.loads(data[8:8 + n].decode('utf-8'))
assert header['__metadata__'] == {'steps': '1000', 'net': 'le\\net'}, header['__metadata__']
body = data[8 + n:]
spans = []
for name, info in header.items():
    if name == '__metadata__':
        continue
    assert info['dtype'] == 'F32'
    b, e = info['data_offsets']
    count = 1
    for d in info['shape']:
        count *= d
    assert e - b == 4 * count, (name, b, e)
    spans.append((b, e))
    values = struct.unpack('<%df' % count, body[b:e])
    if name == 'conv1/weights':
        assert info['shape'] == [4, 3]
        assert values == tuple(0.125 * i for i in range(12)), values
    else:
        assert name == 'conv1/bi"ases\n', repr(name)
        assert values == (0.0, -1.0, -2.0), values
spans.sort()
assert spans[0][0] == 0 and spans[-1][1] == len(body), spans
assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans
try:
    from safetensors.numpy import load_file
    loaded = load_file(sys.argv[1])
    assert loaded['conv1/weights'].shape == (4, 3)
    print('safetensors package agrees')
except ImportError:
    pass
print('ok')
)";
  const std::string cmd = "python3 " + script + " " + (t / "m.safetensors") + " > " + (t / "out.txt") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << read_text(t / "out.txt");
  EXPECT_CONTAINS(read_text(t / "out.txt"), "ok");
}

TEST(Safetensors, WriterErrors) {
  TempDir t;
  const Tensor w = tensor({2}, [](int64_t) { return 1.0f; });
  Tensor bad = tensor({2, 2}, [](int64_t) { return 1.0f; });
  bad.data.pop_back();
  using List = std::vector<std::pair<std::string, const Tensor*>>;
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { export_safetensors(t / "x", List{{"a", &w}, {"a", &w}}); }),
                  "duplicate tensor name 'a'");
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { export_safetensors(t / "x", List{{"b", &bad}}); }),
                  "tensor 'b' has shape [2, 2] but holds 3 values");
  EXPECT_THROW(export_safetensors(t / "x", List{{"__metadata__", &w}}), std::invalid_argument);
  EXPECT_TRUE(list_dir(t.path()).empty());
}

TEST(Safetensors, ReaderRejectsMalformedFiles) {
  TempDir t;
  std::map<std::string, Tensor> m;
  m["w"] = tensor({2}, [](int64_t) { return 1.0f; });
  export_safetensors(t / "ok", m);
  auto bytes = read_bytes(t / "ok");
  auto bad = bytes;
  bad[0] = 0xFF;  // header length beyond the file
  write_bytes(t / "len", bad);
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { read_safetensors(t / "len"); }), "header length");
  bad = bytes;
  bad.push_back(0);  // data section longer than the tensors
  write_bytes(t / "hole", bad);
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { read_safetensors(t / "hole"); }), "tensors cover 8");
  bad = bytes;
  bad[8 + 1] = '!';  // broken JSON
  write_bytes(t / "json", bad);
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { read_safetensors(t / "json"); }), "JSON error at byte");
}

}  // namespace
