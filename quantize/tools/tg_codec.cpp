// tg-codec: encode, decode, inspect and sum TernGrad payloads from the shell.
//
// Exit status: 0 success, 1 data error (unreadable/invalid file, codec
// error), 2 usage error (unknown option, bad value, wrong argument count).
// Errors go to stderr as "tg-codec: <file>: <problem>" so scripts can tell
// which of several inputs was at fault.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "npy_io.h"
#include "terngrad/quantize/codec.h"

namespace {

namespace q = terngrad::quantize;
using terngrad::tools::Tensor;
using terngrad::tools::TensorFormat;

constexpr float kDefaultClip = 2.5f;

// A mistake in how the tool was called: reported with the usage line, exit 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A data problem attributed to one file, exit 1.
[[noreturn]] void file_error(const std::string& path, const std::string& problem) {
  throw std::runtime_error(path + ": " + problem);
}

// Runs f, attributing any codec error to path: the library's messages name
// the field or element index but cannot know which file the bytes came from.
template <class F>
auto about_file(const std::string& path, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const q::CodecError& e) {
    file_error(path, e.what());
  }
}

// ---------------------------------------------------------------------------
// Command-line parsing

struct OptionSpec {
  std::string_view name;  // with the leading "--"
  bool takes_value;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::string, std::less<>> options;  // flags map to ""

  bool has(std::string_view name) const { return options.find(name) != options.end(); }
  const std::string* value(std::string_view name) const {
    const auto it = options.find(name);
    return it == options.end() ? nullptr : &it->second;
  }
};

bool is_help(std::string_view arg) { return arg == "--help" || arg == "-h"; }

// Options may come before, between or after the positional arguments;
// "--" ends option parsing. Both "--clip 2" and "--clip=2" work.
ParsedArgs parse_args(std::span<char* const> args, std::span<const OptionSpec> specs) {
  ParsedArgs out;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (options_done || arg.size() < 2 || arg[0] != '-') {
      out.positional.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const OptionSpec& s) { return s.name == name; });
    if (spec == specs.end()) throw UsageError("unknown option '" + std::string(name) + "'");
    if (out.has(name)) throw UsageError("option " + std::string(name) + " given more than once");
    std::string value;
    if (!spec->takes_value) {
      if (eq != std::string_view::npos)
        throw UsageError("option " + std::string(name) + " takes no value (got '" +
                         std::string(arg) + "')");
    } else if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
    } else {
      // A following "--option" is not taken as a value: "--clip --seed 1"
      // almost certainly means the value was forgotten.
      if (i + 1 >= args.size() || std::string_view(args[i + 1]).starts_with("--"))
        throw UsageError("option " + std::string(name) + " needs a value");
      value = args[++i];
    }
    out.options.emplace(name, std::move(value));
  }
  return out;
}

[[noreturn]] void bad_value(std::string_view option, std::string_view text, std::string_view want) {
  throw UsageError("invalid value '" + std::string(text) + "' for " + std::string(option) +
                   ": expected " + std::string(want));
}

// A finite number >= 0 (clip factors and scales are never negative).
float parse_nonneg_float(std::string_view option, const std::string& text) {
  float v = 0.0f;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty() || !std::isfinite(v) || v < 0.0f ||
      std::signbit(v))
    bad_value(option, text, "a finite number >= 0");
  return v;
}

// A decimal (or 0x-prefixed hexadecimal) integer in [0, max].
uint64_t parse_uint(std::string_view option, std::string_view text, uint64_t max) {
  int base = 10;
  std::string_view digits = text;
  if (digits.starts_with("0x") || digits.starts_with("0X")) {
    base = 16;
    digits.remove_prefix(2);
  }
  uint64_t v = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, v, base);
  if (digits.empty() || ec != std::errc() || ptr != end || v > max)
    bad_value(option, text, "an integer from 0 to " + std::to_string(max));
  return v;
}

std::optional<uint64_t> uint_option(const ParsedArgs& a, std::string_view name, uint64_t max) {
  const std::string* v = a.value(name);
  if (!v) return std::nullopt;
  return parse_uint(name, *v, max);
}

// "784,500" -> {784, 500}.
std::vector<uint64_t> parse_shape(const std::string& text) {
  std::vector<uint64_t> dims;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view part = std::string_view(text).substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    uint64_t d = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), d);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size())
      bad_value("--shape", text, "comma-separated non-negative integers, e.g. 784,500");
    dims.push_back(d);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!terngrad::tools::element_count(dims)) bad_value("--shape", text, "a shape that fits in 64 bits");
  return dims;
}

TensorFormat tensor_format(const ParsedArgs& a, const std::string& path) {
  if (const std::string* f = a.value("--format")) {
    if (auto fmt = terngrad::tools::parse_format_name(*f)) return *fmt;
    bad_value("--format", *f, "npy or raw");
  }
  return terngrad::tools::format_for_path(path);
}

void expect_positional(const ParsedArgs& a, size_t n, std::string_view names) {
  if (a.positional.size() < n)
    throw UsageError("missing arguments: expected " + std::string(names));
  if (a.positional.size() > n)
    throw UsageError("unexpected extra argument '" + a.positional[n] + "' (expected " +
                     std::string(names) + ")");
}

// ---------------------------------------------------------------------------
// Shared reporting helpers

struct CodeHistogram {
  uint64_t plus = 0, zero = 0, minus = 0;
};

// Counts the codes of a validated payload of n elements, whatever its
// packing (codec 1, 4 or 5): through accumulate_counts(), which reads every
// packing, rather than the 2-bit body, which only codec 1 has.
CodeHistogram count_codes(std::span<const uint8_t> payload, uint64_t n) {
  CodeHistogram h;
  std::vector<int16_t> signs(static_cast<size_t>(n), 0);
  q::accumulate_counts(payload, signs);
  for (int16_t v : signs) {
    if (v > 0) ++h.plus;
    else if (v < 0) ++h.minus;
    else ++h.zero;
  }
  return h;
}

const char* codec_description(uint8_t codec) {
  switch (codec) {
    case q::kCodecTernary2Bit: return "ternary, 2 bits per element";
    case q::kCodecTernaryBase3: return "ternary, base-3: 5 elements per byte";
    case q::kCodecTernaryEntropy: return "ternary, rANS entropy-coded";
  }
  return "unknown";
}

std::string percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

void print_histogram(const CodeHistogram& h, uint64_t n) {
  std::printf("codes:        +s %" PRIu64 " (%s)  0 %" PRIu64 " (%s)  -s %" PRIu64 " (%s)\n", h.plus,
              percent(h.plus, n).c_str(), h.zero, percent(h.zero, n).c_str(), h.minus,
              percent(h.minus, n).c_str());
}

// Float values print with 9 significant digits: enough to read back the
// exact float32, which the tests and scripts rely on.
void print_stats(const q::TensorStats& st) {
  std::printf("elements:     %" PRIu64 "\n", st.count);
  std::printf("mean:         %.9g\n", st.mean);
  std::printf("stddev:       %.9g\n", st.stddev);
  std::printf("max|g|:       %.9g\n", static_cast<double>(st.max_abs));
}

Tensor read_input(const ParsedArgs& a, const std::string& path) {
  return terngrad::tools::read_tensor(path, tensor_format(a, path));
}

// The payload and its validated header.
struct Payload {
  std::vector<uint8_t> bytes;
  q::PayloadHeader header;
};

Payload read_payload(const std::string& path) {
  Payload p;
  p.bytes = terngrad::tools::read_file_bytes(path);
  p.header = about_file(path, [&] { return q::inspect(p.bytes); });
  if (p.header.count > std::numeric_limits<size_t>::max() / sizeof(float))
    file_error(path, "element count " + std::to_string(p.header.count) + " is too large");
  return p;
}

// The output shape: --shape when given (its element count must match), else 1-D.
std::vector<uint64_t> output_shape(const ParsedArgs& a, const std::string& source, uint64_t count) {
  const std::string* text = a.value("--shape");
  if (!text) return {count};
  std::vector<uint64_t> shape = parse_shape(*text);
  const uint64_t n = *terngrad::tools::element_count(shape);
  if (n != count)
    file_error(source, "--shape " + *text + " has " + std::to_string(n) +
                           " elements but the payload holds " + std::to_string(count));
  return shape;
}

// ---------------------------------------------------------------------------
// Subcommands

int cmd_encode(const ParsedArgs& a) {
  expect_positional(a, 2, "IN OUT");
  const std::string& in = a.positional[0];
  const std::string& out = a.positional[1];
  q::EncodeParams params;
  if (const std::string* c = a.value("--clip")) params.clip_factor = parse_nonneg_float("--clip", *c);
  params.seed = uint_option(a, "--seed", UINT64_MAX).value_or(0);
  params.step = static_cast<uint32_t>(uint_option(a, "--step", UINT32_MAX).value_or(0));
  params.tensor_id = static_cast<uint32_t>(uint_option(a, "--tensor-id", UINT32_MAX).value_or(0));
  if (const std::string* s = a.value("--shared-scale"))
    params.shared_scale = parse_nonneg_float("--shared-scale", *s);
  if (const std::string* r = a.value("--round")) {
    if (*r == "nearest")
      params.rounding = q::Rounding::kNearest;
    else if (*r != "stochastic")
      throw UsageError("--round: expected stochastic or nearest, got '" + *r + "'");
  }
  if (const std::string* st = a.value("--stream")) {
    const std::optional<q::RandomStream> stream = q::parse_random_stream(*st);
    if (!stream) throw UsageError("--stream: expected philox7x16 or philox10, got '" + *st + "'");
    params.stream = *stream;
  }
  if (const std::string* pk = a.value("--pack")) {
    const std::optional<q::Packing> packing = q::parse_packing(*pk);
    if (!packing) throw UsageError("--pack: expected 2bit, base3 or entropy, got '" + *pk + "'");
    params.packing = *packing;
  }
  tensor_format(a, in);  // reject a bad --format before reading anything

  const Tensor t = read_input(a, in);
  const q::TensorStats st = about_file(in, [&] { return q::compute_stats(t.data); });
  const float local = about_file(in, [&] { return q::local_scale(st, params.clip_factor); });
  const float scale = about_file(in, [&] { return q::resolve_scale(st, params); });

  std::vector<uint8_t> payload(q::max_encoded_bytes(t.data.size(), params.packing));
  const auto t0 = std::chrono::steady_clock::now();
  const size_t written = about_file(in, [&] { return q::encode(t.data, params, payload); });
  const auto t1 = std::chrono::steady_clock::now();
  payload.resize(written);
  const std::span<const uint8_t> parts[] = {payload};
  terngrad::tools::write_file_atomic(out, parts);

  const uint64_t n = t.data.size();
  print_stats(st);
  std::string how;
  if (params.shared_scale) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "shared; local scale %.9g", static_cast<double>(local));
    how = buf;
  } else if (scale == 0.0f) {
    how = "all elements zero";
  } else if (scale < st.max_abs) {
    char buf[80];
    std::snprintf(buf, sizeof buf, "clipped: %g * stddev < max|g|",
                  static_cast<double>(params.clip_factor));
    how = buf;
  } else {
    how = "not clipped: scale = max|g|";
  }
  std::printf("scale:        %.9g (%s)\n", static_cast<double>(scale), how.c_str());
  std::printf("bytes in:     %" PRIu64 "\n", n * sizeof(float));
  std::printf("bytes out:    %zu\n", written);
  std::printf("codec:        %u (%s)\n", static_cast<unsigned>(payload[q::kHeaderCodecOffset]),
              codec_description(payload[q::kHeaderCodecOffset]));
  std::printf("compression:  %.2fx\n",
              static_cast<double>(n * sizeof(float)) / static_cast<double>(written));
  print_histogram(count_codes(payload, n), n);
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  if (seconds > 0.0)
    std::printf("throughput:   %.3f GB/s (%.3f ms)\n",
                static_cast<double>(n * sizeof(float)) / seconds / 1e9, seconds * 1e3);
  else
    std::printf("throughput:   n/a (too fast to time)\n");
  return 0;
}

int cmd_decode(const ParsedArgs& a) {
  expect_positional(a, 2, "IN.tgrd OUT");
  const std::string& in = a.positional[0];
  const std::string& out = a.positional[1];
  const bool accumulate = a.has("--accumulate");
  if (accumulate && a.has("--shape"))
    throw UsageError("--shape cannot be combined with --accumulate (OUT keeps its own shape)");
  if (const std::string* s = a.value("--shape")) parse_shape(*s);  // syntax first: exit 2
  const TensorFormat fmt = tensor_format(a, out);

  const Payload p = read_payload(in);
  const uint64_t n = p.header.count;
  if (accumulate) {
    Tensor cur = terngrad::tools::read_tensor(out, fmt);
    if (cur.data.size() != n)
      file_error(out, "holds " + std::to_string(cur.data.size()) + " elements but " + in +
                          " holds " + std::to_string(n));
    about_file(in, [&] { q::decode_accumulate(p.bytes, cur.data); });
    terngrad::tools::write_tensor(out, fmt, cur.shape, cur.data);
  } else {
    const std::vector<uint64_t> shape = output_shape(a, in, n);
    std::vector<float> values(static_cast<size_t>(n));
    about_file(in, [&] { q::decode(p.bytes, values); });
    terngrad::tools::write_tensor(out, fmt, shape, values);
  }
  std::printf("%s %" PRIu64 " elements (scale %.9g%s) into %s\n",
              accumulate ? "accumulated" : "decoded", n, static_cast<double>(p.header.scale),
              p.header.shared_scale() ? ", shared" : "", out.c_str());
  return 0;
}

int cmd_inspect(const ParsedArgs& a) {
  expect_positional(a, 1, "PAYLOAD");
  const std::string& path = a.positional[0];
  const uint64_t dump = uint_option(a, "--dump", UINT64_MAX).value_or(0);

  const Payload p = read_payload(path);
  const q::PayloadHeader& h = p.header;
  const uint8_t* b = p.bytes.data();
  std::printf("file:         %s\n", path.c_str());
  std::printf("magic:        %c%c%c%c\n", b[0], b[1], b[2], b[3]);
  // Codecs whose codes are drawn name their random stream by the version; sums draw nothing.
  const bool drawn = h.codec == q::kCodecTernary2Bit || h.codec == q::kCodecTernaryBucketed ||
                     h.codec == q::kCodecTernaryBase3 || h.codec == q::kCodecTernaryEntropy;
  if (drawn && !h.nearest())
    std::printf("version:      %u (random stream %s)\n", static_cast<unsigned>(h.version),
                q::random_stream_name(static_cast<q::RandomStream>(h.version)));
  else
    std::printf("version:      %u\n", static_cast<unsigned>(h.version));
  std::printf("codec:        %u (%s)\n", static_cast<unsigned>(h.codec), codec_description(h.codec));
  std::string flags = h.shared_scale() ? "shared-scale" : "";
  if (h.nearest()) flags += flags.empty() ? "nearest-rounding" : ", nearest-rounding";
  std::printf("flags:        0x%02x (%s)\n", static_cast<unsigned>(h.flags), flags.empty() ? "none" : flags.c_str());
  std::printf("header bytes: %u\n", static_cast<unsigned>(b[q::kHeaderSizeOffset]));
  std::printf("count:        %" PRIu64 "\n", h.count);
  std::printf("scale:        %.9g (bits 0x%08" PRIx32 ")\n", static_cast<double>(h.scale),
              q::float_bits(h.scale));
  std::printf("tensor id:    %" PRIu32 "\n", h.tensor_id);
  std::printf("seed:         %" PRIu64 "\n", h.seed);
  std::printf("step:         %" PRIu32 "\n", h.step);
  const size_t header_bytes = b[q::kHeaderSizeOffset];  // 40, or 52 for codec 5 (validated)
  std::printf("header crc:   0x%08" PRIx32 " (ok)\n", q::load_le32(b + header_bytes - 4));
  std::printf("body bytes:   %zu\n", p.bytes.size() - header_bytes);
  if (h.count > 0)
    std::printf("bits/element: %.4f (whole payload)\n",
                8.0 * static_cast<double>(p.bytes.size()) / static_cast<double>(h.count));
  print_histogram(count_codes(p.bytes, h.count), h.count);
  // Values from a full decode: every packing, one path (the payload is
  // already validated and its count bounded by read_payload()).
  const uint64_t shown = std::min(dump, h.count);
  if (shown > 0) {
    std::vector<float> values(static_cast<size_t>(h.count));
    q::decode(p.bytes, values);
    for (uint64_t i = 0; i < shown; ++i) std::printf("[%" PRIu64 "] %.9g\n", i, static_cast<double>(values[i]));
  }
  return 0;
}

int cmd_repack(const ParsedArgs& a) {
  expect_positional(a, 2, "IN.tgrd OUT.tgrd");
  const std::string& in = a.positional[0];
  const std::string& out = a.positional[1];
  const std::string* pk = a.value("--pack");
  if (pk == nullptr) throw UsageError("--pack is required (2bit, base3 or entropy)");
  const std::optional<q::Packing> packing = q::parse_packing(*pk);
  if (!packing) throw UsageError("--pack: expected 2bit, base3 or entropy, got '" + *pk + "'");

  const Payload p = read_payload(in);
  std::vector<uint8_t> payload(q::max_encoded_bytes(p.header.count, *packing));
  payload.resize(about_file(in, [&] { return q::repack(p.bytes, *packing, payload); }));
  const std::span<const uint8_t> parts[] = {payload};
  terngrad::tools::write_file_atomic(out, parts);
  std::printf("repacked %" PRIu64 " elements: codec %u (%zu bytes) -> codec %u (%zu bytes, %s) into %s\n",
              p.header.count, static_cast<unsigned>(p.header.codec), p.bytes.size(),
              static_cast<unsigned>(payload[q::kHeaderCodecOffset]), payload.size(),
              codec_description(payload[q::kHeaderCodecOffset]), out.c_str());
  return 0;
}

int cmd_stats(const ParsedArgs& a) {
  expect_positional(a, 1, "IN");
  const std::string& in = a.positional[0];
  std::optional<float> clip;
  if (const std::string* c = a.value("--clip")) clip = parse_nonneg_float("--clip", *c);
  tensor_format(a, in);

  const Tensor t = read_input(a, in);
  const q::TensorStats st = about_file(in, [&] { return q::compute_stats(t.data); });
  std::printf("shape:        %s\n", terngrad::tools::shape_string(t.shape).c_str());
  print_stats(st);
  std::vector<float> clips = {0.0f, kDefaultClip};
  if (clip && *clip != 0.0f && *clip != kDefaultClip) clips.push_back(*clip);
  for (float c : clips) {
    const float s = about_file(in, [&] { return q::local_scale(st, c); });
    std::printf("scale (clip %g): %.9g\n", static_cast<double>(c), static_cast<double>(s));
  }
  return 0;
}

// Count sums live in int16, one per element per payload in [-1, 1].
constexpr size_t kMaxSumPayloads = std::numeric_limits<int16_t>::max();

int cmd_sum(const ParsedArgs& a) {
  if (a.positional.size() < 2) throw UsageError("missing arguments: expected OUT P1 [P2 ...]");
  if (a.positional.size() - 1 > kMaxSumPayloads)
    throw UsageError("at most " + std::to_string(kMaxSumPayloads) + " payloads can be summed");
  const std::string& out = a.positional[0];
  if (const std::string* s = a.value("--shape")) parse_shape(*s);
  const TensorFormat fmt = tensor_format(a, out);

  const std::vector<std::string> paths(a.positional.begin() + 1, a.positional.end());
  std::vector<Payload> payloads;
  for (const std::string& path : paths) {
    payloads.push_back(read_payload(path));
    // Checked here, not only by sum_shared, so the message names the file.
    const q::PayloadHeader& first = payloads.front().header;
    const q::PayloadHeader& h = payloads.back().header;
    if (h.count != first.count)
      file_error(path, "holds " + std::to_string(h.count) + " elements but " + paths.front() +
                           " holds " + std::to_string(first.count));
    if (q::float_bits(h.scale) != q::float_bits(first.scale)) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "scale %.9g differs from %.9g in the first payload; sum needs payloads "
                    "encoded with one shared scale (encode --shared-scale)",
                    static_cast<double>(h.scale), static_cast<double>(first.scale));
      file_error(path, buf);
    }
  }
  const uint64_t n = payloads.front().header.count;
  const std::vector<uint64_t> shape = output_shape(a, paths.front(), n);

  std::vector<std::span<const uint8_t>> spans;
  for (const Payload& p : payloads) spans.emplace_back(p.bytes);
  std::vector<int16_t> counts(static_cast<size_t>(n), 0);
  const float scale = about_file(paths.front(), [&] { return q::sum_shared(spans, counts); });

  std::vector<float> values(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) values[i] = scale * static_cast<float>(counts[i]);
  terngrad::tools::write_tensor(out, fmt, shape, values);

  std::printf("payloads:     %zu\n", payloads.size());
  std::printf("elements:     %" PRIu64 "\n", n);
  std::printf("shared scale: %.9g\n", static_cast<double>(scale));
  if (counts.empty()) {
    std::printf("count range:  n/a (no elements)\n");
  } else {
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    std::printf("count range:  [%d, %d]\n", static_cast<int>(*lo), static_cast<int>(*hi));
  }
  std::printf("wrote:        %s\n", out.c_str());
  return 0;
}

// ---------------------------------------------------------------------------
// Command table and help

struct Command {
  std::string_view name;
  std::string_view usage;
  std::string_view help;
  std::vector<OptionSpec> options;
  int (*run)(const ParsedArgs&);
};

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"encode", "tg-codec encode IN OUT [options]",
       "Quantizes a float32 tensor (IN: .npy, or raw little-endian float32) to a\n"
       "TernGrad payload OUT and prints its statistics and compression.\n"
       "\n"
       "  --clip C          clip factor: scale = min(max|g|, C * stddev); 0 disables\n"
       "                    clipping (default 2.5)\n"
       "  --seed S          Philox seed (default 0)\n"
       "  --step T          training step, part of the random stream (default 0)\n"
       "  --tensor-id I     tensor id, part of the random stream (default 0)\n"
       "  --shared-scale X  use scale X (>= the tensor's own scale) shared by all workers\n"
       "  --round stochastic|nearest\n"
       "                    how codes are chosen: drawn (TernGrad, unbiased; default) or\n"
       "                    deterministic nearest rounding (for error feedback)\n"
       "  --stream philox7x16|philox10\n"
       "                    the random stream that draws the codes (FORMAT.md): format\n"
       "                    version 2 (default, 16 bits per element) or version 1\n"
       "  --pack 2bit|base3|entropy\n"
       "                    how the codes travel (FORMAT.md): codec 1 (default), codec 4\n"
       "                    (5 per byte) or codec 5 (rANS; codec 4 when not smaller)\n"
       "  --format npy|raw  input format (default: by extension, .npy or raw)\n",
       {{"--clip", true},
        {"--seed", true},
        {"--step", true},
        {"--tensor-id", true},
        {"--shared-scale", true},
        {"--round", true},
        {"--stream", true},
        {"--pack", true},
        {"--format", true}},
       cmd_encode},
      {"decode", "tg-codec decode IN.tgrd OUT [--shape D1,D2,...] [--accumulate]",
       "Decodes a payload to float32 OUT (.npy, or raw float32).\n"
       "\n"
       "  --shape D1,D2,... shape of the .npy output (default 1-D); its element\n"
       "                    count must equal the payload's\n"
       "  --accumulate      OUT must exist with the same element count: OUT += decoded\n"
       "                    (OUT keeps its shape; replaced atomically)\n"
       "  --format npy|raw  output format (default: by extension)\n",
       {{"--shape", true}, {"--accumulate", false}, {"--format", true}},
       cmd_decode},
      {"inspect", "tg-codec inspect PAYLOAD [--dump N]",
       "Validates a payload completely (header, CRC, length, every code, padding)\n"
       "and prints every header field and the code histogram. Exits 1 with the\n"
       "reason if the payload is invalid.\n"
       "\n"
       "  --dump N          also print the first N decoded values\n",
       {{"--dump", true}},
       cmd_inspect},
      {"repack", "tg-codec repack IN.tgrd OUT.tgrd --pack 2bit|base3|entropy",
       "Writes the same codes in another packing (FORMAT.md): every header field\n"
       "(version, flags, count, scale, seed, step, tensor id) and decoded value stays;\n"
       "the bytes are those encode --pack would write for the same input. IN is\n"
       "validated completely first. entropy falls back to base3 when not smaller.\n"
       "\n"
       "  --pack 2bit|base3|entropy\n"
       "                    the packing of OUT: codec 1, 4 or 5\n",
       {{"--pack", true}},
       cmd_repack},
      {"stats", "tg-codec stats IN [--clip C] [--format npy|raw]",
       "Prints count, mean, stddev and max|g| of a float32 tensor and the scale\n"
       "encode would use with clip factors 0 and 2.5.\n"
       "\n"
       "  --clip C          also print the scale for clip factor C\n"
       "  --format npy|raw  input format (default: by extension)\n",
       {{"--clip", true}, {"--format", true}},
       cmd_stats},
      {"sum", "tg-codec sum OUT P1 [P2 ...] [--shape D1,D2,...] [--format npy|raw]",
       "Sums payloads that share one scale and element count (encoded with\n"
       "--shared-scale) exactly, as integer counts times the shared scale, and\n"
       "writes the float32 sum to OUT.\n"
       "\n"
       "  --shape D1,D2,... shape of the .npy output (default 1-D)\n"
       "  --format npy|raw  output format (default: by extension)\n",
       {{"--shape", true}, {"--format", true}},
       cmd_sum},
  };
  return table;
}

void print_main_help(std::FILE* to) {
  std::fprintf(to,
               "usage: tg-codec COMMAND [options]\n"
               "\n"
               "TernGrad codec tool: 2-bit ternary payloads of float32 tensors.\n"
               "\n"
               "commands:\n");
  for (const Command& c : commands()) std::fprintf(to, "  %s\n", std::string(c.usage).c_str());
  std::fprintf(to,
               "\n"
               "Run 'tg-codec COMMAND --help' for a command's options.\n"
               "Exit status: 0 success, 1 data error, 2 usage error.\n");
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    print_main_help(stderr);
    return 2;
  }
  const std::string_view name = argv[1];
  if (is_help(name) || name == "help") {
    print_main_help(stdout);
    return 0;
  }
  const auto& table = commands();
  const auto cmd =
      std::find_if(table.begin(), table.end(), [&](const Command& c) { return c.name == name; });
  if (cmd == table.end()) {
    std::fprintf(stderr, "tg-codec: unknown command '%s'\n", argv[1]);
    print_main_help(stderr);
    return 2;
  }
  const std::span<char* const> rest(argv + 2, static_cast<size_t>(argc - 2));
  // --help anywhere before "--" wins over every other problem on the line.
  for (const char* arg : rest) {
    if (std::string_view(arg) == "--") break;
    if (is_help(arg)) {
      std::printf("usage: %s\n\n%s", std::string(cmd->usage).c_str(), std::string(cmd->help).c_str());
      return 0;
    }
  }
  try {
    return cmd->run(parse_args(rest, cmd->options));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tg-codec %s: %s\nusage: %s\nRun 'tg-codec %s --help' for details.\n",
                 std::string(name).c_str(), e.what(), std::string(cmd->usage).c_str(),
                 std::string(name).c_str());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rc = 1;
  try {
    rc = dispatch(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tg-codec: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tg-codec: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "tg-codec: unexpected internal error\n");
    return 1;
  }
  // A full disk or closed pipe on stdout must not look like success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "tg-codec: cannot write to standard output\n");
    return 1;
  }
  return rc;
}
