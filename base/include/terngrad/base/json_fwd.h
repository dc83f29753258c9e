// The JSON value type by name only, for headers that hold one behind a
// pointer and keep nlohmann/json.hpp out of their includers.
#pragma once

#include <nlohmann/json_fwd.hpp>

namespace terngrad::json {
using Json = nlohmann::ordered_json;
}  // namespace terngrad::json
