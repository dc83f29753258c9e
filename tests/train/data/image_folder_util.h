// Small image-folder datasets for tests, written with the real encoders:
// <root>/<split>/<class>/<nnn>.{jpg,png}, each image a smooth gradient whose
// hue depends on the class plus a little noise, in varying sizes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "terngrad/train/image_codec.h"

namespace tg_test {

inline terngrad::train::Image gradient_image(int64_t h, int64_t w, int64_t channels, uint32_t seed) {
  terngrad::train::Image img;
  img.height = h;
  img.width = w;
  img.channels = channels;
  img.pixels.resize(static_cast<size_t>(h * w * channels));
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < channels; ++c) {
        s = s * 1664525u + 1013904223u;
        const int v = static_cast<int>((x * 255) / std::max<int64_t>(w - 1, 1) * (c + 1) / 3 +
                                       (y * 128) / std::max<int64_t>(h - 1, 1) + seed * 37 % 64) +
                      static_cast<int>(s >> 29) - 4;
        img.pixels[static_cast<size_t>((y * w + x) * channels + c)] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
  return img;
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// `per_class` images in each of `classes` (their folder names) under dir;
// every third image is a PNG, one in five is gray, sizes vary around h x w.
inline void make_image_folder(const std::string& dir, const std::vector<std::string>& classes, int per_class,
                              int64_t h = 60, int64_t w = 80) {
  for (size_t c = 0; c < classes.size(); ++c)
    for (int i = 0; i < per_class; ++i) {
      const uint32_t seed = static_cast<uint32_t>(c * 1000 + i);
      const int64_t ch = i % 5 == 4 ? 1 : 3;
      const auto img = gradient_image(h + (i % 3) * 7, w - (i % 2) * 11, ch, seed);
      char name[32];
      const bool png = i % 3 == 2;
      std::snprintf(name, sizeof name, "%03d.%s", i, png ? "png" : "jpg");
      write_file(dir + "/" + classes[c] + "/" + name,
                  png ? terngrad::train::encode_png(img) : terngrad::train::encode_jpeg(img, 90));
    }
}

}  // namespace tg_test
