// The C API with a codec whose payload size depends on the values: the test
// codec "varsize_test" (tests/support/varsize_test_codec.h) registered in
// this process, which links the C API's host sources itself (libterngrad.so
// keeps its registry to itself and exports no way to register a codec).
// tg_codec_encode reports the bytes it used, fewer than the capacity
// tg_codec_payload_bytes gives; those decode; tg_codec_variable_size says so;
// the device functions refuse the codec.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "terngrad.h"
#include "varsize_test_codec.h"

namespace {

struct Codec {
  tg_codec_t* h = nullptr;
  explicit Codec(const char* spec) { EXPECT_EQ(tg_codec_create(spec, &h), TG_OK) << tg_last_error_message(); }
  ~Codec() { tg_codec_destroy(h); }
};

}  // namespace

TEST(CApiVariableSize, EncodeReportsTheUsedBytesWhichDecode) {
  varsize_test::register_varsize_test_codec();
  Codec c("varsize_test");
  int variable = -1;
  ASSERT_EQ(tg_codec_variable_size(c.h, &variable), TG_OK);
  EXPECT_EQ(variable, 1);
  const uint64_t n = 100;
  std::vector<float> g(n, 0.0f);
  for (uint64_t i = 0; i < n; i += 10) g[i] = 0.25f * static_cast<float>(i + 1);
  size_t capacity = 0;
  ASSERT_EQ(tg_codec_payload_bytes(c.h, n, &capacity), TG_OK);
  std::vector<uint8_t> out(capacity);
  size_t written = 0;
  ASSERT_EQ(tg_codec_encode(c.h, g.data(), n, 0, 0, 1, nullptr, out.data(), out.size(), &written), TG_OK)
      << tg_last_error_message();
  EXPECT_EQ(written, varsize_test::used_bytes(n, 10));
  EXPECT_LT(written, capacity);
  std::vector<float> back(n, -1.0f);
  ASSERT_EQ(tg_codec_decode(c.h, out.data(), written, back.data(), n), TG_OK) << tg_last_error_message();
  EXPECT_EQ(back, g);
  ASSERT_EQ(tg_codec_decode_accumulate(c.h, out.data(), written, back.data(), n), TG_OK);
  for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(back[i], 2 * g[i]) << i;
  // The capacity's bytes are not the payload.
  EXPECT_EQ(tg_codec_decode(c.h, out.data(), capacity, back.data(), n), TG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tg_last_error_message()).find("the header says"), std::string::npos) << tg_last_error_message();
  // A buffer below the capacity is refused, whatever the values would need.
  EXPECT_EQ(tg_codec_encode(c.h, g.data(), n, 0, 0, 1, nullptr, out.data(), capacity - 1, &written),
            TG_ERR_BUFFER_TOO_SMALL);
}

TEST(CApiVariableSize, DeviceFunctionsRefuseTheCodec) {
  varsize_test::register_varsize_test_codec();
  Codec c("varsize_test");
  float scale = 0;
  EXPECT_EQ(tg_codec_local_scale_device(c.h, nullptr, 0, nullptr, &scale), TG_ERR_UNSUPPORTED);
}
