// ps_push_pull_bench: the communication cycle of one synchronous step over
// the parameter-server service on loopback, per codec and worker count, for
// a LeNet-sized (1.26M floats) and an AlexNet-sized (about 61M floats) set
// of gradients (the models' real variables, one ps).
//
// One step, timed for all workers together: scale exchange (terngrad),
// push of every variable's payload, the ps's sum, pull of the sums. The
// gradients are encoded once beforehand (encode speed is codec_cpu_bench's
// subject). Reported per step and worker:
//   payload_push / payload_pull  codec bytes pushed / sums pulled;
//   grpc_bytes                   serialized protobuf messages, both ways;
//   lo_bytes                     what crossed the loopback interface (HTTP/2
//                                framing and TCP/IP headers included, from
//                                /proc/net/dev, both ways), and
//   overhead = lo_bytes / (payload_push + payload_pull).
// Baselines measured in the same run: the fp32 codec's step time at the
// same worker count (speedup_vs_fp32) and a raw TCP loopback stream
// (lo_wire_GBps) against which the cycle's wire rate is a fraction.
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/ps_server.h"
#include "terngrad/comm/worker_client.h"
#include "terngrad/train/models.h"

namespace tc = terngrad::comm;

namespace {

// Bytes the loopback interface has carried (tx counter of "lo").
uint64_t loopback_bytes() {
  std::ifstream f("/proc/net/dev");
  std::string line;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != "lo") continue;
    std::istringstream in(line.substr(colon + 1));
    uint64_t v[16] = {};
    for (auto& x : v) in >> x;
    return v[8];  // transmit bytes
  }
  return 0;
}

// Raw TCP over loopback: one 1 MiB-write stream of 512 MiB, in GB/s.
double raw_loopback_gbps() {
  const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
  ::listen(ls, 1);
  constexpr size_t kChunk = 1 << 20, kTotal = size_t{512} << 20;
  std::thread reader([&] {
    const int s = ::accept(ls, nullptr, nullptr);
    std::vector<char> buf(kChunk);
    size_t got = 0;
    while (got < kTotal) {
      const ssize_t n = ::read(s, buf.data(), buf.size());
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ::close(s);
  });
  const int c = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
  std::vector<char> buf(kChunk, 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t sent = 0; sent < kTotal;) {
    const ssize_t n = ::write(c, buf.data(), buf.size());
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::close(c);
  reader.join();
  ::close(ls);
  return kTotal / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
}

std::vector<tc::VariableSpec> model_variables(const std::string& net, const std::string& codec) {
  auto model = terngrad::train::make_model(net, terngrad::train::ModelOptions{}, 1);
  std::vector<tc::VariableSpec> v;
  for (const auto& p : model->params().params) v.push_back({p.name, static_cast<uint64_t>(p.value.size()), codec});
  return v;
}

std::map<std::string, double> g_fp32_ms;  // "net/workers" -> fp32 step time, this run
double g_raw_gbps = 0;

void push_pull(benchmark::State& state, const std::string& net, const std::string& codec, int workers) {
  const tc::Layout layout = tc::place_variables(model_variables(net, codec), 1);
  tc::ServerOptions so;
  so.verbose = false;
  so.peer_timeout_s = 600;
  tc::ParameterServer ps("127.0.0.1:0", so, nullptr);
  std::thread serve([&] {
    try {
      ps.run();
    } catch (...) {
    }
  });
  const std::string address = "127.0.0.1:" + std::to_string(ps.port());
  tc::ClientOptions co;
  co.rpc_timeout_s = 600;
  co.peer_timeout_s = 600;
  std::vector<std::unique_ptr<tc::WorkerClient>> clients;
  for (int w = 0; w < workers; ++w)
    clients.push_back(std::make_unique<tc::WorkerClient>(std::vector<std::string>{address}, layout, w, true, workers,
                                                         workers, co));
  {
    std::vector<std::thread> joins;
    for (int w = 0; w < workers; ++w) joins.emplace_back([&, w] { clients[w]->join(0); });
    for (auto& t : joins) t.join();
  }
  // Each worker's payloads, encoded once with a shared scale.
  auto codec_obj = tc::make_codec(codec);
  std::vector<std::vector<std::vector<uint8_t>>> payloads(workers);
  std::vector<std::vector<float>> scales(workers, std::vector<float>(layout.variables.size()));
  std::vector<float> grad;
  for (size_t v = 0; v < layout.variables.size(); ++v) {
    grad.resize(layout.variables[v].size);
    std::vector<float> local(workers);
    for (int w = 0; w < workers; ++w) {
      terngrad::bench::fill_gradient(grad.data(), grad.size(), terngrad::bench::kInputSeed + 97 * w + v);
      if (codec_obj->wants_shared_scale()) scales[w][v] = codec_obj->local_scale(grad);
      tc::EncodeContext ctx;
      ctx.tensor_id = static_cast<uint32_t>(v);
      ctx.seed = terngrad::bench::kCodecSeed + w;
      ctx.shared_scale = 1.0f;  // above every local scale: all payloads share it
      payloads[w].emplace_back(codec_obj->payload_bytes(grad.size()));
      codec_obj->encode(grad, ctx, payloads[w].back());
    }
  }
  double push_bytes = 0;
  for (const auto& p : payloads[0]) push_bytes += static_cast<double>(p.size());
  const bool wants_scales = codec_obj->wants_shared_scale();

  int64_t step = 0;
  auto one_step = [&] {
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
      threads.emplace_back([&, w] {
        if (wants_scales) clients[w]->exchange_scales(step, scales[w]);
        std::vector<std::span<const uint8_t>> views(payloads[w].begin(), payloads[w].end());
        clients[w]->push(step, 0.0f, views);
        std::vector<std::vector<uint8_t>> sums;
        clients[w]->pull_sums(step, sums);
      });
    for (auto& t : threads) t.join();
    ++step;
  };
  one_step();  // warm-up: connections, allocations
  const tc::Traffic t0 = clients[0]->traffic();
  const uint64_t lo0 = loopback_bytes();
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) one_step();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t lo = loopback_bytes() - lo0;
  const tc::Traffic t1 = clients[0]->traffic();
  const double steps = static_cast<double>(state.iterations());
  const double step_ms = 1e3 * secs / steps;
  const double pull_bytes = (t1.payload_received - t0.payload_received) / steps;
  const double grpc_bytes = ((t1.message_sent - t0.message_sent) + (t1.message_received - t0.message_received)) / steps;
  const double lo_bytes = lo / steps / workers;
  state.counters["payload_push"] = push_bytes;
  state.counters["payload_pull"] = pull_bytes;
  state.counters["grpc_bytes"] = grpc_bytes;
  state.counters["lo_bytes"] = lo_bytes;
  state.counters["overhead"] = lo_bytes / (push_bytes + pull_bytes);
  state.counters["wire_frac_of_raw"] = (lo / secs) / (g_raw_gbps * 1e9);
  const std::string key = net + "/" + std::to_string(workers);
  if (codec == "fp32") g_fp32_ms[key] = step_ms;
  if (g_fp32_ms.count(key)) state.counters["speedup_vs_fp32"] = g_fp32_ms[key] / step_ms;
  for (auto& c : clients) c->finish(true);
  clients.clear();
  serve.join();
}

}  // namespace

int main(int argc, char** argv) {
  terngrad::bench::BenchArgs args = terngrad::bench::parse_bench_args(argc, argv);
  g_raw_gbps = raw_loopback_gbps();
  std::printf("raw TCP loopback stream (same run): %.2f GB/s\n", g_raw_gbps);
  const std::vector<std::string> nets = args.quick ? std::vector<std::string>{"lenet"}
                                                   : std::vector<std::string>{"lenet", "alexnet"};
  const std::vector<std::pair<std::string, std::string>> codecs = {
      {"fp32", "fp32"}, {"fp16", "fp16"}, {"terngrad", "terngrad:clip=2.5,share_scale=1"}};
  for (const auto& net : nets)
    for (int workers : {1, 2, 4})
      for (const auto& [label, spec] : codecs) {
        auto* b = benchmark::RegisterBenchmark(
            ("PushPull/" + net + "/" + label + "/workers:" + std::to_string(workers)).c_str(),
            [net, spec = spec, workers](benchmark::State& s) { push_pull(s, net, spec, workers); });
        b->UseRealTime()->Unit(benchmark::kMillisecond);
        if (net == "alexnet") b->Iterations(args.quick ? 1 : 3);
      }
  benchmark::Initialize(&args.argc, args.argv.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
