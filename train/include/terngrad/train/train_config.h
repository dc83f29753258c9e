// Everything a training run is configured by. Field names follow the flags of
// the TernGrad authors' scripts where those exist (--net, --batch_size,
// --grad_bits, --clip_factor, --size_to_binarize, --quantize_logits, ...).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace terngrad::train {

struct TrainConfig {
  // Model and data.
  std::string net = "lenet";            // lenet | cifarnet | alexnet | googlenet | vgg_a
  std::string dataset = "";             // mnist | cifar10 | imagenet | synthetic ("" = the net's default)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // How data_dir stores the dataset: native (IDX for mnist, CIFAR-10 binary
  // batches for cifar10), tfrecord (sharded train-*-of-* / validation-*-of-*
  // tf.train.Example records as TF's converters write them) or folder (one
  // subfolder of JPEG/PNG files per class under train/ and validation/).
  // "" = native for mnist/cifar10, tfrecord for imagenet.
  std::string data_format = "";
  // A damaged record or undecodable image: false stops the run with an error
  // naming the file and record; true skips it, counts it and logs the count.
  bool skip_corrupt_records = false;
  int data_threads = 0;                 // streaming decode threads (0 = the cores)
  int64_t prefetch_batches = 2;         // streaming: batches decoded ahead of the step, per worker
  int num_classes = 0;                  // 0 = the dataset's; 224x224 nets: 1000 or 1001
  int64_t synthetic_examples = 2048;    // size of the synthetic training set
  std::string preprocessing = "";       // lenet | cifar | standardize ("" = the dataset's)

  // Workers and batch: each of num_nodes virtual workers takes batch_size examples per step.
  int num_nodes = 1;
  int64_t batch_size = 64;
  int64_t max_steps = 1000;

  // Optimizer and learning rate.
  std::string optimizer = "momentum";   // sgd | momentum | adam | rmsprop
  double momentum = 0.9;
  double initial_learning_rate = 0.01;
  std::string learning_rate_decay_type = "fixed";  // fixed | polynomial | exponential
  double learning_rate_decay_factor = 0.1;         // exponential
  double decay_steps = 0;                          // 0 = max_steps (polynomial) / required (exponential)
  double end_learning_rate = 0.0;                  // polynomial
  double learning_rate_power = 0.5;                // polynomial power (TernGrad LeNet: 0.5)
  bool staircase = true;                           // exponential
  double weight_decay = -1;                        // -1 = the net's default
  double moving_average_decay = 0.9999;            // 0 disables the EMA of the weights
  double keep_prob = -1;                           // dropout keep probability (-1 = net default)

  // Gradient codec: grad_bits 32 = fp32 (no compression), 2 = TernGrad.
  int grad_bits = 32;
  double clip_factor = 2.5;
  bool share_scale = true;
  int64_t size_to_binarize = 1;   // variables with fewer elements stay fp32
  bool quantize_logits = true;    // false: the logits layer stays fp32
  std::string codec = "";         // explicit codec spec overrides grad_bits (e.g. "fp16")
  // --codec=auto[(<codec>,...)] (comm/codec_choice.h): the link rate the
  // choice assumes ("" = the chief probes each ps; in-process runs have no
  // link), and where the candidates' measured costs are cached per CPU and
  // SIMD level ("" = $TG_CACHE_DIR, else $XDG_CACHE_HOME/terngrad, else
  // ~/.cache/terngrad, codec_costs.json; "none" = measure every run).
  std::string auto_link_rate = "";
  std::string codec_costs = "";
  // Re-deciding (sync runs): at every checkpoint (--save_interval_steps)
  // the chief of a cluster that probed its link probes it again, and when
  // either direction's rate moved by more than 2x it chooses again; a new
  // plan takes effect at that step on every replica and ps (error-feedback
  // residuals flushed). auto_link_changes ("STEP:RATE,...") is what a
  // re-check sees from global step STEP on instead of a probe, for tests and
  // what-if runs, in-process runs included.
  bool auto_recheck_links = true;
  // The least time between two re-check probes (each stalls every replica's
  // step for about a second); 0: 20 times the last probe's own duration,
  // so probing costs at most 5% of the run.
  double auto_recheck_secs = 0;
  std::string auto_link_changes = "";

  // Distributed runs (ps/worker over gRPC). The cluster comes from the
  // flags when job_name is set, else from the TF_CONFIG environment variable
  // when it is set, else the run is in-process (num_nodes virtual workers).
  std::string job_name = "";        // ps | chief | worker | evaluator
  int task_id = 0;
  std::string ps_hosts = "";        // comma-separated host:port
  std::string worker_hosts = "";
  std::string chief_host = "";
  std::string evaluator_host = "";
  bool sync_replicas = true;        // false: async, each push applied on arrival
  int replicas_to_aggregate = -1;   // sync: pushes per step (-1 = every replica; fewer = backups)
  double peer_timeout_secs = 60;    // a silent or unreachable peer is reported after this
  // Sync: the ps keeps the sums and shared scales of this many steps, so a
  // restarted replica catches up from the chief's latest checkpoint to the
  // run's step (0: it cannot rejoin; make it >= --save_interval_steps).
  int64_t rejoin_window_steps = 0;
  // A ps that restarted (empty) is refilled while the replicas wait up to
  // this long (0: it ends the run): async, from the chief's values and
  // slots; sync (with --train_dir and --save_interval_steps), every ps and
  // replica goes back to the chief's latest checkpoint.
  double ps_rejoin_window_secs = 120;
  double startup_timeout_secs = 120;  // every task must have joined within this
  double rpc_timeout_secs = 30;     // deadline of one request
  // Who may talk to the ps tasks (comm/credentials.h, comm/tls.h): a file
  // holding the run's cluster secret or this task's role key (else the
  // TG_CLUSTER_SECRET environment variable; neither: no authentication).
  std::string secret_file = "";
  std::string tls_ca = "";    // PEM CA of the peers' certificates: replicas connect with TLS
  std::string tls_cert = "";  // PEM certificate of this task (a ps serves TLS with it)
  std::string tls_key = "";   // its private key
  bool tls_verify_clients = false;  // ps: require client certificates signed by tls_ca
  std::string tls_server_name = "";  // the name on the ps certificates, when not their hosts
  int64_t min_shard_bytes = 256 * 1024;  // variables split into shards of at least this
  std::string placement = "by_size";     // by_size | round_robin
  // Shards hold at most this many fp32 bytes (0 = no cap): each fits one
  // 1 MiB message, and a sync step's sums flow back shard by shard (the
  // last shard's sum and trip back is what the pipeline cannot hide).
  int64_t max_shard_bytes = 256 * 1024;
  // Sync CPU replicas: push each variable as soon as its gradient exists
  // (during backward) and decode sums as they arrive; false: push after the
  // whole backward pass, then pull (the arithmetic is the same).
  bool overlap_comm = true;
  // A CPU replica in a cluster runs its forward and backward passes this many
  // nice steps below its communication threads (0..19; 0 = the same), so a
  // bucket to push or a sum to read does not wait for a busy core while the
  // link idles (terngrad/comm/comm_threads.h). Measured on 2 cores, 1 Gbit/s:
  // 10 gave sync LeNet with 2 replicas 1.02x, with 4 replicas 0.98x.
  int compute_nice = 0;
  // Sync ps: a push's reply waits while its replica leads a replica still
  // sending by more than this many bytes of the step (0 = never;
  // ServerOptions::push_lead_bytes), so replicas sharing the ps's link deliver
  // each shard together. Measured on 2 cores, LeNet, 4 replicas: 1.03x at
  // 1 Gbit/s, 1.07x at 500 Mbit/s, 1.00x on loopback (CPU-bound there).
  int64_t push_lead_bytes = 256 << 10;
  // Async, overlapped: each replica's push crosses the ps's link in alone, in
  // turn (comm/service/push_turns.h): the next turn begins when the last push
  // has at most push_lead_bytes to come. Replicas then push while others pull
  // instead of falling into step. Measured on 2 cores, LeNet at 1 Gbit/s:
  // 1.04x with 2 replicas, 1.08x with 4.
  bool push_turns = true;
  // tg-train keeps freed blocks below 32 MiB in the process (glibc's mmap and
  // trim thresholds) instead of handing them back to the kernel: every step's
  // message buffers (gRPC's, the ps's values and gradients) are then reused,
  // not page-faulted in again. Measured on 2 cores, LeNet async at 1 Gbit/s:
  // page faults 1.10M -> 0.16M, the ps's CPU 8.0-8.6 -> 5.5-5.7 s, peak RSS +65-75 MiB.
  bool retain_freed_memory = true;
  // Communication only: a fixed gradient instead of forward/backward, and
  // compute_ms of sleep in its place; encode, push, sum, pull, decode and
  // apply are real (AlexNet-sized gradients on a small machine).
  bool comm_only = false;
  double compute_ms = 0;

  // Bookkeeping.
  std::string train_dir = "";     // checkpoints, metrics.jsonl, model.safetensors ("" = none)
  // Real gradients for codec studies: every save_gradients_every steps
  // (from step 0), every worker's gradient of each variable (what its codec
  // encodes) as <save_gradients>/step-<S>/worker-<W>/<v>-<name>.npy, float32
  // with the variable's shape, written atomically; tg-codec reads them.
  // In-process runs only. "" = off.
  std::string save_gradients = "";
  int64_t save_gradients_every = 1000;
  uint64_t seed = 1;
  int64_t eval_interval_steps = 0;  // 0 = only at the end
  int64_t eval_batch_size = 500;
  int64_t max_eval_examples = 0;    // 0 = the whole test set
  int64_t save_interval_steps = 0;  // 0 = only at the end
  int64_t log_every_n_steps = 10;
  int threads = 0;                  // 0 = all cores
  // cpu: the Eigen/OpenMP layers. gpu: the CUDA backend (cuDNN/cuBLAS layers,
  // the CUDA codec in the loop, num_nodes virtual workers on num_gpus GPUs); needs
  // a CUDA build and a device, and fails with a message saying which is missing.
  std::string device = "cpu";
  // gpu: the virtual workers are spread over devices 0..num_gpus-1 in
  // contiguous blocks; each GPU keeps a copy of the weights and receives the
  // others' packed payloads (the in-process trainer only; a cluster replica
  // is one worker on one GPU).
  int num_gpus = 1;
  bool quiet = false;               // no console progress
  // Write this process's timeline (forward and backward per layer, waits for
  // sums, pushes, the ps's reads, sums and sends) to this file as Chrome
  // trace JSON at exit ("" = none; terngrad/base/timeline.h).
  std::string trace_file;
};

// Parses --flag=value / --flag value arguments into cfg. Unknown flags and
// bad values throw std::invalid_argument naming the flag and the value.
void parse_train_flags(const std::vector<std::string>& args, TrainConfig& cfg);

// Checks ranges and combinations; throws std::invalid_argument naming the field.
void validate(const TrainConfig& cfg);
// --auto_link_changes as (global step, bits per second) pairs, steps
// ascending; std::invalid_argument naming the entry that is wrong.
std::vector<std::pair<int64_t, uint64_t>> parse_link_changes(const std::string& text);

std::string train_flags_help();

}  // namespace terngrad::train
