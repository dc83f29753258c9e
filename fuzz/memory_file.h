// A file that lives in memory (memfd), for readers that only take a path:
// each fuzz run rewrites it and hands the reader "/proc/self/fd/<n>".
// Nothing touches the disk, and runs of one process never see each other's
// leftovers because every write replaces the whole contents.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace terngrad::fuzz {

class MemoryFile {
 public:
  explicit MemoryFile(const char* name);
  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the contents with bytes; aborts if the kernel refuses (a
  // harness failure, not a finding).
  void write(std::span<const uint8_t> bytes);
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace terngrad::fuzz
