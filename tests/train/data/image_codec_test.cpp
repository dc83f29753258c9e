// JPEG/PNG decoding through libjpeg-turbo and libpng: round trips through the
// encoders, conversions, and the errors damaged images must produce.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "terngrad/train/example_source.h"
#include "terngrad/train/image_codec.h"

namespace tt = terngrad::train;

namespace {

// A smooth colour gradient with a sharp diagonal edge: JPEG keeps it within a
// few levels at high quality, and any row/column mix-up shows.
tt::Image test_image(int64_t h, int64_t w, int64_t c) {
  tt::Image img;
  img.height = h;
  img.width = w;
  img.channels = c;
  img.pixels.resize(h * w * c);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k)
        img.pixels[(y * w + x) * c + k] = static_cast<uint8_t>(x * 120 / w + y * 50 / h + 25 * k + (x > y ? 20 : 0));
  return img;
}

double mean_abs_diff(const tt::Image& a, const tt::Image& b) {
  double s = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
  return s / a.pixels.size();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ImageCodec, PngRoundTripIsExactGrayAndRgb) {
  for (int c : {1, 3}) {
    const tt::Image img = test_image(17, 23, c);
    const auto bytes = tt::encode_png(img);
    EXPECT_EQ(tt::sniff_image_format(bytes, "x"), tt::ImageFormat::kPng);
    const tt::Image back = tt::decode_png(bytes, "x");
    EXPECT_EQ(back.height, 17);
    EXPECT_EQ(back.width, 23);
    EXPECT_EQ(back.channels, c);
    EXPECT_EQ(back.pixels, img.pixels);
    EXPECT_EQ(tt::decode_image(bytes, "x").pixels, img.pixels);
  }
}

TEST(ImageCodec, JpegRoundTripIsCloseAtHighQuality) {
  for (int c : {1, 3}) {
    const tt::Image img = test_image(40, 56, c);
    const auto bytes = tt::encode_jpeg(img, 95);
    EXPECT_EQ(tt::sniff_image_format(bytes, "x"), tt::ImageFormat::kJpeg);
    const tt::Image back = tt::decode_jpeg(bytes, "x");
    ASSERT_EQ(back.height, 40);
    ASSERT_EQ(back.width, 56);
    ASSERT_EQ(back.channels, c);
    EXPECT_LT(mean_abs_diff(img, back), 3.0) << "channels " << c;
  }
}

TEST(ImageCodec, ChannelConversions) {
  const tt::Image gray = test_image(8, 9, 1);
  const tt::Image as_rgb = tt::decode_png(tt::encode_png(gray), "x", 3);
  ASSERT_EQ(as_rgb.channels, 3);
  for (int64_t p = 0; p < 72; ++p)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(as_rgb.pixels[3 * p + k], gray.pixels[p]);
  const tt::Image rgb = test_image(8, 9, 3);
  const tt::Image as_gray = tt::decode_jpeg(tt::encode_jpeg(rgb, 100), "x", 1);
  EXPECT_EQ(as_gray.channels, 1);
  // decode_example converts the same way for raw records.
  tt::EncodedExample e;
  e.format = tt::ImageFormat::kRaw;
  e.raw_height = 8, e.raw_width = 9, e.raw_channels = 1;
  e.bytes = gray.pixels;
  e.where = "rec";
  EXPECT_EQ(tt::decode_example(e, 3).pixels, as_rgb.pixels);
}

TEST(ImageCodec, TruncatedJpegNamesWhereAndWhy) {
  auto bytes = tt::encode_jpeg(test_image(64, 64, 3), 90);
  bytes.resize(bytes.size() / 2);
  const std::string msg = error_of([&] { tt::decode_jpeg(bytes, "shard-3: record 7"); });
  EXPECT_NE(msg.find("shard-3: record 7: undecodable JPEG"), std::string::npos) << msg;
}

TEST(ImageCodec, CorruptPngNamesWhereAndWhy) {
  auto bytes = tt::encode_png(test_image(32, 32, 3));
  for (size_t i = 40; i < bytes.size() - 12; i += 7) bytes[i] ^= 0x5A;  // damage the IDAT stream
  const std::string msg = error_of([&] { tt::decode_png(bytes, "a/b.png"); });
  EXPECT_NE(msg.find("a/b.png: undecodable PNG"), std::string::npos) << msg;
  bytes.resize(20);
  EXPECT_NE(error_of([&] { tt::decode_png(bytes, "a/b.png"); }).find("a/b.png: undecodable PNG"), std::string::npos);
}

TEST(ImageCodec, UnknownBytesAndFormatsAreRefused) {
  const std::vector<uint8_t> junk = {'G', 'I', 'F', '8', '9', 'a', 0, 0};
  EXPECT_NE(error_of([&] { tt::decode_image(junk, "x.gif"); }).find("x.gif: neither a JPEG nor a PNG"), std::string::npos);
  EXPECT_NE(error_of([&] { tt::decode_image({}, "e"); }).find("e: empty image"), std::string::npos);
  EXPECT_EQ(tt::parse_image_format("JPEG", "r"), tt::ImageFormat::kJpeg);
  EXPECT_EQ(tt::parse_image_format("png", "r"), tt::ImageFormat::kPng);
  EXPECT_EQ(tt::parse_image_format("RAW", "r"), tt::ImageFormat::kRaw);
  EXPECT_NE(error_of([&] { tt::parse_image_format("webp", "r"); }).find("r: image format 'webp'"), std::string::npos);
}

TEST(ImageCodec, RawSizeMustMatchItsShape) {
  const std::vector<uint8_t> bytes(28 * 28 - 1);
  const std::string msg = error_of([&] { tt::decode_raw(bytes, 28, 28, 1, "mnist-0: record 2"); });
  EXPECT_NE(msg.find("mnist-0: record 2: raw image of 783 bytes, expected 28x28x1 = 784"), std::string::npos) << msg;
  EXPECT_THROW(tt::decode_raw(bytes, 28, 28, 2, "r"), tt::ImageError);
}

TEST(ImageCodec, DimensionsAboveTheLimitAreRefusedBeforeAllocating) {
  const auto bytes = tt::encode_png(test_image(40, 30, 3));
  tt::DecodeLimits small;
  small.max_side = 32;
  const std::string msg = error_of([&] { tt::decode_png(bytes, "big.png", 0, small); });
  EXPECT_NE(msg.find("big.png: image is 40x30, above the decoder's limit"), std::string::npos) << msg;
  EXPECT_THROW(tt::decode_jpeg(tt::encode_jpeg(test_image(40, 30, 3)), "big.jpg", 0, small), tt::ImageError);
}

TEST(ImageCodec, DecodeExampleTurnsImageErrorsIntoDataErrors) {
  tt::EncodedExample e;
  e.format = tt::ImageFormat::kJpeg;
  e.bytes = {0xFF, 0xD8, 0xFF, 0x00};
  e.where = "train-00001-of-00004: record 3";
  try {
    tt::decode_example(e);
    FAIL() << "no error";
  } catch (const tt::DataError& err) {
    EXPECT_NE(std::string(err.what()).find("train-00001-of-00004: record 3: undecodable JPEG"), std::string::npos)
        << err.what();
  }
}

}  // namespace
