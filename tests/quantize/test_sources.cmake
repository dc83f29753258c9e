# The codec library's test sources, shared by the native build (tests/) and
# the AArch64 cross build (tests/cross/).
set(TG_QUANTIZE_TEST_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/philox_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reference_codec.h
  ${CMAKE_CURRENT_LIST_DIR}/format_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stats_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/encode_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decode_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/statistical_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slice_encode_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ternary_sum_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/simd_levels_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fp16_convert_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/forced_simd_level.cpp)
