// safetensors writer and strict reader (safetensors.h).
#include "terngrad/train/safetensors.h"

#include <algorithm>
#include <bit>
#include <set>
#include <stdexcept>

#include "file_io.h"
#include "terngrad/base/json.h"

namespace terngrad::train {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; byteswap on big-endian hosts");

namespace {
constexpr const char* kMetadataKey = "__metadata__";
// The reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeader = 100'000'000;
}  // namespace

void export_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  auto bad = [&](const std::string& msg) { throw std::invalid_argument("export_safetensors(" + path + "): " + msg); };
  json::Json doc = json::Json::object();
  if (!metadata.empty()) {
    json::Json meta = json::Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    doc[kMetadataKey] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) bad("a tensor has an empty name");
    if (name == kMetadataKey) bad("a tensor may not be named " + std::string(kMetadataKey));
    if (!seen.insert(name).second) bad("duplicate tensor name '" + name + "'");
    if (!t) bad("tensor '" + name + "' is null");
    const int64_t n = detail::element_count(t->shape, "tensor '" + name + "'");
    if (static_cast<uint64_t>(n) != t->data.size())
      bad("tensor '" + name + "' has shape " + detail::format_shape(t->shape) + " but holds " +
          std::to_string(t->data.size()) + " values");
    const uint64_t end = offset + 4 * t->data.size();
    doc[name] = {{"dtype", "F32"}, {"shape", t->shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string header = json::dump_line(doc);
  // Pad with spaces (valid JSON whitespace) so the data section is 8-byte
  // aligned, which lets readers map the file and view tensors in place.
  header.append((8 - header.size() % 8) % 8, ' ');

  detail::AtomicFile f(path);
  std::string len;
  detail::put_le(len, header.size(), 8);
  f.write(len);
  f.write(header);
  for (const auto& [name, t] : tensors) f.write(t->data.data(), 4 * t->data.size());
  f.commit();
}

void export_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (const auto& [name, t] : tensors) list.emplace_back(name, &t);
  export_safetensors(path, list, metadata);
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::vector<uint8_t> bytes = detail::read_file(path);
  auto fail = [&](const std::string& msg) -> void { throw std::runtime_error(path + ": " + msg); };
  if (bytes.size() < 8) fail("truncated: " + std::to_string(bytes.size()) + " bytes, no room for the header length");
  SafetensorsFile out;
  out.header_length = detail::get_le(bytes.data(), 8);
  if (out.header_length > kMaxHeader || out.header_length > bytes.size() - 8)
    fail("header length " + std::to_string(out.header_length) + " exceeds the file's " +
         std::to_string(bytes.size() - 8) + " remaining bytes (or the 100 MB limit)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, out.header_length);
  if (text.empty() || text[0] != '{') fail("header does not start with '{'");
  json::Json root;
  try {
    root = json::parse_strict(text);
  } catch (const std::exception& e) {
    fail(std::string("header: ") + e.what());
  }
  if (!root.is_object()) fail("header is not a JSON object");
  const uint64_t data_start = 8 + out.header_length;
  const uint64_t data_size = bytes.size() - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, v] : root.items()) {
    if (name == kMetadataKey) {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) fail("__metadata__ value of '" + k + "' is not a string");
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (out.tensors.count(name)) fail("duplicate " + what);
    if (!v.is_object()) fail(what + " is not an object");
    const json::Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, m] : v.items()) {
      if (k == "dtype") dtype = &m;
      else if (k == "shape") shape = &m;
      else if (k == "data_offsets") offsets = &m;
      else fail(what + " has unknown field '" + k + "'");
    }
    if (!dtype || !shape || !offsets) fail(what + " lacks dtype, shape or data_offsets");
    if (!dtype->is_string() || dtype->get<std::string>() != "F32")
      fail(what + " has dtype " + (dtype->is_string() ? dtype->get<std::string>() : "?") +
           ", this reader handles F32 only");
    if (!shape->is_array()) fail(what + " shape is not an array");
    if (!offsets->is_array() || offsets->size() != 2) fail(what + " data_offsets is not [begin, end]");
    Tensor t;
    for (const auto& d : *shape) t.shape.push_back(static_cast<int64_t>(json::as_u64(d, path + ": " + what + " dimension")));
    const int64_t n = detail::element_count(t.shape, path + ": " + what);
    const uint64_t b = json::as_u64((*offsets)[0], path + ": " + what + " begin offset");
    const uint64_t e = json::as_u64((*offsets)[1], path + ": " + what + " end offset");
    if (b > e || e > data_size)
      fail(what + " data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] outside the " +
           std::to_string(data_size) + "-byte data section");
    if (e - b != 4 * static_cast<uint64_t>(n))
      fail(what + " shape " + detail::format_shape(t.shape) + " needs " + std::to_string(4 * n) + " bytes, offsets span " +
           std::to_string(e - b));
    t.data.resize(static_cast<size_t>(n));
    std::copy_n(bytes.data() + data_start + b, e - b, reinterpret_cast<uint8_t*>(t.data.data()));
    spans.emplace_back(b, e);
    out.names.push_back(name);
    out.tensors.emplace(name, std::move(t));
  }
  // As the reference implementation: the tensors tile the data section.
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [b, e] : spans) {
    if (b != at) fail("data section has a hole or overlap at byte " + std::to_string(at));
    at = e;
  }
  if (at != data_size)
    fail("data section is " + std::to_string(data_size) + " bytes but the tensors cover " + std::to_string(at));
  return out;
}

}  // namespace terngrad::train
