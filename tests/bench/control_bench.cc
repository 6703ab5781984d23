// Control-plane costs, measured side by side in one run:
//
//   - one request's round trip over the control socket, the control lcore spinning (no back-off)
//     against the same lcore with the control back-off, asleep in poll(2) on the wake-up set when
//     the request arrives: what an operator waits for, and what sleeping costs in latency;
//   - collecting and rendering one /metrics snapshot of N series.
//
//   build/tests/bench/control_bench
//
// Each round-trip iteration is a fresh request on one connection; in the asleep variant the
// benchmark waits until the lcore sleeps before sending (the wait is not timed).
#include <benchmark/benchmark.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "api/metrics.h"
#include "control/server.h"
#include "runtime/lcore.h"

namespace vecflow::control {
namespace {

using namespace std::chrono_literals;

const CommandSpec kPing{"ping", "answers"};

class Rig {
 public:
  explicit Rig(BackoffConfig backoff) {
    char tmpl[] = "/tmp/vct-bench-XXXXXX";
    dir_ = mkdtemp(tmpl);
    ServerOptions o;
    o.socket_path = dir_ + "/c.sock";
    o.group = "";
    o.read_timeout_ms = 600000;
    (void)registry_.add_command(Command{&kPing, [](const CommandContext&) -> CommandResult {
                                          return Json{{"pong", true}};
                                        }});
    server_ = *ControlServer::create(o, registry_);
    lcore_ = std::make_unique<Lcore>(0, backoff);
    lcore_->add_service(server_);
    thread_ = std::thread([this] { lcore_->run(); });
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, o.socket_path.c_str(), sizeof(a.sun_path) - 1);
    while (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
      std::this_thread::sleep_for(1ms);
  }
  ~Rig() {
    close(fd_);
    lcore_->request_stop();
    thread_.join();
    lcore_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  bool round_trip() {
    static const char kRequest[] = "{\"command\":\"ping\"}\n";
    if (send(fd_, kRequest, sizeof(kRequest) - 1, 0) <= 0) return false;
    char buf[256];
    size_t got = 0;
    while (got == 0 || buf[got - 1] != '\n') {
      ssize_t n = recv(fd_, buf + got, sizeof(buf) - got, 0);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  void wait_asleep() {
    while (!server_->stats().sleeping.load())
      std::this_thread::sleep_for(100us);
  }

 private:
  std::string dir_;
  Registry registry_;
  std::shared_ptr<ControlServer> server_;
  std::unique_ptr<Lcore> lcore_;
  std::thread thread_;
  int fd_ = -1;
};

void BM_RoundTripSpinning(benchmark::State& state) {
  Rig rig(BackoffConfig{.busy_poll = true});  // never naps, never sleeps
  for (auto _ : state) {
    if (!rig.round_trip()) state.SkipWithError("no reply");
  }
}
BENCHMARK(BM_RoundTripSpinning)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_RoundTripFromSleep(benchmark::State& state) {
  Rig rig(BackoffConfig{.spin_us = 20,
                        .idle_sleep_max_us = 1000});  // the control lcore's back-off in vecflowd
  for (auto _ : state) {
    state.PauseTiming();
    rig.wait_asleep();
    state.ResumeTiming();
    if (!rig.round_trip()) state.SkipWithError("no reply");
  }
}
BENCHMARK(BM_RoundTripFromSleep)->UseRealTime()->Unit(benchmark::kMicrosecond)->Iterations(300);

const MetricFamily kBenchFamily{
    "vecflow_bench_packets_total", "bench", MetricType::Counter, {"port", "queue"}};

void BM_CollectAndRender(benchmark::State& state) {
  auto series = static_cast<size_t>(state.range(0));
  size_t bytes = 0;
  for (auto _ : state) {
    Snapshot s;
    for (size_t i = 0; i < series; ++i)
      s.add(kBenchFamily, {std::to_string(i / 16), std::to_string(i % 16)}, i * 1000);
    std::string text = render_prometheus(s);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(series));
}
BENCHMARK(BM_CollectAndRender)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vecflow::control

BENCHMARK_MAIN();
