// File helpers shared by the loaders and writers of train/data (internal).
//
// Everything the trainer writes goes through AtomicFile
// (terngrad/base/atomic_file.h): a reader sees either the previous file or
// the complete new one, never a torn one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "terngrad/base/atomic_file.h"
#include "terngrad/train/tensor.h"

namespace terngrad::train::detail {

// Shared with every layer (terngrad/base/atomic_file.h).
using base::AtomicFile;
using base::fsync_dir;
using base::parent_dir;
using base::throw_errno;

// Whole file into memory; errors name the path.
std::vector<uint8_t> read_file(const std::string& path);

// Product of the dimensions; throws std::invalid_argument naming `what` when a
// dimension is negative or the product overflows. (The layers library owns
// numel(); this library does not link it.)
int64_t element_count(const Shape& shape, const std::string& what);
std::string format_shape(const Shape& shape);  // "[64, 28, 28, 1]"

// A Tensor of the given shape, zero-filled, without Tensor(Shape) (see above).
Tensor make_tensor(const Shape& shape, const std::string& what);

// Little-endian fixed-width integers (file formats are little-endian
// whatever the host; tensor payloads are copied as-is, see checkpoint.cpp).
inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
inline uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace terngrad::train::detail
