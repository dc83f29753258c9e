// Spec parsing and the name -> factory registry.
//
// The registry is a function-local static: C++ initializes it on first use,
// exactly once even under concurrent first calls, and its constructor adds
// the built-in codecs. Nothing depends on the order in which static objects
// of different translation units are initialized.
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

#include "builtin_codecs.h"
#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm {

namespace {

// Names and keys: letters, digits, '_', '-', '.' (no separators, no spaces).
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

// First character of s that is not allowed in a name, or npos.
size_t bad_name_char(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (!is_name_char(s[i])) return i;
  return std::string_view::npos;
}

// Values may hold anything printable except the separators and '=' (so
// "a=b=c" is rejected rather than guessed at).
bool is_value_char(char c) { return c > ' ' && c < 127 && c != ',' && c != '=' && c != ':'; }

std::string quoted(std::string_view s) {
  std::string q;  // appended piecewise: GCC 12 misreports "\"" + s + "\"" under -Wrestrict
  q.reserve(s.size() + 2);
  q.push_back('"');
  q.append(s);
  q.push_back('"');
  return q;
}

std::string char_desc(char c) {
  if (c > ' ' && c < 127) return std::string("'") + c + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
  return buf;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, CodecFactory> factories;

  Registry() {
    factories["fp32"] = detail::make_fp32_codec;
    factories["fp16"] = detail::make_fp16_codec;
    factories["terngrad"] = detail::make_terngrad_codec;
  }

  std::string names_locked() const {
    std::string s;
    for (const auto& [name, f] : factories) s += (s.empty() ? "" : ", ") + name;
    return s;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

void check_codec_name(std::string_view name, std::string_view context) {
  if (name.empty()) throw std::invalid_argument(std::string(context) + ": codec name is empty");
  if (const size_t i = bad_name_char(name); i != std::string_view::npos)
    throw std::invalid_argument(std::string(context) + ": codec name " + quoted(name) + " contains " +
                                char_desc(name[i]) + " (allowed: letters, digits, '_', '-', '.')");
}

}  // namespace

CodecSpec parse_codec_spec(std::string_view spec) {
  const std::string ctx = "codec spec " + quoted(spec);
  if (spec.empty()) throw std::invalid_argument("codec spec is empty (expected \"name\" or \"name:key=value,...\")");
  CodecSpec out;
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  check_codec_name(name, ctx);
  out.name = std::string(name);
  if (colon == std::string_view::npos) return out;

  const std::string_view rest = spec.substr(colon + 1);
  if (rest.empty()) throw std::invalid_argument(ctx + ": nothing after ':' (expected key=value[,key=value...])");
  size_t start = 0, index = 1;
  while (true) {
    const size_t comma = rest.find(',', start);
    const std::string_view token = rest.substr(start, comma == std::string_view::npos ? comma : comma - start);
    const std::string where = ctx + ": parameter " + std::to_string(index) + " " + quoted(token);
    if (token.empty()) throw std::invalid_argument(ctx + ": parameter " + std::to_string(index) + " is empty");
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) throw std::invalid_argument(where + " is not key=value");
    const std::string_view key = token.substr(0, eq), value = token.substr(eq + 1);
    if (key.empty()) throw std::invalid_argument(where + " has no key");
    if (const size_t i = bad_name_char(key); i != std::string_view::npos)
      throw std::invalid_argument(where + ": key contains " + char_desc(key[i]) +
                                  " (allowed: letters, digits, '_', '-', '.')");
    if (value.empty()) throw std::invalid_argument(where + " has no value");
    for (char c : value)
      if (!is_value_char(c)) throw std::invalid_argument(where + ": value contains " + char_desc(c));
    if (!out.params.emplace(std::string(key), std::string(value)).second)
      throw std::invalid_argument(where + ": key " + quoted(key) + " is given more than once");
    if (comma == std::string_view::npos) break;
    start = comma + 1;
    ++index;
  }
  return out;
}

void register_codec(const std::string& name, CodecFactory factory) {
  check_codec_name(name, "register_codec");
  if (!factory) throw std::invalid_argument("register_codec(\"" + name + "\"): the factory is empty");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.factories.count(name))
    throw std::invalid_argument("register_codec: codec \"" + name + "\" is already registered (registered: " +
                                r.names_locked() + ")");
  r.factories.emplace(name, std::move(factory));
}

std::unique_ptr<GradientCodec> make_codec(std::string_view spec) {
  const CodecSpec parsed = parse_codec_spec(spec);
  CodecFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.factories.find(parsed.name);
    if (it == r.factories.end())
      throw std::invalid_argument("unknown codec \"" + parsed.name + "\" in spec " + quoted(spec) +
                                  "; registered codecs: " + r.names_locked());
    factory = it->second;  // a copy: user factories run without the lock held
  }
  std::unique_ptr<GradientCodec> codec = factory(parsed);
  if (!codec) throw std::runtime_error("codec factory for \"" + parsed.name + "\" returned no codec");
  return codec;
}

std::vector<std::string> registered_codecs() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;  // std::map keeps them sorted
}

}  // namespace terngrad::comm
