/* terngrad.h: the stable C API of libterngrad.
 *
 * Gradient codecs (TernGrad's 2-bit stochastic ternarization, fp16, fp32)
 * for trainers that are not this project's: a C, C++, Python (ctypes) or
 * any-FFI program links libterngrad.so and calls these functions.
 *
 * Conventions
 *   - Every codec lives behind an opaque handle (tg_codec_t*), created from a
 *     spec string and released with tg_codec_destroy().
 *   - Sizes are explicit: element counts are uint64_t, byte counts size_t.
 *   - Every fallible call returns a tg_status; TG_OK is 0. On failure,
 *     tg_last_error_message() returns a message naming the problem (field,
 *     value, element index). The message is per thread and stays valid until
 *     the next libterngrad call on that thread.
 *   - A failed call writes nothing to its outputs.
 *   - A handle is not thread-safe (the terngrad codec keeps the statistics of
 *     the last tg_codec_local_scale() for the next encode); use one handle per
 *     thread, or serialize. Distinct handles are independent.
 *   - No C++ type crosses this boundary; no exception escapes it.
 *
 * Scale sharing (TernGrad): each worker calls tg_codec_local_scale(), the
 * workers max-reduce the scales, and each passes the max to
 * tg_codec_encode() as shared_scale. Then every payload has the same scale
 * and their sum is an integer count per element times that scale.
 *
 * Device pointers: when libterngrad is built with CUDA, the *_device
 * functions take device pointers and a CUDA stream, passed as void* (a
 * cudaStream_t cast to void*; NULL is the legacy default stream) so that this
 * header does not need the CUDA headers. They are enqueued on the stream and
 * return without waiting, except tg_codec_local_scale_device(), which waits
 * for the scale. Errors found on the device (NaN input, a malformed payload)
 * are reported by tg_codec_device_check(), which waits for the stream; the
 * device work after a failed check writes nothing. A codec handle holds one
 * device workspace: use it on one stream at a time (or synchronize between
 * streams); give each concurrent stream its own handle. Without CUDA they
 * return TG_ERR_UNSUPPORTED.
 *
 * Payload formats: terngrad is quantize/FORMAT.md (40-byte header, 2 bits per
 * element); fp32 and fp16 are a 16-byte header followed by the values.
 */
#ifndef TERNGRAD_H_
#define TERNGRAD_H_

#include <stddef.h>
#include <stdint.h>

/* The library is built with -fvisibility=hidden; TG_API marks what it exports. */
#if defined(TG_BUILDING_LIBRARY)
#define TG_API __attribute__((visibility("default")))
#else
#define TG_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The API this header describes. tg_api_version() returns the library's;
 * a program checks that the majors agree (and, while the major is 0, the
 * minors too) before relying on anything else. */
#define TG_API_VERSION_MAJOR 0
#define TG_API_VERSION_MINOR 1
#define TG_API_VERSION_PATCH 0
#define TG_API_VERSION \
  (TG_API_VERSION_MAJOR * 10000 + TG_API_VERSION_MINOR * 100 + TG_API_VERSION_PATCH)

/* Status codes. Numbers are part of the ABI and never change meaning. */
typedef enum tg_status {
  TG_OK = 0,
  TG_ERR_INVALID_ARGUMENT = 1,  /* null pointer, bad spec, wrong size, bad shared scale */
  TG_ERR_NON_FINITE = 2,        /* NaN or Inf in the input gradient */
  TG_ERR_BUFFER_TOO_SMALL = 3,  /* output capacity below tg_codec_payload_bytes() */
  TG_ERR_MALFORMED_PAYLOAD = 4, /* payload header or length is wrong */
  TG_ERR_INVALID_CODE = 5,      /* terngrad payload body holds a reserved code */
  TG_ERR_SCALE_MISMATCH = 6,    /* payloads summed together disagree */
  TG_ERR_CUDA = 7,              /* a CUDA runtime call failed */
  TG_ERR_UNSUPPORTED = 8,       /* built without CUDA, or no device path for this codec */
  TG_ERR_OUT_OF_MEMORY = 9,
  TG_ERR_INTERNAL = 10          /* a bug: please report the message */
} tg_status;

typedef struct tg_codec tg_codec_t;

/* ---- library ---------------------------------------------------------- */

/* "0.1.0": the library's version string. */
TG_API const char* tg_version(void);
/* TG_API_VERSION of the library that is loaded. */
TG_API uint32_t tg_api_version(void);
/* Message of the last failed call on this thread ("" if none). */
TG_API const char* tg_last_error_message(void);
/* "TG_ERR_NON_FINITE" etc.; "unknown status" for numbers not listed above. */
TG_API const char* tg_status_name(tg_status status);
/* 1 if the library was built with CUDA, else 0. */
TG_API int tg_cuda_built(void);
/* 1 if built with CUDA and a CUDA device can be used now, else 0. */
TG_API int tg_cuda_available(void);

/* ---- codecs ----------------------------------------------------------- */

/* Creates a codec from a spec: "terngrad" (clip=2.5, share_scale=1),
 * "terngrad:clip=0" (s = max|g|), "terngrad:clip=2.5,share_scale=0",
 * "terngrad:pack=base3" (1.6 bits), "terngrad:pack=entropy" (rANS-coded:
 * a variable-size codec, tg_codec_variable_size),
 * "fp16", "fp32", "qsgd:levels=7", "sign:scale=mean", "topk:ratio=0.01",
 * "randomk:ratio=0.01", and any of them under error feedback, "ef(topk)"
 * (comm/include/terngrad/comm/codec_config.h lists every key). An unknown
 * name, key or value is TG_ERR_INVALID_ARGUMENT with a message listing what
 * is accepted. Device pointers take fp32, fp16 and terngrad without ef()
 * and with fixed-size payloads. */
TG_API tg_status tg_codec_create(const char* spec, tg_codec_t** out_codec);
/* Releases a codec (NULL is a no-op). */
TG_API void tg_codec_destroy(tg_codec_t* codec);

/* The canonical spec ("terngrad:clip=2.5,share_scale=1"), NUL-terminated in
 * buf. *out_length (optional) receives its length without the NUL; a buf
 * too small (capacity <= length) is TG_ERR_BUFFER_TOO_SMALL, so a call with
 * buf = NULL, capacity = 0 asks for the length. */
TG_API tg_status tg_codec_spec(const tg_codec_t* codec, char* buf, size_t capacity,
                               size_t* out_length);

/* Bytes tg_codec_encode() writes for n elements: exact for fixed-size
 * codecs, the most it writes (the capacity to allocate) for variable-size
 * ones (tg_codec_variable_size). */
TG_API tg_status tg_codec_payload_bytes(const tg_codec_t* codec, uint64_t n, size_t* out_bytes);

/* *out_variable = 1 if the length of the codec's payloads depends on the
 * values (an entropy-coded payload), else 0. Such a payload is the first
 * *out_written bytes tg_codec_encode() reports: send and decode those (an
 * all-gather exchanges the lengths too); tg_codec_payload_bytes() is only
 * their upper bound. The device functions refuse these codecs
 * (TG_ERR_UNSUPPORTED). */
TG_API tg_status tg_codec_variable_size(const tg_codec_t* codec, int* out_variable);

/* *out_wants = 1 if the codec takes part in scale sharing (terngrad with
 * share_scale=1), else 0. */
TG_API tg_status tg_codec_wants_shared_scale(const tg_codec_t* codec, int* out_wants);

/* This worker's scale for grad[0, n): what encode would use without
 * sharing. 0 for codecs without a scale (fp32, fp16). */
TG_API tg_status tg_codec_local_scale(tg_codec_t* codec, const float* grad, uint64_t n,
                                      float* out_scale);

/* Encodes grad[0, n) into out (capacity bytes, at least
 * tg_codec_payload_bytes(n)). The random stream is a pure function of
 * (seed, step, tensor_id, element index): workers must use different seeds;
 * step and tensor_id make each (step, tensor) draw independent.
 * shared_scale: NULL, or the max over workers of tg_codec_local_scale()
 * (must be >= this tensor's own scale); ignored by codecs that do not want
 * one. *out_written (optional) receives the bytes of the payload: exactly
 * tg_codec_payload_bytes(n) for fixed-size codecs, at most that for
 * variable-size ones; out beyond them is unspecified and not part of it. */
TG_API tg_status tg_codec_encode(tg_codec_t* codec, const float* grad, uint64_t n,
                                 uint32_t tensor_id, uint32_t step, uint64_t seed,
                                 const float* shared_scale, uint8_t* out, size_t capacity,
                                 size_t* out_written);

/* 16-bit gradients (mixed-precision training). The element types a
 * *_typed call takes: grad points to n elements of 4 (TG_FLOAT32) or 2
 * bytes, in host byte order. */
typedef enum tg_dtype {
  TG_FLOAT32 = 0,
  TG_FLOAT16 = 1,  /* IEEE binary16 */
  TG_BFLOAT16 = 2, /* the top 16 bits of a float32 */
} tg_dtype;

/* tg_codec_local_scale, tg_codec_encode and tg_codec_encode_slices on a
 * gradient of any tg_dtype: the results and bytes of the float32 calls on
 * its float32 values (every half is exactly a float32), so replicas with
 * float32 and 16-bit gradients agree. terngrad, and ef() / server_ef() of it,
 * read the halves directly (no float32 copy of the gradient); other codecs
 * widen into a copy the handle keeps. An unknown dtype is
 * TG_ERR_INVALID_ARGUMENT. */
TG_API tg_status tg_codec_local_scale_typed(tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype,
                                            float* out_scale);
TG_API tg_status tg_codec_encode_typed(tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype,
                                       uint32_t tensor_id, uint32_t step, uint64_t seed, const float* shared_scale,
                                       uint8_t* out, size_t capacity, size_t* out_written);

/* out[0, n) = decoded payload. n must equal the payload's element count. */
TG_API tg_status tg_codec_decode(const tg_codec_t* codec, const uint8_t* payload,
                                 size_t payload_bytes, float* out, uint64_t n);

/* out[0, n) += decoded payload: the all-gather / server-side reduction. */
TG_API tg_status tg_codec_decode_accumulate(const tg_codec_t* codec, const uint8_t* payload,
                                            size_t payload_bytes, float* out, uint64_t n);

/* The codec's state carried between steps: error-feedback residuals of an
 * "ef(<codec>)" codec (empty for stateless codecs, and before the first
 * encode). Written to buf (capacity bytes); *out_length (optional) receives
 * its length; capacity below it is TG_ERR_BUFFER_TOO_SMALL (buf = NULL,
 * capacity = 0 asks for the length). Save it with your checkpoints. */
TG_API tg_status tg_codec_save_state(const tg_codec_t* codec, uint8_t* buf, size_t capacity,
                                     size_t* out_length);

/* Restores a state from tg_codec_save_state() (length 0: back to no state).
 * A state that is not this codec's (damaged, another codec, momentum buffer
 * mismatch) is TG_ERR_INVALID_ARGUMENT and the codec keeps its state; one
 * from a tensor of another size is refused at the next encode. */
TG_API tg_status tg_codec_load_state(tg_codec_t* codec, const uint8_t* state, size_t length);

/* ---- reduce-scatter: slices and sums of payloads ----------------------- */

/* A compressed all-reduce keeps TernGrad's homomorphic sum: each rank cuts
 * its gradient into slices (tg_codec_encode_slices), sends slice j to rank
 * j, rank j sums the payloads it received without decoding them
 * (tg_codec_aggregate) and every rank decodes every rank's sum
 * (tg_codec_decode_aggregate). terngrad.torch's reduce-scatter hook does
 * this over torch.distributed. */

/* Encodes count slices of grad[0, n) in one call: slice i is
 * grad[begins[i], begins[i] + lengths[i]) into outs[i] (capacities[i] bytes,
 * at least tg_codec_payload_bytes(lengths[i])); out_written[i] receives its
 * payload's bytes. Statistics, scale and random draws are the whole
 * tensor's (an ef() codec keeps one residual for the whole tensor), so the
 * slices decode to the whole tensor's decoding cut up, whatever the cut.
 * Each begins[i] is a multiple of 4 and each slice lies in [0, n); they need
 * not cover it. shared_scale as tg_codec_encode(). */
TG_API tg_status tg_codec_encode_slices(tg_codec_t* codec, const float* grad, uint64_t n, size_t count,
                                        const uint64_t* begins, const uint64_t* lengths, uint32_t tensor_id,
                                        uint32_t step, uint64_t seed, const float* shared_scale,
                                        uint8_t* const* outs, const size_t* capacities, size_t* out_written);
TG_API tg_status tg_codec_encode_slices_typed(tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype,
                                              size_t count, const uint64_t* begins, const uint64_t* lengths,
                                              uint32_t tensor_id, uint32_t step, uint64_t seed,
                                              const float* shared_scale, uint8_t* const* outs,
                                              const size_t* capacities, size_t* out_written);

/* The sum of count payloads of the same n elements (payloads[i] of
 * payload_bytes[i] bytes), in the order given, as one payload: what a
 * parameter server returns. terngrad payloads with one shared scale sum to
 * integer counts, bit_width(2 count) bits per element, without decoding;
 * other codecs' to float32. Written to out (capacity bytes); *out_length
 * (optional) receives its length; a capacity below it is
 * TG_ERR_BUFFER_TOO_SMALL (out = NULL, capacity = 0 asks for the length).
 * (terngrad payloads whose scales differ sum to float32 too.) A malformed
 * payload is TG_ERR_MALFORMED_PAYLOAD (TG_ERR_INVALID_CODE for the reserved
 * code) naming the problem. */
TG_API tg_status tg_codec_aggregate(const tg_codec_t* codec, const uint8_t* const* payloads,
                                    const size_t* payload_bytes, size_t count, uint64_t n, uint8_t* out,
                                    size_t capacity, size_t* out_length);

/* *out_bytes = the length tg_codec_aggregate() gives for count payloads of
 * n elements that this codec encoded with one shared scale (as a
 * reduce-scatter encodes its slices), when it follows from n and count
 * alone: 2-bit terngrad with scale sharing, fp32; 0 when the length depends
 * on the payloads (entropy-coded and sparse sums, ...). Lets every rank size
 * the all-gather of the sums without exchanging their lengths. */
TG_API tg_status tg_codec_aggregate_bytes(const tg_codec_t* codec, uint64_t n, size_t count, size_t* out_bytes);

/* out[0, n) = the sum a tg_codec_aggregate() payload stands for. */
TG_API tg_status tg_codec_decode_aggregate(const tg_codec_t* codec, const uint8_t* aggregate,
                                           size_t aggregate_bytes, float* out, uint64_t n);

/* ---- choosing the codec: "auto" (comm/codec_choice.h) ------------------ */

/* The candidates of an "auto" or "auto(<spec>,...)" spec as canonical specs,
 * one per line (each ended by '\n'), NUL-terminated in buf. sync = 0 for an
 * asynchronous run (its defaults differ, and codecs that need a step's sum
 * are refused). *out_length (optional) = the text's length without the NUL.
 * A bad candidate is TG_ERR_INVALID_ARGUMENT naming it. */
TG_API tg_status tg_auto_candidates(const char* auto_spec, int sync, char* buf, size_t capacity,
                                    size_t* out_length);

/* Which candidate each of `count` variables (sizes[i] elements) should travel
 * with, for a parameter server reached at up / down bytes per second with
 * the given round trip, `replicas` replicas and `num_ps` servers:
 * out_choice[i] = the candidate's index in tg_auto_candidates' list, or -1
 * for fp32 where fp32 is not a candidate and fixed[i] != 0 keeps variable i
 * fp32 (fixed may be NULL). *out_estimate_s (optional) = the model's
 * communication and codec time per step for the plan. Rates of 0 mean no
 * link: the first candidate everywhere. Each candidate's cost is measured
 * on this machine during the call (a fraction of a second each; the
 * trainer caches them, this call does not). Nothing is written on failure. */
TG_API tg_status tg_auto_choose(const char* auto_spec, int sync, const uint64_t* sizes, const int* fixed,
                                size_t count, double up_bytes_per_s, double down_bytes_per_s,
                                double round_trip_s, int replicas, int num_ps, int* out_choice,
                                double* out_estimate_s);

/* ---- device pointers (CUDA builds) ------------------------------------ */

/* As tg_codec_local_scale on device memory; waits for the stream. */
TG_API tg_status tg_codec_local_scale_device(tg_codec_t* codec, const float* d_grad, uint64_t n,
                                             void* stream, float* out_scale);

/* As tg_codec_encode on device memory (d_grad 4-byte aligned); shared_scale
 * is a host pointer. Enqueued on the stream; the payload bytes equal the
 * host path's (fixed-size codecs only: *out_written is
 * tg_codec_payload_bytes(n)). */
TG_API tg_status tg_codec_encode_device(tg_codec_t* codec, const float* d_grad, uint64_t n,
                                        uint32_t tensor_id, uint32_t step, uint64_t seed,
                                        const float* shared_scale, uint8_t* d_out,
                                        size_t capacity, void* stream, size_t* out_written);

/* As tg_codec_local_scale_device / tg_codec_encode_device on a device
 * gradient of any tg_dtype (2-byte aligned for 16 bits): float16 and
 * bfloat16 gradients give the bytes of their float32 values, read as they
 * are (no float32 copy). 16-bit device gradients are taken by terngrad's
 * 2-bit codec; the others refuse them (TG_ERR_UNSUPPORTED), which
 * tg_codec_device_takes() tells beforehand. */
TG_API tg_status tg_codec_local_scale_device_typed(tg_codec_t* codec, const void* d_grad, uint64_t n,
                                                   tg_dtype dtype, void* stream, float* out_scale);
TG_API tg_status tg_codec_encode_device_typed(tg_codec_t* codec, const void* d_grad, uint64_t n, tg_dtype dtype,
                                              uint32_t tensor_id, uint32_t step, uint64_t seed,
                                              const float* shared_scale, uint8_t* d_out, size_t capacity,
                                              void* stream, size_t* out_written);
/* *out_takes = 1 if the device functions take this codec's gradients of
 * dtype (a CUDA build; terngrad any dtype, fp32 and fp16 float32 only), else 0. */
TG_API tg_status tg_codec_device_takes(const tg_codec_t* codec, tg_dtype dtype, int* out_takes);

/* As tg_codec_decode / tg_codec_decode_accumulate on device memory. */
TG_API tg_status tg_codec_decode_device(tg_codec_t* codec, const uint8_t* d_payload,
                                        size_t payload_bytes, float* d_out, uint64_t n,
                                        void* stream);
TG_API tg_status tg_codec_decode_accumulate_device(tg_codec_t* codec, const uint8_t* d_payload,
                                                   size_t payload_bytes, float* d_out, uint64_t n,
                                                   void* stream);

/* The reduce-scatter's steps on device memory (terngrad.torch's hook on
 * CUDA buckets, over NCCL), each the device twin of its host function above,
 * with the same bytes and floats:
 *   - tg_codec_encode_slices_device(_typed): as tg_codec_encode_slices(_typed)
 *     on a device gradient, into device buffers d_outs[i] (a host array of
 *     device pointers); terngrad's slices take the whole tensor's
 *     statistics; fp32 and fp16 encode each range;
 *   - tg_codec_aggregate_device: as tg_codec_aggregate for terngrad payloads
 *     with one shared scale (2-bit, share_scale=1; other codecs are
 *     TG_ERR_UNSUPPORTED): count device payloads of exactly
 *     tg_codec_payload_bytes(n) bytes summed to integer counts and written
 *     as the packed sum (*out_length, optional, gets its length:
 *     tg_codec_aggregate_bytes(n, count)); no host round trip;
 *   - tg_codec_decode_aggregate_device: as tg_codec_decode_aggregate for
 *     those sums; waits for the stream to read the sum's 40-byte header.
 * A payload or sum found malformed on the device (codes, padding, a scale
 * that differs) is reported by tg_codec_device_check(), and the output is
 * left as it was. */
TG_API tg_status tg_codec_encode_slices_device(tg_codec_t* codec, const float* d_grad, uint64_t n, size_t count,
                                               const uint64_t* begins, const uint64_t* lengths, uint32_t tensor_id,
                                               uint32_t step, uint64_t seed, const float* shared_scale,
                                               uint8_t* const* d_outs, const size_t* capacities, void* stream,
                                               size_t* out_written);
TG_API tg_status tg_codec_encode_slices_device_typed(tg_codec_t* codec, const void* d_grad, uint64_t n,
                                                     tg_dtype dtype, size_t count, const uint64_t* begins,
                                                     const uint64_t* lengths, uint32_t tensor_id, uint32_t step,
                                                     uint64_t seed, const float* shared_scale,
                                                     uint8_t* const* d_outs, const size_t* capacities, void* stream,
                                                     size_t* out_written);
TG_API tg_status tg_codec_aggregate_device(tg_codec_t* codec, const uint8_t* const* d_payloads,
                                           const size_t* payload_bytes, size_t count, uint64_t n, uint8_t* d_out,
                                           size_t capacity, void* stream, size_t* out_length);
TG_API tg_status tg_codec_decode_aggregate_device(tg_codec_t* codec, const uint8_t* d_aggregate,
                                                  size_t aggregate_bytes, float* d_out, uint64_t n, void* stream);

/* Waits for the stream and reports the first error the device work of this
 * codec found since the last check (then clears it). */
TG_API tg_status tg_codec_device_check(tg_codec_t* codec, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* TERNGRAD_H_ */
