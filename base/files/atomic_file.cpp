// Whole files written atomically (terngrad/base/atomic_file.h).
#include "terngrad/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace terngrad::base {

void throw_errno(const std::string& path, const std::string& what) {
  const int e = errno;
  throw std::runtime_error(path + ": " + what + ": " + std::strerror(e));
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

namespace {
std::atomic<uint64_t> temp_counter{0};
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const size_t slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  if (name.empty()) throw std::invalid_argument("cannot write '" + path_ + "': it names a directory, not a file");
  // Hidden and unique per process and call, so concurrent writers and a
  // crashed earlier run never collide with this temporary file.
  tmp_ = dir + "." + name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter++);
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw_errno(tmp_, "cannot create temporary file for " + path_);
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (f_) std::fclose(f_);
  std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (committed_) throw std::logic_error(path_ + ": write after commit");
  if (n == 0) return;
  if (std::fwrite(data, 1, n, f_) != n) throw_errno(tmp_, "write failed after " + std::to_string(written_) + " bytes");
  written_ += n;
}

void AtomicFile::commit() {
  if (committed_) throw std::logic_error(path_ + ": committed twice");
  if (std::fflush(f_) != 0) throw_errno(tmp_, "flush failed");
  if (::fsync(::fileno(f_)) != 0) throw_errno(tmp_, "fsync failed");
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) throw_errno(tmp_, "close failed");
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) throw_errno(path_, "cannot rename " + tmp_ + " over it");
  committed_ = true;
  fsync_dir(parent_dir(path_));
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw_errno(dir, "cannot open directory to fsync it");
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories; that is no reason
  // to fail a write whose data is already durable.
  if (rc != 0 && e != EINVAL && e != ENOTSUP) {
    errno = e;
    throw_errno(dir, "fsync of directory failed");
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace terngrad::base
