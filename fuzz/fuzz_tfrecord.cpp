// TFRecord files of tf.train.Example (train/tfrecord.h, tf_example.h): the
// input is a mode byte and one file. Mode bit 0: skip_corrupt instead of
// strict; bit 1: fix the CRCs first (a fuzzer cannot forge CRC-32Cs, so
// without this it would never get past the framing to the Example parser and
// the image decoders). The file is indexed, every record read and parsed, what
// parses decoded with small limits. Also load_tfrecord_dataset, whose result
// must pass check_dataset(). Faults must be DataErrors, never crashes,
// hangs, or allocations sized by an unchecked length.
#include "fuzz_input.h"
#include "memory_file.h"
#include "outcome.h"
#include "terngrad/train/crc32c.h"
#include "terngrad/train/datasets.h"
#include "terngrad/train/tf_example.h"
#include "terngrad/train/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tr = terngrad::train;
  using namespace terngrad::fuzz;
  if (size == 0) return 0;
  static MemoryFile file("fuzz-train-00000-of-00001");
  const bool skip = (data[0] & 1) != 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (data[0] & 2) {
    // Walk the framing as far as the lengths fit and make every CRC right.
    auto put32 = [&](size_t at, uint32_t v) {
      for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(v >> (8 * i));
    };
    size_t pos = 0;
    while (bytes.size() - pos >= 12) {
      put32(pos + 8, tr::mask_crc32c(tr::crc32c(&bytes[pos], 8)));
      uint64_t len = 0;
      for (int i = 0; i < 8; ++i) len |= uint64_t{bytes[pos + i]} << (8 * i);
      if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) break;
      put32(pos + 12 + len, tr::mask_crc32c(tr::crc32c(&bytes[pos + 12], len)));
      pos += 16 + len;
    }
  }
  file.write(bytes);
  tr::DecodeLimits limits;
  limits.max_side = 256;
  limits.max_pixels = 1 << 16;
  accepts([&] {
    const tr::TfRecordFile f(file.path(), skip);
    for (int64_t i = 0; i < f.size(); ++i)
      accepts([&] {
        const tr::EncodedExample e = tr::parse_tf_example(f.read(i), f.where(i));
        tr::decode_example(e, 0, limits);
      });
  });
  tr::TfRecordLoadOptions o;
  o.skip_corrupt_records = skip;
  o.limits = limits;
  tr::Dataset d;
  if (!accepts([&] { d = tr::load_tfrecord_dataset({file.path()}, o); })) return 0;
  must_accept("check_dataset", [&] { tr::check_dataset(d, "fuzzed TFRecord"); });
  return 0;
}
