// Typed codec parameters: spec <-> CodecConfig, canonical specs, ef(...) and
// the errors a mistyped spec gets.
#include <gtest/gtest.h>

#include "terngrad/comm/codec_config.h"
#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;

namespace {

std::string error_of(std::string_view spec) {
  try {
    tc::parse_codec_config(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << spec;
  return "";
}

}  // namespace

TEST(CodecConfig, ParsesTypedParameters) {
  const tc::CodecConfig t = tc::parse_codec_config("terngrad:clip=1.5,share_scale=0");
  ASSERT_TRUE(std::holds_alternative<tc::TernGradParams>(t.params));
  EXPECT_EQ(std::get<tc::TernGradParams>(t.params), (tc::TernGradParams{1.5f, false, 0}));
  EXPECT_FALSE(t.error_feedback);

  const tc::CodecConfig q = tc::parse_codec_config("qsgd:levels=15");
  EXPECT_EQ(std::get<tc::QsgdParams>(q.params), (tc::QsgdParams{15, 512}));

  const tc::CodecConfig s = tc::parse_codec_config("sign:vote=sign");
  EXPECT_EQ(std::get<tc::SignParams>(s.params), (tc::SignParams{tc::SignScale::kNone, tc::SignVote::kSign}));

  const tc::CodecConfig k = tc::parse_codec_config("topk:ratio=0.001,values=fp16");
  EXPECT_EQ(std::get<tc::TopKParams>(k.params), (tc::TopKParams{0.001f, tc::SparseValues::kFloat16}));

  const tc::CodecConfig r = tc::parse_codec_config("randomk:rescale=1");
  EXPECT_EQ(std::get<tc::RandomKParams>(r.params), (tc::RandomKParams{0.01f, tc::SparseValues::kFloat32, true}));
}

TEST(CodecConfig, ErrorFeedbackWrapsAnyCodec) {
  const tc::CodecConfig e = tc::parse_codec_config("ef(terngrad:clip=2)");
  ASSERT_TRUE(e.error_feedback);
  EXPECT_EQ(e.error_feedback->momentum, 0.0f);
  EXPECT_EQ(std::get<tc::TernGradParams>(e.params).clip, 2.0f);
  const tc::CodecConfig m = tc::parse_codec_config("ef(topk:ratio=0.01):momentum=0.9");
  ASSERT_TRUE(m.error_feedback);
  EXPECT_EQ(m.error_feedback->momentum, 0.9f);
  EXPECT_EQ(tc::to_spec(m), "ef(topk:ratio=0.01,values=fp32):momentum=0.9");
  EXPECT_EQ(tc::to_spec(tc::parse_codec_config("ef(fp16)")), "ef(fp16)");
}

TEST(CodecConfig, CanonicalSpecsRoundTrip) {
  for (const char* spec :
       {"fp32", "fp16", "terngrad", "terngrad:bucket=512", "terngrad:clip=0,share_scale=0,bucket=4", "terngrad:round=nearest",
        "ef(terngrad:share_scale=0,round=nearest)", "qsgd",
        "qsgd:levels=1,bucket=4", "sign", "sign:scale=mean", "sign:vote=sign", "topk", "topk:ratio=1,values=fp16",
        "randomk:ratio=0.25,rescale=1", "ef(sign:scale=mean)", "ef(qsgd:levels=3):momentum=0.5"}) {
    SCOPED_TRACE(spec);
    const tc::CodecConfig c = tc::parse_codec_config(spec);
    const std::string canonical = tc::to_spec(c);
    EXPECT_EQ(tc::parse_codec_config(canonical), c);
    EXPECT_EQ(tc::to_spec(tc::parse_codec_config(canonical)), canonical);
  }
  EXPECT_EQ(tc::to_spec(tc::parse_codec_config("terngrad:bucket=512")), "terngrad:clip=2.5,share_scale=0,bucket=512");
  EXPECT_EQ(tc::to_spec(tc::parse_codec_config("sign")), "sign:scale=none,vote=counts");
  // The default rounding is not printed: the specs of earlier runs stay as they were.
  EXPECT_EQ(tc::to_spec(tc::parse_codec_config("terngrad:round=stochastic")), "terngrad:clip=2.5,share_scale=1");
  EXPECT_EQ(tc::to_spec(tc::parse_codec_config("terngrad:round=nearest")),
            "terngrad:clip=2.5,share_scale=1,round=nearest");
  EXPECT_EQ(tc::codec_name(tc::parse_codec_config("ef(qsgd)").params), "qsgd");
}

TEST(CodecConfig, BuiltCodecsReportTheirTypedParameters) {
  for (const char* spec : {"fp32", "fp16", "terngrad:clip=1.5,share_scale=0", "ef(terngrad)", "ef(fp32):momentum=0.9"}) {
    SCOPED_TRACE(spec);
    const auto codec = tc::make_codec(spec);
    EXPECT_EQ(codec->config(), tc::parse_codec_config(spec));
    EXPECT_EQ(codec->spec(), tc::to_spec(tc::parse_codec_config(spec)));
  }
  tc::CodecConfig typed;
  typed.params = tc::TernGradParams{2.0f, true, 0};
  EXPECT_EQ(tc::make_codec(typed)->spec(), "terngrad:clip=2,share_scale=1");
}

TEST(CodecConfig, TypedParametersGetTheSpecsChecks) {
  tc::CodecConfig bad;
  bad.params = tc::QsgdParams{0, 512};
  EXPECT_THROW(tc::make_codec(bad), std::invalid_argument);
  bad.params = tc::TopKParams{0.0f, tc::SparseValues::kFloat32};
  EXPECT_THROW(tc::make_codec(bad), std::invalid_argument);
  bad.params = tc::TernGradParams{2.5f, true, 512};  // buckets cannot share one scale
  EXPECT_THROW(tc::make_codec(bad), std::invalid_argument);
}

TEST(CodecConfig, ErrorsNameWhatIsWrong) {
  struct Case {
    const char* spec;
    std::vector<const char*> parts;
  };
  for (const Case& c : std::vector<Case>{
           {"qsgd:levels=0", {"levels", "0", "[1, 32767]"}},
           {"qsgd:bucket=6", {"bucket", "6", "multiple of 4"}},
           {"sign:scale=max", {"scale", "max", "none or mean"}},
           {"sign:scale=mean,vote=sign", {"vote", "scale=none"}},
           {"topk:ratio=0", {"ratio", "(0, 1]"}},
           {"topk:ratio=1.5", {"ratio", "1.5"}},
           {"topk:values=int8", {"values", "int8", "fp32 or fp16"}},
           {"terngrad:bucket=512,share_scale=1", {"bucket=512", "share_scale"}},
           {"terngrad:round=up", {"round", "up", "stochastic or nearest"}},
           {"terngrad:bucket=512,round=nearest", {"round=nearest", "bucket=512"}},
           {"ef(terngrad", {"closing"}},
           {"ef()", {"needs a codec"}},
           {"ef(ef(fp32))", {"ef(ef"}},
           {"ef(fp32)x", {"after ef(...)"}},
           {"ef(fp32):momentum=1", {"momentum", "[0, 1)"}},
           {"ef(fp32):lr=1", {"lr", "momentum"}},
           {"ef", {"ef(<codec>)"}},
           {"ef(nope)", {"nope", "terngrad", "topk"}},
           {"fp32:x=(1)", {"'('"}},
       }) {
    SCOPED_TRACE(c.spec);
    const std::string msg = error_of(c.spec);
    for (const char* p : c.parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}
