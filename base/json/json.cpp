#include "terngrad/base/json.h"

#include <set>
#include <stdexcept>
#include <vector>

namespace terngrad::json {
namespace {

// A refusal from the parse callback (a duplicate key, too deep a nesting),
// passed through as it is.
struct CallbackRefusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// nlohmann's message starts with "[json.exception.parse_error.101] "; the
// rest (line, column, what was expected) is what a person needs.
std::string without_exception_id(const char* what) {
  const std::string s = what;
  const size_t end = s.find("] ");
  return s.rfind("[json.exception.", 0) == 0 && end != std::string::npos ? s.substr(end + 2) : s;
}

}  // namespace

Json parse_strict(std::string_view text) {
  // The keys seen so far in each object being read, innermost last.
  std::vector<std::set<std::string>> open_objects;
  size_t depth = 0;  // arrays and objects open
  const Json::parser_callback_t refuse_duplicates = [&open_objects, &depth](int, Json::parse_event_t event,
                                                                            Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (++depth > kMaxDepth)
          throw CallbackRefusal("JSON error: arrays and objects nested deeper than " + std::to_string(kMaxDepth) +
                             " levels");
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::array_end: --depth; break;
      case Json::parse_event_t::object_end:
        --depth;
        open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second) throw CallbackRefusal("JSON error: duplicate key " + parsed.dump());
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), refuse_duplicates);
  } catch (const Json::parse_error& e) {
    // e.byte counts the characters read, the offending one included.
    const size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    throw std::runtime_error("JSON error at byte " + std::to_string(offset) + ": " + without_exception_id(e.what()));
  }
}

uint64_t as_u64(const Json& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  throw std::runtime_error(what + " is " + (v.is_number() ? v.dump() : std::string("not a number")) +
                           ", expected a non-negative integer");
}

std::string dump_line(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string dump_pretty(const Json& v) { return v.dump(2, ' ', false, Json::error_handler_t::replace); }

}  // namespace terngrad::json
