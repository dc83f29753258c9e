// Checkpoint files: writer, verifying reader, index and retention (checkpoint.h).
#include "terngrad/train/checkpoint.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "file_io.h"

namespace terngrad::train {

// Tensor payloads go to disk as they lie in memory; the format is
// little-endian, so a big-endian port would byteswap them here.
static_assert(std::endian::native == std::endian::little, "checkpoint payloads assume a little-endian host");

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'\x89', 'T', 'G', 'C', 'K', '\r', '\n', '\x1a'};
constexpr uint32_t kVersion = 1;
constexpr uint8_t kF32 = 1, kU8 = 2;
constexpr uint64_t kFixedHeader = 8 + 4 + 4 + 8 + 8;  // magic, version, count, length, step
constexpr uint64_t kMaxName = 4096;
constexpr const char* kIndexName = "checkpoint";

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t crc_update(uint32_t crc, const void* data, uint64_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib's crc32 takes a 32-bit length
    const uInt chunk = static_cast<uInt>(std::min<uint64_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

// Parses "ckpt-<step>.tgck"; -1 if the name is not a checkpoint's.
int64_t step_of(const std::string& name) {
  if (!name.starts_with("ckpt-") || !name.ends_with(".tgck")) return -1;
  const std::string digits = name.substr(5, name.size() - 5 - 5);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return std::stoll(digits);
}

// Checkpoint files in dir as (step, file name), highest step first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const int64_t s = step_of(name);
    if (s >= 0 && e.is_regular_file()) out.emplace_back(s, name);
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

void write_index(const std::string& dir, const std::string& latest, const std::vector<std::string>& kept) {
  std::string text = "model_checkpoint_path: \"" + latest + "\"\n";
  // Oldest first, as TensorFlow's CheckpointState lists them.
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) text += "all_model_checkpoint_paths: \"" + *it + "\"\n";
  detail::AtomicFile f(dir + "/" + kIndexName);
  f.write(text);
  f.commit();
}

// Reads from a checkpoint file with a byte budget, so a bad length field
// reports "truncated" instead of reading past the entries or allocating
// absurd amounts.
class Reader {
 public:
  Reader(std::FILE* f, std::string path, uint64_t budget) : f_(f), path_(std::move(path)), left_(budget) {}
  void read(void* dst, uint64_t n, const std::string& what) {
    if (n > left_)
      fail(what + " needs " + std::to_string(n) + " bytes but only " + std::to_string(left_) +
           " remain before the CRC (truncated or corrupt entry)");
    if (n && std::fread(dst, 1, n, f_) != n) detail::throw_errno(path_, "read failed in " + what);
    left_ -= n;
  }
  uint64_t u(int bytes, const std::string& what) {
    uint8_t b[8];
    read(b, bytes, what);
    return detail::get_le(b, bytes);
  }
  uint64_t left() const { return left_; }
  [[noreturn]] void fail(const std::string& msg) const { throw std::runtime_error(path_ + ": " + msg); }

 private:
  std::FILE* f_;
  std::string path_;
  uint64_t left_;
};

struct FileCloser {
  std::FILE* f;
  ~FileCloser() {
    if (f) std::fclose(f);
  }
};

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return dir + "/ckpt-" + std::to_string(step) + ".tgck";
}

std::string save_checkpoint(const std::string& dir, int64_t step, const TensorMap& tensors, const BlobMap& blobs,
                            int keep_last, const std::string& metadata) {
  const std::string path = checkpoint_path(dir, step);
  auto bad = [&](const std::string& msg) { throw std::invalid_argument("save_checkpoint(" + path + "): " + msg); };
  if (step < 0) bad("step " + std::to_string(step) + " is negative");
  if (keep_last < 0) bad("keep_last " + std::to_string(keep_last) + " is negative");
  if (metadata.size() > UINT32_MAX) bad("metadata of " + std::to_string(metadata.size()) + " bytes is too long");

  // Validate everything before creating any file.
  uint64_t total = kFixedHeader + 4 + metadata.size();
  auto check_name = [&](const std::string& name) {
    if (name.empty()) bad("an entry has an empty name");
    if (name.size() > kMaxName) bad("name '" + name.substr(0, 64) + "...' is longer than " + std::to_string(kMaxName));
  };
  for (const auto& [name, t] : tensors) {
    check_name(name);
    if (blobs.count(name)) bad("name '" + name + "' is both a tensor and a blob");
    if (t.shape.size() > 255) bad("tensor '" + name + "' has rank " + std::to_string(t.shape.size()));
    const int64_t n = detail::element_count(t.shape, "tensor '" + name + "'");
    if (static_cast<uint64_t>(n) != t.data.size())
      bad("tensor '" + name + "' has shape " + detail::format_shape(t.shape) + " (" + std::to_string(n) +
          " elements) but holds " + std::to_string(t.data.size()) + " values");
    total += 4 + name.size() + 4 + 8 * t.shape.size() + 8 + 4 * t.data.size();
  }
  for (const auto& [name, b] : blobs) {
    check_name(name);
    total += 4 + name.size() + 4 + 8 + 8 + b.size();
  }
  total += 4;  // CRC

  fs::create_directories(dir);
  {
    detail::AtomicFile f(path);
    uint32_t crc = crc_update(0, nullptr, 0);
    auto put = [&](const void* p, uint64_t n) {
      crc = crc_update(crc, p, n);
      f.write(p, n);
    };
    std::string h(kMagic, 8);
    detail::put_le(h, kVersion, 4);
    detail::put_le(h, tensors.size() + blobs.size(), 4);
    detail::put_le(h, total, 8);
    detail::put_le(h, static_cast<uint64_t>(step), 8);
    detail::put_le(h, metadata.size(), 4);
    h += metadata;
    put(h.data(), h.size());
    auto entry_head = [&](const std::string& name, uint8_t dtype, const Shape& shape, uint64_t bytes) {
      std::string e;
      detail::put_le(e, name.size(), 4);
      e += name;
      e.push_back(static_cast<char>(dtype));
      e.push_back(static_cast<char>(shape.size()));
      detail::put_le(e, 0, 2);
      for (int64_t d : shape) detail::put_le(e, static_cast<uint64_t>(d), 8);
      detail::put_le(e, bytes, 8);
      put(e.data(), e.size());
    };
    for (const auto& [name, t] : tensors) {
      entry_head(name, kF32, t.shape, 4 * t.data.size());
      put(t.data.data(), 4 * t.data.size());
    }
    for (const auto& [name, b] : blobs) {
      entry_head(name, kU8, {static_cast<int64_t>(b.size())}, b.size());
      put(b.data(), b.size());
    }
    std::string tail;
    detail::put_le(tail, crc, 4);
    f.write(tail);
    if (f.bytes_written() != total)
      throw std::logic_error(path + ": wrote " + std::to_string(f.bytes_written()) + " bytes, computed " +
                             std::to_string(total));
    f.commit();
  }

  // Retention: the file just written first, then the others by step. The
  // index is rewritten before anything is deleted, so it never names a
  // removed file.
  const std::string written = fs::path(path).filename().string();
  std::vector<std::string> ranked = {written};
  for (const auto& [s, name] : list_checkpoints(dir))
    if (name != written) ranked.push_back(name);
  const size_t keep = keep_last == 0 ? ranked.size() : std::min<size_t>(ranked.size(), keep_last);
  write_index(dir, written, std::vector<std::string>(ranked.begin(), ranked.begin() + keep));
  bool removed = false;
  for (size_t i = keep; i < ranked.size(); ++i) removed |= fs::remove(dir + "/" + ranked[i]);
  // Temporary files left by a crashed earlier save (ours are removed on error).
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if ((name.starts_with(".ckpt-") || name.starts_with(".checkpoint.")) && name.find(".tmp.") != std::string::npos)
      removed |= fs::remove(e.path());
  }
  if (removed) detail::fsync_dir(dir);
  return path;
}

Checkpoint load_checkpoint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) detail::throw_errno(path, "cannot open checkpoint");
  FileCloser closer{f};
  auto fail = [&](const std::string& msg) -> void { throw std::runtime_error(path + ": " + msg); };
  struct stat st {};
  if (::fstat(::fileno(f), &st) != 0) detail::throw_errno(path, "cannot stat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) fail("truncated: " + std::to_string(size) + " bytes, too short for the checkpoint magic");
  uint8_t head[kFixedHeader];
  const size_t got = std::fread(head, 1, std::min<uint64_t>(size, kFixedHeader), f);
  if (std::memcmp(head, kMagic, 8) != 0) {
    std::string found;
    for (int i = 0; i < 8; ++i) {
      char b[4];
      std::snprintf(b, sizeof b, "%02x", head[i]);
      found += b;
    }
    fail("bad magic " + found + ", expected 89 54 47 43 4b 0d 0a 1a (\\x89TGCK\\r\\n\\x1a): not a TernGrad checkpoint");
  }
  if (got < kFixedHeader)
    fail("truncated: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kFixedHeader) +
         "-byte header");
  const uint32_t version = static_cast<uint32_t>(detail::get_le(head + 8, 4));
  if (version != kVersion)
    fail("unsupported version " + std::to_string(version) + ", this build reads version " + std::to_string(kVersion));
  const uint32_t count = static_cast<uint32_t>(detail::get_le(head + 12, 4));
  const uint64_t length = detail::get_le(head + 16, 8);
  if (size < length)
    fail("truncated: " + std::to_string(size) + " bytes, the header says " + std::to_string(length));
  if (size > length)
    fail(std::to_string(size - length) + " trailing bytes after the " + std::to_string(length) +
         " the header says");
  if (length < kFixedHeader + 4 + 4) fail("declared length " + std::to_string(length) + " is too short");

  // Verify the CRC before interpreting any length field.
  uint32_t crc = crc_update(0, head, kFixedHeader);
  {
    std::vector<uint8_t> buf(1 << 20);
    uint64_t left = length - 4 - kFixedHeader;
    while (left > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      if (std::fread(buf.data(), 1, n, f) != n) detail::throw_errno(path, "read failed");
      crc = crc_update(crc, buf.data(), n);
      left -= n;
    }
    uint8_t tail[4];
    if (std::fread(tail, 1, 4, f) != 4) detail::throw_errno(path, "read failed");
    const uint32_t stored = static_cast<uint32_t>(detail::get_le(tail, 4));
    if (stored != crc)
      fail("CRC mismatch: stored " + hex32(stored) + ", computed " + hex32(crc) + " (the file is corrupt)");
  }

  if (std::fseek(f, static_cast<long>(kFixedHeader), SEEK_SET) != 0) detail::throw_errno(path, "seek failed");
  Reader r(f, path, length - 4 - kFixedHeader);
  Checkpoint ck;
  ck.path = path;
  ck.step = static_cast<int64_t>(detail::get_le(head + 24, 8));
  // Lengths are checked against the bytes left before anything is allocated:
  // a corrupt (or crafted) length is an error, not a 4 GiB allocation.
  const uint64_t metadata_len = r.u(4, "metadata length");
  if (metadata_len > r.left())
    r.fail("metadata length " + std::to_string(metadata_len) + " exceeds the " + std::to_string(r.left()) +
           " bytes left (truncated or corrupt header)");
  ck.metadata.resize(metadata_len);
  r.read(ck.metadata.data(), ck.metadata.size(), "metadata");
  for (uint32_t e = 0; e < count; ++e) {
    const std::string where = "entry " + std::to_string(e);
    const uint64_t name_len = r.u(4, where + " name length");
    if (name_len == 0 || name_len > kMaxName) r.fail(where + ": name length " + std::to_string(name_len));
    std::string name(name_len, '\0');
    r.read(name.data(), name_len, where + " name");
    const std::string what = where + " '" + name + "'";
    const uint8_t dtype = static_cast<uint8_t>(r.u(1, what + " dtype"));
    const uint8_t rank = static_cast<uint8_t>(r.u(1, what + " rank"));
    r.u(2, what + " padding");
    Shape shape(rank);
    for (auto& d : shape) {
      d = static_cast<int64_t>(r.u(8, what + " shape"));
      if (d < 0) r.fail(what + ": negative dimension in shape");
    }
    const uint64_t bytes = r.u(8, what + " byte length");
    if (bytes > r.left())
      r.fail(what + ": byte length " + std::to_string(bytes) + " exceeds the " + std::to_string(r.left()) +
             " bytes left (truncated or corrupt entry)");
    if (ck.tensors.count(name) || ck.blobs.count(name)) r.fail("duplicate name '" + name + "' (" + where + ")");
    if (dtype == kF32) {
      const int64_t n = detail::element_count(shape, path + ": " + what);
      // n is compared with bytes / 4, not 4 * n with bytes: 4 * n wraps for
      // n >= 2^62, and a wrapped product equal to bytes would allocate n floats.
      if (bytes % 4 != 0 || static_cast<uint64_t>(n) != bytes / 4)
        r.fail(what + ": shape " + detail::format_shape(shape) + " has " + std::to_string(n) +
               " float32 elements (4 bytes each), the entry holds " + std::to_string(bytes) + " bytes");
      Tensor t;
      t.shape = shape;
      t.data.resize(static_cast<size_t>(n));
      r.read(t.data.data(), bytes, what + " data");
      ck.tensors.emplace(name, std::move(t));
    } else if (dtype == kU8) {
      if (rank != 1 || static_cast<uint64_t>(shape[0]) != bytes)
        r.fail(what + ": blob shape " + detail::format_shape(shape) + " does not match its " + std::to_string(bytes) +
               " bytes");
      std::vector<uint8_t> b(bytes);
      r.read(b.data(), bytes, what + " data");
      ck.blobs.emplace(name, std::move(b));
    } else {
      r.fail(what + ": unknown dtype " + std::to_string(dtype) + " (1 = f32, 2 = u8 blob)");
    }
  }
  if (r.left() != 0) r.fail(std::to_string(r.left()) + " bytes after the last of " + std::to_string(count) + " entries");
  return ck;
}

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir) {
  if (!fs::is_directory(dir)) return std::nullopt;
  const std::string index = dir + "/" + kIndexName;
  if (fs::exists(index)) {
    std::ifstream in(index);
    if (!in) throw std::runtime_error(index + ": cannot open checkpoint index");
    std::string line;
    const std::string key = "model_checkpoint_path:";
    while (std::getline(in, line)) {
      if (!line.starts_with(key)) continue;
      const size_t a = line.find('"'), b = line.rfind('"');
      if (a == std::string::npos || b <= a + 1) throw std::runtime_error(index + ": malformed line '" + line + "'");
      const std::string name = line.substr(a + 1, b - a - 1);
      const std::string path = name.starts_with("/") ? name : dir + "/" + name;
      if (!fs::exists(path)) throw std::runtime_error(index + ": names " + path + ", which does not exist");
      return load_checkpoint(path);
    }
    throw std::runtime_error(index + ": no model_checkpoint_path line");
  }
  const auto found = list_checkpoints(dir);
  if (found.empty()) return std::nullopt;
  return load_checkpoint(dir + "/" + found.front().second);
}

std::optional<Checkpoint> load_newest_intact_checkpoint(
    const std::string& dir, const std::function<void(const std::string&)>& warn,
    const std::function<std::string(const Checkpoint&)>& why_unusable) {
  if (!fs::is_directory(dir)) return std::nullopt;
  // Candidates: what the index names first (it is the latest unless a crash
  // came between a checkpoint's rename and the index's), then every
  // checkpoint file, newest first.
  std::vector<std::string> candidates;
  std::vector<std::string> skipped;
  auto skip = [&](const std::string& why) {
    skipped.push_back(why);
    warn(why);
  };
  const std::string index = dir + "/" + kIndexName;
  if (fs::exists(index)) {
    std::ifstream in(index);
    std::string line, named;
    const std::string key = "model_checkpoint_path:";
    while (in && std::getline(in, line)) {
      if (!line.starts_with(key)) continue;
      const size_t a = line.find('"'), b = line.rfind('"');
      if (a != std::string::npos && b > a + 1) named = line.substr(a + 1, b - a - 1);
      break;
    }
    if (named.empty()) skip(index + ": unreadable or names no checkpoint");
    else candidates.push_back(named.starts_with("/") ? named : dir + "/" + named);
  }
  for (const auto& [step, name] : list_checkpoints(dir)) {
    const std::string path = dir + "/" + name;
    if (std::find(candidates.begin(), candidates.end(), path) == candidates.end()) candidates.push_back(path);
  }
  std::optional<Checkpoint> newest_intact;  // kept only while why_unusable passes over them
  for (const std::string& path : candidates) {
    if (!fs::exists(path)) {
      skip(index + " names " + path + ", which does not exist");
      continue;
    }
    std::optional<Checkpoint> ck;
    try {
      ck = load_checkpoint(path);
    } catch (const std::exception& e) {  // the loader's message names the file and what is wrong
      skip(std::string("corrupt checkpoint ") + e.what());
      continue;
    }
    const std::string why = why_unusable ? why_unusable(*ck) : std::string();
    if (why.empty()) return ck;
    warn(path + ": " + why);
    if (!newest_intact) newest_intact = std::move(ck);
  }
  if (newest_intact) return newest_intact;
  if (skipped.empty()) return std::nullopt;  // no checkpoint yet
  std::string all;
  for (const auto& why : skipped) all += (all.empty() ? "" : "; ") + why;
  throw std::runtime_error("no intact checkpoint in " + dir + ": " + all);
}

void restore_params(ParamSet& params, const TensorMap& tensors, bool allow_extra) {
  std::vector<std::string> missing, mismatched, extra;
  std::map<std::string, bool> is_param;
  for (const Param& p : params.params) {
    is_param[p.name] = true;
    auto it = tensors.find(p.name);
    if (it == tensors.end()) {
      missing.push_back(p.name);
    } else if (it->second.shape != p.value.shape || it->second.data.size() != p.value.data.size()) {
      mismatched.push_back(p.name + " (model " + detail::format_shape(p.value.shape) + ", checkpoint " +
                           detail::format_shape(it->second.shape) + ")");
    }
  }
  if (!allow_extra)
    for (const auto& [name, t] : tensors)
      if (!is_param.count(name)) extra.push_back(name);
  if (!missing.empty() || !mismatched.empty() || !extra.empty()) {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return s;
    };
    std::string msg = "checkpoint does not match the model's parameters:";
    if (!missing.empty()) msg += " missing [" + list(missing) + "];";
    if (!mismatched.empty()) msg += " shape mismatch [" + list(mismatched) + "];";
    if (!extra.empty()) msg += " not in the model [" + list(extra) + "];";
    msg.pop_back();
    throw std::runtime_error(msg);
  }
  for (Param& p : params.params) p.value.data = tensors.at(p.name).data;
}

void restore_state(StateSet& state, const TensorMap& tensors) {
  std::string missing, mismatched;
  for (const StateVar& v : state.vars) {
    auto it = tensors.find(v.name);
    if (it == tensors.end())
      missing += (missing.empty() ? "" : ", ") + v.name;
    else if (it->second.shape != v.value.shape || it->second.data.size() != v.value.data.size())
      mismatched += (mismatched.empty() ? "" : ", ") + v.name + " (model " + detail::format_shape(v.value.shape) +
                    ", checkpoint " + detail::format_shape(it->second.shape) + ")";
  }
  if (!missing.empty() || !mismatched.empty()) {
    std::string msg = "checkpoint does not match the model's state (batch norm moving statistics):";
    if (!missing.empty()) msg += " missing [" + missing + "];";
    if (!mismatched.empty()) msg += " shape mismatch [" + mismatched + "];";
    msg.pop_back();
    throw std::runtime_error(msg);
  }
  for (StateVar& v : state.vars) v.value.data = tensors.at(v.name).data;
}

std::vector<uint8_t> pack_int64s(const std::vector<int64_t>& values) {
  std::string s;
  for (int64_t v : values) detail::put_le(s, static_cast<uint64_t>(v), 8);
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::vector<int64_t> unpack_int64s(const std::vector<uint8_t>& blob, const std::string& what) {
  if (blob.size() % 8 != 0)
    throw std::runtime_error(what + ": " + std::to_string(blob.size()) + " bytes is not a whole number of int64 values");
  std::vector<int64_t> v(blob.size() / 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(detail::get_le(blob.data() + 8 * i, 8));
  return v;
}

}  // namespace terngrad::train
