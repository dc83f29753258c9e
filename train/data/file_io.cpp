#include "file_io.h"

#include <sys/stat.h>

#include <limits>
#include <stdexcept>

namespace terngrad::train::detail {

std::vector<uint8_t> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw_errno(path, "cannot open");
  std::vector<uint8_t> out;
  struct stat st {};
  if (::fstat(::fileno(f), &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw_errno(path, "read failed after " + std::to_string(out.size()) + " bytes");
  return out;
}

int64_t element_count(const Shape& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument(what + ": shape " + format_shape(shape) + " has a negative dimension");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw std::invalid_argument(what + ": shape " + format_shape(shape) + " has too many elements");
    n *= d;
  }
  return n;
}

std::string format_shape(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor make_tensor(const Shape& shape, const std::string& what) {
  Tensor t;
  t.shape = shape;
  t.data.assign(static_cast<size_t>(element_count(shape, what)), 0.0f);
  return t;
}

}  // namespace terngrad::train::detail
