// Training checkpoints: everything a run needs to resume bit-for-bit.
//
// A checkpoint holds named float32 tensors (weights, optimizer slots, EMA
// shadows), named byte blobs (RNG and sampler states, codec state, anything
// serialized by its owner) and a free-form metadata string. Files are
// "<dir>/ckpt-<step>.tgck", written atomically (temporary file in the same
// directory, fflush + fsync, rename, fsync of the directory), then the index
// "<dir>/checkpoint" (also atomic) is rewritten to name the latest, and only
// the last K checkpoints are kept. A crash at any point leaves the previous
// checkpoint and index intact.
//
// File format (version 1, all integers little-endian):
//   header   8 bytes magic "\x89TGCK\r\n\x1a" (PNG-style: catches text-mode
//            and 7-bit mangling), u32 version, u32 entry count,
//            u64 total file length (CRC included), i64 step,
//            u32 metadata length + metadata bytes
//   entries  u32 name length + name bytes, u8 dtype (1 = f32, 2 = u8 blob),
//            u8 rank, u16 zero, rank x i64 dims, u64 byte length, data
//   trailer  u32 CRC-32 (zlib) of every preceding byte
// The loader checks magic, version, length (truncated / trailing bytes),
// CRC, dtypes, shapes against byte lengths and duplicate names, and its
// errors name the file and what is wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "terngrad/train/layer.h"
#include "terngrad/train/tensor.h"

namespace terngrad::train {

using TensorMap = std::map<std::string, Tensor>;
using BlobMap = std::map<std::string, std::vector<uint8_t>>;

struct Checkpoint {
  std::string path;  // the file it was read from
  int64_t step = 0;
  std::string metadata;
  TensorMap tensors;
  BlobMap blobs;
};

// Writes <dir>/ckpt-<step>.tgck and the index, then deletes older
// checkpoints beyond the newest keep_last (0 = keep all; the one just written
// is always kept and counts as the newest; the others rank by step). Creates
// dir if needed. Names must be non-empty and unique across tensors and blobs
// and each tensor's data must match its shape (std::invalid_argument
// otherwise, before anything is written). Returns the checkpoint's path.
std::string save_checkpoint(const std::string& dir, int64_t step, const TensorMap& tensors, const BlobMap& blobs,
                            int keep_last = 5, const std::string& metadata = "");

// Reads and verifies one checkpoint file.
Checkpoint load_checkpoint(const std::string& path);

// The checkpoint the index of dir names; without an index (a crash between
// the checkpoint's rename and the index's), the highest-step ckpt-*.tgck.
// nullopt when dir does not exist or holds no checkpoint. An index naming a
// missing or corrupt file is an error here, not a silent fall-back to older
// state; load_newest_intact_checkpoint falls back, and says so.
std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir);

// What a run resumes from: the checkpoint the index names or, when that one
// is missing or corrupt (bad CRC, truncated, ...), the newest earlier
// checkpoint file that loads intact. Each one passed over is reported to
// warn(), naming the file and why. nullopt when dir holds no checkpoint at
// all; std::runtime_error listing every file and why when none is intact.
//
// why_unusable (optional) says why an intact checkpoint should not be resumed
// from ("" when it can be): such a one is passed over, reported to warn(),
// for the newest earlier one it accepts; when it accepts none, the newest
// intact checkpoint is returned after all. (A restarted replica's own codec
// state may lag the chief's newest checkpoint: the kill came between the two
// writes.)
std::optional<Checkpoint> load_newest_intact_checkpoint(
    const std::string& dir, const std::function<void(const std::string&)>& warn,
    const std::function<std::string(const Checkpoint&)>& why_unusable = nullptr);

// "<dir>/ckpt-<step>.tgck".
std::string checkpoint_path(const std::string& dir, int64_t step);

// Copies checkpoint tensors into the parameters by name. Every parameter must
// be present with the same shape; otherwise std::runtime_error lists the
// missing names and the shape mismatches, and no parameter is modified.
// Names in `tensors` that are not parameters (optimizer slots, EMA shadows)
// are ignored unless allow_extra is false, in which case they are listed as
// an error too.
void restore_params(ParamSet& params, const TensorMap& tensors, bool allow_extra = true);

// The model state's counterpart (batch norm's moving statistics, layer.h's
// StateSet): every state tensor must be present with the same shape, else
// std::runtime_error lists the missing names and mismatches and nothing is
// modified. A model without state restores nothing and checks nothing.
void restore_state(StateSet& state, const TensorMap& tensors);

// Blob helpers for integer state (sampler positions, counters).
std::vector<uint8_t> pack_int64s(const std::vector<int64_t>& values);
// Throws std::runtime_error naming `what` when the size is not a multiple of 8.
std::vector<int64_t> unpack_int64s(const std::vector<uint8_t>& blob, const std::string& what);

}  // namespace terngrad::train
