// The parameter server's request handling without a network: the input is a
// script of calls (tests/support/ps_request_script.h: every call of the
// service as a serialized protobuf request, with the caller's token and
// session chosen by the script) run against a fresh ps over an in-process
// channel, with or without a cluster secret, sync or async. Whatever the
// requests, the ps must neither crash nor hang, and must still answer the
// chief's Status afterwards.
#include <cstdio>
#include <cstdlib>

#include "ps_request_script.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // a script's worth; bigger inputs only slow the search
  const terngrad::testing::ScriptOutcome o = terngrad::testing::run_ps_request_script({data, size});
  if (!o.ps_alive) {
    std::fprintf(stderr, "the ps stopped answering: %s\n", o.detail.c_str());
    std::abort();
  }
  return 0;
}
