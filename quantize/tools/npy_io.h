// Tensor files for tg-codec: NumPy .npy (float32, little-endian, C order)
// and headerless raw little-endian float32, plus whole-file byte reads and
// atomic writes used for payloads.
//
// Every failure throws std::runtime_error whose message is
// "<file>: <problem>", so the tool can print it after its own name.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace terngrad::tools {

enum class TensorFormat { kNpy, kRaw };

// A dense float32 tensor: its shape (empty for a 0-d scalar) and its
// elements in C order.
struct Tensor {
  std::vector<uint64_t> shape;
  std::vector<float> data;
};

// .npy (any letter case) means NumPy; every other name means raw float32.
TensorFormat format_for_path(std::string_view path);

// "npy" or "raw"; nullopt for anything else.
std::optional<TensorFormat> parse_format_name(std::string_view name);

// Reads a tensor. Raw files come back 1-D.
Tensor read_tensor(const std::string& path, TensorFormat format);

// Writes a tensor atomically. Raw files drop the shape; the caller has
// checked that the shape's element count equals data.size().
void write_tensor(const std::string& path, TensorFormat format, std::span<const uint64_t> shape,
                  std::span<const float> data);

// The complete .npy header (magic through the terminating newline) for a
// float32 C-order array of this shape, laid out as NumPy writes it: version
// 1.0 when the header fits, otherwise 2.0, padded to a multiple of 64 bytes.
std::vector<uint8_t> npy_header(std::span<const uint64_t> shape);

// The whole contents of a regular file.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// Replaces path with the concatenation of parts: writes a temporary file in
// the same directory, syncs it and renames it over path, so readers see the
// old file or the new one and never a partial write.
void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> parts);

// "(784, 500)", "(3,)" or "()": the Python spelling, for messages.
std::string shape_string(std::span<const uint64_t> shape);

// Product of the dimensions; nullopt on uint64 overflow.
std::optional<uint64_t> element_count(std::span<const uint64_t> shape);

}  // namespace terngrad::tools
