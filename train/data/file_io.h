// File helpers shared by the loaders and writers of train/data (internal).
//
// Everything the trainer writes goes through AtomicFile: the bytes land in a
// temporary file in the target's directory, are flushed and fsync'ed, and only
// then renamed over the target, after which the directory itself is fsync'ed.
// A reader (or a run resumed after a crash or power loss) therefore sees
// either the previous file or the complete new one, never a torn one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "terngrad/train/tensor.h"

namespace terngrad::train::detail {

// Throws std::runtime_error("<path>: <what>: <strerror(errno)>").
[[noreturn]] void throw_errno(const std::string& path, const std::string& what);

class AtomicFile {
 public:
  // Opens "<dir>/.<name>.tmp.<pid>.<n>" next to `path` (same file system, so
  // the final rename is atomic).
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // not committed: closes and removes the temporary file
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  // fflush + fsync + close, rename over the target, fsync the directory.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Makes a rename or unlink in `dir` durable.
void fsync_dir(const std::string& dir);

// The directory part of a path ("." when there is none).
std::string parent_dir(const std::string& path);

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
