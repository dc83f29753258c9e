// link_rate.h: tc's rate syntax, and schedules of rates.
#include "terngrad/comm/link_rate.h"

#include <strings.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <type_traits>

namespace terngrad::comm {

std::string link_rate_problem(const std::string& text, uint64_t* out) {
  // tc's units (tc(8), case-insensitive as tc compares them); the *bps ones
  // are bytes per second.
  static const struct {
    const char* name;
    double bits;
  } kUnits[] = {{"bit", 1},        {"kbit", 1e3},           {"mbit", 1e6},
                {"gbit", 1e9},     {"tbit", 1e12},          {"kibit", 1024.0},
                {"mibit", 1048576.0}, {"gibit", 1073741824.0}, {"tibit", 1099511627776.0},
                {"bps", 8},        {"kbps", 8e3},           {"mbps", 8e6},
                {"gbps", 8e9},     {"tbps", 8e12},          {"kibps", 8 * 1024.0},
                {"mibps", 8 * 1048576.0}, {"gibps", 8 * 1073741824.0}, {"tibps", 8 * 1099511627776.0}};
  const char* usage = "expected a rate in tc's syntax, a number and a unit such as 500kbit, 100mbit, 1gbit, 10gbit";
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) return std::string(usage);
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0') return std::string(usage);
  if (unit.empty()) return std::string("no unit (tc would read a bare number as bits per second); e.g. 100mbit");
  double scale = 0;
  for (const auto& u : kUnits)
    if (strcasecmp(u.name, unit.c_str()) == 0) scale = u.bits;
  if (scale == 0)
    return std::string("unknown unit \"" + unit + "\" (bit, kbit, mbit, gbit, tbit, kibit..tibit; bps, kbps.. are bytes per second)");
  const double bps = value * scale;
  // Below 10 kbit/s a 1500-byte frame takes over a second; above 100 gbit/s
  // no veth on one machine gets near, so the link would not be shaped at all.
  if (!(bps >= 1e4) || !(bps <= 1e11)) return std::string("out of range: 10kbit to 100gbit");
  if (out) *out = static_cast<uint64_t>(std::llround(bps));
  return "";
}

template <class Key>
std::string rate_schedule_problem(const std::string& text, std::vector<std::pair<Key, uint64_t>>* changes) {
  constexpr bool kSteps = std::is_integral_v<Key>;
  const std::string form = kSteps ? "STEP:RATE" : "SECS:RATE";
  std::vector<std::pair<Key, uint64_t>> out;
  std::istringstream in(text);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    const std::string named = "entry \"" + entry + "\" ";
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) return named + "is not " + form;
    Key key{};
    const std::string k = entry.substr(0, colon);
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), key);
    if (ec != std::errc() || end != k.data() + k.size() || !(kSteps ? key >= 1 : key > 0))
      return named + (kSteps ? "has no step >= 1 before its ':'" : "has no seconds > 0 before its ':'");
    if (!out.empty() && key <= out.back().first)
      return named + (kSteps ? "does not come after the step before it" : "does not come after the time before it");
    uint64_t bps = 0;
    if (const std::string why = link_rate_problem(entry.substr(colon + 1), &bps); !why.empty()) return named + why;
    out.emplace_back(key, bps);
  }
  if (out.empty()) return "no " + form + " entry";
  if (changes) *changes = std::move(out);
  return "";
}
template std::string rate_schedule_problem(const std::string&, std::vector<std::pair<int64_t, uint64_t>>*);
template std::string rate_schedule_problem(const std::string&, std::vector<std::pair<double, uint64_t>>*);

}  // namespace terngrad::comm
