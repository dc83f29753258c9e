// Private: the ParameterServer service's methods as the generated code has
// them, read from the proto's descriptors: where the ps installs a handler of
// its own (the index), and what a replica opens a call of its own on (the
// path). Throws std::logic_error for a name the service does not have.
#pragma once

#include <string>

namespace terngrad::comm::detail {

// The method's index in the generated Service (the proto's order).
int parameter_server_method_index(const std::string& method);
// "/package.ParameterServer/Method"; lives as long as the process.
const char* parameter_server_method_path(const std::string& method);

}  // namespace terngrad::comm::detail
