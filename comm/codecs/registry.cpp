// Spec parsing and the name -> factory registry.
//
// The registry is a function-local static: C++ initializes it on first use,
// exactly once even under concurrent first calls, and its constructor adds
// the built-in codecs. Nothing depends on the order in which static objects
// of different translation units are initialized.
#include <algorithm>
#include <cstdio>
#include <variant>
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

// Values may hold anything printable except the separators, '=' (so
// "a=b=c" is rejected rather than guessed at) and the parentheses of ef(...).
bool is_value_char(char c) {
  return c > ' ' && c < 127 && c != ',' && c != '=' && c != ':' && c != '(' && c != ')';
}

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

// Codecs added by register_codec(); the built-in ones are typed
// (codec_config.cpp) and built by make_codec(const CodecConfig&) below.
struct Registry {
  std::mutex mutex;
  std::map<std::string, CodecFactory> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

std::vector<std::string> all_names() {
  std::vector<std::string> names = detail::builtin_codec_names();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [name, f] : r.factories) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

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

namespace detail {

const std::vector<std::string>& builtin_codec_names() {
  static const std::vector<std::string> names = {"fp16", "fp32", "powersgd", "qsgd", "randomk", "sign", "terngrad", "topk"};
  return names;
}

bool is_registered_custom_codec(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.factories.count(name) != 0;
}

std::string registered_codec_list() {
  std::string s;
  for (const std::string& name : all_names()) s += (s.empty() ? "" : ", ") + name;
  return s + " (and ef(<codec>), server_ef(<codec>) around any of them)";
}

}  // namespace detail

void register_codec(const std::string& name, CodecFactory factory) {
  check_codec_name(name, "register_codec");
  if (!factory) throw std::invalid_argument("register_codec(\"" + name + "\"): the factory is empty");
  const auto& builtin = detail::builtin_codec_names();
  if (name == "ef" || name == "server_ef" || std::find(builtin.begin(), builtin.end(), name) != builtin.end())
    throw std::invalid_argument("register_codec: \"" + name + "\" is a built-in codec (registered: " +
                                detail::registered_codec_list() + ")");
  Registry& r = registry();
  bool taken = false;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    taken = !r.factories.emplace(name, std::move(factory)).second;
  }
  if (taken)  // the list takes the lock itself
    throw std::invalid_argument("register_codec: codec \"" + name + "\" is already registered (registered: " +
                                detail::registered_codec_list() + ")");
}

std::unique_ptr<GradientCodec> make_codec(std::string_view spec) { return make_codec(parse_codec_config(spec)); }

std::unique_ptr<GradientCodec> make_codec(const CodecConfig& config_in) {
  // Typed parameters built in code get the checks a spec gets: print, parse.
  const CodecConfig config = parse_codec_config(to_spec(config_in));
  std::unique_ptr<GradientCodec> codec = std::visit(
      Overloaded{
          [](const Fp32Params&) { return detail::make_fp32_codec(); },
          [](const Fp16Params&) { return detail::make_fp16_codec(); },
          [](const TernGradParams& p) { return detail::make_terngrad_codec(p); },
          [](const QsgdParams& p) { return detail::make_qsgd_codec(p); },
          [](const SignParams& p) { return detail::make_sign_codec(p); },
          [](const TopKParams& p) { return detail::make_topk_codec(p); },
          [](const RandomKParams& p) { return detail::make_randomk_codec(p); },
          [](const PowerSgdParams& p) { return detail::make_powersgd_codec(p); },
          [](const CustomParams& p) {
            CodecFactory factory;
            {
              Registry& r = registry();
              std::lock_guard<std::mutex> lock(r.mutex);
              factory = r.factories.at(p.spec.name);  // parse_codec_config checked it is registered
            }
            std::unique_ptr<GradientCodec> c = factory(p.spec);  // user code runs without the lock held
            if (!c) throw std::runtime_error("codec factory for \"" + p.spec.name + "\" returned no codec");
            return c;
          },
      },
      config.params);
  if (config.server_error_feedback) codec = detail::make_server_error_feedback_codec(std::move(codec));
  if (config.error_feedback) codec = detail::make_error_feedback_codec(std::move(codec), *config.error_feedback);
  return codec;
}

std::vector<std::string> registered_codecs() { return all_names(); }

CodecConfig GradientCodec::config() const { return CodecConfig{CustomParams{parse_codec_spec(spec())}, std::nullopt}; }

}  // namespace terngrad::comm
