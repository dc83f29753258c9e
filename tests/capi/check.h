/* Check macros for the C API's C tests: count checks, report failures with
 * the location and the library's last message, keep going. */
#ifndef TG_TESTS_CAPI_CHECK_H_
#define TG_TESTS_CAPI_CHECK_H_

#include <stdio.h>

#include "terngrad.h"

static int g_checks = 0, g_failed = 0;

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    ++g_checks;                                                                             \
    if (!(cond)) {                                                                          \
      ++g_failed;                                                                           \
      fprintf(stderr, "%s:%d: check failed: %s (last message: \"%s\")\n", __FILE__, __LINE__, \
              #cond, tg_last_error_message());                                              \
    }                                                                                       \
  } while (0)

#endif /* TG_TESTS_CAPI_CHECK_H_ */
