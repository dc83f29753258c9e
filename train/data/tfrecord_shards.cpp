// Sharded TFRecord file sets: train-00000-of-01024 ... (tfrecord.h).
#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "terngrad/train/tfrecord.h"

namespace terngrad::train {
namespace {

namespace fs = std::filesystem;

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::string shard_file_name(const ShardName& s, size_t width) {
  std::string idx = std::to_string(s.index), cnt = std::to_string(s.count);
  if (idx.size() < width) idx.insert(0, width - idx.size(), '0');
  if (cnt.size() < width) cnt.insert(0, width - cnt.size(), '0');
  return s.prefix + "-" + idx + "-of-" + cnt;
}

}  // namespace

ShardName parse_shard_name(const std::string& name) {
  // <prefix>-<digits>-of-<digits>; TF's converters pad to 5 digits, any width is taken.
  const size_t of = name.rfind("-of-");
  if (of == std::string::npos) return {};
  const std::string count = name.substr(of + 4);
  const size_t dash = of == 0 ? std::string::npos : name.rfind('-', of - 1);
  if (dash == std::string::npos) return {};
  const std::string index = name.substr(dash + 1, of - dash - 1);
  // 9 digits at most: larger numbers are not shard counts and would overflow.
  if (!all_digits(index) || !all_digits(count) || index.size() > 9 || count.size() > 9) return {};
  ShardName s;
  s.prefix = name.substr(0, dash);
  s.index = std::stoll(index);
  s.count = std::stoll(count);
  return s;
}

std::vector<std::string> resolve_tfrecord_files(const std::string& pattern) {
  const fs::path p(pattern);
  const std::string name = p.filename().string();
  const bool glob = name.find_first_of("*?[") != std::string::npos;
  if (!glob) {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) throw DataError(pattern + ": no such TFRecord file");
    return {pattern};
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw DataError(pattern + ": cannot list " + dir.string() + ": " + ec.message());
  std::vector<std::string> names;
  for (const fs::directory_entry& e : it) {
    const std::string n = e.path().filename().string();
    // FNM_PERIOD: "*" does not match a leading dot (AtomicFile's temporaries).
    if (::fnmatch(name.c_str(), n.c_str(), FNM_PERIOD) == 0 && e.is_regular_file(ec)) names.push_back(n);
  }
  if (names.empty()) throw DataError(pattern + ": no files match");
  std::sort(names.begin(), names.end());

  // Shard sets must be whole; other names (a "*.tfrecord" glob) are taken as found.
  std::vector<ShardName> shards;
  for (const std::string& n : names) shards.push_back(parse_shard_name(n));
  const size_t named = static_cast<size_t>(std::count_if(shards.begin(), shards.end(), [](const ShardName& s) { return s.count >= 0; }));
  if (named == 0) {
    std::vector<std::string> out;
    for (const std::string& n : names) out.push_back((dir / n).string());
    return out;
  }
  if (named != names.size()) {
    size_t like = 0;
    while (shards[like].count < 0) ++like;
    for (size_t i = 0; i < names.size(); ++i)
      if (shards[i].count < 0)
        throw DataError(pattern + ": " + names[i] + " matches, but is not named <prefix>-NNNNN-of-MMMMM like " +
                        names[like] + " (a stray file among the shards?)");
  }
  std::map<std::pair<std::string, int64_t>, std::vector<size_t>> sets;  // (prefix, count) -> files
  for (size_t i = 0; i < names.size(); ++i) sets[{shards[i].prefix, shards[i].count}].push_back(i);
  if (sets.size() > 1) {
    std::string list;
    for (const auto& [key, files] : sets)
      list += (list.empty() ? "" : ", ") + names[files.front()] + " (" + std::to_string(files.size()) + " files of " +
              key.first + "-*-of-" + std::to_string(key.second) + ")";
    throw DataError(pattern + ": inconsistent shard sets: " + list);
  }
  const int64_t count = shards[0].count;
  if (count <= 0) throw DataError(pattern + ": " + names[0] + " says the set has " + std::to_string(count) + " shards");
  std::vector<std::string> by_index(static_cast<size_t>(std::min<int64_t>(count, 1 << 24)));
  if (static_cast<int64_t>(by_index.size()) != count)
    throw DataError(pattern + ": " + names[0] + " claims " + std::to_string(count) + " shards, more than 2^24");
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t k = shards[i].index;
    if (k >= count)
      throw DataError(pattern + ": " + names[i] + " is shard " + std::to_string(k) + " of a set of " +
                      std::to_string(count) + " (shards are numbered from 0)");
    if (!by_index[static_cast<size_t>(k)].empty())
      throw DataError(pattern + ": shard " + std::to_string(k) + " appears twice: " + by_index[static_cast<size_t>(k)] +
                      " and " + names[i]);
    by_index[static_cast<size_t>(k)] = names[i];
  }
  std::vector<std::string> missing;
  const size_t width = names[0].size() - names[0].rfind("-of-") - 4;
  for (int64_t k = 0; k < count; ++k)
    if (by_index[static_cast<size_t>(k)].empty()) {
      ShardName s = shards[0];
      s.index = k;
      missing.push_back(shard_file_name(s, width));
    }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", " : "") + missing[i];
    if (missing.size() > 8) list += ", ...";
    throw DataError(pattern + ": " + std::to_string(missing.size()) + " of " + std::to_string(count) +
                    " shards missing in " + dir.string() + ": " + list);
  }
  std::vector<std::string> out;
  for (const std::string& n : by_index) out.push_back((dir / n).string());
  return out;
}

}  // namespace terngrad::train
