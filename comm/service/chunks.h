// Private: large byte buffers travel as a stream of chunks (no message grows
// with the model), and are reassembled with every size checked.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace terngrad::comm::detail {

inline constexpr size_t kChunkBytes = size_t{1} << 20;  // 1 MiB per message
// Both ends accept messages up to this size (a chunk plus its envelope).
inline constexpr int kMaxMessageBytes = 16 << 20;
// A link probe's filler, each way (rpc Probe).
inline constexpr size_t kMaxProbeBytes = size_t{4} << 20;

// Calls emit(offset, piece) for consecutive pieces of at most kChunkBytes;
// once with an empty piece for an empty buffer, so every buffer is announced.
template <class Emit>
bool for_each_chunk(std::span<const uint8_t> bytes, Emit&& emit) {
  if (bytes.empty()) return emit(uint64_t{0}, bytes);
  for (size_t off = 0; off < bytes.size(); off += kChunkBytes) {
    if (!emit(static_cast<uint64_t>(off), bytes.subspan(off, std::min(kChunkBytes, bytes.size() - off))))
      return false;
  }
  return true;
}

// One buffer being reassembled from chunks that arrive in order. A buffer
// from an earlier step can be adopted: when the size is the same, it is
// reused as it is (no allocation, no page faults, no zero-fill), which is
// what keeps large tensors from costing fresh memory every step.
//
// Buffer is std::vector<uint8_t> or std::string. With std::string, a chunk
// that is the whole buffer (every payload of at most kChunkBytes) is taken
// over from the parsed message without a copy: the bytes are copied once,
// from gRPC's receive slices into the message, and never again before use.
template <class Buffer>
class BasicReassembly {
 public:
  void adopt(Buffer&& buffer) { bytes_ = std::move(buffer); }
  // Ready for another attempt (a retried request), keeping the buffer.
  void restart() {
    started_ = false;
    filled_ = 0;
  }
  // Returns an error message, or "" when the chunk fits.
  std::string add(uint64_t offset, uint64_t total, const std::string& data, uint64_t max_total) {
    if (std::string err = check(offset, total, data.size(), max_total); !err.empty()) return err;
    if (!data.empty()) std::memcpy(bytes_.data() + filled_, data.data(), data.size());
    filled_ += data.size();
    return "";
  }
  // As add(), but a chunk holding the whole buffer is moved in (std::string).
  std::string take(uint64_t offset, uint64_t total, std::string&& data, uint64_t max_total) {
    if constexpr (std::is_same_v<Buffer, std::string>) {
      if (!started_ && offset == 0 && data.size() == total && total <= max_total) {
        bytes_ = std::move(data);
        started_ = true;
        filled_ = total;
        return "";
      }
    }
    return add(offset, total, data, max_total);
  }
  bool started() const { return started_; }
  bool complete() const { return started_ && filled_ == bytes_.size(); }
  uint64_t filled() const { return filled_; }
  Buffer& bytes() { return bytes_; }
  const Buffer& bytes() const { return bytes_; }

 private:
  std::string check(uint64_t offset, uint64_t total, size_t size, uint64_t max_total) {
    if (!started_) {
      if (total > max_total)
        return "announces " + std::to_string(total) + " bytes, more than the " + std::to_string(max_total) +
               " expected";
      if (bytes_.size() != total) bytes_.resize(total);
      started_ = true;
    }
    if (total != bytes_.size())
      return "chunk says the total is " + std::to_string(total) + " bytes, earlier ones " +
             std::to_string(bytes_.size());
    if (offset != filled_)
      return "chunk at byte " + std::to_string(offset) + " where " + std::to_string(filled_) + " was expected";
    if (size > total - filled_)
      return "chunk of " + std::to_string(size) + " bytes overruns the " + std::to_string(total) + " bytes";
    return "";
  }

  Buffer bytes_;
  uint64_t filled_ = 0;
  bool started_ = false;
};

using Reassembly = BasicReassembly<std::vector<uint8_t>>;
using StringReassembly = BasicReassembly<std::string>;

inline std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace terngrad::comm::detail
