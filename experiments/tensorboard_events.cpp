#include "tensorboard_events.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "terngrad/train/crc32c.h"

namespace terngrad::experiments {
namespace {

// Protobuf wire types used here.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

// Explicit little-endian byte order, independent of the host's.
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

double unix_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, train::mask_crc32c(train::crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, train::mask_crc32c(train::crc32c(data.data(), data.size())), 4);
  return out;
}

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, value);
  std::string summary;
  put_bytes(summary, 1, summary_value);

  std::string event;
  put_double(event, 1, wall_time);
  // int64 is encoded as its two's-complement uint64 (a negative step takes 10 bytes).
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);
  return event;
}

std::string event_file_name(double wall_time) {
  return "events.out.tfevents." + std::to_string(static_cast<long long>(std::floor(wall_time))) + "." + hostname();
}

EventWriter::EventWriter(const std::string& dir) : EventWriter(dir + "/" + event_file_name(unix_time_now()), unix_time_now()) {}

EventWriter EventWriter::to_path(const std::string& path, double wall_time) { return EventWriter(path, wall_time); }

EventWriter::EventWriter(std::string path, double wall_time)
    : path_(std::move(path)), out_(path_, std::ios::binary | std::ios::trunc) {
  if (!out_) throw std::runtime_error("cannot create event file " + path_);
  write_record(encode_file_version_event(wall_time));
}

EventWriter::~EventWriter() {
  // Best effort: a destructor must not throw; call flush()/close() to see errors.
  if (out_.is_open()) out_.flush();
}

void EventWriter::scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  write_record(encode_scalar_event(wall_time, step, tag, static_cast<float>(value)));
}

void EventWriter::write_record(std::string_view data) {
  if (!out_.is_open()) throw std::runtime_error("event file " + path_ + " is closed");
  const std::string record = frame_tfrecord(data);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  if (!out_) throw std::runtime_error("cannot write event file " + path_);
}

void EventWriter::flush() {
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write event file " + path_);
}

void EventWriter::close() {
  if (!out_.is_open()) return;
  flush();
  out_.close();
  if (!out_) throw std::runtime_error("cannot close event file " + path_);
}

}  // namespace terngrad::experiments
