// Checkpoints: round trip, corruption detection, atomic writes, retention,
// index handling and restoring into a ParamSet.
#include <zlib.h>

#include <cstring>

#include "terngrad/train/checkpoint.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

TensorMap sample_tensors(float base) {
  TensorMap t;
  t["conv1/weights"] = tensor({5, 5, 1, 4}, [&](int64_t i) { return base + 0.25f * i; });
  t["conv1/biases"] = tensor({4}, [&](int64_t i) { return -base * i; });
  t["conv1/weights/Momentum"] = tensor({5, 5, 1, 4}, [&](int64_t i) { return 1e-3f * i - base; });
  t["scalar"] = tensor({}, [&](int64_t) { return base * 3; });
  t["empty"] = tensor({0, 7}, [](int64_t) { return 0.0f; });
  return t;
}

BlobMap sample_blobs() {
  BlobMap b;
  b["samplers"] = pack_int64s({3, 17, -5, 1LL << 40});
  b["rng/dropout"] = {1, 2, 3, 255};
  b["codec_state"] = {};
  return b;
}

void expect_equal(const Checkpoint& ck, const TensorMap& t, const BlobMap& b) {
  ASSERT_EQ(ck.tensors.size(), t.size());
  for (const auto& [name, v] : t) {
    ASSERT_TRUE(ck.tensors.count(name)) << name;
    EXPECT_EQ(ck.tensors.at(name).shape, v.shape) << name;
    EXPECT_EQ(ck.tensors.at(name).data, v.data) << name;
  }
  EXPECT_EQ(ck.blobs, b);
}

// Rewrites the CRC trailer so a deliberately edited file passes the CRC check.
void fix_crc(std::vector<uint8_t>& bytes) {
  const uint32_t crc = static_cast<uint32_t>(crc32(0, bytes.data(), static_cast<uInt>(bytes.size() - 4)));
  for (int i = 0; i < 4; ++i) bytes[bytes.size() - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

TEST(Checkpoint, RoundTrip) {
  TempDir t;
  const TensorMap tensors = sample_tensors(1.5f);
  const BlobMap blobs = sample_blobs();
  const std::string path = save_checkpoint(t.path(), 120, tensors, blobs, 3, "net=lenet\nseed=1");
  EXPECT_EQ(path, t / "ckpt-120.tgck");
  EXPECT_EQ(list_dir(t.path()), (std::vector<std::string>{"checkpoint", "ckpt-120.tgck"}));  // no temp left
  const Checkpoint ck = load_checkpoint(path);
  EXPECT_EQ(ck.step, 120);
  EXPECT_EQ(ck.path, path);
  EXPECT_EQ(ck.metadata, "net=lenet\nseed=1");
  expect_equal(ck, tensors, blobs);
  const auto latest = load_latest_checkpoint(t.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 120);
  expect_equal(*latest, tensors, blobs);
  EXPECT_EQ(unpack_int64s(latest->blobs.at("samplers"), "samplers"), (std::vector<int64_t>{3, 17, -5, 1LL << 40}));
  EXPECT_CONTAINS(read_text(t / "checkpoint"), "model_checkpoint_path: \"ckpt-120.tgck\"");
}

TEST(Checkpoint, RestoreStateNamesWhatIsMissingAndChangesNothing) {
  // Built field by field: this library does not link the layers' Tensor helpers.
  auto filled = [](int64_t n, float v) {
    Tensor t;
    t.shape = {n};
    t.data.assign(static_cast<size_t>(n), v);
    return t;
  };
  StateSet state;
  state.add(StateVar{"bn/moving_mean", filled(3, 0.0f)});
  state.add(StateVar{"bn/moving_variance", filled(3, 1.0f)});
  TensorMap ck;
  ck["bn/moving_mean"] = filled(3, 0.5f);
  try {
    restore_state(state, ck);
    FAIL() << "a checkpoint without moving_variance was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bn/moving_variance"), std::string::npos) << e.what();
  }
  EXPECT_EQ(state.vars[0].value.data[0], 0.0f);  // untouched
  ck["bn/moving_variance"] = filled(4, 2.0f);
  EXPECT_THROW(restore_state(state, ck), std::runtime_error);  // shape mismatch
  ck["bn/moving_variance"] = filled(3, 2.0f);
  restore_state(state, ck);
  EXPECT_EQ(state.vars[0].value.data[2], 0.5f);
  EXPECT_EQ(state.vars[1].value.data[1], 2.0f);
}

TEST(Checkpoint, NoCheckpointYet) {
  TempDir t;
  EXPECT_FALSE(load_latest_checkpoint(t / "does-not-exist").has_value());
  EXPECT_FALSE(load_latest_checkpoint(t.path()).has_value());
}

TEST(Checkpoint, CrcMismatchDetected) {
  TempDir t;
  const std::string path = save_checkpoint(t.path(), 1, sample_tensors(2), sample_blobs());
  auto bytes = read_bytes(path);
  bytes[bytes.size() / 2] ^= 0x10;  // one bit in some tensor's data
  write_bytes(path, bytes);
  const std::string e = error_of<std::runtime_error>([&] { load_checkpoint(path); });
  EXPECT_CONTAINS(e, path);
  EXPECT_CONTAINS(e, "CRC mismatch: stored 0x");
  EXPECT_THROW(load_latest_checkpoint(t.path()), std::runtime_error);  // no silent fall-back
}

TEST(Checkpoint, BadMagicTruncatedTrailingVersion) {
  TempDir t;
  const std::string path = save_checkpoint(t.path(), 1, sample_tensors(2), sample_blobs());
  const auto good = read_bytes(path);

  write_bytes(t / "text.tgck", std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  std::string e = error_of<std::runtime_error>([&] { load_checkpoint(t / "text.tgck"); });
  EXPECT_CONTAINS(e, t / "text.tgck");
  EXPECT_CONTAINS(e, "bad magic 68656c6c6f20776f");

  auto cut = good;
  cut.resize(good.size() - 100);
  write_bytes(t / "cut.tgck", cut);
  e = error_of<std::runtime_error>([&] { load_checkpoint(t / "cut.tgck"); });
  EXPECT_CONTAINS(e, "truncated: " + std::to_string(cut.size()) + " bytes, the header says " + std::to_string(good.size()));

  cut.resize(20);
  write_bytes(t / "cut.tgck", cut);
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_checkpoint(t / "cut.tgck"); }), "truncated");

  auto longer = good;
  longer.insert(longer.end(), {0, 0, 0});
  write_bytes(t / "long.tgck", longer);
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_checkpoint(t / "long.tgck"); }), "3 trailing bytes");

  auto v2 = good;
  v2[8] = 2;
  write_bytes(t / "v2.tgck", v2);
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_checkpoint(t / "v2.tgck"); }), "unsupported version 2");

  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_checkpoint(t / "missing.tgck"); }), t / "missing.tgck");
}

TEST(Checkpoint, DuplicateNameDetected) {
  TempDir t;
  TensorMap two;
  two["aa"] = tensor({2}, [](int64_t i) { return float(i); });
  two["ab"] = tensor({2}, [](int64_t i) { return float(-i); });
  const std::string path = save_checkpoint(t.path(), 1, two, {});
  auto bytes = read_bytes(path);
  // Rename the second entry "ab" to "aa" (and keep the CRC valid) so only
  // the duplicate check can catch it.
  const char* needle = "ab";
  auto it = std::search(bytes.begin(), bytes.end(), needle, needle + 2);
  ASSERT_NE(it, bytes.end());
  it[1] = 'a';
  fix_crc(bytes);
  write_bytes(path, bytes);
  const std::string e = error_of<std::runtime_error>([&] { load_checkpoint(path); });
  EXPECT_CONTAINS(e, path);
  EXPECT_CONTAINS(e, "duplicate name 'aa'");
}

TEST(Checkpoint, CorruptEntryWithValidCrcReportsTheEntry) {
  TempDir t;
  TensorMap one;
  one["w"] = tensor({3}, [](int64_t i) { return float(i); });
  const std::string path = save_checkpoint(t.path(), 1, one, {});
  auto bytes = read_bytes(path);
  // Entry layout after the 36-byte header + empty metadata: u32 name len,
  // "w", dtype at offset 41.
  ASSERT_EQ(bytes[41], 1);
  bytes[41] = 9;
  fix_crc(bytes);
  write_bytes(path, bytes);
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_checkpoint(path); }), "entry 0 'w': unknown dtype 9");
}

// Found by fuzz/fuzz_checkpoint: the metadata length was trusted before it
// was compared with the file, so a corrupt one allocated up to 4 GiB.
TEST(Checkpoint, MetadataLengthBeyondTheFileIsRefusedBeforeAllocating) {
  TempDir t;
  const std::string path = save_checkpoint(t.path(), 1, {}, {});
  auto bytes = read_bytes(path);
  // The u32 metadata length follows the 32-byte fixed header.
  ASSERT_EQ(bytes[32], 0);
  bytes[32] = 0xF0;
  bytes[33] = bytes[34] = bytes[35] = 0xFF;
  fix_crc(bytes);
  write_bytes(path, bytes);
  const std::string e = error_of<std::runtime_error>([&] { load_checkpoint(path); });
  EXPECT_CONTAINS(e, path);
  EXPECT_CONTAINS(e, "metadata length 4294967280 exceeds the 0 bytes left");
}

// Found by fuzz/fuzz_checkpoint: 4 * elements wrapped for a shape of 2^62
// elements, so a byte length of 0 matched it and the reader allocated 2^62 floats.
TEST(Checkpoint, ShapeWhoseByteCountWrapsIsRefused) {
  TempDir t;
  TensorMap one;
  one["w"] = tensor({3}, [](int64_t i) { return float(i); });
  const std::string path = save_checkpoint(t.path(), 1, one, {});
  auto bytes = read_bytes(path);
  // Entry 0 after the 36-byte header + empty metadata: u32 name length, "w",
  // dtype, rank, u16 zero, then the one i64 dimension at 45 and the u64 byte length at 53.
  ASSERT_EQ(bytes[45], 3);
  ASSERT_EQ(bytes[53], 12);
  for (int i = 0; i < 8; ++i) bytes[45 + i] = i == 7 ? 0x40 : 0;  // 2^62
  bytes[53] = 0;
  fix_crc(bytes);
  write_bytes(path, bytes);
  const std::string e = error_of<std::runtime_error>([&] { load_checkpoint(path); });
  EXPECT_CONTAINS(e, "entry 0 'w': shape [4611686018427387904] has 4611686018427387904 float32 elements");
  EXPECT_CONTAINS(e, "the entry holds 0 bytes");
}

TEST(Checkpoint, FailedWriteLeavesThePreviousCheckpointIntact) {
  TempDir t;
  const TensorMap first = sample_tensors(1), second = sample_tensors(2);
  save_checkpoint(t.path(), 1, first, sample_blobs());
  const std::string index_before = read_text(t / "checkpoint");
  // Make the final rename fail: a directory sits where ckpt-2.tgck would go.
  fs::create_directory(t / "ckpt-2.tgck");
  const std::string e = error_of<std::runtime_error>([&] { save_checkpoint(t.path(), 2, second, sample_blobs()); });
  EXPECT_CONTAINS(e, t / "ckpt-2.tgck");
  EXPECT_EQ(list_dir(t.path()), (std::vector<std::string>{"checkpoint", "ckpt-1.tgck", "ckpt-2.tgck"}));
  EXPECT_TRUE(fs::is_directory(t / "ckpt-2.tgck"));  // untouched, and no temporary file left
  EXPECT_EQ(read_text(t / "checkpoint"), index_before);
  const auto latest = load_latest_checkpoint(t.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 1);
  expect_equal(*latest, first, sample_blobs());
}

TEST(Checkpoint, ReadOnlyDirectoryFailsCleanly) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not stop writes";
  TempDir t;
  save_checkpoint(t.path(), 1, sample_tensors(1), {});
  fs::permissions(t.path(), fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_THROW(save_checkpoint(t.path(), 2, sample_tensors(2), {}), std::runtime_error);
  fs::permissions(t.path(), fs::perms::owner_all);
  EXPECT_EQ(list_dir(t.path()), (std::vector<std::string>{"checkpoint", "ckpt-1.tgck"}));
  EXPECT_EQ(load_latest_checkpoint(t.path())->step, 1);
}

TEST(Checkpoint, InvalidInputWritesNothing) {
  TempDir t;
  TensorMap bad;
  bad["w"] = tensor({2, 3}, [](int64_t) { return 0.0f; });
  bad["w"].data.pop_back();
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { save_checkpoint(t.path(), 1, bad, {}); }),
                  "tensor 'w' has shape [2, 3] (6 elements) but holds 5 values");
  TensorMap ok;
  ok["x"] = tensor({1}, [](int64_t) { return 1.0f; });
  BlobMap clash;
  clash["x"] = {1};
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { save_checkpoint(t.path(), 1, ok, clash); }),
                  "'x' is both a tensor and a blob");
  EXPECT_THROW(save_checkpoint(t.path(), -1, ok, {}), std::invalid_argument);
  EXPECT_TRUE(list_dir(t.path()).empty());
}

TEST(Checkpoint, KeepsTheLastK) {
  TempDir t;
  for (int64_t step = 100; step <= 500; step += 100) save_checkpoint(t.path(), step, sample_tensors(float(step)), {}, 2);
  EXPECT_EQ(list_dir(t.path()), (std::vector<std::string>{"checkpoint", "ckpt-400.tgck", "ckpt-500.tgck"}));
  const std::string index = read_text(t / "checkpoint");
  EXPECT_CONTAINS(index, "model_checkpoint_path: \"ckpt-500.tgck\"");
  EXPECT_CONTAINS(index, "all_model_checkpoint_paths: \"ckpt-400.tgck\"");
  EXPECT_EQ(index.find("ckpt-300"), std::string::npos);
  EXPECT_EQ(load_latest_checkpoint(t.path())->tensors.at("scalar").data[0], 1500.0f);
  // keep_last = 0 keeps everything.
  save_checkpoint(t.path(), 600, sample_tensors(6), {}, 0);
  EXPECT_EQ(list_dir(t.path()).size(), 4u);
}

TEST(Checkpoint, IndexHandling) {
  TempDir t;
  save_checkpoint(t.path(), 7, sample_tensors(7), {});
  save_checkpoint(t.path(), 9, sample_tensors(9), {});
  // Without the index (a crash between rename and index write): highest step.
  fs::remove(t / "checkpoint");
  EXPECT_EQ(load_latest_checkpoint(t.path())->step, 9);
  // An index naming a missing file is an error, not a fall-back.
  {
    std::ofstream(t / "checkpoint") << "model_checkpoint_path: \"ckpt-8.tgck\"\n";
  }
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_latest_checkpoint(t.path()); }), "ckpt-8.tgck");
  // A stale temporary file from a crashed save is cleaned by the next save.
  write_bytes(t / ".ckpt-10.tgck.tmp.999.0", {1, 2, 3});
  save_checkpoint(t.path(), 10, sample_tensors(10), {});
  for (const auto& name : list_dir(t.path())) EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
}

// Resuming: a corrupt latest checkpoint falls back to the newest intact one,
// and every file passed over is reported with the reason.
TEST(Checkpoint, FallsBackToTheNewestIntactCheckpointAndSaysWhy) {
  TempDir t;
  for (int64_t step : {1, 2, 3}) save_checkpoint(t.path(), step, sample_tensors(float(step)), sample_blobs());
  auto bytes = read_bytes(t / "ckpt-3.tgck");
  bytes[bytes.size() / 2] ^= 0x10;
  write_bytes(t / "ckpt-3.tgck", bytes);
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& w) { warnings.push_back(w); };
  auto ck = load_newest_intact_checkpoint(t.path(), warn);
  ASSERT_TRUE(ck.has_value());
  EXPECT_EQ(ck->step, 2);
  expect_equal(*ck, sample_tensors(2), sample_blobs());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_CONTAINS(warnings[0], t / "ckpt-3.tgck");
  EXPECT_CONTAINS(warnings[0], "CRC mismatch");
  // Two bad ones (the second truncated): the oldest, both named.
  bytes = read_bytes(t / "ckpt-2.tgck");
  bytes.resize(bytes.size() - 9);
  write_bytes(t / "ckpt-2.tgck", bytes);
  warnings.clear();
  ck = load_newest_intact_checkpoint(t.path(), warn);
  ASSERT_TRUE(ck.has_value());
  EXPECT_EQ(ck->step, 1);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_CONTAINS(warnings[0], "ckpt-3.tgck");
  EXPECT_CONTAINS(warnings[1], "ckpt-2.tgck");
  EXPECT_CONTAINS(warnings[1], "truncated");
  // The strict loader still refuses (no silent fall-back there).
  EXPECT_THROW(load_latest_checkpoint(t.path()), std::runtime_error);
}

// A caller's preference (why_unusable): intact checkpoints it passes over are
// reported; when it takes none, the newest intact one is returned after all.
TEST(Checkpoint, PassesOverIntactCheckpointsTheCallerCannotUse) {
  TempDir t;
  for (int64_t step : {1, 2, 3}) save_checkpoint(t.path(), step, sample_tensors(float(step)), sample_blobs());
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& w) { warnings.push_back(w); };
  auto below = [](int64_t limit) {
    return [limit](const Checkpoint& c) { return c.step < limit ? "" : "step " + std::to_string(c.step) + " too new"; };
  };
  auto ck = load_newest_intact_checkpoint(t.path(), warn, below(2));
  ASSERT_TRUE(ck.has_value());
  EXPECT_EQ(ck->step, 1);
  expect_equal(*ck, sample_tensors(1), sample_blobs());
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_CONTAINS(warnings[0], t / "ckpt-3.tgck" + ": step 3 too new");
  EXPECT_CONTAINS(warnings[1], "ckpt-2.tgck: step 2 too new");
  warnings.clear();
  ck = load_newest_intact_checkpoint(t.path(), warn, below(0));
  ASSERT_TRUE(ck.has_value());
  EXPECT_EQ(ck->step, 3);
  EXPECT_EQ(warnings.size(), 3u);
  warnings.clear();
  EXPECT_EQ(load_newest_intact_checkpoint(t.path(), warn, below(10))->step, 3);
  EXPECT_TRUE(warnings.empty());
}

TEST(Checkpoint, AnIndexNamingAMissingFileFallsBackToTheNewestFile) {
  TempDir t;
  save_checkpoint(t.path(), 7, sample_tensors(7), {});
  save_checkpoint(t.path(), 9, sample_tensors(9), {});
  { std::ofstream(t / "checkpoint") << "model_checkpoint_path: \"ckpt-12.tgck\"\n"; }
  std::vector<std::string> warnings;
  const auto ck = load_newest_intact_checkpoint(t.path(), [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(ck.has_value());
  EXPECT_EQ(ck->step, 9);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_CONTAINS(warnings[0], "ckpt-12.tgck, which does not exist");
}

TEST(Checkpoint, NoIntactCheckpointIsAnErrorNamingEachFile) {
  TempDir t;
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& w) { warnings.push_back(w); };
  // Nothing saved yet: a fresh start, nothing to warn about.
  EXPECT_FALSE(load_newest_intact_checkpoint(t.path(), warn).has_value());
  EXPECT_FALSE(load_newest_intact_checkpoint(t / "does-not-exist", warn).has_value());
  EXPECT_TRUE(warnings.empty());
  save_checkpoint(t.path(), 4, sample_tensors(4), {});
  save_checkpoint(t.path(), 5, sample_tensors(5), {});
  for (const char* name : {"ckpt-4.tgck", "ckpt-5.tgck"}) write_bytes(t / name, {'n', 'o', 'p', 'e', '!', '!', '!', '!'});
  const std::string e = error_of<std::runtime_error>([&] { load_newest_intact_checkpoint(t.path(), warn); });
  EXPECT_CONTAINS(e, "no intact checkpoint in " + t.path());
  EXPECT_CONTAINS(e, "ckpt-5.tgck: bad magic");
  EXPECT_CONTAINS(e, "ckpt-4.tgck: bad magic");
  EXPECT_EQ(warnings.size(), 2u);
}

ParamSet model_params() {
  ParamSet p;
  p.add(Param{"conv1/weights", tensor({5, 5, 1, 4}, [](int64_t) { return 0.0f; }), 0.0005f, false});
  p.add(Param{"conv1/biases", tensor({4}, [](int64_t) { return 0.0f; }), 0.0f, false});
  return p;
}

TEST(Checkpoint, RestoreParams) {
  const TensorMap tensors = sample_tensors(4);
  ParamSet p = model_params();
  restore_params(p, tensors);  // extra names (slots, scalars) ignored by default
  EXPECT_EQ(p.params[0].value.data, tensors.at("conv1/weights").data);
  EXPECT_EQ(p.params[1].value.data, tensors.at("conv1/biases").data);
  EXPECT_EQ(p.params[0].weight_decay, 0.0005f);

  ParamSet q = model_params();
  q.add(Param{"fc/weights", tensor({3, 2}, [](int64_t) { return 0.0f; }), 0.0f, true});
  TensorMap wrong = tensors;
  wrong["conv1/biases"] = tensor({5}, [](int64_t) { return 1.0f; });
  const std::string e = error_of<std::runtime_error>([&] { restore_params(q, wrong); });
  EXPECT_CONTAINS(e, "missing [fc/weights]");
  EXPECT_CONTAINS(e, "shape mismatch [conv1/biases (model [4], checkpoint [5])]");
  for (const Param& x : q.params)
    for (float v : x.value.data) ASSERT_EQ(v, 0.0f) << "modified on error: " << x.name;

  ParamSet r = model_params();
  const std::string e2 = error_of<std::runtime_error>([&] { restore_params(r, tensors, false); });
  EXPECT_CONTAINS(e2, "not in the model [conv1/weights/Momentum, empty, scalar]");
}

TEST(Checkpoint, Int64Blobs) {
  EXPECT_EQ(unpack_int64s(pack_int64s({}), "x"), std::vector<int64_t>{});
  EXPECT_CONTAINS(error_of<std::runtime_error>([] { unpack_int64s({1, 2, 3}, "samplers"); }),
                  "samplers: 3 bytes is not a whole number");
}

}  // namespace
