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

/* The reduce-scatter on the device: W ranks' slices (encode_slices_device,
 * float32) against the host's bytes; each slice's W payloads summed on the
 * device against tg_codec_aggregate's bytes; the sums decoded on the device
 * against the host's floats. Then a payload of another scale: reported by
 * tg_codec_device_check, the output left as it was. */
static void compare_reduce_scatter(const char* spec, uint64_t n, size_t world) {
  tg_codec_t* host = NULL;
  tg_codec_t* dev = NULL;
  CHECK(tg_codec_create(spec, &host) == TG_OK && tg_codec_create(spec, &dev) == TG_OK);
  uint64_t begins[8], lengths[8];
  const uint64_t step = (n + 4 * world - 1) / (4 * world) * 4;
  for (size_t j = 0; j < world; ++j) {
    begins[j] = j * step < n ? j * step : 0;
    lengths[j] = j * step < n ? (n - j * step < step ? n - j * step : step) : 0;
  }
  float* g = malloc(world * n * sizeof(float) + 4);
  for (uint64_t i = 0; i < world * n; ++i) g[i] = sample(i + 7, 0);
  float shared = 0;
  for (size_t r = 0; r < world; ++r) {
    float s = 0;
    CHECK(tg_codec_local_scale(host, g + r * n, n, &s) == TG_OK);
    if (s > shared) shared = s;
  }
  float* d_g = dev_alloc(n * sizeof(float));
  /* payload[r][j]: rank r's slice j, host and device */
  uint8_t* hp[8][8];
  uint8_t* dp[8][8];
  size_t cap[8], hw[8], dw[8];
  for (size_t r = 0; r < world; ++r) {
    for (size_t j = 0; j < world; ++j) {
      CHECK(tg_codec_payload_bytes(host, lengths[j], &cap[j]) == TG_OK);
      hp[r][j] = malloc(cap[j]);
      dp[r][j] = dev_alloc(cap[j]);
    }
    to_dev(d_g, g + r * n, n * sizeof(float));
    CHECK(tg_codec_encode_slices(host, g + r * n, n, world, begins, lengths, 3, 5, r, &shared, hp[r], cap, hw) ==
          TG_OK);
    CHECK(tg_codec_encode_slices_device(dev, d_g, n, world, begins, lengths, 3, 5, r, &shared, dp[r], cap, NULL,
                                        dw) == TG_OK);
    CHECK(tg_codec_device_check(dev, NULL) == TG_OK);
    for (size_t j = 0; j < world; ++j) {
      uint8_t* back = malloc(cap[j]);
      to_host(back, dp[r][j], cap[j]);
      CHECK(hw[j] == dw[j] && memcmp(back, hp[r][j], hw[j]) == 0);
      free(back);
    }
  }
  for (size_t j = 0; j < world; ++j) {
    const uint8_t* hin[8];
    const uint8_t* din[8];
    size_t lens[8];
    for (size_t r = 0; r < world; ++r) hin[r] = hp[r][j], din[r] = dp[r][j], lens[r] = cap[j];
    size_t sum_bytes = 0, dev_bytes = 0, want = 0;
    CHECK(tg_codec_aggregate_bytes(host, lengths[j], world, &want) == TG_OK);
    uint8_t* hs = malloc(want + 1);
    uint8_t* ds = malloc(want + 1);
    uint8_t* d_sum = dev_alloc(want);
    CHECK(tg_codec_aggregate(host, hin, lens, world, lengths[j], hs, want, &sum_bytes) == TG_OK && sum_bytes == want);
    CHECK(tg_codec_aggregate_device(dev, din, lens, world, lengths[j], d_sum, want, NULL, &dev_bytes) == TG_OK &&
          dev_bytes == want);
    CHECK(tg_codec_device_check(dev, NULL) == TG_OK);
    to_host(ds, d_sum, want);
    CHECK(memcmp(hs, ds, want) == 0);
    float* hf = malloc(lengths[j] * sizeof(float) + 4);
    float* df = malloc(lengths[j] * sizeof(float) + 4);
    float* d_f = dev_alloc(lengths[j] * sizeof(float));
    CHECK(tg_codec_decode_aggregate(host, hs, want, hf, lengths[j]) == TG_OK);
    CHECK(tg_codec_decode_aggregate_device(dev, d_sum, want, d_f, lengths[j], NULL) == TG_OK);
    CHECK(tg_codec_device_check(dev, NULL) == TG_OK);
    to_host(df, d_f, lengths[j] * sizeof(float));
    CHECK(same_floats(hf, df, lengths[j]));
    free(hs), free(ds), free(hf), free(df);
    cudaFree(d_sum), cudaFree(d_f);
  }
  /* Another scale in the sum: found on the device, the output untouched. */
  if (world >= 2 && lengths[0] > 0) {
    float other = 2 * shared;
    size_t w2[8];
    to_dev(d_g, g, n * sizeof(float));
    CHECK(tg_codec_encode_slices_device(dev, d_g, n, 1, begins, lengths, 3, 5, 0, &other, &dp[1][0], cap, NULL, w2) ==
          TG_OK);
    const uint8_t* din[2] = {dp[0][0], dp[1][0]};
    size_t lens[2] = {cap[0], cap[0]}, want = 0;
    CHECK(tg_codec_aggregate_bytes(host, lengths[0], 2, &want) == TG_OK);
    uint8_t* d_sum = dev_alloc(want);
    uint8_t* filler = malloc(want);
    uint8_t* back = malloc(want);
    memset(filler, 0xA5, want);
    to_dev(d_sum, filler, want);
    CHECK(tg_codec_aggregate_device(dev, din, lens, 2, lengths[0], d_sum, want, NULL, NULL) == TG_OK);
    CHECK(tg_codec_device_check(dev, NULL) == TG_ERR_SCALE_MISMATCH);
    to_host(back, d_sum, want);
    CHECK(memcmp(back, filler, want) == 0);
    /* A wrong payload length is refused at the call. */
    lens[1] = cap[0] - 1;
    CHECK(tg_codec_aggregate_device(dev, din, lens, 2, lengths[0], d_sum, want, NULL, NULL) ==
          TG_ERR_MALFORMED_PAYLOAD);
    free(filler), free(back);
    cudaFree(d_sum);
  }
  /* One payload aggregates to itself (as on the host); a corrupt one (the
     reserved code 0b11 in its first element) is found on the device and
     the output is left as it was. */
  if (world == 1 && lengths[0] > 0) {
    uint8_t* bad = malloc(cap[0]);
    memcpy(bad, hp[0][0], cap[0]);
    bad[40] |= 0x3; /* the first element's 2-bit code, after the 40-byte header */
    uint8_t* d_bad = dev_alloc(cap[0]);
    to_dev(d_bad, bad, cap[0]);
    uint8_t* d_out = dev_alloc(cap[0]);
    uint8_t* filler = malloc(cap[0]);
    uint8_t* back = malloc(cap[0]);
    memset(filler, 0xA5, cap[0]);
    to_dev(d_out, filler, cap[0]);
    const uint8_t* din[1] = {d_bad};
    size_t lens[1] = {cap[0]}, got = 0;
    CHECK(tg_codec_aggregate_device(dev, din, lens, 1, lengths[0], d_out, cap[0], NULL, &got) == TG_OK &&
          got == cap[0]);
    CHECK(tg_codec_device_check(dev, NULL) == TG_ERR_INVALID_CODE);
    to_host(back, d_out, cap[0]);
    CHECK(memcmp(back, filler, cap[0]) == 0);
    free(bad), free(filler), free(back);
    cudaFree(d_bad), cudaFree(d_out);
  }
  for (size_t r = 0; r < world; ++r)
    for (size_t j = 0; j < world; ++j) free(hp[r][j]), cudaFree(dp[r][j]);
  cudaFree(d_g);
  free(g);
  tg_codec_destroy(host);
  tg_codec_destroy(dev);
}

/* Codecs whose sums stay on the host: refused by name before any device work. */
static void device_sum_unsupported(const char* spec) {
  tg_codec_t* c = NULL;
  CHECK(tg_codec_create(spec, &c) == TG_OK);
  uint8_t* d = dev_alloc(64);
  const uint8_t* in[1] = {d};
  size_t lens[1] = {48};
  float* d_f = dev_alloc(16);
  CHECK(tg_codec_aggregate_device(c, in, lens, 1, 8, d, 64, NULL, NULL) == TG_ERR_UNSUPPORTED);
  CHECK(strstr(tg_last_error_message(), "sums on the host") != NULL);
  CHECK(tg_codec_decode_aggregate_device(c, d, 64, d_f, 4, NULL) == TG_ERR_UNSUPPORTED);
  cudaFree(d), cudaFree(d_f);
  tg_codec_destroy(c);
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
  static const uint64_t rs_sizes[] = {0, 5, 1000, 100003};
  static const size_t worlds[] = {1, 2, 4, 8};
  for (size_t k = 0; k < sizeof rs_sizes / sizeof rs_sizes[0]; ++k)
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; ++w) {
      compare_reduce_scatter("terngrad", rs_sizes[k], worlds[w]);
      compare_reduce_scatter("terngrad:round=nearest", rs_sizes[k], worlds[w]);
    }
  device_sum_unsupported("terngrad:share_scale=0");
  device_sum_unsupported("fp32");
  printf("capi_cuda_test: %d checks, %d failed\n", g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
