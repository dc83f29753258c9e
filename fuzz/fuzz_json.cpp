// base/json's strict parser (terngrad/base/json.h: parse_strict), and the
// writer on what it accepted: dump_line() must give text that parses back to
// the same value (the metrics logs and result files rely on it), and as_u64()
// must answer or refuse.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "outcome.h"
#include "terngrad/base/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tj = terngrad::json;
  using namespace terngrad::fuzz;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tj::Json v;
  if (!accepts([&] { v = tj::parse_strict(text); })) return 0;
  accepts([&] { (void)tj::as_u64(v, "the fuzzed value"); });
  const std::string line = tj::dump_line(v);
  (void)tj::dump_pretty(v);
  tj::Json back;
  must_accept("parse_strict of dump_line", [&] { back = tj::parse_strict(line); });
  if (back != v) {
    std::fprintf(stderr, "fuzz: dump_line() does not read back: %s\n", line.c_str());
    std::abort();
  }
  return 0;
}
