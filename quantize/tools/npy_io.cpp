// .npy and raw float32 reading/writing for tg-codec. The .npy layout is the
// one NumPy documents (numpy.lib.format): 6-byte magic "\x93NUMPY", major
// and minor version bytes, a little-endian header length (2 bytes in 1.0,
// 4 bytes in 2.0 and 3.0), then a Python dict literal with the keys 'descr',
// 'fortran_order' and 'shape', padded with spaces and ended by '\n'.
#include "npy_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <utility>

namespace terngrad::tools {
namespace {

// Raw files and '<f4' data are copied straight into float arrays; a
// big-endian host would need byte swaps that nothing here performs.
static_assert(std::endian::native == std::endian::little,
              "tg-codec reads little-endian float32 files by memcpy");

constexpr uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kNpyAlign = 64;  // NumPy aligns the data start to 64 bytes

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw std::runtime_error(path + ": " + problem);
}

std::string errno_text(int err) { return std::strerror(err); }

// An open file descriptor that closes itself; reads fail loudly.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path_, "cannot open: " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      fail(path_, "cannot stat: " + errno_text(err));
    }
    // Sizes are checked against headers before anything is allocated, so
    // the size must be known up front: pipes and directories are refused.
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail(path_, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { ::close(fd_); }

  uint64_t size() const { return size_; }

  // Reads exactly n bytes; a short read means the file changed under us.
  void read_exact(void* dst, size_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      const ssize_t got = ::read(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (got < 0) {
        if (errno == EINTR) continue;
        fail(path_, "read error: " + errno_text(errno));
      }
      if (got == 0) fail(path_, "file ended early (was it truncated while being read?)");
      p += got;
      n -= static_cast<size_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A value of the Python literal subset .npy headers use.
struct PyValue {
  enum class Kind { kString, kBool, kInt, kNone, kTuple, kList };
  Kind kind = Kind::kNone;
  std::string text;  // string contents, or the source spelling of other kinds
  bool boolean = false;
  int64_t integer = 0;
  std::vector<PyValue> items;
};

// Recursive-descent parser for the header dict. NumPy itself uses
// ast.literal_eval; this accepts the same forms NumPy has ever written
// (including Python 2's "3L" integers) and rejects everything else.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), s_(text) {}

  std::vector<std::pair<std::string, PyValue>> parse_dict() {
    std::vector<std::pair<std::string, PyValue>> entries;
    skip_space();
    expect('{');
    skip_space();
    while (peek() != '}') {
      PyValue key = parse_value();
      if (key.kind != PyValue::Kind::kString) bad("dictionary key is not a string");
      skip_space();
      expect(':');
      PyValue value = parse_value();
      entries.emplace_back(key.text, std::move(value));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        bad("expected ',' or '}'");
      }
    }
    ++pos_;
    skip_space();
    if (pos_ != s_.size()) bad("unexpected text after the dictionary");
    return entries;
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    fail(path_, "malformed .npy header (" + what + " at offset " + std::to_string(pos_) +
                    " of the header text)");
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }

  PyValue parse_value() {
    skip_space();
    const char c = peek();
    if (c == '\'' || c == '"') return parse_string();
    if (c == '(' || c == '[') return parse_sequence();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return parse_int();
    if (std::isalpha(static_cast<unsigned char>(c))) return parse_word();
    if (c == '\0') bad("header text ends early");
    bad(std::string("unexpected character '") + c + "'");
  }

  PyValue parse_string() {
    const char quote = s_[pos_++];
    PyValue v;
    v.kind = PyValue::Kind::kString;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;  // dtype strings never need more
      v.text += s_[pos_++];
    }
    if (pos_ >= s_.size()) bad("unterminated string");
    ++pos_;
    return v;
  }

  PyValue parse_sequence() {
    // Each level is a C++ call: without a limit, a header of 100k '[' (a
    // version 2.0 header may hold 4 GiB) overflows the stack.
    if (++depth_ > kMaxDepth) bad("tuples and lists nested deeper than " + std::to_string(kMaxDepth) + " levels");
    const char open = s_[pos_++];
    const char close = open == '(' ? ')' : ']';
    PyValue v;
    v.kind = open == '(' ? PyValue::Kind::kTuple : PyValue::Kind::kList;
    skip_space();
    while (peek() != close) {
      v.items.push_back(parse_value());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != close) {
        bad(std::string("expected ',' or '") + close + "'");
      }
    }
    ++pos_;
    --depth_;
    return v;
  }

  PyValue parse_int() {
    const size_t start = pos_;
    bool negative = false;
    if (peek() == '-') {
      negative = true;
      ++pos_;
    }
    if (!std::isdigit(static_cast<unsigned char>(peek()))) bad("expected a digit");
    uint64_t magnitude = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      const uint64_t digit = static_cast<uint64_t>(s_[pos_++] - '0');
      if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) bad("integer too large");
      magnitude = magnitude * 10 + digit;
    }
    if (peek() == 'L' || peek() == 'l') ++pos_;  // Python 2 long suffix
    if (magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad("integer too large");
    PyValue v;
    v.kind = PyValue::Kind::kInt;
    v.text = std::string(s_.substr(start, pos_ - start));
    v.integer = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    return v;
  }

  PyValue parse_word() {
    const size_t start = pos_;
    while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_') ++pos_;
    const std::string_view word = s_.substr(start, pos_ - start);
    PyValue v;
    v.text = std::string(word);
    if (word == "True" || word == "False") {
      v.kind = PyValue::Kind::kBool;
      v.boolean = word == "True";
    } else if (word == "None") {
      v.kind = PyValue::Kind::kNone;
    } else {
      pos_ = start;
      bad("unexpected word '" + std::string(word) + "'");
    }
    return v;
  }

  // NumPy's headers nest one level (the shape); structured dtypes, which are
  // refused anyway, a few more.
  static constexpr int kMaxDepth = 32;

  const std::string& path_;
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// Python spelling of a parsed value, for error messages.
std::string py_repr(const PyValue& v) {
  switch (v.kind) {
    case PyValue::Kind::kString:
      return "'" + v.text + "'";
    case PyValue::Kind::kTuple:
    case PyValue::Kind::kList: {
      std::string out = v.kind == PyValue::Kind::kTuple ? "(" : "[";
      for (size_t i = 0; i < v.items.size(); ++i) out += (i ? ", " : "") + py_repr(v.items[i]);
      if (v.kind == PyValue::Kind::kTuple && v.items.size() == 1) out += ",";
      return out + (v.kind == PyValue::Kind::kTuple ? ")" : "]");
    }
    default:
      return v.text;
  }
}

// Explains a dtype other than '<f4' and how to get float32 from NumPy.
[[noreturn]] void unsupported_dtype(const std::string& path, const PyValue& descr) {
  std::string found;
  if (descr.kind == PyValue::Kind::kString)
    found = "dtype '" + descr.text + "'";
  else
    found = "structured dtype " + py_repr(descr);
  std::string hint = "convert with arr.astype(np.float32)";
  if (descr.kind == PyValue::Kind::kString && descr.text == ">f4")
    hint = "it is big-endian float32; convert with arr.astype('<f4')";
  fail(path, found + " is not supported: tg-codec reads float32 little-endian ('<f4'); " + hint);
}

// Validates the parsed dict and returns the shape.
std::vector<uint64_t> check_header_dict(const std::string& path,
                                        const std::vector<std::pair<std::string, PyValue>>& dict) {
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (const auto& [key, value] : dict) {
    const PyValue** slot = key == "descr"           ? &descr
                           : key == "fortran_order" ? &fortran
                           : key == "shape"         ? &shape
                                                    : nullptr;
    if (slot == nullptr) fail(path, "malformed .npy header: unexpected key '" + key + "'");
    if (*slot != nullptr) fail(path, "malformed .npy header: key '" + key + "' appears twice");
    *slot = &value;
  }
  if (!descr || !fortran || !shape) {
    const char* missing = !descr ? "descr" : !fortran ? "fortran_order" : "shape";
    fail(path, std::string("malformed .npy header: no '") + missing + "' key");
  }
  if (descr->kind != PyValue::Kind::kString || descr->text != "<f4") unsupported_dtype(path, *descr);
  if (fortran->kind != PyValue::Kind::kBool)
    fail(path, "malformed .npy header: 'fortran_order' is " + py_repr(*fortran) +
                   ", expected True or False");
  if (fortran->boolean)
    fail(path,
         "fortran_order is True (column-major data) and is not supported; "
         "save a C-ordered array, e.g. np.save(path, np.ascontiguousarray(arr))");
  if (shape->kind != PyValue::Kind::kTuple)
    fail(path, "malformed .npy header: 'shape' is " + py_repr(*shape) + ", expected a tuple");
  std::vector<uint64_t> dims;
  for (const PyValue& d : shape->items) {
    if (d.kind != PyValue::Kind::kInt || d.integer < 0)
      fail(path, "malformed .npy header: shape " + py_repr(*shape) +
                     " has an entry that is not a non-negative integer");
    dims.push_back(static_cast<uint64_t>(d.integer));
  }
  return dims;
}

Tensor read_npy(const std::string& path) {
  InputFile file(path);
  const uint64_t file_size = file.size();
  uint8_t preamble[8];
  const size_t have = static_cast<size_t>(std::min<uint64_t>(file_size, sizeof preamble));
  file.read_exact(preamble, have);
  if (have < sizeof kNpyMagic || std::memcmp(preamble, kNpyMagic, sizeof kNpyMagic) != 0)
    fail(path, "not a .npy file (bad magic: the file must start with \\x93NUMPY); "
               "use --format raw for headerless float32 data");
  if (have < 8) fail(path, "truncated .npy header (file is " + std::to_string(file_size) + " bytes)");
  const int major = preamble[6];
  const int minor = preamble[7];
  if (minor != 0 || major < 1 || major > 3)
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  // Version 1.0 stores the header length in 2 bytes, 2.0 and 3.0 in 4
  // (3.0 only differs by allowing UTF-8 in the header text).
  const size_t len_bytes = major == 1 ? 2 : 4;
  uint8_t len_buf[4] = {0, 0, 0, 0};
  if (file_size < 8 + len_bytes)
    fail(path, "truncated .npy header (file is " + std::to_string(file_size) + " bytes)");
  file.read_exact(len_buf, len_bytes);
  const uint64_t header_len = uint64_t{len_buf[0]} | uint64_t{len_buf[1]} << 8 |
                              uint64_t{len_buf[2]} << 16 | uint64_t{len_buf[3]} << 24;
  const uint64_t data_offset = 8 + len_bytes + header_len;
  if (data_offset > file_size)
    fail(path, "truncated .npy header (header says " + std::to_string(header_len) +
                   " bytes, file is " + std::to_string(file_size) + " bytes)");
  std::string header(static_cast<size_t>(header_len), '\0');
  file.read_exact(header.data(), header.size());

  HeaderParser parser(path, header);
  Tensor t;
  t.shape = check_header_dict(path, parser.parse_dict());

  const std::optional<uint64_t> count = element_count(t.shape);
  if (!count || *count > std::numeric_limits<uint64_t>::max() / sizeof(float))
    fail(path, "shape " + shape_string(t.shape) + " is too large");
  const uint64_t need = *count * sizeof(float);
  const uint64_t data_bytes = file_size - data_offset;
  if (data_bytes < need)
    fail(path, "data is shorter than the shape implies: shape " + shape_string(t.shape) +
                   " needs " + std::to_string(need) + " bytes of float32, the file holds " +
                   std::to_string(data_bytes) + " (truncated file?)");
  if (data_bytes > need)
    fail(path, "data is longer than the shape implies: shape " + shape_string(t.shape) +
                   " needs " + std::to_string(need) + " bytes of float32, the file holds " +
                   std::to_string(data_bytes));
  t.data.resize(static_cast<size_t>(*count));
  file.read_exact(t.data.data(), static_cast<size_t>(need));
  return t;
}

Tensor read_raw(const std::string& path) {
  InputFile file(path);
  if (file.size() % sizeof(float) != 0)
    fail(path, "raw float32 file size " + std::to_string(file.size()) +
                   " bytes is not a multiple of 4 (if it is a .npy file, name it *.npy or pass "
                   "--format npy)");
  Tensor t;
  t.data.resize(static_cast<size_t>(file.size() / sizeof(float)));
  t.shape = {t.data.size()};
  file.read_exact(t.data.data(), static_cast<size_t>(file.size()));
  return t;
}

// An output file under construction: removed again unless committed.
class TempFile {
 public:
  TempFile(const std::string& target) : target_(target) {
    namespace fs = std::filesystem;
    const fs::path p(target);
    if (!p.has_filename()) fail(target, "not a file name");
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    // A hidden name next to the target: rename() needs the same file system.
    std::string name = dir.string();
    name += "/.";
    name += p.filename().string();
    name += ".tg-codec-XXXXXX";
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0)
      fail(target, "cannot create a temporary file in '" + dir.string() + "': " + errno_text(errno));
    temp_ = name;
    // mkstemp creates 0600; give the result the permissions a plain
    // open(O_CREAT, 0666) would, as users expect of a new output file.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }

  void write(std::span<const uint8_t> bytes) {
    const uint8_t* p = bytes.data();
    size_t n = bytes.size();
    while (n > 0) {
      const ssize_t put = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (put < 0) {
        if (errno == EINTR) continue;
        fail(target_, "write error: " + errno_text(errno));
      }
      p += put;
      n -= static_cast<size_t>(put);
    }
  }

  void commit() {
    // fsync before rename: otherwise a crash can leave the new name
    // pointing at an empty file on some file systems.
    if (::fsync(fd_) != 0) fail(target_, "cannot sync: " + errno_text(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail(target_, "write error on close: " + errno_text(errno));
    if (::rename(temp_.c_str(), target_.c_str()) != 0)
      fail(target_, "cannot replace: " + errno_text(errno));
    committed_ = true;
  }

 private:
  std::string target_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

std::span<const uint8_t> as_bytes_span(std::span<const float> data) {
  return {reinterpret_cast<const uint8_t*>(data.data()), data.size_bytes()};
}

}  // namespace

TensorFormat format_for_path(std::string_view path) {
  if (path.size() < 4) return TensorFormat::kRaw;
  std::string ext(path.substr(path.size() - 4));
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".npy" ? TensorFormat::kNpy : TensorFormat::kRaw;
}

std::optional<TensorFormat> parse_format_name(std::string_view name) {
  if (name == "npy") return TensorFormat::kNpy;
  if (name == "raw") return TensorFormat::kRaw;
  return std::nullopt;
}

std::optional<uint64_t> element_count(std::span<const uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

std::string shape_string(std::span<const uint64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::vector<uint8_t> npy_header(std::span<const uint64_t> shape) {
  // Key order and spacing follow NumPy's own writer (sorted keys, repr values).
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
  // Pad with spaces so magic + version + length + text + '\n' is a multiple
  // of 64; like NumPy, at least one space, at most 64.
  auto build = [&](size_t len_bytes) {
    const size_t unpadded = 8 + len_bytes + dict.size() + 1;
    const size_t pad = kNpyAlign - unpadded % kNpyAlign;
    return std::pair{dict.size() + pad + 1, pad};
  };
  size_t len_bytes = 2;
  auto [header_len, pad] = build(len_bytes);
  if (header_len > 0xFFFF) {  // very high-rank shapes only: needs version 2.0
    len_bytes = 4;
    std::tie(header_len, pad) = build(len_bytes);
  }
  std::vector<uint8_t> out(kNpyMagic, kNpyMagic + sizeof kNpyMagic);
  out.push_back(len_bytes == 2 ? 1 : 2);
  out.push_back(0);
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<uint8_t>(header_len >> (8 * i)));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), pad, ' ');
  out.push_back('\n');
  return out;
}

Tensor read_tensor(const std::string& path, TensorFormat format) {
  return format == TensorFormat::kNpy ? read_npy(path) : read_raw(path);
}

void write_tensor(const std::string& path, TensorFormat format, std::span<const uint64_t> shape,
                  std::span<const float> data) {
  if (format == TensorFormat::kRaw) {
    const std::span<const uint8_t> parts[] = {as_bytes_span(data)};
    write_file_atomic(path, parts);
    return;
  }
  const std::vector<uint8_t> header = npy_header(shape);
  const std::span<const uint8_t> parts[] = {header, as_bytes_span(data)};
  write_file_atomic(path, parts);
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  InputFile file(path);
  std::vector<uint8_t> bytes(static_cast<size_t>(file.size()));
  file.read_exact(bytes.data(), bytes.size());
  return bytes;
}

void write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> parts) {
  TempFile tmp(path);
  for (const auto& part : parts) tmp.write(part);
  tmp.commit();
}

}  // namespace terngrad::tools
