// MNIST / Fashion-MNIST IDX loader.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "terngrad/train/datasets.h"

namespace terngrad::train {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr int kNumClasses = 10;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

[[noreturn]] void fail(const std::string& path, const std::string& msg) { throw std::runtime_error(path + ": " + msg); }

// A gzip or plain file read through zlib (gzread passes plain files through).
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
    gzbuffer(f_, 1 << 18);
  }
  ~GzReader() { gzclose(f_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at end of data. Decompression errors
  // (corrupt or truncated gzip stream) throw.
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(f_, static_cast<char*>(dst) + got, chunk);
      if (r < 0) check();
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    check();
    return got;
  }

 private:
  void check() {
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    // Z_BUF_ERROR is zlib's "unexpected end of file" inside a gzip stream.
    if (err != Z_OK) fail(path_, std::string("gzip data is corrupt or truncated: ") + msg);
  }
  std::string path_;
  gzFile f_;
};

struct IdxFile {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
};

// Reads and checks header, exact length and dims of one IDX file.
IdxFile read_idx(const std::string& path, uint32_t magic, const char* kind) {
  GzReader in(path);
  const size_t ndims = magic & 0xFF;
  uint8_t head[4 + 4 * 3];
  const size_t head_bytes = 4 + 4 * ndims;
  const size_t got_head = in.read(head, 4);
  if (got_head < 4) fail(path, "truncated: " + std::to_string(got_head) + " bytes, too short for an IDX magic number");
  const uint32_t found = (uint32_t{head[0]} << 24) | (uint32_t{head[1]} << 16) | (uint32_t{head[2]} << 8) | head[3];
  if (found != magic)
    fail(path, "bad magic " + hex32(found) + ", expected " + hex32(magic) + " (IDX " + kind + ": unsigned byte, " +
                   std::to_string(ndims) + " dimension" + (ndims > 1 ? "s" : "") + ")");
  const size_t got_dims = in.read(head + 4, head_bytes - 4);
  if (got_dims < head_bytes - 4)
    fail(path, "truncated: header ends after " + std::to_string(4 + got_dims) + " bytes, expected " +
                   std::to_string(head_bytes));
  IdxFile f;
  uint64_t payload = 1;
  for (size_t i = 0; i < ndims; ++i) {
    const uint8_t* p = head + 4 + 4 * i;
    const uint32_t d = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    if (i > 0 && d == 0) fail(path, "dimension " + std::to_string(i) + " is 0");
    if (d > (1u << 30)) fail(path, "dimension " + std::to_string(i) + " is " + std::to_string(d) + ", implausibly large");
    f.dims.push_back(d);
    payload *= d;
  }
  if (payload > (uint64_t{1} << 36))
    fail(path, "header implies " + std::to_string(payload) + " data bytes, implausibly large");
  // Grow as data arrives rather than trusting the header with one huge
  // allocation: a corrupt count then fails as "truncated", not bad_alloc.
  // Reading through a fixed buffer (not resizing the vector to the next
  // chunk and reading into it) also means a short file with a large header
  // costs its own size, not 16 MiB of zero-filling per call (fuzz/fuzz_idx
  // ran at 200 files/s before).
  f.data.reserve(static_cast<size_t>(std::min<uint64_t>(payload, uint64_t{64} << 20)));
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min<uint64_t>(payload, uint64_t{1} << 20)));
  size_t have = 0;
  while (have < payload) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(payload - have, chunk.size()));
    const size_t got = in.read(chunk.data(), want);
    f.data.insert(f.data.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(got));
    have += got;
    if (got < want) break;
  }
  std::string shape;
  for (size_t i = 0; i < ndims; ++i) shape += (i ? " x " : "") + std::to_string(f.dims[i]);
  if (have < payload)
    fail(path, "truncated: header (" + shape + ") implies " + std::to_string(head_bytes + payload) +
                   " bytes, the file holds " + std::to_string(head_bytes + have) + (path.ends_with(".gz") ? " (decompressed)" : ""));
  uint8_t extra[4096];
  size_t trailing = 0, got;
  while ((got = in.read(extra, sizeof extra)) > 0) trailing += got;
  if (trailing > 0)
    fail(path, std::to_string(trailing) + " trailing bytes after the " + std::to_string(head_bytes + payload) +
                   " bytes the header (" + shape + ") implies");
  return f;
}

}  // namespace

Dataset load_idx(const std::string& images_path, const std::string& labels_path) {
  IdxFile im = read_idx(images_path, kImagesMagic, "images");
  IdxFile lb = read_idx(labels_path, kLabelsMagic, "labels");
  if (im.dims[0] != lb.dims[0])
    throw std::runtime_error("count mismatch: images file " + images_path + " holds " + std::to_string(im.dims[0]) +
                             " images but labels file " + labels_path + " holds " + std::to_string(lb.dims[0]) +
                             " labels");
  Dataset d;
  d.count = im.dims[0];
  d.height = im.dims[1];
  d.width = im.dims[2];
  d.channels = 1;
  d.num_classes = kNumClasses;
  d.images = std::move(im.data);
  d.labels.resize(lb.data.size());
  for (size_t i = 0; i < lb.data.size(); ++i) {
    if (lb.data[i] >= kNumClasses)
      fail(labels_path, "label " + std::to_string(lb.data[i]) + " at index " + std::to_string(i) +
                            " is out of range [0, " + std::to_string(kNumClasses) + ")");
    d.labels[i] = lb.data[i];
  }
  d.source = images_path;
  return d;
}

Dataset load_idx_dir(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto pick = [](const std::string& base) {
    if (std::filesystem::exists(base + ".gz")) return base + ".gz";
    if (std::filesystem::exists(base)) return base;
    throw std::runtime_error("missing IDX file: neither " + base + ".gz nor " + base + " exists");
  };
  const std::string images = pick(prefix + "-images-idx3-ubyte");  // images first: errors name them first
  const std::string labels = pick(prefix + "-labels-idx1-ubyte");
  return load_idx(images, labels);
}

}  // namespace terngrad::train
