// Writing a whole file so that readers never see half of it: the bytes land
// in a temporary file in the target's directory, are flushed and fsync'ed,
// and only then renamed over the target, after which the directory itself is
// fsync'ed. A reader (or a run resumed after a crash or power loss) therefore
// sees either the previous file or the complete new one, never a torn one.
// Checkpoints, exports, results and timelines are all written this way.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace terngrad::base {

// Throws std::runtime_error("<path>: <what>: <strerror(errno)>").
[[noreturn]] void throw_errno(const std::string& path, const std::string& what);

// Makes a rename or unlink in `dir` durable.
void fsync_dir(const std::string& dir);

// The directory part of a path ("." when there is none).
std::string parent_dir(const std::string& path);

class AtomicFile {
 public:
  // Opens "<dir>/.<name>.tmp.<pid>.<n>" next to `path` (same file system, so
  // the final rename is atomic). Throws std::invalid_argument when path names
  // a directory, std::runtime_error (naming the file) when it cannot be created.
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

// The whole file at once. Throws std::runtime_error naming the path and the
// failing step; the target is then unchanged.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace terngrad::base
