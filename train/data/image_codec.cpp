// JPEG through libjpeg-turbo, PNG through libpng's simplified API.
//
// libjpeg reports fatal errors by calling error_exit, which must not return;
// the only safe way out of C code is longjmp back to a setjmp in a frame
// that owns no C++ objects created after it. decode_jpeg_into therefore
// keeps every object with a destructor in its caller, and the message is
// copied into a plain char array before the jump.
#include "terngrad/train/image_codec.h"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>

namespace terngrad::train {

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& problem) {
  throw ImageError(where + ": " + problem);
}

void check_channels(int channels, const std::string& where) {
  if (channels != 0 && channels != 1 && channels != 3)
    fail(where, "requested channels " + std::to_string(channels) + " (expected 0, 1 or 3)");
}

void check_size(int64_t height, int64_t width, const DecodeLimits& limits, const std::string& where) {
  if (height <= 0 || width <= 0) fail(where, "image is " + std::to_string(height) + "x" + std::to_string(width));
  if (height > limits.max_side || width > limits.max_side || height * width > limits.max_pixels)
    fail(where, "image is " + std::to_string(height) + "x" + std::to_string(width) +
                    ", above the decoder's limit (side " + std::to_string(limits.max_side) + ", pixels " +
                    std::to_string(limits.max_pixels) + ")");
}

// ---- JPEG -----------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr mgr;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (corrupt data libjpeg can work around, e.g. "premature end of
// data segment") are errors here: a damaged training image is reported, not
// silently padded with grey.
void jpeg_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) jpeg_error_exit(cinfo);
}

struct JpegHeader {
  int64_t height = 0, width = 0, channels = 0;
};

// Returns 0 on success, 1 after a libjpeg error (err.message says which).
// stage 0: read the header into *header; stage 1: decode into out (sized
// from the header by the caller) with out_components per pixel.
int jpeg_run(const uint8_t* data, size_t n, int stage, int out_components, JpegHeader* header, uint8_t* out,
             JpegError& err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_emit_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  if (stage == 0) {
    header->height = cinfo.image_height;
    header->width = cinfo.image_width;
    header->channels = cinfo.num_components;
    jpeg_destroy_decompress(&cinfo);
    return 0;
  }
  cinfo.out_color_space = out_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const size_t stride = static_cast<size_t>(cinfo.output_width) * out_components;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out + static_cast<size_t>(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return 0;
}

}  // namespace

ImageFormat parse_image_format(const std::string& name, const std::string& where) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "jpeg" || s == "jpg") return ImageFormat::kJpeg;
  if (s == "png") return ImageFormat::kPng;
  if (s == "raw") return ImageFormat::kRaw;
  fail(where, "image format '" + name + "' (expected JPEG, PNG or RAW)");
}

ImageFormat sniff_image_format(std::span<const uint8_t> bytes, const std::string& where) {
  static const uint8_t kPngSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::kJpeg;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPngSig, 8) == 0) return ImageFormat::kPng;
  fail(where, bytes.empty() ? "empty image" : "neither a JPEG nor a PNG (unknown signature)");
}

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& where, int channels, const DecodeLimits& limits) {
  check_channels(channels, where);
  if (bytes.empty()) fail(where, "empty JPEG");
  JpegError err{};
  JpegHeader header;
  if (jpeg_run(bytes.data(), bytes.size(), 0, 0, &header, nullptr, err))
    fail(where, std::string("undecodable JPEG: ") + err.message);
  check_size(header.height, header.width, limits, where);
  Image img;
  img.height = header.height;
  img.width = header.width;
  img.channels = channels != 0 ? channels : (header.channels == 1 ? 1 : 3);
  img.pixels.resize(static_cast<size_t>(img.height * img.width * img.channels));
  if (jpeg_run(bytes.data(), bytes.size(), 1, static_cast<int>(img.channels), nullptr, img.pixels.data(), err))
    fail(where, std::string("undecodable JPEG: ") + err.message);
  return img;
}

Image decode_png(std::span<const uint8_t> bytes, const std::string& where, int channels, const DecodeLimits& limits) {
  check_channels(channels, where);
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
    fail(where, std::string("undecodable PNG: ") + png.message);
  struct Cleanup {
    png_image* p;
    ~Cleanup() { png_image_free(p); }
  } cleanup{&png};
  check_size(png.height, png.width, limits, where);
  const bool color = (png.format & PNG_FORMAT_FLAG_COLOR) != 0;
  Image img;
  img.height = png.height;
  img.width = png.width;
  img.channels = channels != 0 ? channels : (color ? 3 : 1);
  png.format = img.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  img.pixels.resize(static_cast<size_t>(img.height * img.width * img.channels));
  const png_color black{0, 0, 0};  // what transparent pixels are composited onto
  if (!png_image_finish_read(&png, &black, img.pixels.data(), 0, nullptr))
    fail(where, std::string("undecodable PNG: ") + png.message);
  if (PNG_IMAGE_FAILED(png)) fail(where, std::string("undecodable PNG: ") + png.message);
  return img;
}

Image decode_raw(std::span<const uint8_t> bytes, int64_t height, int64_t width, int64_t channels,
                 const std::string& where, const DecodeLimits& limits) {
  if (channels != 1 && channels != 3) fail(where, "raw image with " + std::to_string(channels) + " channels (expected 1 or 3)");
  check_size(height, width, limits, where);
  const int64_t need = height * width * channels;
  if (static_cast<int64_t>(bytes.size()) != need)
    fail(where, "raw image of " + std::to_string(bytes.size()) + " bytes, expected " + std::to_string(height) + "x" +
                    std::to_string(width) + "x" + std::to_string(channels) + " = " + std::to_string(need));
  Image img;
  img.height = height;
  img.width = width;
  img.channels = channels;
  img.pixels.assign(bytes.begin(), bytes.end());
  return img;
}

Image decode_image(std::span<const uint8_t> bytes, const std::string& where, int channels, const DecodeLimits& limits) {
  return sniff_image_format(bytes, where) == ImageFormat::kJpeg ? decode_jpeg(bytes, where, channels, limits)
                                                                : decode_png(bytes, where, channels, limits);
}

namespace {

void check_encodable(const Image& image, const char* what) {
  if ((image.channels != 1 && image.channels != 3) || image.height <= 0 || image.width <= 0 ||
      image.height > 65535 || image.width > 65535 ||
      static_cast<int64_t>(image.pixels.size()) != image.height * image.width * image.channels)
    throw std::invalid_argument(std::string(what) + ": cannot encode a " + std::to_string(image.height) + "x" +
                                std::to_string(image.width) + "x" + std::to_string(image.channels) + " image of " +
                                std::to_string(image.pixels.size()) + " bytes");
}

}  // namespace

std::vector<uint8_t> encode_png(const Image& image) {
  check_encodable(image, "encode_png");
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), 0, nullptr))
    throw std::runtime_error(std::string("encode_png: ") + png.message);
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0, nullptr))
    throw std::runtime_error(std::string("encode_png: ") + png.message);
  out.resize(size);
  return out;
}

namespace {

// Same error discipline as jpeg_run: 0 on success, 1 after a libjpeg error;
// *buffer (malloc'ed by jpeg_mem_dest) is the caller's to free either way.
int jpeg_encode_run(const Image& image, int quality, unsigned char** buffer, unsigned long* size, JpegError& err) {
  jpeg_compress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return 1;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, buffer, size);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = static_cast<int>(image.channels);
  cinfo.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(image.width * image.channels);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.pixels.data()) + cinfo.next_scanline * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return 0;
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  check_encodable(image, "encode_jpeg");
  if (quality < 1 || quality > 100) throw std::invalid_argument("encode_jpeg: quality " + std::to_string(quality));
  JpegError err{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int failed = jpeg_encode_run(image, quality, &buffer, &size, err);
  std::vector<uint8_t> out;
  if (!failed) out.assign(buffer, buffer + size);
  std::free(buffer);
  if (failed) throw std::runtime_error(std::string("encode_jpeg: ") + err.message);
  return out;
}

}  // namespace terngrad::train
