/* A program outside the terngrad source tree that uses the installed C API:
 * two workers' gradients, TernGrad with scale sharing, and the averaged
 * update decoded from the two 2-bit payloads. Exits non-zero on any error. */
#include <stdio.h>
#include <stdlib.h>

#include <terngrad.h>

#define TRY(call)                                                                        \
  do {                                                                                   \
    const tg_status st_ = (call);                                                        \
    if (st_ != TG_OK) {                                                                  \
      fprintf(stderr, "%s: %s\n", tg_status_name(st_), tg_last_error_message());        \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

int main(void) {
  if (tg_api_version() / 100 != TG_API_VERSION / 100) {
    fprintf(stderr, "libterngrad %s does not match terngrad.h %d\n", tg_version(), TG_API_VERSION);
    return 1;
  }
  enum { N = 8 };
  const float grad[2][N] = {{0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f, 0.75f, -0.5f},
                            {0.1f, 0.2f, -0.3f, 0.4f, -0.5f, 0.6f, -0.7f, 0.8f}};
  tg_codec_t* codec[2];
  float scale[2], shared;
  size_t bytes;
  for (int w = 0; w < 2; ++w) {
    TRY(tg_codec_create("terngrad:clip=2.5", &codec[w]));
    TRY(tg_codec_local_scale(codec[w], grad[w], N, &scale[w]));
  }
  shared = scale[0] > scale[1] ? scale[0] : scale[1]; /* the max all-reduce */
  TRY(tg_codec_payload_bytes(codec[0], N, &bytes));
  unsigned char* payload[2];
  for (int w = 0; w < 2; ++w) {
    payload[w] = malloc(bytes);
    /* seed: per worker; step and tensor id: per step and variable */
    TRY(tg_codec_encode(codec[w], grad[w], N, /*tensor_id=*/0, /*step=*/1, /*seed=*/100 + w,
                        &shared, payload[w], bytes, NULL));
  }
  float mean[N] = {0};
  for (int w = 0; w < 2; ++w) TRY(tg_codec_decode_accumulate(codec[0], payload[w], bytes, mean, N));
  printf("terngrad %s: %zu bytes per worker for %d floats; averaged update:", tg_version(), bytes, N);
  for (int i = 0; i < N; ++i) {
    mean[i] /= 2;
    /* each element is k * shared / 2 with k in {-2, ..., 2} */
    const float k = mean[i] * 2 / shared;
    if (k != (float)(int)k || k < -2 || k > 2) {
      fprintf(stderr, "element %d = %g is not a multiple of the shared scale / 2\n", i, mean[i]);
      return 1;
    }
    printf(" %g", mean[i]);
  }
  printf("\n");
  for (int w = 0; w < 2; ++w) {
    free(payload[w]);
    tg_codec_destroy(codec[w]);
  }
  return 0;
}
