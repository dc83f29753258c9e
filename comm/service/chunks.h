// Private: large byte buffers travel as a stream of chunks (no message grows
// with the model), and are reassembled with every size checked.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace terngrad::comm::detail {

inline constexpr size_t kChunkBytes = size_t{1} << 20;  // 1 MiB per message
// Both ends accept messages up to this size (a chunk plus its envelope).
inline constexpr int kMaxMessageBytes = 16 << 20;

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
class Reassembly {
 public:
  void adopt(std::vector<uint8_t>&& buffer) { bytes_ = std::move(buffer); }
  // Ready for another attempt (a retried request), keeping the buffer.
  void restart() {
    started_ = false;
    filled_ = 0;
  }
  // Returns an error message, or "" when the chunk fits.
  std::string add(uint64_t offset, uint64_t total, const std::string& data, uint64_t max_total) {
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
    if (data.size() > total - filled_)
      return "chunk of " + std::to_string(data.size()) + " bytes overruns the " + std::to_string(total) + " bytes";
    if (!data.empty()) std::memcpy(bytes_.data() + filled_, data.data(), data.size());
    filled_ += data.size();
    return "";
  }
  bool started() const { return started_; }
  bool complete() const { return started_ && filled_ == bytes_.size(); }
  uint64_t filled() const { return filled_; }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
  uint64_t filled_ = 0;
  bool started_ = false;
};

inline std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace terngrad::comm::detail
