/* The C API from C11, as a user's trainer sees it: terngrad.h and
 * libterngrad.so only. Checks are against FORMAT.md's worked example, float64
 * references computed here from the payload bytes, and the error contract
 * (status, message naming the problem, outputs untouched). Exits 1 on any
 * failed check. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "terngrad.h"

/* Status equals want and the thread's message contains `part`. */
#define CHECK_ERROR(call, want, part)                                                    \
  do {                                                                                   \
    const tg_status st_ = (call);                                                        \
    CHECK(st_ == (want));                                                                \
    if (strstr(tg_last_error_message(), (part)) == NULL) {                               \
      ++g_failed;                                                                        \
      fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\" (status %s)\n", __FILE__, __LINE__, \
              tg_last_error_message(), (part), tg_status_name(st_));                     \
    }                                                                                    \
    ++g_checks;                                                                          \
  } while (0)

#define CHECK_OK(call) CHECK_ERROR(call, TG_OK, "")

static tg_codec_t* make(const char* spec) {
  tg_codec_t* c = NULL;
  CHECK_OK(tg_codec_create(spec, &c));
  return c;
}

static void test_library(void) {
  CHECK(strcmp(tg_version(), TG_EXPECTED_VERSION) == 0);
  CHECK(tg_api_version() == TG_API_VERSION);
  CHECK(strcmp(tg_status_name(TG_ERR_NON_FINITE), "TG_ERR_NON_FINITE") == 0);
  CHECK(strcmp(tg_status_name((tg_status)99), "unknown status") == 0);
  CHECK(tg_cuda_built() == 0 || tg_cuda_built() == 1);
}

static void test_create(void) {
  tg_codec_t* c = (tg_codec_t*)0x1;
  CHECK_ERROR(tg_codec_create("tern", &c), TG_ERR_INVALID_ARGUMENT, "unknown codec \"tern\"");
  CHECK(c == (tg_codec_t*)0x1); /* untouched on failure */
  CHECK_ERROR(tg_codec_create("terngrad:clip=-1", &c), TG_ERR_INVALID_ARGUMENT, "clip");
  CHECK_ERROR(tg_codec_create("terngrad:clips=2", &c), TG_ERR_INVALID_ARGUMENT, "clips");
  /* Multi-round codecs need the workers' pre-round sums: refused by name. */
  CHECK_ERROR(tg_codec_create("powersgd:rank=2,rows=4", &c), TG_ERR_INVALID_ARGUMENT, "multi-round codec");
  CHECK_ERROR(tg_codec_create("ef(powersgd:rank=2,rows=4)", &c), TG_ERR_INVALID_ARGUMENT, "single-call encode/decode");
  CHECK_ERROR(tg_codec_create(NULL, &c), TG_ERR_INVALID_ARGUMENT, "tg_codec_create: spec is NULL");
  CHECK_ERROR(tg_codec_create("fp32", NULL), TG_ERR_INVALID_ARGUMENT, "out_codec is NULL");

  tg_codec_t* t = make("terngrad");
  char buf[64];
  size_t len = 0;
  CHECK_ERROR(tg_codec_spec(t, NULL, 0, &len), TG_ERR_BUFFER_TOO_SMALL, "cannot hold");
  CHECK(len == strlen("terngrad:clip=2.5,share_scale=1"));
  CHECK_OK(tg_codec_spec(t, buf, sizeof buf, &len));
  CHECK(strcmp(buf, "terngrad:clip=2.5,share_scale=1") == 0);
  int wants = -1;
  CHECK_OK(tg_codec_wants_shared_scale(t, &wants));
  CHECK(wants == 1);
  size_t bytes = 0;
  CHECK_OK(tg_codec_payload_bytes(t, 1000, &bytes));
  CHECK(bytes == 40 + 250);
  CHECK_ERROR(tg_codec_payload_bytes(NULL, 1, &bytes), TG_ERR_INVALID_ARGUMENT, "codec is NULL");
  /* Fixed-size payloads (tests/capi/capi_variable_size_test.cpp has a variable-size codec). */
  int variable = -1;
  CHECK_OK(tg_codec_variable_size(t, &variable));
  CHECK(variable == 0);
  CHECK_ERROR(tg_codec_variable_size(t, NULL), TG_ERR_INVALID_ARGUMENT, "out_variable");
  CHECK_ERROR(tg_codec_variable_size(NULL, &variable), TG_ERR_INVALID_ARGUMENT, "codec is NULL");
  tg_codec_destroy(t);
  tg_codec_destroy(NULL);

  tg_codec_t* f = make("fp16");
  CHECK_OK(tg_codec_wants_shared_scale(f, &wants));
  CHECK(wants == 0);
  CHECK_OK(tg_codec_payload_bytes(f, 1000, &bytes));
  CHECK(bytes == 16 + 2000);
  tg_codec_destroy(f);
}

/* FORMAT.md's worked examples, byte for byte: format version 2 (the
 * default stream) with seed 50, version 1 (stream=philox10) with seed 42. */
static void test_format_example(void) {
  const float g[6] = {0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f};
  const struct {
    const char* spec;
    uint64_t seed;
    uint8_t version, byte0;
    float want[6];
  } examples[2] = {{"terngrad:clip=0", 50, 2, 0x19, {2.0f, -2.0f, 2.0f, 0.0f, 0.0f, 2.0f}},
                   {"terngrad:clip=0,stream=philox10", 42, 1, 0x01, {2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.0f}}};
  for (int e = 0; e < 2; ++e) {
    tg_codec_t* c = make(examples[e].spec);
    uint8_t payload[42];
    size_t written = 0;
    CHECK_OK(tg_codec_encode(c, g, 6, 3, 7, examples[e].seed, NULL, payload, sizeof payload, &written));
    CHECK(written == 42);
    CHECK(memcmp(payload, "TGRD", 4) == 0);
    CHECK(payload[4] == examples[e].version);
    CHECK(payload[40] == examples[e].byte0 && payload[41] == 0x04);
    float out[6];
    CHECK_OK(tg_codec_decode(c, payload, sizeof payload, out, 6));
    CHECK(memcmp(out, examples[e].want, sizeof out) == 0);
    tg_codec_destroy(c);
  }
}

/* Element i of a terngrad payload in float64 from FORMAT.md: scale at byte
 * 16, 2-bit code i in body byte i/4 (01 = +s, 10 = -s). */
static double reference_value(const uint8_t* payload, uint64_t i) {
  float scale;
  memcpy(&scale, payload + 16, 4); /* little-endian host */
  const unsigned code = (payload[40 + i / 4] >> (2 * (i % 4))) & 3u;
  return code == 1 ? (double)scale : code == 2 ? -(double)scale : 0.0;
}

/* Two workers with scale sharing: local scales, max, encode, then
 * decode-accumulate of both payloads against a float64 sum. */
static void test_scale_sharing(void) {
  enum { N = 1003 };
  static float g0[N], g1[N], sum[N];
  for (int i = 0; i < N; ++i) {
    g0[i] = (float)sin(0.1 * i) * 0.01f;
    g1[i] = (float)cos(0.37 * i) * 0.02f;
  }
  tg_codec_t* w0 = make("terngrad");
  tg_codec_t* w1 = make("terngrad");
  float s0 = 0, s1 = 0;
  CHECK_OK(tg_codec_local_scale(w0, g0, N, &s0));
  CHECK_OK(tg_codec_local_scale(w1, g1, N, &s1));
  CHECK(s0 > 0 && s1 > s0); /* g1 has the larger amplitude */
  const float shared = s0 > s1 ? s0 : s1;
  size_t bytes = 0;
  CHECK_OK(tg_codec_payload_bytes(w0, N, &bytes));
  uint8_t* p0 = malloc(bytes);
  uint8_t* p1 = malloc(bytes);
  CHECK_OK(tg_codec_encode(w0, g0, N, 5, 11, 1001, &shared, p0, bytes, NULL));
  CHECK_OK(tg_codec_encode(w1, g1, N, 5, 11, 1002, &shared, p1, bytes, NULL));
  CHECK(memcmp(p0 + 16, &shared, 4) == 0 && memcmp(p1 + 16, &shared, 4) == 0);
  CHECK((p0[6] & 1) && (p1[6] & 1)); /* the shared-scale flag */

  memset(sum, 0, sizeof sum);
  CHECK_OK(tg_codec_decode_accumulate(w0, p0, bytes, sum, N));
  CHECK_OK(tg_codec_decode_accumulate(w1, p1, bytes, sum, N));
  int exact = 1, signs = 1;
  double kept = 0;
  for (uint64_t i = 0; i < N; ++i) {
    const double v0 = reference_value(p0, i), v1 = reference_value(p1, i);
    if ((double)sum[i] != v0 + v1) exact = 0; /* k*s, |k| <= 2: exact in float */
    if (v0 * g0[i] < 0 || v1 * g1[i] < 0) signs = 0; /* a kept element keeps its sign */
    kept += (v0 != 0) + (v1 != 0);
  }
  CHECK(exact);
  CHECK(signs);
  CHECK(kept > 0.2 * N && kept < 1.8 * N); /* stochastic, far from all or nothing */

  /* The same inputs, seeds, step and tensor id give the same bytes. */
  uint8_t* again = malloc(bytes);
  CHECK_OK(tg_codec_local_scale(w0, g0, N, &s0));
  CHECK_OK(tg_codec_encode(w0, g0, N, 5, 11, 1001, &shared, again, bytes, NULL));
  CHECK(memcmp(again, p0, bytes) == 0);
  /* A shared scale below the tensor's own is refused. */
  const float low = s1 / 2;
  CHECK_ERROR(tg_codec_encode(w1, g1, N, 5, 11, 1002, &low, again, bytes, NULL),
              TG_ERR_INVALID_ARGUMENT, "shared");
  free(again);
  free(p0);
  free(p1);
  tg_codec_destroy(w0);
  tg_codec_destroy(w1);
}

static void test_dense(void) {
  const float g[5] = {1.0f, -2.5f, 3.0e-8f, 65519.0f, 70000.0f};
  tg_codec_t* f32 = make("fp32");
  tg_codec_t* f16 = make("fp16");
  uint8_t p32[16 + 20], p16[16 + 10];
  CHECK_OK(tg_codec_encode(f32, g, 5, 0, 0, 0, NULL, p32, sizeof p32, NULL));
  CHECK_OK(tg_codec_encode(f16, g, 5, 0, 0, 0, NULL, p16, sizeof p16, NULL));
  float out[5], acc[5] = {1, 1, 1, 1, 1};
  CHECK_OK(tg_codec_decode(f32, p32, sizeof p32, out, 5));
  CHECK(memcmp(out, g, sizeof g) == 0);
  CHECK_OK(tg_codec_decode(f16, p16, sizeof p16, out, 5));
  /* 3e-8 rounds to the smallest subnormal half 2^-24; beyond 65504 saturates. */
  const float want16[5] = {1.0f, -2.5f, 0x1p-24f, 65504.0f, 65504.0f};
  CHECK(memcmp(out, want16, sizeof want16) == 0);
  CHECK_OK(tg_codec_decode_accumulate(f16, p16, sizeof p16, acc, 5));
  CHECK(acc[0] == 2.0f && acc[1] == -1.5f && acc[3] == 65505.0f);
  /* A payload of the other codec is refused. */
  CHECK_ERROR(tg_codec_decode(f32, p16, sizeof p16, out, 5), TG_ERR_MALFORMED_PAYLOAD, "element type 16");
  tg_codec_destroy(f32);
  tg_codec_destroy(f16);
}

static void test_errors(void) {
  tg_codec_t* c = make("terngrad");
  float g[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t payload[42];
  g[5] = NAN;
  CHECK_ERROR(tg_codec_encode(c, g, 8, 0, 0, 0, NULL, payload, sizeof payload, NULL),
              TG_ERR_NON_FINITE, "element 5");
  g[5] = 6;
  CHECK_ERROR(tg_codec_encode(c, g, 8, 0, 0, 0, NULL, payload, 41, NULL), TG_ERR_BUFFER_TOO_SMALL,
              "capacity is 41 bytes, 8 elements of terngrad:clip=2.5,share_scale=1 need 42");
  CHECK_ERROR(tg_codec_encode(c, NULL, 8, 0, 0, 0, NULL, payload, sizeof payload, NULL),
              TG_ERR_INVALID_ARGUMENT, "grad is NULL with 8 elements");
  CHECK_OK(tg_codec_encode(c, g, 8, 0, 0, 0, NULL, payload, sizeof payload, NULL));

  float out[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  uint8_t bad[42];
  memcpy(bad, payload, sizeof bad);
  bad[0] ^= 0xFF;
  CHECK_ERROR(tg_codec_decode_accumulate(c, bad, sizeof bad, out, 8), TG_ERR_MALFORMED_PAYLOAD, "magic");
  memcpy(bad, payload, sizeof bad);
  bad[40] |= 0x03; /* the reserved code 0b11 for element 0 */
  CHECK_ERROR(tg_codec_decode_accumulate(c, bad, sizeof bad, out, 8), TG_ERR_INVALID_CODE, "body byte 0");
  CHECK_ERROR(tg_codec_decode_accumulate(c, payload, 41, out, 8), TG_ERR_MALFORMED_PAYLOAD, "");
  CHECK_ERROR(tg_codec_decode(c, payload, sizeof payload, out, 7), TG_ERR_INVALID_ARGUMENT, "");
  int untouched = 1;
  for (int i = 0; i < 8; ++i) untouched &= out[i] == 7.0f;
  CHECK(untouched);
  /* A success clears the message. */
  CHECK_OK(tg_codec_decode(c, payload, sizeof payload, out, 8));
  CHECK(tg_last_error_message()[0] == '\0');
  tg_codec_destroy(c);
}

/* The message is per thread: another thread's failure does not show here. */
static void* fail_in_thread(void* arg) {
  tg_codec_t* c = NULL;
  *(tg_status*)arg = tg_codec_create("nope", &c);
  return NULL;
}

static void test_thread_local_message(void) {
  tg_codec_t* c = NULL;
  CHECK(tg_codec_create("bogus1", &c) == TG_ERR_INVALID_ARGUMENT);
  pthread_t t;
  tg_status other = TG_OK;
  CHECK(pthread_create(&t, NULL, fail_in_thread, &other) == 0);
  pthread_join(t, NULL);
  CHECK(other == TG_ERR_INVALID_ARGUMENT);
  CHECK(strstr(tg_last_error_message(), "bogus1") != NULL);
}

/* Without a device (or without CUDA) the device functions refuse cleanly. */
static void test_device_refusal(void) {
  if (tg_cuda_available()) return; /* capi_cuda_test covers the device path */
  tg_codec_t* c = make("fp32");
  uint8_t out[16];
  if (tg_cuda_built())
    CHECK_ERROR(tg_codec_encode_device(c, NULL, 0, 0, 0, 0, NULL, out, sizeof out, NULL, NULL),
                TG_ERR_CUDA, "failed");
  else
    CHECK_ERROR(tg_codec_encode_device(c, NULL, 0, 0, 0, 0, NULL, out, sizeof out, NULL, NULL),
                TG_ERR_UNSUPPORTED, "built without CUDA");
  tg_codec_destroy(c);
}

/* ef(<codec>): the state round-trips, a restored codec encodes what the
 * original does, and a foreign state is refused with the state kept. */
static void test_error_feedback_state(void) {
  enum { N = 300 };
  float g[N];
  tg_codec_t *a = NULL, *b = NULL, *plain = NULL;
  CHECK(tg_codec_create("ef(terngrad:share_scale=0)", &a) == TG_OK);
  CHECK(tg_codec_create("ef(terngrad:share_scale=0)", &b) == TG_OK);
  CHECK(tg_codec_create("fp16", &plain) == TG_OK);
  size_t bytes = 0, len = 1;
  CHECK(tg_codec_payload_bytes(a, N, &bytes) == TG_OK);
  CHECK(tg_codec_save_state(a, NULL, 0, &len) == TG_OK && len == 0); /* nothing encoded yet */
  uint8_t* pa = malloc(bytes);
  uint8_t* pb = malloc(bytes);
  for (uint32_t step = 0; step < 3; ++step) {
    for (int i = 0; i < N; ++i) g[i] = (float)sin(0.37 * i + step) * 0.01f;
    CHECK(tg_codec_encode(a, g, N, 1, step, 9, NULL, pa, bytes, NULL) == TG_OK);
  }
  CHECK(tg_codec_save_state(a, NULL, 0, &len) == TG_ERR_BUFFER_TOO_SMALL && len > (size_t)N * 4);
  uint8_t* state = malloc(len);
  CHECK(tg_codec_save_state(a, state, len, NULL) == TG_OK);
  CHECK(tg_codec_load_state(b, state, len) == TG_OK);
  for (int i = 0; i < N; ++i) g[i] = (float)cos(0.11 * i) * 0.02f;
  CHECK(tg_codec_encode(a, g, N, 1, 3, 9, NULL, pa, bytes, NULL) == TG_OK);
  CHECK(tg_codec_encode(b, g, N, 1, 3, 9, NULL, pb, bytes, NULL) == TG_OK);
  CHECK(memcmp(pa, pb, bytes) == 0);
  state[0] ^= 1; /* bad magic */
  CHECK(tg_codec_load_state(b, state, len) == TG_ERR_INVALID_ARGUMENT);
  CHECK(strstr(tg_last_error_message(), "magic") != NULL);
  CHECK(tg_codec_load_state(plain, state, len) == TG_ERR_INVALID_ARGUMENT); /* stateless */
  CHECK(tg_codec_load_state(plain, NULL, 0) == TG_OK);
  free(state);
  free(pa);
  free(pb);
  tg_codec_destroy(a);
  tg_codec_destroy(b);
  tg_codec_destroy(plain);
}

/* The reduce-scatter calls: W = 3 workers' slices of one tensor, summed
 * per slice without decoding, decode to the sum of the whole payloads'
 * decodings; bad slices, payloads and buffers are refused by name. */
static void test_reduce_scatter(void) {
  enum { W = 3, N = 1001 };
  static float g[W][N];
  uint32_t state = 12345;
  for (int w = 0; w < W; ++w)
    for (int i = 0; i < N; ++i) {
      state = state * 1664525u + 1013904223u;
      g[w][i] = ((float)(state >> 8) / 16777216.0f - 0.5f) * 1e-3f;
    }
  tg_codec_t* c = make("terngrad");
  float shared = 0.0f;
  for (int w = 0; w < W; ++w) {
    float s;
    CHECK_OK(tg_codec_local_scale(c, g[w], N, &s));
    if (s > shared) shared = s;
  }
  /* Slices [0, 336), [336, 672), [672, 1001) of every worker; and the whole payloads. */
  const uint64_t begins[W] = {0, 336, 672}, lengths[W] = {336, 336, 329};
  static uint8_t slices[W][W][200], whole[W][400];
  for (int w = 0; w < W; ++w) {
    uint8_t* outs[W] = {slices[w][0], slices[w][1], slices[w][2]};
    const size_t caps[W] = {200, 200, 200};
    size_t written[W];
    CHECK_OK(tg_codec_encode_slices(c, g[w], N, W, begins, lengths, 4, 9, 100 + w, &shared, outs, caps, written));
    CHECK(written[0] == 40 + 84 && written[2] == 40 + 83);
    size_t n_whole = 0;
    CHECK_OK(tg_codec_encode(c, g[w], N, 4, 9, 100 + w, &shared, whole[w], sizeof whole[w], &n_whole));
    CHECK(n_whole == 40 + 251);
  }
  float want[N] = {0}, got[N];
  for (int w = 0; w < W; ++w) CHECK_OK(tg_codec_decode_accumulate(c, whole[w], 40 + 251, want, N));
  for (int j = 0; j < W; ++j) {
    const uint8_t* in[W] = {slices[0][j], slices[1][j], slices[2][j]};
    const size_t in_bytes[W] = {40 + (lengths[j] + 3) / 4, 40 + (lengths[j] + 3) / 4, 40 + (lengths[j] + 3) / 4};
    size_t length = 0;
    CHECK_ERROR(tg_codec_aggregate(c, in, in_bytes, W, lengths[j], NULL, 0, &length), TG_ERR_BUFFER_TOO_SMALL,
                "capacity 0");
    CHECK(length == 40 + (3 * lengths[j] + 7) / 8); /* counts in [-3, 3]: 3 bits an element */
    uint8_t sum[200];
    CHECK_OK(tg_codec_aggregate(c, in, in_bytes, W, lengths[j], sum, sizeof sum, &length));
    CHECK_OK(tg_codec_decode_aggregate(c, sum, length, got + begins[j], lengths[j]));
    if (j == 0) {
      uint8_t bad[200];
      memcpy(bad, in[1], in_bytes[1]);
      bad[40] = 0xFF; /* the reserved code */
      const uint8_t* corrupt[W] = {in[0], bad, in[2]};
      CHECK_ERROR(tg_codec_aggregate(c, corrupt, in_bytes, W, lengths[j], sum, sizeof sum, &length),
                  TG_ERR_INVALID_CODE, "reserved code");
    }
  }
  int same = 1;
  for (int i = 0; i < N; ++i) same &= fabsf(got[i] - want[i]) <= 1e-6f * shared;
  CHECK(same);
  {
    const uint64_t odd_begin[1] = {2}, one[1] = {8};
    uint8_t buf[64];
    uint8_t* outs[1] = {buf};
    const size_t caps[1] = {sizeof buf};
    size_t written[1];
    CHECK_ERROR(tg_codec_encode_slices(c, g[0], N, 1, odd_begin, one, 0, 0, 0, &shared, outs, caps, written),
                TG_ERR_INVALID_ARGUMENT, "4");
    const uint64_t zero[1] = {0}, many[1] = {800};
    CHECK_ERROR(tg_codec_encode_slices(c, g[0], N, 1, zero, many, 0, 0, 0, &shared, outs, caps, written),
                TG_ERR_BUFFER_TOO_SMALL, "800 elements");
  }
  tg_codec_destroy(c);
}

/* 16-bit gradients (the *_typed calls): a bfloat16 gradient encodes to the
 * bytes of its float32 values, for a codec that reads halves directly
 * (ef(terngrad)) and one that widens (qsgd); an unknown dtype is refused. */
static void test_typed_gradients(void) {
  enum { N = 1003 };
  static uint16_t bf[N];
  static float wide[N];
  for (int i = 0; i < N; ++i) {
    const float x = sinf(0.37f * (float)i) * 0.01f;
    uint32_t bits;
    memcpy(&bits, &x, 4);
    bf[i] = (uint16_t)(bits >> 16);
    bits = (uint32_t)bf[i] << 16;
    memcpy(&wide[i], &bits, 4);
  }
  const char* specs[2] = {"ef(terngrad:round=nearest)", "qsgd"};
  for (int k = 0; k < 2; ++k) {
    tg_codec_t *h = NULL, *f = NULL;
    CHECK_OK(tg_codec_create(specs[k], &h));
    CHECK_OK(tg_codec_create(specs[k], &f));
    size_t cap = 0;
    CHECK_OK(tg_codec_payload_bytes(h, N, &cap));
    static uint8_t ph[8192], pf[8192];
    CHECK(cap <= sizeof ph);
    for (int step = 0; step < 3; ++step) { /* ef's residual carries over: equal too */
      float sh = 0, sf = 0;
      CHECK_OK(tg_codec_local_scale_typed(h, bf, N, TG_BFLOAT16, &sh));
      CHECK_OK(tg_codec_local_scale(f, wide, N, &sf));
      CHECK(memcmp(&sh, &sf, 4) == 0);
      size_t wh = 0, wf = 0;
      CHECK_OK(tg_codec_encode_typed(h, bf, N, TG_BFLOAT16, 1, (uint32_t)step, 5, &sh, ph, cap, &wh));
      CHECK_OK(tg_codec_encode(f, wide, N, 1, (uint32_t)step, 5, &sf, pf, cap, &wf));
      CHECK(wh == wf && memcmp(ph, pf, wh) == 0);
    }
    const uint64_t begins[2] = {0, 500}, lengths[2] = {500, 503};
    static uint8_t a0[4096], a1[4096], b0[4096], b1[4096];
    uint8_t* oh[2] = {a0, a1};
    uint8_t* of[2] = {b0, b1};
    const size_t caps[2] = {4096, 4096};
    size_t wh[2], wf[2];
    CHECK_OK(tg_codec_encode_slices_typed(h, bf, N, TG_BFLOAT16, 2, begins, lengths, 1, 7, 5, NULL, oh, caps, wh));
    CHECK_OK(tg_codec_encode_slices(f, wide, N, 2, begins, lengths, 1, 7, 5, NULL, of, caps, wf));
    CHECK(wh[0] == wf[0] && wh[1] == wf[1] && memcmp(a0, b0, wh[0]) == 0 && memcmp(a1, b1, wh[1]) == 0);
    float s = 0;
    CHECK_ERROR(tg_codec_local_scale_typed(h, bf, N, (tg_dtype)7, &s), TG_ERR_INVALID_ARGUMENT, "dtype 7");
    CHECK_ERROR(tg_codec_encode_typed(h, NULL, N, TG_FLOAT16, 0, 0, 0, NULL, ph, cap, NULL), TG_ERR_INVALID_ARGUMENT,
                "grad");
    tg_codec_destroy(h);
    tg_codec_destroy(f);
  }
}

/* "auto": the candidates, and the plan for a trainer's own variables. */
static void test_auto_choice(void) {
  char buf[512];
  size_t len = 0;
  CHECK(tg_auto_candidates("auto", 1, buf, sizeof buf, &len) == TG_OK);
  CHECK(len == strlen(buf));
  CHECK(strncmp(buf, "fp32\nfp16\nef(server_ef(terngrad:", 32) == 0);
  CHECK(tg_auto_candidates("auto", 0, buf, sizeof buf, NULL) == TG_OK);
  CHECK(strstr(buf, "server_ef") == NULL); /* async: the worker-side half only */
  CHECK(tg_auto_candidates("auto", 1, buf, 8, &len) == TG_ERR_BUFFER_TOO_SMALL);
  CHECK(tg_auto_candidates("auto(fp32,zstd)", 1, buf, sizeof buf, NULL) == TG_ERR_INVALID_ARGUMENT);
  CHECK(strstr(tg_last_error_message(), "zstd") != NULL);

  /* 1 Gbit/s, 2 replicas: the large variable compressed, the fixed one fp32. */
  const uint64_t sizes[3] = {4000000, 300000, 10};
  const int fixed[3] = {0, 0, 1};
  int choice[3] = {-7, -7, -7};
  double estimate = 0;
  CHECK(tg_auto_choose("auto", 1, sizes, fixed, 3, 125e6, 125e6, 1e-4, 2, 1, choice, &estimate) == TG_OK);
  CHECK(choice[0] == 2 && choice[1] == 2 && choice[2] == 0);
  CHECK(estimate > 0 && estimate < 0.27); /* fp32 would move 2 x 17 MB: about 0.27 s of link alone */
  /* No link: nothing to save, the first candidate everywhere; -1 = fp32 outside the candidates. */
  CHECK(tg_auto_choose("auto", 1, sizes, NULL, 3, 0, 0, 0, 2, 1, choice, NULL) == TG_OK);
  CHECK(choice[0] == 0 && choice[1] == 0 && choice[2] == 0);
  CHECK(tg_auto_choose("auto(terngrad)", 1, sizes, fixed, 3, 125e6, 125e6, 0, 2, 1, choice, NULL) == TG_OK);
  CHECK(choice[0] == 0 && choice[2] == -1);
  /* Refused, and nothing written. */
  choice[0] = 42;
  CHECK(tg_auto_choose("auto", 1, sizes, NULL, 3, -1, 0, 0, 2, 1, choice, NULL) == TG_ERR_INVALID_ARGUMENT);
  CHECK(tg_auto_choose("auto", 1, NULL, NULL, 3, 1, 1, 0, 2, 1, choice, NULL) == TG_ERR_INVALID_ARGUMENT);
  CHECK(tg_auto_choose("auto", 1, sizes, NULL, 3, 1, 1, 0, 0, 1, choice, NULL) == TG_ERR_INVALID_ARGUMENT);
  CHECK(choice[0] == 42);
}

int main(void) {
  test_library();
  test_create();
  test_format_example();
  test_scale_sharing();
  test_dense();
  test_errors();
  test_thread_local_message();
  test_device_refusal();
  test_error_feedback_state();
  test_reduce_scatter();
  test_typed_gradients();
  test_auto_choice();
  printf("capi_test: %d checks, %d failed (libterngrad %s, CUDA built %d)\n", g_checks, g_failed,
         tg_version(), tg_cuda_built());
  return g_failed == 0 ? 0 : 1;
}
