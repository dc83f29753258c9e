/* The C API's device functions against its host functions (the CPU
 * reference): the same payload bytes from encode, the same floats from
 * decode and decode-accumulate, the same scales, and device-found errors
 * reported by tg_codec_device_check() with the output left untouched.
 * Exits 77 (ctest SKIP) when no CUDA device is present. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "terngrad.h"

static void* dev_alloc(size_t bytes) {
  void* p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
    exit(1);
  }
  return p;
}

static void to_dev(void* d, const void* h, size_t bytes) {
  if (bytes) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
}
static void to_host(void* h, const void* d, size_t bytes) {
  if (bytes) cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
}

/* Bit-equal floats, except that any NaN matches any NaN. */
static int same_floats(const float* a, const float* b, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (isnan(a[i]) && isnan(b[i])) continue;
    if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      fprintf(stderr, "element %llu: host %a, device %a\n", (unsigned long long)i, (double)a[i], (double)b[i]);
      return 0;
    }
  }
  return 1;
}

/* Values with every class the fp16 conversion treats apart (dense codecs
 * only: terngrad refuses non-finite input). */
static float sample(uint64_t i, int dense) {
  static const float special[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -1e6f, 0x1p-25f,
                                  0x1.8p-25f, 0x1p-24f, 6.1e-5f, 1e-40f, INFINITY, -INFINITY, NAN};
  const uint64_t ns = sizeof special / sizeof special[0];
  if (dense && i % 97 < ns) return special[i % 97];
  return (float)(sin(0.013 * (double)i) * 0.05 + ((i * 2654435761u) % 1000) * 1e-5);
}

static void compare_codec(const char* spec, uint64_t n) {
  const int dense = strncmp(spec, "fp", 2) == 0;
  tg_codec_t* host = NULL;
  tg_codec_t* dev = NULL;
  CHECK(tg_codec_create(spec, &host) == TG_OK && tg_codec_create(spec, &dev) == TG_OK);
  float* g = malloc(n * sizeof(float) + 4);
  for (uint64_t i = 0; i < n; ++i) g[i] = sample(i, dense);
  size_t bytes = 0;
  CHECK(tg_codec_payload_bytes(host, n, &bytes) == TG_OK);
  float* d_g = dev_alloc(n * sizeof(float));
  to_dev(d_g, g, n * sizeof(float));

  float hs = -1, ds = -2;
  CHECK(tg_codec_local_scale(host, g, n, &hs) == TG_OK);
  CHECK(tg_codec_local_scale_device(dev, d_g, n, NULL, &ds) == TG_OK);
  CHECK(memcmp(&hs, &ds, sizeof hs) == 0);
  const float shared = hs * 1.5f;

  uint8_t* hp = malloc(bytes);
  uint8_t* dp = malloc(bytes);
  uint8_t* d_p = dev_alloc(bytes);
  for (int with_shared = 0; with_shared < 2; ++with_shared) {
    const float* sp = with_shared ? &shared : NULL;
    CHECK(tg_codec_encode(host, g, n, 9, 4, 77, sp, hp, bytes, NULL) == TG_OK);
    CHECK(tg_codec_encode_device(dev, d_g, n, 9, 4, 77, sp, d_p, bytes, NULL, NULL) == TG_OK);
    CHECK(tg_codec_device_check(dev, NULL) == TG_OK);
    to_host(dp, d_p, bytes);
    if (memcmp(hp, dp, bytes) != 0) {
      ++g_failed;
      fprintf(stderr, "%s n=%llu shared=%d: device payload differs from the host's\n", spec,
              (unsigned long long)n, with_shared);
    }
    ++g_checks;
  }

  /* decode: host and device floats bit-equal, NaN payloads included (no
   * arithmetic touches them); then decode-accumulate on top: bit-equal but
   * for NaNs, which need only be NaN on both (a NaN that an addition
   * returns carries a payload IEEE 754 leaves open: the GPU's is canonical). */
  float* ho = malloc(n * sizeof(float) + 4);
  float* dout = malloc(n * sizeof(float) + 4);
  float* d_o = dev_alloc(n * sizeof(float));
  CHECK(tg_codec_decode(host, hp, bytes, ho, n) == TG_OK);
  CHECK(tg_codec_decode_device(dev, d_p, bytes, d_o, n, NULL) == TG_OK);
  CHECK(tg_codec_device_check(dev, NULL) == TG_OK);
  to_host(dout, d_o, n * sizeof(float));
  CHECK(n == 0 || memcmp(ho, dout, n * sizeof(float)) == 0);
  CHECK(tg_codec_decode_accumulate(host, hp, bytes, ho, n) == TG_OK);
  CHECK(tg_codec_decode_accumulate_device(dev, d_p, bytes, d_o, n, NULL) == TG_OK);
  CHECK(tg_codec_device_check(dev, NULL) == TG_OK);
  to_host(dout, d_o, n * sizeof(float));
  CHECK(same_floats(ho, dout, n));

  /* A corrupt header: reported by the check, the output untouched. */
  if (n > 0) {
    float* before = malloc(n * sizeof(float));
    memcpy(before, dout, n * sizeof(float));
    uint8_t first = hp[0] ^ 0x5A;
    to_dev(d_p, &first, 1);
    CHECK(tg_codec_decode_accumulate_device(dev, d_p, bytes, d_o, n, NULL) == TG_OK);
    CHECK(tg_codec_device_check(dev, NULL) == TG_ERR_MALFORMED_PAYLOAD);
    CHECK(strstr(tg_last_error_message(), "magic") != NULL);
    to_host(dout, d_o, n * sizeof(float));
    CHECK(memcmp(before, dout, n * sizeof(float)) == 0); /* untouched, bit for bit */
    free(before);
    to_dev(d_p, hp, 1);
    /* A payload of n elements decoded into n - 1: the caller's shape error. */
    tg_status st = tg_codec_decode_device(dev, d_p, bytes, d_o, n - 1, NULL);
    if (st == TG_OK) st = tg_codec_device_check(dev, NULL);
    CHECK(st == TG_ERR_INVALID_ARGUMENT || st == TG_ERR_MALFORMED_PAYLOAD);
    CHECK(tg_codec_device_check(dev, NULL) == TG_OK); /* the check cleared it */
  }
  if (!dense && n > 3) { /* NaN input: found on the device, named by index */
    float nan = NAN;
    to_dev(d_g + 3, &nan, sizeof nan);
    CHECK(tg_codec_encode_device(dev, d_g, n, 0, 0, 0, NULL, d_p, bytes, NULL, NULL) == TG_OK);
    CHECK(tg_codec_device_check(dev, NULL) == TG_ERR_NON_FINITE);
    CHECK(strstr(tg_last_error_message(), "element 3") != NULL);
  }
  cudaFree(d_g);
  cudaFree(d_p);
  cudaFree(d_o);
  free(g);
  free(hp);
  free(dp);
  free(ho);
  free(dout);
  tg_codec_destroy(host);
  tg_codec_destroy(dev);
}

/* 16-bit device gradients (the *_device_typed calls): terngrad's payload of
 * a bfloat16 or float16 gradient equals the host's of the same halves, and
 * so of their float32 values; fp32 refuses them, as tg_codec_device_takes says. */
static void compare_typed(const char* spec, tg_dtype dtype, uint64_t n) {
  tg_codec_t* host = NULL;
  tg_codec_t* dev = NULL;
  CHECK(tg_codec_create(spec, &host) == TG_OK && tg_codec_create(spec, &dev) == TG_OK);
  uint16_t* h = malloc(2 * n + 2);
  for (uint64_t i = 0; i < n; ++i) {
    const float x = sample(i, 0);
    uint32_t bits;
    memcpy(&bits, &x, 4);
    /* bfloat16: truncated; float16: a small exact-in-half pattern around 1e-2. */
    h[i] = dtype == TG_BFLOAT16 ? (uint16_t)(bits >> 16) : (uint16_t)(0x2000 + (i * 2654435761u) % 0x0C00);
  }
  int takes = -1;
  CHECK(tg_codec_device_takes(dev, dtype, &takes) == TG_OK);
  size_t bytes = 0;
  CHECK(tg_codec_payload_bytes(host, n, &bytes) == TG_OK);
  uint16_t* d_g = dev_alloc(2 * n + 2);
  uint8_t* d_p = dev_alloc(bytes);
  to_dev(d_g + 1, h, 2 * n); /* 2-byte aligned, not 4 */
  float hs = 0, ds = 0;
  CHECK(tg_codec_local_scale_typed(host, h, n, dtype, &hs) == TG_OK);
  const tg_status st = tg_codec_local_scale_device_typed(dev, d_g + 1, n, dtype, NULL, &ds);
  if (!takes) {
    CHECK(st == TG_ERR_UNSUPPORTED);
    CHECK(strstr(tg_last_error_message(), "float32 device gradients only") != NULL);
  } else {
    CHECK(st == TG_OK && memcmp(&hs, &ds, 4) == 0);
    uint8_t* hp = malloc(bytes);
    uint8_t* dp = malloc(bytes);
    size_t hw = 0, dw = 0;
    CHECK(tg_codec_encode_typed(host, h, n, dtype, 2, 8, 99, &hs, hp, bytes, &hw) == TG_OK);
    CHECK(tg_codec_encode_device_typed(dev, d_g + 1, n, dtype, 2, 8, 99, &ds, d_p, bytes, NULL, &dw) == TG_OK);
    CHECK(tg_codec_device_check(dev, NULL) == TG_OK);
    to_host(dp, d_p, bytes);
    CHECK(hw == dw && memcmp(hp, dp, hw) == 0);
    free(hp);
    free(dp);
  }
  cudaFree(d_g);
  cudaFree(d_p);
  free(h);
  tg_codec_destroy(host);
  tg_codec_destroy(dev);
}

int main(void) {
  if (!tg_cuda_built() || !tg_cuda_available()) {
    printf("capi_cuda_test: SKIPPED, %s\n",
           tg_cuda_built() ? "no CUDA device present" : "libterngrad built without CUDA");
    return 77;
  }
  static const char* specs[] = {"fp32", "fp16", "terngrad", "terngrad:clip=0",
                                "terngrad:share_scale=0", "terngrad:round=nearest",
                                "terngrad:stream=philox10"};
  static const uint64_t sizes[] = {0, 1, 5, 1000, 100003, 1u << 20};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; ++s)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) compare_codec(specs[s], sizes[k]);
  static const char* typed_specs[] = {"terngrad", "terngrad:round=nearest", "fp32"};
  for (size_t s = 0; s < sizeof typed_specs / sizeof typed_specs[0]; ++s)
    for (size_t k = 1; k < sizeof sizes / sizeof sizes[0]; ++k) {
      compare_typed(typed_specs[s], TG_BFLOAT16, sizes[k]);
      compare_typed(typed_specs[s], TG_FLOAT16, sizes[k]);
    }
  printf("capi_cuda_test: %d checks, %d failed\n", g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
