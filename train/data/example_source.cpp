#include "terngrad/train/example_source.h"

namespace terngrad::train {

Image decode_example(const EncodedExample& e, int channels, const DecodeLimits& limits) {
  try {
    Image img;
    switch (e.format) {
      case ImageFormat::kJpeg: img = decode_jpeg(e.bytes, e.where, 0, limits); break;
      case ImageFormat::kPng: img = decode_png(e.bytes, e.where, 0, limits); break;
      case ImageFormat::kRaw:
        img = decode_raw(e.bytes, e.raw_height, e.raw_width, e.raw_channels, e.where, limits);
        break;
    }
    if (channels == 0 || channels == img.channels) return img;
    if (channels != 1 && channels != 3)
      throw ImageError(e.where + ": requested channels " + std::to_string(channels) + " (expected 0, 1 or 3)");
    // Gray to RGB replicates; RGB to gray uses the ITU-R 601 luma weights (as libjpeg and libpng do).
    Image out;
    out.height = img.height;
    out.width = img.width;
    out.channels = channels;
    const int64_t n = img.height * img.width;
    out.pixels.resize(static_cast<size_t>(n * channels));
    for (int64_t p = 0; p < n; ++p) {
      if (channels == 3) {
        out.pixels[3 * p] = out.pixels[3 * p + 1] = out.pixels[3 * p + 2] = img.pixels[p];
      } else {
        const uint8_t* rgb = &img.pixels[3 * p];
        out.pixels[p] = static_cast<uint8_t>((299 * rgb[0] + 587 * rgb[1] + 114 * rgb[2] + 500) / 1000);
      }
    }
    return out;
  } catch (const ImageError& err) {
    throw DataError(err.what());
  }
}

}  // namespace terngrad::train
