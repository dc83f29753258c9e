// Decoding and encoding of the image files datasets are stored as: JPEG
// (libjpeg-turbo) and PNG (libpng), plus the "raw" records of TF's dataset
// converters (height x width x channels uint8 bytes with the shape stored
// beside them).
//
// Every decoder is safe on untrusted bytes: a truncated, corrupt or
// unsupported image throws ImageError naming `where` (the file, or the shard
// and record it came from) and what is wrong; it never crashes, never reads
// outside the buffer and never allocates more than the declared dimensions
// allow (capped by DecodeLimits).
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace terngrad::train {

// An image that could not be decoded. what() = "<where>: <problem>".
class ImageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A decoded image: uint8 HWC, rows top to bottom, channels 1 (gray) or 3 (RGB).
struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels
  const uint8_t* at(int64_t y, int64_t x) const { return pixels.data() + (y * width + x) * channels; }
};

enum class ImageFormat { kJpeg, kPng, kRaw };

// "jpeg"/"jpg"/"JPEG", "png"/"PNG", "raw"/"RAW" (case-insensitive, as TF's
// converters spell image/format). Anything else throws ImageError naming it.
ImageFormat parse_image_format(const std::string& name, const std::string& where);
// The format a file's bytes start with (JPEG SOI, PNG signature); throws
// ImageError naming `where` when it is neither.
ImageFormat sniff_image_format(std::span<const uint8_t> bytes, const std::string& where);

struct DecodeLimits {
  int64_t max_side = 1 << 15;          // either dimension
  int64_t max_pixels = 100'000'000;    // height * width
};

// channels: 0 keeps the file's (gray stays 1, anything with colour becomes 3;
// alpha is dropped), 1 converts to gray, 3 converts to RGB.
Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& where, int channels = 0,
                  const DecodeLimits& limits = {});
// 16-bit PNGs are reduced to 8 bits, palettes expanded, alpha dropped.
Image decode_png(std::span<const uint8_t> bytes, const std::string& where, int channels = 0,
                 const DecodeLimits& limits = {});
// Raw bytes: exactly height * width * channels of them (channels 1 or 3),
// else ImageError naming the sizes.
Image decode_raw(std::span<const uint8_t> bytes, int64_t height, int64_t width, int64_t channels,
                 const std::string& where, const DecodeLimits& limits = {});
// JPEG or PNG by the bytes' signature.
Image decode_image(std::span<const uint8_t> bytes, const std::string& where, int channels = 0,
                   const DecodeLimits& limits = {});

// Encoders for converters and tests (channels 1 or 3; throws
// std::invalid_argument on a bad shape).
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90);

}  // namespace terngrad::train
