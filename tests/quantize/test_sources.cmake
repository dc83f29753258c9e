# The codec library's test sources and the SIMD levels the suite is rerun
# under (forced through TG_CPU_SIMD), shared by the native build (tests/) and
# the AArch64 cross build (tests/cross/).
set(TG_QUANTIZE_TEST_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/philox_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reference_codec.h
  ${CMAKE_CURRENT_LIST_DIR}/format_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stats_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/encode_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nearest_encode_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decode_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/statistical_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slice_encode_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/error_feedback_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/half_input_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ternary_sum_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/simd_levels_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fp16_convert_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dense_sum_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/packed_payload_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/packed_format_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/forced_simd_level.cpp)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(TG_SIMD_LEVELS portable avx2 avx512)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(TG_SIMD_LEVELS portable neon)
else()
  set(TG_SIMD_LEVELS portable)
endif()
