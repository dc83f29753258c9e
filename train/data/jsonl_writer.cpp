// JsonObject and JsonlWriter (metrics.h).
#include <stdexcept>

#include "file_io.h"
#include "terngrad/base/json.h"
#include "terngrad/train/metrics.h"

namespace terngrad::train {

JsonObject::JsonObject() : fields_(std::make_unique<json::Json>(json::Json::object())) {}
JsonObject::~JsonObject() = default;
JsonObject::JsonObject(JsonObject&&) noexcept = default;
JsonObject& JsonObject::operator=(JsonObject&&) noexcept = default;

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  (*fields_)[std::string(k)] = std::string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, bool value) {
  (*fields_)[std::string(k)] = value;
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, double value) {
  (*fields_)[std::string(k)] = value;  // NaN and +-Inf are written as null
  return *this;
}

JsonObject& JsonObject::add_int(std::string_view k, int64_t value) {
  (*fields_)[std::string(k)] = value;
  return *this;
}

JsonObject& JsonObject::add_uint(std::string_view k, uint64_t value) {
  (*fields_)[std::string(k)] = value;
  return *this;
}

JsonObject& JsonObject::add_null(std::string_view k) {
  (*fields_)[std::string(k)] = nullptr;
  return *this;
}

JsonObject& JsonObject::add_json(std::string_view k, std::string_view json_text) {
  (*fields_)[std::string(k)] = json::parse_strict(json_text);
  return *this;
}

std::string JsonObject::str() const { return json::dump_line(*fields_); }

JsonlWriter::JsonlWriter(std::string path, bool append) : path_(std::move(path)) {
  bool torn = false;
  if (append) {
    if (std::FILE* r = std::fopen(path_.c_str(), "rb")) {
      if (std::fseek(r, -1, SEEK_END) == 0) torn = std::fgetc(r) != '\n';
      std::fclose(r);
    }
  }
  f_ = std::fopen(path_.c_str(), append ? "ab" : "wb");
  if (!f_) detail::throw_errno(path_, "cannot open metrics log");
  if (torn && (std::fputc('\n', f_) == EOF || std::fflush(f_) != 0))
    detail::throw_errno(path_, "cannot write metrics log");
}

JsonlWriter::~JsonlWriter() {
  if (f_) std::fclose(f_);
}

void JsonlWriter::write(const JsonObject& o) {
  const std::string line = o.str() + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  // One fwrite per line, then flush: a reader (or a crash) sees whole lines.
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    detail::throw_errno(path_, "cannot write metrics log");
}

}  // namespace terngrad::train
