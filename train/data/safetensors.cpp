// safetensors writer and strict reader (safetensors.h).
#include "terngrad/train/safetensors.h"

#include <algorithm>
#include <bit>
#include <set>
#include <stdexcept>

#include "file_io.h"
#include "terngrad/comm/json.h"

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
  std::string header = "{";
  if (!metadata.empty()) {
    comm::json::append_json_string(header, kMetadataKey);
    header += ":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ",";
      first = false;
      comm::json::append_json_string(header, k);
      header += ":";
      comm::json::append_json_string(header, v);
    }
    header += "}";
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
    if (header.size() > 1) header += ",";
    comm::json::append_json_string(header, name);
    header += ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < t->shape.size(); ++i) {
      if (i) header += ",";
      header += std::to_string(t->shape[i]);
    }
    const uint64_t end = offset + 4 * t->data.size();
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
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
  comm::json::JsonValue root;
  try {
    root = comm::json::parse_json(text);
  } catch (const std::exception& e) {
    fail(std::string("header: ") + e.what());
  }
  if (root.type != comm::json::JsonValue::Type::kObject) fail("header is not a JSON object");
  const uint64_t data_start = 8 + out.header_length;
  const uint64_t data_size = bytes.size() - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, v] : root.members) {
    if (name == kMetadataKey) {
      if (v.type != comm::json::JsonValue::Type::kObject) fail("__metadata__ is not an object");
      for (const auto& [k, s] : v.members) {
        if (s.type != comm::json::JsonValue::Type::kString) fail("__metadata__ value of '" + k + "' is not a string");
        out.metadata[k] = s.text;
      }
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (out.tensors.count(name)) fail("duplicate " + what);
    if (v.type != comm::json::JsonValue::Type::kObject) fail(what + " is not an object");
    const comm::json::JsonValue *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, m] : v.members) {
      if (k == "dtype") dtype = &m;
      else if (k == "shape") shape = &m;
      else if (k == "data_offsets") offsets = &m;
      else fail(what + " has unknown field '" + k + "'");
    }
    if (!dtype || !shape || !offsets) fail(what + " lacks dtype, shape or data_offsets");
    if (dtype->type != comm::json::JsonValue::Type::kString || dtype->text != "F32")
      fail(what + " has dtype " + (dtype->type == comm::json::JsonValue::Type::kString ? dtype->text : "?") +
           ", this reader handles F32 only");
    if (shape->type != comm::json::JsonValue::Type::kArray) fail(what + " shape is not an array");
    if (offsets->type != comm::json::JsonValue::Type::kArray || offsets->items.size() != 2)
      fail(what + " data_offsets is not [begin, end]");
    Tensor t;
    for (const auto& d : shape->items) t.shape.push_back(static_cast<int64_t>(d.as_u64(path + ": " + what + " dimension")));
    const int64_t n = detail::element_count(t.shape, path + ": " + what);
    const uint64_t b = offsets->items[0].as_u64(path + ": " + what + " begin offset");
    const uint64_t e = offsets->items[1].as_u64(path + ": " + what + " end offset");
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
