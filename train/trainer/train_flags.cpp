// Command-line flags of tg-train, declared once in a table so that parsing,
// errors and --help cannot disagree.
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "terngrad/train/train_config.h"

#include "terngrad/comm/codec_choice.h"
#include "terngrad/comm/link_rate.h"

namespace terngrad::train {

namespace {

struct Flag {
  const char* name;
  const char* help;
  std::function<void(TrainConfig&, const std::string&)> set;
};

[[noreturn]] void bad(const std::string& flag, const std::string& value, const std::string& want) {
  throw std::invalid_argument("--" + flag + "=" + value + ": expected " + want);
}

int64_t to_int(const std::string& flag, const std::string& v) {
  int64_t out = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  if (r.ec != std::errc() || r.ptr != v.data() + v.size()) bad(flag, v, "an integer");
  return out;
}

double to_double(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const double d = std::stod(v, &pos);
    if (pos != v.size() || !std::isfinite(d)) bad(flag, v, "a finite number");
    return d;
  } catch (const std::logic_error&) {
    bad(flag, v, "a number");
  }
}

bool to_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1" || v == "True") return true;
  if (v == "false" || v == "0" || v == "False") return false;
  bad(flag, v, "true or false");
}

std::string one_of(const std::string& flag, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return v;
    list += (list.empty() ? "" : " | ") + std::string(a);
  }
  bad(flag, v, "one of " + list);
}

#define TG_STR(field) [](TrainConfig& c, const std::string& v) { c.field = v; }
#define TG_INT(field) [](TrainConfig& c, const std::string& v) { c.field = to_int(#field, v); }
#define TG_DBL(field) [](TrainConfig& c, const std::string& v) { c.field = to_double(#field, v); }
#define TG_BOOL(field) [](TrainConfig& c, const std::string& v) { c.field = to_bool(#field, v); }

// The net, the device and the data.
std::vector<Flag> model_and_data_flags() {
  return {
      {"net", "lenet | cifarnet | alexnet | googlenet | vgg_a",
       [](TrainConfig& c, const std::string& v) {
         c.net = one_of("net", v, {"lenet", "cifarnet", "alexnet", "googlenet", "vgg_a"});
       }},
      {"device", "cpu | gpu (CUDA backend: cuDNN/cuBLAS layers, CUDA codec on the device; sgd, momentum, adam)",
       [](TrainConfig& c, const std::string& v) { c.device = one_of("device", v, {"cpu", "gpu"}); }},
      {"num_gpus", "GPUs the virtual workers are spread over (--device=gpu; devices 0..num_gpus-1)",
       [](TrainConfig& c, const std::string& v) { c.num_gpus = static_cast<int>(to_int("num_gpus", v)); }},
      {"dataset_name", "mnist (also Fashion-MNIST) | cifar10 | imagenet | synthetic; default per net",
       [](TrainConfig& c, const std::string& v) {
         c.dataset = one_of("dataset_name", v, {"mnist", "cifar10", "imagenet", "synthetic"});
       }},
      {"data_dir", "dataset directory", TG_STR(data_dir)},
      {"data_format", "native (IDX / CIFAR-10 binary) | tfrecord (train-*-of-* shards) | folder (class subfolders); "
                      "default native, tfrecord for imagenet",
       [](TrainConfig& c, const std::string& v) {
         c.data_format = one_of("data_format", v, {"native", "tfrecord", "folder"});
       }},
      {"skip_corrupt_records", "skip (and count) damaged records and undecodable images instead of stopping",
       TG_BOOL(skip_corrupt_records)},
      {"data_threads", "threads decoding streamed images, shared by the process's workers (0 = the cores)",
       [](TrainConfig& c, const std::string& v) { c.data_threads = static_cast<int>(to_int("data_threads", v)); }},
      {"prefetch_batches", "batches each worker's stream decodes ahead of the step", TG_INT(prefetch_batches)},
      {"preprocessing", "lenet ([-1,1]) | cifar (24x24 distorted crops, centre crop to test) | standardize; default per dataset",
       [](TrainConfig& c, const std::string& v) {
         c.preprocessing = one_of("preprocessing", v, {"lenet", "cifar", "standardize"});
       }},
      {"num_classes", "logits width (224x224 nets: 1000 or 1001); 0 = dataset's", TG_INT(num_classes)},
      {"synthetic_examples", "training examples of the synthetic dataset", TG_INT(synthetic_examples)},
  };
}

// Workers, batches, steps and the optimizer.
std::vector<Flag> schedule_flags() {
  return {
      {"num_nodes", "virtual workers", [](TrainConfig& c, const std::string& v) {
         c.num_nodes = static_cast<int>(to_int("num_nodes", v));
       }},
      {"batch_size", "examples per worker per step", TG_INT(batch_size)},
      {"max_steps", "training steps", TG_INT(max_steps)},
      {"optimizer", "sgd | momentum | adam | rmsprop",
       [](TrainConfig& c, const std::string& v) {
         c.optimizer = one_of("optimizer", v, {"sgd", "momentum", "adam", "rmsprop"});
       }},
      {"momentum", "momentum coefficient", TG_DBL(momentum)},
      {"initial_learning_rate", "learning rate at step 0", TG_DBL(initial_learning_rate)},
      {"learning_rate_decay_type", "fixed | polynomial | exponential",
       [](TrainConfig& c, const std::string& v) {
         c.learning_rate_decay_type = one_of("learning_rate_decay_type", v, {"fixed", "polynomial", "exponential"});
       }},
      {"learning_rate_decay_factor", "exponential decay rate", TG_DBL(learning_rate_decay_factor)},
      {"decay_steps", "decay period in steps (polynomial default: max_steps)", TG_DBL(decay_steps)},
      {"end_learning_rate", "polynomial decay end value", TG_DBL(end_learning_rate)},
      {"learning_rate_power", "polynomial decay power", TG_DBL(learning_rate_power)},
      {"staircase", "exponential decay in whole periods", TG_BOOL(staircase)},
      {"weight_decay", "L2 coefficient of weights (-1 = the net's default)", TG_DBL(weight_decay)},
      {"moving_average_decay", "EMA of the weights for evaluation (0 = off)", TG_DBL(moving_average_decay)},
      {"keep_prob", "dropout keep probability (-1 = net default)", TG_DBL(keep_prob)},
  };
}

// How gradients travel.
std::vector<Flag> codec_flags() {
  return {
      {"grad_bits", "32 (fp32 gradients) or 2 (TernGrad)",
       [](TrainConfig& c, const std::string& v) {
         const int64_t b = to_int("grad_bits", v);
         if (b != 32 && b != 2) bad("grad_bits", v, "32 or 2");
         c.grad_bits = static_cast<int>(b);
       }},
      {"clip_factor", "TernGrad clip factor c (0 = no clipping)", TG_DBL(clip_factor)},
      {"share_scale", "TernGrad scale sharing (max over workers)", TG_BOOL(share_scale)},
      {"size_to_binarize", "variables smaller than this stay fp32", TG_INT(size_to_binarize)},
      {"quantize_logits", "ternarize the logits layer too", TG_BOOL(quantize_logits)},
      {"codec", "explicit codec spec, overrides grad_bits: fp32, fp16, terngrad[:clip=C,share_scale=S,bucket=B], "
               "qsgd[:levels=S,bucket=B], sign[:scale=none|mean,vote=counts|sign], topk[:ratio=R,values=fp32|fp16], "
               "randomk[:ratio=R,values=..,rescale=0|1], ef(<codec>)[:momentum=M], server_ef(<codec>) (comm/codec_config.h); "
               "auto or auto(<codec>,...): chosen per variable from the measured link and codec costs (comm/codec_choice.h)",
       TG_STR(codec)},
      {"auto_link_rate", "--codec=auto: the link rate to choose for (tc syntax: 100mbit, 1gbit, 10gbit); default: the "
                         "chief probes each ps (in-process runs: no link)",
       TG_STR(auto_link_rate)},
      {"codec_costs", "--codec=auto: the file caching the codecs' measured costs per CPU and SIMD level (default "
                      "$TG_CACHE_DIR, $XDG_CACHE_HOME/terngrad or ~/.cache/terngrad /codec_costs.json; none: measure "
                      "every run)",
       TG_STR(codec_costs)},
      {"auto_recheck_links", "--codec=auto, a sync cluster that probes its link: the chief probes again at every "
                             "checkpoint and, when a direction's rate moved by more than 2x, chooses again (every "
                             "replica and ps switch at that step; error-feedback residuals are flushed)",
       TG_BOOL(auto_recheck_links)},
      {"auto_recheck_secs", "--auto_recheck_links: the least time between two probes (each stalls the step about a "
                            "second); 0 (default): 20 times the last probe's own duration, at most 5% of the run",
       TG_DBL(auto_recheck_secs)},
      {"auto_link_changes", "--codec=auto, sync runs: STEP:RATE[,STEP:RATE...], the link rate a re-check at a "
                            "checkpoint sees from global step STEP on, instead of a probe (tests, what-if runs; "
                            "in-process runs too)",
       TG_STR(auto_link_changes)},
  };
}

// What a run writes and shows, and how many threads it takes.
std::vector<Flag> output_flags() {
  return {
      {"train_dir", "checkpoints, metrics.jsonl, model.safetensors", TG_STR(train_dir)},
      {"save_gradients", "directory for every worker's gradients as .npy (step-S/worker-W/<v>-<name>.npy; tg-codec reads them)",
       TG_STR(save_gradients)},
      {"save_gradients_every", "steps between saved gradients (from step 0)",
       [](TrainConfig& c, const std::string& v) {
         c.save_gradients_every = to_int("save_gradients_every", v);
         if (c.save_gradients_every < 1) bad("save_gradients_every", v, "a positive integer");
       }},
      {"seed", "seed of init, data order, augmentation, dropout and the codec",
       [](TrainConfig& c, const std::string& v) {
         const int64_t s = to_int("seed", v);
         if (s < 0) bad("seed", v, "a non-negative integer");
         c.seed = static_cast<uint64_t>(s);
       }},
      {"eval_interval_steps", "evaluate every N steps (0 = at the end only)", TG_INT(eval_interval_steps)},
      {"eval_batch_size", "evaluation batch", TG_INT(eval_batch_size)},
      {"max_eval_examples", "cap on test examples (0 = all)", TG_INT(max_eval_examples)},
      {"save_interval_steps", "checkpoint every N steps (0 = at the end only)", TG_INT(save_interval_steps)},
      {"log_every_n_steps", "metrics line every N steps", TG_INT(log_every_n_steps)},
      {"threads", "OpenMP threads (0 = all cores)", [](TrainConfig& c, const std::string& v) {
         c.threads = static_cast<int>(to_int("threads", v));
       }},
      {"quiet", "no console progress", TG_BOOL(quiet)},
      {"trace_file", "write this process's timeline here at exit (Chrome trace JSON, ui.perfetto.dev)",
       TG_STR(trace_file)},
  };
}

// Distributed runs: roles, addresses, timeouts, security, placement.
std::vector<Flag> cluster_flags() {
  return {
      {"job_name", "distributed role: ps | chief | worker | evaluator (else TF_CONFIG, else in-process)",
       [](TrainConfig& c, const std::string& v) {
         c.job_name = one_of("job_name", v, {"ps", "chief", "worker", "evaluator"});
       }},
      {"task_id", "index of this task within its job", [](TrainConfig& c, const std::string& v) {
         c.task_id = static_cast<int>(to_int("task_id", v));
       }},
      {"ps_hosts", "parameter servers, comma-separated host:port", TG_STR(ps_hosts)},
      {"worker_hosts", "workers, comma-separated host:port", TG_STR(worker_hosts)},
      {"chief_host", "the chief's host:port (optional: else worker 0 is the chief)", TG_STR(chief_host)},
      {"evaluator_host", "the evaluator's host:port (optional)", TG_STR(evaluator_host)},
      {"sync_replicas", "synchronous steps (false: async, pushes applied on arrival)", TG_BOOL(sync_replicas)},
      {"replicas_to_aggregate", "sync: pushes summed per step (-1 = all replicas; fewer makes backups)",
       [](TrainConfig& c, const std::string& v) {
         c.replicas_to_aggregate = static_cast<int>(to_int("replicas_to_aggregate", v));
       }},
      {"peer_timeout_secs", "report a silent or unreachable peer after this", TG_DBL(peer_timeout_secs)},
      {"rejoin_window_steps", "sync: the ps keeps this many steps' sums so a restarted replica catches up from the "
                              "chief's latest checkpoint (>= --save_interval_steps; 0: no rejoin)",
       TG_INT(rejoin_window_steps)},
      {"ps_rejoin_window_secs", "a ps that restarted is refilled (async: from the chief's values; sync: the run "
                                "goes back to the chief's latest checkpoint) while the replicas wait up to this long "
                                "(0: it ends the run)",
       TG_DBL(ps_rejoin_window_secs)},
      {"startup_timeout_secs", "every task must join within this", TG_DBL(startup_timeout_secs)},
      {"rpc_timeout_secs", "deadline of one request to a ps", TG_DBL(rpc_timeout_secs)},
      {"secret_file", "file with the run's cluster secret or this task's key (else $TG_CLUSTER_SECRET)",
       TG_STR(secret_file)},
      {"tls_ca", "PEM CA that signed the ps certificates (replicas then use TLS)", TG_STR(tls_ca)},
      {"tls_cert", "PEM certificate of this task (a ps serves TLS with it)", TG_STR(tls_cert)},
      {"tls_key", "private key of --tls_cert", TG_STR(tls_key)},
      {"tls_verify_clients", "ps: require client certificates signed by --tls_ca", TG_BOOL(tls_verify_clients)},
      {"tls_server_name", "the name on the ps certificates when it is not their host", TG_STR(tls_server_name)},
      {"min_shard_bytes", "split variables into ps shards of at least this", TG_INT(min_shard_bytes)},
      {"max_shard_bytes", "cap on a ps shard's fp32 bytes (0 = none); small shards pipeline", TG_INT(max_shard_bytes)},
      {"compute_nice", "cluster CPU replica: compute this many nice steps below communication (0..19)",
       TG_INT(compute_nice)},
      {"push_lead_bytes", "sync ps: hold a push's reply while its replica leads one still sending by this (0 = never); async: "
       "the next push turn begins with this much of the last push to come",
       TG_INT(push_lead_bytes)},
      {"push_turns", "async: replicas' pushes cross the ps's link one at a time, in turn", TG_BOOL(push_turns)},
      {"retain_freed_memory", "tg-train: keep freed blocks under 32 MiB for reuse, not returned to the kernel",
       TG_BOOL(retain_freed_memory)},
      {"overlap_comm", "sync: push each variable during backward, decode sums as they arrive", TG_BOOL(overlap_comm)},
      {"comm_only", "a fixed gradient in place of forward/backward (communication benchmark)", TG_BOOL(comm_only)},
      {"compute_ms", "comm_only: milliseconds of emulated compute per step", TG_DBL(compute_ms)},
      {"placement", "by_size | round_robin",
       [](TrainConfig& c, const std::string& v) { c.placement = one_of("placement", v, {"by_size", "round_robin"}); }},
  };
}

// Every flag, in the order --help lists them.
const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = [] {
    std::vector<Flag> all;
    for (auto group : {model_and_data_flags, schedule_flags, codec_flags, output_flags, cluster_flags}) {
      std::vector<Flag> g = group();
      all.insert(all.end(), std::make_move_iterator(g.begin()), std::make_move_iterator(g.end()));
    }
    return all;
  }();
  return table;
}

}  // namespace

void parse_train_flags(const std::vector<std::string>& args, TrainConfig& cfg) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + a + "' (flags are --name=value)");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (i + 1 >= args.size()) throw std::invalid_argument("--" + name + " needs a value");
      value = args[++i];
    }
    bool found = false;
    for (const Flag& f : flags()) {
      if (name == f.name) {
        f.set(cfg, value);
        found = true;
        break;
      }
    }
    if (!found) throw std::invalid_argument("unknown flag --" + name + " (see --help)");
  }
}

std::vector<std::pair<int64_t, uint64_t>> parse_link_changes(const std::string& text) {
  std::vector<std::pair<int64_t, uint64_t>> out;
  if (const std::string why = comm::link_changes_problem(text, &out); !why.empty())
    throw std::invalid_argument("--auto_link_changes=" + text + ": " + why);
  return out;
}

void validate(const TrainConfig& c) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  require(c.num_nodes >= 1 && c.num_nodes <= 1024, "--num_nodes must be in [1, 1024], got " + std::to_string(c.num_nodes));
  require(c.num_gpus >= 1 && c.num_gpus <= c.num_nodes,
          "--num_gpus must be in [1, --num_nodes = " + std::to_string(c.num_nodes) + "], got " +
              std::to_string(c.num_gpus));
  require(c.num_gpus == 1 || c.device == "gpu", "--num_gpus=" + std::to_string(c.num_gpus) + " needs --device=gpu");
  require(c.batch_size >= 1, "--batch_size must be >= 1, got " + std::to_string(c.batch_size));
  require(c.max_steps >= 0, "--max_steps must be >= 0, got " + std::to_string(c.max_steps));
  require(c.initial_learning_rate > 0, "--initial_learning_rate must be > 0");
  require(c.momentum >= 0 && c.momentum < 1, "--momentum must be in [0, 1)");
  require(c.clip_factor >= 0, "--clip_factor must be >= 0 (0 disables clipping)");
  require(c.size_to_binarize >= 0, "--size_to_binarize must be >= 0");
  require(c.moving_average_decay >= 0 && c.moving_average_decay < 1, "--moving_average_decay must be in [0, 1)");
  require(c.keep_prob == -1 || (c.keep_prob > 0 && c.keep_prob <= 1), "--keep_prob must be in (0, 1]");
  require(c.eval_batch_size >= 1, "--eval_batch_size must be >= 1");
  require(c.eval_interval_steps >= 0 && c.save_interval_steps >= 0 && c.log_every_n_steps >= 0,
          "interval flags must be >= 0");
  require(c.learning_rate_decay_type != "exponential" || c.decay_steps > 0,
          "--learning_rate_decay_type=exponential needs --decay_steps > 0");
  require(c.num_classes >= 0, "--num_classes must be >= 0");
  require(c.threads >= 0, "--threads must be >= 0");
  require(c.synthetic_examples >= 1, "--synthetic_examples must be >= 1");
  require(c.data_threads >= 0 && c.data_threads <= 256, "--data_threads must be in [0, 256], got " + std::to_string(c.data_threads));
  require(c.prefetch_batches >= 1 && c.prefetch_batches <= 64,
          "--prefetch_batches must be in [1, 64], got " + std::to_string(c.prefetch_batches));
  require(c.task_id >= 0, "--task_id must be >= 0, got " + std::to_string(c.task_id));
  require(c.replicas_to_aggregate == -1 || c.replicas_to_aggregate >= 1,
          "--replicas_to_aggregate must be -1 (all) or >= 1, got " + std::to_string(c.replicas_to_aggregate));
  require(c.rejoin_window_steps >= 0 && c.rejoin_window_steps <= 100000,
          "--rejoin_window_steps must be in [0, 100000], got " + std::to_string(c.rejoin_window_steps));
  require(c.ps_rejoin_window_secs >= 0 && c.ps_rejoin_window_secs <= 86400,
          "--ps_rejoin_window_secs must be in [0, 86400], got " + std::to_string(c.ps_rejoin_window_secs));
  require(c.peer_timeout_secs > 0 && c.startup_timeout_secs > 0 && c.rpc_timeout_secs > 0,
          "--peer_timeout_secs, --startup_timeout_secs and --rpc_timeout_secs must be > 0");
  require(c.min_shard_bytes >= 256, "--min_shard_bytes must be >= 256, got " + std::to_string(c.min_shard_bytes));
  require(c.max_shard_bytes == 0 || c.max_shard_bytes >= 1024,
          "--max_shard_bytes must be 0 (no cap) or >= 1024, got " + std::to_string(c.max_shard_bytes));
  if (!c.trace_file.empty()) {  // refused now, not after a run whose timeline would be lost
    const std::filesystem::path dir = std::filesystem::absolute(c.trace_file).parent_path();
    std::error_code ec;
    require(std::filesystem::is_directory(dir, ec),
            "--trace_file=" + c.trace_file + ": its folder " + dir.string() + " does not exist");
  }
  require(c.push_lead_bytes >= 0, "--push_lead_bytes must be >= 0, got " + std::to_string(c.push_lead_bytes));
  require(c.compute_nice >= 0 && c.compute_nice <= 19,
          "--compute_nice must be in [0, 19], got " + std::to_string(c.compute_nice));
  require(c.compute_ms >= 0 && c.compute_ms <= 600000, "--compute_ms must be in [0, 600000], got " + std::to_string(c.compute_ms));
  const bool auto_codec = comm::is_auto_codec(c.codec);
  if (auto_codec) comm::parse_auto_codec(c.codec, c.sync_replicas);  // names a bad candidate
  if (!c.auto_link_rate.empty()) {
    require(auto_codec, "--auto_link_rate=" + c.auto_link_rate + " is for --codec=auto (the codec is \"" + c.codec + "\")");
    const std::string why = comm::link_rate_problem(c.auto_link_rate);
    require(why.empty(), "--auto_link_rate=" + c.auto_link_rate + ": " + why);
  }
  require(c.auto_recheck_secs >= 0 && c.auto_recheck_secs <= 86400,
          "--auto_recheck_secs must be in [0, 86400], got " + std::to_string(c.auto_recheck_secs));
  if (!c.auto_link_changes.empty()) {
    require(auto_codec, "--auto_link_changes=" + c.auto_link_changes + " is for --codec=auto (the codec is \"" +
                            c.codec + "\")");
    require(c.sync_replicas, "--auto_link_changes: an async run keeps its choice (no step is agreed by every replica "
                             "to switch at)");
    (void)parse_link_changes(c.auto_link_changes);  // names a bad entry
  }
}

std::string train_flags_help() {
  std::ostringstream os;
  os << "usage: tg-train [--flag=value ...]\n";
  for (const Flag& f : flags()) os << "  --" << f.name << "  " << f.help << "\n";
  return os.str();
}

}  // namespace terngrad::train
