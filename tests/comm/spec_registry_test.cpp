// Codec specs, the registry and canonical specs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;

namespace {

// The message of the std::invalid_argument that f throws ("" if none).
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

void expect_contains(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(text.find(p), std::string::npos) << "'" << p << "' not in: " << text;
}

// Each part must appear quoted, in single or double quotes (the message
// names the exact token; the quoting style is the implementation's choice).
void expect_quoted(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* p : parts) {
    bool found = false;
    for (char q : {'\'', '"'}) {
      std::string quoted(1, q);  // built by append: GCC 12 misreports "x" + string (-Wrestrict)
      quoted.append(p).push_back(q);
      found = found || text.find(quoted) != std::string::npos;
    }
    EXPECT_TRUE(found) << "quoted '" << p << "' not in: " << text;
  }
}

}  // namespace

TEST(CodecSpec, ParsesNameAndParameters) {
  const tc::CodecSpec a = tc::parse_codec_spec("fp32");
  EXPECT_EQ(a.name, "fp32");
  EXPECT_TRUE(a.params.empty());
  const tc::CodecSpec b = tc::parse_codec_spec("terngrad:clip=2.5,share_scale=0");
  EXPECT_EQ(b.name, "terngrad");
  ASSERT_EQ(b.params.size(), 2u);
  EXPECT_EQ(b.params.at("clip"), "2.5");
  EXPECT_EQ(b.params.at("share_scale"), "0");
}

TEST(CodecSpec, ErrorsNameTheBadToken) {
  struct Case {
    const char* spec;
    const char* token;
  };
  // The token is the bad part itself or, where that part is empty, the spec.
  for (const Case& c : {Case{":clip=1", ":clip=1"}, Case{"ter ngrad", "ter ngrad"},
                        Case{"terngrad:", "terngrad:"}, Case{"terngrad:clip", "clip"},
                        Case{"terngrad:clip=", "clip="}, Case{"terngrad:=1", "=1"},
                        Case{"terngrad:clip=1,", "terngrad:clip=1,"},
                        Case{"terngrad:clip=1,,share_scale=1", "terngrad:clip=1,,share_scale=1"},
                        Case{"terngrad:clip=1,clip=2", "clip"}, Case{"terngrad:clip=1 ", "clip=1 "},
                        Case{"terngrad:clip=1:2", "clip=1:2"}, Case{"terngrad:clip=a=b", "clip=a=b"}}) {
    SCOPED_TRACE(c.spec);
    const std::string msg = invalid_argument_message([&] { tc::parse_codec_spec(c.spec); });
    expect_quoted(msg, {c.token});
  }
  expect_contains(invalid_argument_message([] { tc::parse_codec_spec(""); }), {"empty"});
}

TEST(CodecRegistry, BuiltInsAreRegistered) {
  const auto names = tc::registered_codecs();
  for (const char* n : {"fp16", "fp32", "terngrad"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(CodecRegistry, UnknownNameListsRegisteredCodecs) {
  const std::string msg = invalid_argument_message([] { tc::make_codec("fp8:x=1"); });
  expect_quoted(msg, {"fp8"});
  expect_contains(msg, {"fp16", "fp32", "terngrad"});
}

TEST(CodecRegistry, UnknownKeyNamesCodecKeyValueAndAcceptedKeys) {
  const std::string msg = invalid_argument_message([] { tc::make_codec("terngrad:clp=3"); });
  expect_quoted(msg, {"terngrad", "clp", "3"});
  expect_contains(msg, {"clip, share_scale"});
  expect_quoted(invalid_argument_message([] { tc::make_codec("fp32:clip=3"); }), {"fp32", "clip", "3"});
  expect_quoted(invalid_argument_message([] { tc::make_codec("fp16:x=y"); }), {"fp16", "x", "y"});
}

TEST(CodecRegistry, BadValuesNameCodecKeyAndValue) {
  struct Case {
    const char* spec;
    const char* key;
    const char* value;
  };
  for (const Case& c : {Case{"terngrad:clip=-1", "clip", "-1"}, Case{"terngrad:clip=abc", "clip", "abc"},
                        Case{"terngrad:clip=2.5x", "clip", "2.5x"}, Case{"terngrad:clip=nan", "clip", "nan"},
                        Case{"terngrad:clip=inf", "clip", "inf"}, Case{"terngrad:clip=1e99", "clip", "1e99"},
                        Case{"terngrad:share_scale=2", "share_scale", "2"},
                        Case{"terngrad:share_scale=yes", "share_scale", "yes"}}) {
    SCOPED_TRACE(c.spec);
    expect_quoted(invalid_argument_message([&] { tc::make_codec(c.spec); }), {"terngrad", c.key, c.value});
  }
}

TEST(CodecRegistry, CanonicalSpecsRoundTrip) {
  struct Case {
    const char* in;
    const char* canonical;
    bool shared;
  };
  for (const Case& c : {Case{"fp32", "fp32", false}, Case{"fp16", "fp16", false},
                        Case{"terngrad", "terngrad:clip=2.5,share_scale=1", true},
                        Case{"terngrad:share_scale=0,clip=0", "terngrad:clip=0,share_scale=0", false},
                        Case{"terngrad:clip=1e1", "terngrad:clip=10,share_scale=1", true},
                        Case{"terngrad:clip=0.1", "terngrad:clip=0.1,share_scale=1", true},
                        Case{"terngrad:clip=3.14159274", "terngrad:clip=3.1415927,share_scale=1", true}}) {
    SCOPED_TRACE(c.in);
    const auto codec = tc::make_codec(c.in);
    EXPECT_EQ(codec->spec(), c.canonical);
    EXPECT_EQ(codec->wants_shared_scale(), c.shared);
    EXPECT_EQ(tc::make_codec(codec->spec())->spec(), c.canonical);
  }
}

namespace {

// A user codec: sends nothing and decodes zeros (checks the extension path).
class NullCodec final : public tc::GradientCodec {
 public:
  explicit NullCodec(std::string spec) : spec_(std::move(spec)) {}
  std::string spec() const override { return spec_; }
  size_t payload_bytes(uint64_t) const override { return 0; }
  void encode_slices(std::span<const float>, const tc::EncodeContext&, std::span<const tc::ElementRange>,
                     std::span<const std::span<uint8_t>>) override {}
  void decode(std::span<const uint8_t>, std::span<float> out) const override {
    std::fill(out.begin(), out.end(), 0.0f);
  }
  void decode_accumulate(std::span<const uint8_t>, std::span<float>) const override {}

 private:
  std::string spec_;
};

}  // namespace

TEST(CodecRegistry, UserCodecsRegisterOnceAndReceiveTheirParameters) {
  tc::register_codec("test_null", [](const tc::CodecSpec& s) {
    return std::make_unique<NullCodec>(s.name + (s.params.count("tag") ? ":tag=" + s.params.at("tag") : ""));
  });
  EXPECT_EQ(tc::make_codec("test_null:tag=7")->spec(), "test_null:tag=7");
  const auto names = tc::registered_codecs();
  EXPECT_NE(std::find(names.begin(), names.end(), "test_null"), names.end());
  expect_contains(invalid_argument_message([] {
                    tc::register_codec("test_null", [](const tc::CodecSpec&) { return nullptr; });
                  }),
                  {"test_null", "already"});
  expect_quoted(invalid_argument_message([] { tc::register_codec("fp32", tc::CodecFactory{}); }), {"fp32"});
  expect_quoted(invalid_argument_message([] {
                  tc::register_codec("bad name", [](const tc::CodecSpec&) { return nullptr; });
                }),
                {"bad name"});
}

TEST(CodecRegistry, ConcurrentUseIsSafe) {
  std::atomic<int> made{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t, &made] {
      if (t == 0)
        tc::register_codec("test_concurrent", [](const tc::CodecSpec& s) { return std::make_unique<NullCodec>(s.name); });
      for (int i = 0; i < 200; ++i) {
        made += tc::make_codec(i % 2 ? "fp16" : "terngrad:clip=1") != nullptr;
        (void)tc::registered_codecs();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(made.load(), 8 * 200);
  EXPECT_EQ(tc::make_codec("test_concurrent")->spec(), "test_concurrent");
}
