// TFRecord framing: writer and random-access reader (tfrecord.h).
#include "terngrad/train/tfrecord.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "file_io.h"
#include "terngrad/train/crc32c.h"

namespace terngrad::train {
namespace {

uint32_t masked_crc(const void* p, size_t n) { return mask_crc32c(crc32c(p, n)); }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

// Reads exactly n bytes at offset; returns how many were there (short at EOF).
size_t pread_full(int fd, void* buf, size_t n, uint64_t offset, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(buf) + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      detail::throw_errno(path, "read");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

std::string where_at(const std::string& path, int64_t record, uint64_t offset) {
  return path + ": record " + std::to_string(record) + " (offset " + std::to_string(offset) + ")";
}

}  // namespace

std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + kTfRecordHeaderBytes + kTfRecordFooterBytes);
  detail::put_le(out, data.size(), 8);
  detail::put_le(out, masked_crc(out.data(), 8), 4);
  out.append(data);
  detail::put_le(out, masked_crc(data.data(), data.size()), 4);
  return out;
}

// ---- Writer ----------------------------------------------------------------

struct TfRecordWriter::Impl {
  explicit Impl(const std::string& path) : file(path) {}
  detail::AtomicFile file;
};

TfRecordWriter::TfRecordWriter(const std::string& path) : impl_(std::make_unique<Impl>(path)) {}
TfRecordWriter::~TfRecordWriter() = default;

void TfRecordWriter::write(std::string_view record) {
  impl_->file.write(frame_tfrecord(record));
  ++records_;
}

void TfRecordWriter::commit() { impl_->file.commit(); }

// ---- Reader ----------------------------------------------------------------

namespace {

// A reader keeps every shard open (pread from many threads): ImageNet's 1024
// train + 128 validation shards pass the common soft limit of 1024 open
// files. Raises the soft limit to the hard one; false when it already was.
bool raise_open_file_limit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return false;
  lim.rlim_cur = lim.rlim_max;
  return ::setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

}  // namespace

TfRecordFile::TfRecordFile(std::string path, bool skip_corrupt) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0 && errno == EMFILE && raise_open_file_limit()) fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    throw DataError(path_ + ": cannot open TFRecord file: " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    throw DataError(path_ + ": cannot stat TFRecord file: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw DataError(path_ + ": not a regular file");
  }
  file_size_ = static_cast<uint64_t>(st.st_size);

  // Header-only scan; in skip mode a fault is stepped over by resync().
  uint64_t offset = 0;
  for (int64_t record = 0; offset < file_size_; ++record) {
    std::string fault;
    uint8_t header[kTfRecordHeaderBytes];
    const uint64_t left = file_size_ - offset;
    if (left < kTfRecordHeaderBytes) {
      fault = "truncated header: " + std::to_string(left) + " bytes left in the file, a header is " +
              std::to_string(kTfRecordHeaderBytes);
    } else if (pread_full(fd_, header, kTfRecordHeaderBytes, offset, path_) != kTfRecordHeaderBytes) {
      fault = "truncated header: the file shrank while it was read";
    } else {
      const uint64_t length = detail::get_le(header, 8);
      const uint32_t stored = static_cast<uint32_t>(detail::get_le(header + 8, 4));
      const uint32_t computed = masked_crc(header, 8);
      const uint64_t room = left - kTfRecordHeaderBytes;
      if (stored != computed) {
        fault = "bad length CRC: stored " + hex32(stored) + ", computed " + hex32(computed) + " over length " +
                std::to_string(length);
      } else if (room < kTfRecordFooterBytes || length > room - kTfRecordFooterBytes) {
        // Checked before anything is allocated: the length is only a claim.
        fault = "truncated data: the record claims " + std::to_string(length) + " data bytes + " +
                std::to_string(kTfRecordFooterBytes) + " CRC bytes, " + std::to_string(room) +
                " bytes are left in the file";
      } else {
        spans_.push_back({offset, length});
        offset += kTfRecordHeaderBytes + length + kTfRecordFooterBytes;
        continue;
      }
    }
    const std::string msg = where_at(path_, record, offset) + ": " + fault;
    if (!skip_corrupt) {
      ::close(fd_);
      fd_ = -1;
      throw DataError(msg);
    }
    const uint64_t next = resync(offset + 1);
    ++damaged_regions_;
    damaged_bytes_ += next - offset;
    if (fault_.empty()) fault_ = msg;
    offset = next;
    --record;  // the damaged bytes are not a record
  }
}

uint64_t TfRecordFile::resync(uint64_t from) const {
  // Chunks overlap by a header so that every candidate position is seen whole.
  constexpr size_t kChunk = 1 << 16;
  std::vector<uint8_t> buf(kChunk + kTfRecordHeaderBytes);
  for (uint64_t base = from; base + kTfRecordHeaderBytes <= file_size_; base += kChunk) {
    const size_t got = pread_full(fd_, buf.data(), buf.size(), base, path_);
    for (size_t p = 0; p < kChunk && p + kTfRecordHeaderBytes <= got; ++p) {
      const uint8_t* h = buf.data() + p;
      if (static_cast<uint32_t>(detail::get_le(h + 8, 4)) != masked_crc(h, 8)) continue;
      const uint64_t at = base + p, length = detail::get_le(h, 8);
      const uint64_t room = file_size_ - at - kTfRecordHeaderBytes;
      if (room < kTfRecordFooterBytes || length > room - kTfRecordFooterBytes) continue;
      // Bounded by the file's size (checked just above).
      std::vector<uint8_t> data(static_cast<size_t>(length) + kTfRecordFooterBytes);
      if (pread_full(fd_, data.data(), data.size(), at + kTfRecordHeaderBytes, path_) != data.size()) continue;
      if (static_cast<uint32_t>(detail::get_le(data.data() + length, 4)) == masked_crc(data.data(), static_cast<size_t>(length)))
        return at;
    }
  }
  return file_size_;
}

TfRecordFile::~TfRecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

TfRecordFile::TfRecordFile(TfRecordFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      file_size_(o.file_size_),
      spans_(std::move(o.spans_)),
      damaged_regions_(o.damaged_regions_),
      damaged_bytes_(o.damaged_bytes_),
      fault_(std::move(o.fault_)) {}

TfRecordFile& TfRecordFile::operator=(TfRecordFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    file_size_ = o.file_size_;
    spans_ = std::move(o.spans_);
    damaged_regions_ = o.damaged_regions_;
    damaged_bytes_ = o.damaged_bytes_;
    fault_ = std::move(o.fault_);
  }
  return *this;
}

std::string TfRecordFile::where(int64_t i) const {
  return where_at(path_, i, i >= 0 && i < size() ? spans_[static_cast<size_t>(i)].offset : 0);
}

std::string TfRecordFile::read(int64_t i) const {
  if (i < 0 || i >= size())
    throw std::out_of_range(path_ + ": record " + std::to_string(i) + " is outside [0, " + std::to_string(size()) + ")");
  const TfRecordSpan& s = spans_[static_cast<size_t>(i)];
  // The length was checked against the file's size at indexing, so this
  // allocation is bounded by the file.
  std::string data(static_cast<size_t>(s.length) + kTfRecordFooterBytes, '\0');
  const size_t got = pread_full(fd_, data.data(), data.size(), s.offset + kTfRecordHeaderBytes, path_);
  if (got != data.size())
    throw DataError(where(i) + ": truncated data: " + std::to_string(got) + " of " + std::to_string(data.size()) +
                    " bytes could be read (the file shrank after it was indexed)");
  const uint32_t stored = static_cast<uint32_t>(detail::get_le(reinterpret_cast<const uint8_t*>(data.data()) + s.length, 4));
  const uint32_t computed = masked_crc(data.data(), static_cast<size_t>(s.length));
  if (stored != computed)
    throw DataError(where(i) + ": bad data CRC: stored " + hex32(stored) + ", computed " + hex32(computed) + " over " +
                    std::to_string(s.length) + " bytes");
  data.resize(static_cast<size_t>(s.length));
  return data;
}

}  // namespace terngrad::train
