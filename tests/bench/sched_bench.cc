// Scheduler benchmark: builtin vs DPDK event_dsw vs event_sw, side by side in one run.
//
// One atomic queue, one producer port, one worker port. The producer enqueues bursts of NEW
// events over N flows, each carrying a vector of V packets taken from a vector pool (V = 1:
// the event carries the packet pointer itself); the worker dequeues bursts of 32, reads every
// packet pointer of each event and returns the vectors to the pool (the events are finished:
// the next dequeue releases them). Every backend runs the same code through the same
// Scheduler interface.
//
//   1 lcore:  producer, [event_sw's scheduling service,] worker alternate on one thread
//   2 lcores: producer [and event_sw's service] on the main lcore, the worker on another
//
// Each point runs `--rounds` times, the rounds of all backends interleaved, and the median is
// reported, so a neighbour's burst of load hits every backend alike. Run through
// tests/bench/sched_bench.sh, which reserves hugepages for the run and releases them after.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mempool.h>
#include <rte_pause.h>
#include <time.h>
#include <CLI/CLI.hpp>

#include "core/accounting.h"
#include "core/log.h"
#include "core/packet.h"
#include "io/port.h"
#include "runtime/eal.h"
#include "runtime/service.h"
#include "sched/rx_adapter.h"
#include "sched/scheduler.h"
#include "sched/worker.h"

using namespace vecflow;

namespace {

enum class Kind { Builtin, Dsw, Sw };
constexpr Kind kKinds[] = {Kind::Builtin, Kind::Dsw, Kind::Sw};
const char* name(Kind k) {
  return k == Kind::Builtin ? "builtin" : k == Kind::Dsw ? "event_dsw" : "event_sw";
}

constexpr uint16_t kDequeueBurst = 32;
constexpr uint32_t kInflight = 4096;

struct Point {
  Kind kind;
  uint16_t vector;
  uint32_t flows;
  int lcores;
  uint16_t burst_min;  // producer burst sizes, uniform in [burst_min, burst_max]
  uint16_t burst_max;
};

struct Measure {
  double events = 0;  // per CPU second (see thread_cpu_ns)
  double packets = 0;
  double refused = 0;    // share of enqueued events refused
  double cpu_share = 0;  // CPU time the busiest thread got / wall time
};

// CPU time of the calling thread. Rates are events per CPU second of the busiest thread, not
// per wall second: on a shared machine a polling thread is preempted at random, and wall-time
// rates would measure the neighbours. On a quiet machine (every thread always on its core)
// both are the same.
uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// xorshift: a flow id per event at a few cycles, same sequence for every backend.
struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

struct Bench {
  Bench(sched::Scheduler* s, rte_mempool* pool, const Point& p) : s(s), pool(pool), p(p) {}
  // With 2 lcores the producer's and the worker's state sit on cache lines of their own: a
  // line one thread writes per call and the other reads costs both backends a transfer per
  // burst, by an amount that depended on where the stack put the line boundaries (the
  // two-lcore figures were bimodal per process before).
  sched::Scheduler* const s;
  rte_mempool* const pool;  // nullptr for vector 1
  const Point& p;
  const uint64_t fake_packet = 0x100000;
  // The packet pointers a vector carries: copied in as an rx adapter copies an rx burst.
  std::array<rte_mbuf*, 256> fake_packets = [] {
    std::array<rte_mbuf*, 256> a{};
    for (size_t k = 0; k < a.size(); ++k)
      a[k] = reinterpret_cast<rte_mbuf*>(0x100000 + k * 64);
    return a;
  }();
  // Producer's.
  alignas(64) Rng rng;
  uint64_t sent = 0, refused = 0;
  // Worker's (the producer reads `consumed` every 64 bursts).
  alignas(64) std::atomic<uint64_t> consumed{0};
  uint64_t sink = 0;
  // Run control: written a few times per point, read by the worker on every loop.
  alignas(64) std::atomic<bool> stop{false};
  std::atomic<bool> measuring{false};
  std::atomic<uint64_t> worker_cpu_ns{0};  // CPU time the worker thread spent measuring

  // Reads every packet pointer of a vector, as a stage must at least. Four sums, so the reads
  // do not wait on one another.
  static uint64_t read_all(rte_mbuf* const* m, uint16_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    uint16_t k = 0;
    for (; k + 4 <= n; k += 4) {
      a += reinterpret_cast<uintptr_t>(m[k]);
      b += reinterpret_cast<uintptr_t>(m[k + 1]);
      c += reinterpret_cast<uintptr_t>(m[k + 2]);
      d += reinterpret_cast<uintptr_t>(m[k + 3]);
    }
    for (; k < n; ++k)
      a += reinterpret_cast<uintptr_t>(m[k]);
    return a + b + c + d;
  }

  void produce() {
    sched::EventPort& port = s->producer(0);
    uint16_t n =
        p.burst_min == p.burst_max
            ? p.burst_min
            : static_cast<uint16_t>(p.burst_min + rng.next() % (p.burst_max - p.burst_min + 1));
    rte_event ev[sched::kMaxEventBurst];
    void* vecs[sched::kMaxEventBurst];
    if (pool && rte_mempool_get_bulk(pool, vecs, n) != 0) {
      if (port.needs_maintenance()) port.maintain();
      return;
    }
    rte_event proto{};
    proto.op = RTE_EVENT_OP_NEW;
    proto.sched_type = RTE_SCHED_TYPE_ATOMIC;
    proto.queue_id = 0;
    const uint8_t type = pool ? RTE_EVENT_TYPE_CPU_VECTOR : RTE_EVENT_TYPE_CPU;
    for (uint16_t i = 0; i < n; ++i) {
      rte_event& e = ev[i];
      // Flow counts are powers of two: a mask, not a division, keeps the producer cheap.
      e.event =
          sched::with_flow(proto.event, static_cast<uint32_t>(rng.next() & (p.flows - 1)), type);
      if (pool) {
        auto* v = static_cast<rte_event_vector*>(vecs[i]);
        v->nb_elem = p.vector;
        v->elem_offset = 0;
        std::memcpy(sched::vector_mbufs(v), fake_packets.data(), p.vector * sizeof(rte_mbuf*));
        e.vec = v;
      } else {
        e.u64 = fake_packet;
      }
    }
    uint16_t ok = port.enqueue_new_burst(ev, n);
    sent += ok;
    if (ok < n) {
      refused += n - ok;
      if (pool) rte_mempool_put_bulk(pool, vecs + ok, n - ok);
      if (port.needs_maintenance()) port.maintain();
    }
  }

  uint16_t consume() {
    rte_event ev[kDequeueBurst];
    uint16_t n = s->worker(0).dequeue_burst(ev, kDequeueBurst);
    if (n == 0) return 0;
    if (pool) {
      void* vecs[kDequeueBurst];
      for (uint16_t i = 0; i < n; ++i) {
        rte_event_vector* v = ev[i].vec;
        sink += read_all(sched::vector_mbufs(v), v->nb_elem);
        vecs[i] = v;
      }
      rte_mempool_put_bulk(pool, vecs, n);
    } else {
      for (uint16_t i = 0; i < n; ++i)
        sink += ev[i].u64;
    }
    consumed.store(consumed.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    return n;
  }
};

int worker_main(void* arg) {
  auto* b = static_cast<Bench*>(arg);
  while (!b->measuring.load(std::memory_order_relaxed))
    b->consume();
  uint64_t c0 = thread_cpu_ns();
  while (b->measuring.load(std::memory_order_relaxed))
    b->consume();
  b->worker_cpu_ns.store(thread_cpu_ns() - c0);
  while (!b->stop.load(std::memory_order_relaxed))
    b->consume();
  return 0;
}

// The builtin backend's per-worker backlog limit (--worker-backlog).
uint32_t g_worker_backlog = 1u << 24;

std::unique_ptr<sched::Scheduler> make(Kind k, bool vectors) {
  static unsigned seq = 0;
  sched::SchedulerConfig c;
  c.queues = {{"q", SchedType::Atomic}};
  c.producers = 1;
  c.workers = 1;
  c.inflight_limit = kInflight;
  c.worker_backlog_packets = g_worker_backlog;
  c.vector_events = vectors;
  if (k != Kind::Builtin) {
    c.backend = SchedBackend::Eventdev;
    c.device = fmt::format("{}_vscb{}", k == Kind::Dsw ? "event_dsw" : "event_sw", seq++);
  }
  auto s = sched::create_scheduler(c);
  if (!s) {
    fmt::print(stderr, "{}: {}\n", name(k), s.error().message);
    std::exit(1);
  }
  return std::move(*s);
}

// One scheduler per backend and event kind (plain, vectors) for the whole run (drained between
// points), as vecflowd has one, configured for the events its rx adapters make. Released
// before EAL (end of main).
std::unique_ptr<sched::Scheduler> g_schedulers[3][2];

sched::Scheduler& scheduler(Kind k, bool vectors) {
  auto& slot = g_schedulers[static_cast<int>(k)][vectors];
  if (!slot) slot = make(k, vectors);
  return *slot;
}

Measure run_point(const Point& p, double seconds) {
  sched::Scheduler* s = &scheduler(p.kind, p.vector > 1);
  rte_mempool* pool = nullptr;
  static unsigned pool_seq = 0;
  if (p.vector > 1) {
    pool = rte_event_vector_pool_create(fmt::format("vscb_vec{}", pool_seq++).c_str(),
                                        kInflight * 2, 256, p.vector, SOCKET_ID_ANY);
    if (!pool) {
      fmt::print(stderr, "vector pool of {}: {}\n", p.vector, rte_strerror(rte_errno));
      std::exit(1);
    }
  }
  auto svc = s->service();
  Bench b(s, pool, p);
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t warm = static_cast<uint64_t>(hz * seconds * 0.2);
  const uint64_t span = static_cast<uint64_t>(hz * seconds);
  unsigned worker_lcore = rte_get_next_lcore(rte_lcore_id(), 1, 0);
  if (p.lcores == 2) rte_eal_remote_launch(worker_main, &b, worker_lcore);
  uint64_t t0 = rte_rdtsc();
  uint64_t start = 0, c0 = 0, s0 = 0, r0 = 0, cpu0 = 0;
  for (uint64_t i = 0;; ++i) {
    b.produce();
    if (svc) svc->poll();
    if (p.lcores == 1) b.consume();
    if ((i & 63) == 0) {
      uint64_t now = rte_rdtsc();
      if (!start && now - t0 >= warm) {
        start = now;
        cpu0 = thread_cpu_ns();
        c0 = b.consumed.load();
        s0 = b.sent;
        r0 = b.refused;
        b.measuring = true;
      }
      if (start && now - start >= span) break;
    }
  }
  uint64_t end = rte_rdtsc();
  uint64_t cpu = thread_cpu_ns() - cpu0;
  uint64_t events = b.consumed.load() - c0;
  uint64_t offered = (b.sent - s0) + (b.refused - r0);
  b.measuring = false;
  if (p.lcores == 2) {
    while (b.worker_cpu_ns.load() == 0)
      rte_pause();
    cpu = std::max(cpu, b.worker_cpu_ns.load());
    b.stop = true;
    rte_eal_wait_lcore(worker_lcore);
  }
  // Drain what is left so the vectors return to the pool before it is freed.
  for (int idle = 0; idle < 1000;) {
    if (svc) svc->poll();
    if (s->producer(0).needs_maintenance()) s->producer(0).maintain();
    idle = b.consume() ? 0 : idle + 1;
  }
  rte_mempool_free(pool);
  double wall = static_cast<double>(end - start) / static_cast<double>(hz);
  double secs = static_cast<double>(cpu) / 1e9;
  Measure m;
  m.cpu_share = secs / wall;
  m.events = static_cast<double>(events) / secs;
  m.packets = m.events * p.vector;
  m.refused = offered ? static_cast<double>(b.refused - r0) / static_cast<double>(offered) : 0;
  if (b.sink == 42) std::puts("");  // keeps the reads of the consumer alive
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string rate(double r) {
  if (r >= 1e9) return fmt::format("{:.2f} G", r / 1e9);
  return fmt::format("{:.1f} M", r / 1e6);
}

// ---- rx adapter pipeline ------------------------------------------------------------------
//
// Packets from a synthetic port (mbufs from a pool, the flow changing every `train` packets)
// through the RxAdapter (vectors by flow), the scheduler and a Worker whose handler reads
// every packet, to a sink that frees them: what forming vectors at the rx adapter buys, and
// what it costs when flows interleave too much for vectors to fill.

class SynthPort final : public Port {
 public:
  SynthPort(rte_mempool* pool, uint32_t flows, uint32_t train)
      : Port("synth", PortId{0}), pool_(pool), flows_(flows), train_(train) {}
  std::string_view kind() const noexcept override { return "synth"; }
  uint16_t rx_queue_count() const noexcept override { return 1; }
  uint16_t tx_queue_count() const noexcept override { return 1; }
  uint16_t rx_burst(uint16_t, rte_mbuf** pkts, uint16_t n) noexcept override {
    if (rte_pktmbuf_alloc_bulk(pool_, pkts, n) != 0) return 0;
    for (uint16_t i = 0; i < n; ++i) {
      if (left_ == 0) {
        flow_ = static_cast<uint32_t>(rng_.next() & (flows_ - 1));
        left_ = train_;
      }
      --left_;
      rte_mbuf* m = pkts[i];
      m->port = 0;
      m->hash.rss = flow_;
      m->pkt_len = m->data_len = 64;
    }
    return n;
  }
  uint16_t tx_burst(uint16_t, rte_mbuf**, uint16_t) noexcept override { return 0; }
  LinkState link_state() const noexcept override { return LinkState::Up; }
  Result<void> start() override { return {}; }
  void stop() noexcept override {}

 private:
  rte_mempool* pool_;
  uint32_t flows_;
  uint32_t train_;
  uint32_t flow_ = 0;
  uint32_t left_ = 0;
  Rng rng_;
};

class TouchEvery final : public sched::EventHandler {
 public:
  void process(std::span<rte_event> events) noexcept override {
    for (rte_event& ev : events)
      for (rte_mbuf* m : sched::packets(ev))
        sum += m->hash.rss;
  }
  uint64_t sum = 0;
};

class FreeSink final : public sched::EgressSink {
 public:
  void finish(std::span<rte_event> events) noexcept override {
    for (rte_event& ev : events) {
      auto pkts = sched::packets(ev);
      packets += pkts.size();
      sched::free_payload(ev);
    }
  }
  void drop(std::span<rte_event> events, DropReason) noexcept override {
    for (rte_event& ev : events)
      sched::free_payload(ev);
  }
  void flush() noexcept override {}
  uint64_t packets = 0;
};

struct RxMeasure {
  double packets = 0;      // per CPU second
  double mean_vector = 0;  // packets per event the adapter formed
};

RxMeasure run_rx_point(Kind k, uint16_t vector, uint32_t flows, uint32_t train, double seconds) {
  static unsigned seq = 0;
  static rte_mempool* mbufs = rte_pktmbuf_pool_create("vscb_mbufs", 32767, 256, 0,
                                                      RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  sched::Scheduler& s = scheduler(k, vector > 1);
  rte_mempool* vecs = nullptr;
  if (vector > 1) {
    vecs = rte_event_vector_pool_create(fmt::format("vscb_rxv{}", seq++).c_str(), kInflight * 2,
                                        256, vector, SOCKET_ID_ANY);
  }
  OutcomeTable outcomes(1, 1);
  SynthPort port(mbufs, flows, train);
  sched::RxAdapter rx("rx", s.producer(0), {vector, 50, 0, SchedType::Atomic, vecs},
                      outcomes.row(0));
  (void)rx.add_queue(port, 0);
  TouchEvery handler;
  FreeSink sink;
  sched::Worker worker("w", s, s.worker(0), handler, sink, std::nullopt);
  auto svc = s.service();
  const uint64_t hz = rte_get_tsc_hz();
  uint64_t t0 = rte_rdtsc(), start = 0, p0 = 0, cpu0 = 0;
  for (uint64_t i = 0;; ++i) {
    rx.poll();
    if (svc) svc->poll();
    worker.poll();
    if ((i & 15) == 0) {
      uint64_t now = rte_rdtsc();
      if (!start && now - t0 >= hz * seconds * 0.2) {
        start = now;
        cpu0 = thread_cpu_ns();
        p0 = sink.packets;
      }
      if (start && now - start >= hz * seconds) break;
    }
  }
  uint64_t cpu = thread_cpu_ns() - cpu0;
  uint64_t pkts = sink.packets - p0;
  rx.request_drain();
  rx.poll();
  for (int idle = 0; idle < 1000;) {
    if (svc) svc->poll();
    idle = worker.poll() ? 0 : idle + 1;
  }
  worker.park();
  rte_mempool_free(vecs);
  RxMeasure m;
  m.packets = static_cast<double>(pkts) / (static_cast<double>(cpu) / 1e9);
  const auto& st = rx.adapter_stats();
  m.mean_vector = st.events.load() ? static_cast<double>(st.packets.load()) /
                                         static_cast<double>(st.events.load())
                                   : 0;
  if (handler.sum == 42) std::puts("");
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vecflow scheduler benchmark: builtin vs event_dsw vs event_sw"};
  double seconds = 0.25;
  int rounds = 3;
  bool quick = false;
  bool no_huge = false;
  app.add_option("--seconds", seconds, "measured time per point and round");
  app.add_option("--rounds", rounds, "rounds per point (median reported)");
  app.add_flag("--quick", quick, "vector 1 and 64, 1k flows only");
  app.add_flag("--no-huge", no_huge, "run without hugepages");
  app.add_option("--worker-backlog", g_worker_backlog,
                 "builtin: per-worker backlog limit in packets, 0 = not counted (default 2^24: "
                 "counted as vecflowd counts it, out of the in-flight limit's reach, so the "
                 "tally's cost is measured and never a refusal)");
  std::string profile;
  uint16_t profile_vector = 1;
  app.add_option("--profile-vector", profile_vector, "vector size for --profile");
  uint32_t profile_flows = 1024;
  app.add_option("--profile-flows", profile_flows, "flows for --profile (a power of two)")
      ->check([](const std::string& v) {
        unsigned long n = std::strtoul(v.c_str(), nullptr, 10);
        return n != 0 && (n & (n - 1)) == 0 ? std::string() : std::string("not a power of two");
      });
  uint16_t profile_burst = 32;
  app.add_option("--profile-burst", profile_burst, "producer burst size for --profile")
      ->check(CLI::Range(1, 32));
  int profile_lcores = 1;
  app.add_option("--profile-lcores", profile_lcores, "lcores for --profile (1 or 2)")
      ->check(CLI::Range(1, 2));
  app.add_option("--profile", profile,
                 "run only this backend (builtin, event_dsw, event_sw) for --seconds, "
                 "for perf/callgrind");
  CLI11_PARSE(app, argc, argv);

  log::init(spdlog::level::warn);
  EalOptions eo;
  eo.control_lcore = 0;
  eo.worker_lcores = {0, 1};
  eo.memory_mb = 1024;
  eo.hugepages = no_huge ? HugePagePolicy::Off : HugePagePolicy::Auto;
  eo.file_prefix = fmt::format("vsc-bench-{}", getpid());
  eo.telemetry = false;
  auto eal = Eal::init(eo);
  if (!eal) {
    fmt::print(stderr, "{}\n", eal.error().message);
    return 1;
  }
  if (auto r = register_packet_meta(); !r) {
    fmt::print(stderr, "{}\n", r.error().message);
    return 1;
  }
  if (!profile.empty()) {
    for (Kind k : kKinds) {
      if (profile != name(k)) continue;
      Measure m = run_point(
          {k, profile_vector, profile_flows, profile_lcores, profile_burst, profile_burst},
          seconds);
      fmt::print("{}: {} events/s, {} packets/s\n", name(k), rate(m.events), rate(m.packets));
      for (auto& by_kind : g_schedulers)
        for (auto& s : by_kind)
          s.reset();
      return 0;
    }
    fmt::print(stderr, "--profile: no backend named {}\n", profile);
    return 1;
  }
  double load[3] = {};
  getloadavg(load, 3);
  fmt::print("# vecflow scheduler benchmark\n");
  fmt::print(
      "# hugepages: {}; load average at start: {:.2f} {:.2f} {:.2f}; {} round(s) of {} s "
      "per point, median shown\n",
      (*eal)->hugepages() ? "yes" : "NO (--no-huge: DPDK runs ~2.5x slower; compare ratios only)",
      load[0], load[1], load[2], rounds, seconds);
  fmt::print("# one atomic queue, producer bursts of 32, worker bursts of 32, in-flight limit {}\n",
             kInflight);
  fmt::print(
      "# rates: events (packets) per CPU second of the busiest thread; see thread_cpu_ns()\n\n");

  std::vector<uint16_t> vectors = {1, 4, 16, 64, 256};
  std::vector<uint32_t> flows = {1, 1024, 1 << 20};
  if (quick) {
    vectors = {1, 64};
    flows = {1024};
  }
  // results[lcores][flows][vector][kind]
  std::map<std::tuple<int, uint32_t, uint16_t, int>, std::vector<Measure>> res;
  for (int r = 0; r < rounds; ++r) {
    for (int lc : {1, 2})
      for (uint32_t f : flows)
        for (uint16_t v : vectors)
          for (Kind k : kKinds)
            res[{lc, f, v, static_cast<int>(k)}].push_back(
                run_point({k, v, f, lc, 32, 32}, seconds));
  }
  auto med = [&](int lc, uint32_t f, uint16_t v, Kind k, double Measure::*field) {
    std::vector<double> xs;
    for (auto& m : res[{lc, f, v, static_cast<int>(k)}])
      xs.push_back(m.*field);
    return median(xs);
  };

  bool met_dsw = true;
  double worst_ratio = 1e9;
  std::string worst_at;
  for (int lc : {1, 2}) {
    fmt::print("## {} lcore{}\n\n", lc,
               lc == 1 ? " (producer and worker alternate)" : "s (producer | worker)");
    fmt::print(
        "| flows | vector | builtin ev/s | event_dsw ev/s | event_sw ev/s | builtin pkt/s | "
        "event_dsw pkt/s | event_sw pkt/s | builtin/dsw | builtin/sw |\n");
    fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (uint32_t f : flows) {
      for (uint16_t v : vectors) {
        double e[3], pk[3];
        for (Kind k : kKinds) {
          e[static_cast<int>(k)] = med(lc, f, v, k, &Measure::events);
          pk[static_cast<int>(k)] = med(lc, f, v, k, &Measure::packets);
        }
        double rd = e[0] / e[1], rs = e[0] / e[2];
        if (rd < worst_ratio) {
          worst_ratio = rd;
          worst_at = fmt::format("{} lcore(s), {} flows, vector {}", lc, f, v);
        }
        met_dsw &= rd >= 1.0;
        fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {:.2f}x | {:.2f}x |\n",
                   f == (1u << 20) ? "1M"
                   : f == 1024     ? "1k"
                                   : std::to_string(f),
                   v, rate(e[0]), rate(e[1]), rate(e[2]), rate(pk[0]), rate(pk[1]), rate(pk[2]), rd,
                   rs);
      }
    }
    fmt::print("\n");
  }

  // Variable burst sizes: vector 1, 1k flows, 1 lcore.
  struct BurstCase {
    const char* label;
    uint16_t lo, hi;
  };
  const BurstCase bursts[] = {{"1", 1, 1}, {"2", 2, 2}, {"32", 32, 32}, {"random 1-16", 1, 16}};
  std::map<std::pair<int, int>, std::vector<double>> bres;
  for (int r = 0; r < rounds; ++r)
    for (int b = 0; b < 4; ++b)
      for (Kind k : kKinds)
        bres[{b, static_cast<int>(k)}].push_back(
            run_point({k, 1, 1024, 1, bursts[b].lo, bursts[b].hi}, seconds).events);
  fmt::print("## producer burst size (vector 1, 1k flows, 1 lcore; worker bursts of 32)\n\n");
  fmt::print(
      "| burst | builtin ev/s | event_dsw ev/s | event_sw ev/s | builtin/dsw | builtin/sw |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  for (int b = 0; b < 4; ++b) {
    double e[3];
    for (Kind k : kKinds)
      e[static_cast<int>(k)] = median(bres[{b, static_cast<int>(k)}]);
    fmt::print("| {} | {} | {} | {} | {:.2f}x | {:.2f}x |\n", bursts[b].label, rate(e[0]),
               rate(e[1]), rate(e[2]), e[0] / e[1], e[0] / e[2]);
  }
  // Rx adapter pipeline: 1k flows in trains of 64 and 1 packet, 1 lcore.
  fmt::print(
      "\n## rx adapter pipeline (synthetic port -> rx adapter -> scheduler -> worker, 1 "
      "lcore, 1k flows)\n\n");
  fmt::print(
      "| train | vector | builtin pkt/s | event_dsw pkt/s | event_sw pkt/s | builtin/dsw | "
      "builtin/sw | mean vector |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (uint32_t train : {64u, 1u}) {
    for (uint16_t v : {uint16_t{1}, uint16_t{4}, uint16_t{16}, uint16_t{64}}) {
      std::vector<double> xs[3];
      double mean_vec = 0;
      for (int r = 0; r < rounds; ++r)
        for (Kind k : kKinds) {
          RxMeasure m = run_rx_point(k, v, 1024, train, seconds);
          xs[static_cast<int>(k)].push_back(m.packets);
          if (k == Kind::Builtin) mean_vec = m.mean_vector;
        }
      double e[3];
      for (int k = 0; k < 3; ++k)
        e[k] = median(xs[k]);
      fmt::print("| {} | {} | {} | {} | {} | {:.2f}x | {:.2f}x | {:.1f} |\n", train, v, rate(e[0]),
                 rate(e[1]), rate(e[2]), e[0] / e[1], e[0] / e[2], mean_vec);
    }
  }
  fmt::print("\n## targets\n\n");
  fmt::print("- builtin >= 1.0x event_dsw at every point: {} (lowest {:.2f}x at {})\n",
             met_dsw ? "met" : "MISSED", worst_ratio, worst_at);
  if (std::find(flows.begin(), flows.end(), 1024u) != flows.end()) {
    for (int lc : {1, 2}) {
      double r = med(lc, 1024, 1, Kind::Builtin, &Measure::events) /
                 med(lc, 1024, 1, Kind::Dsw, &Measure::events);
      fmt::print("- builtin >= 1.5x event_dsw at vector 1, 1k flows, {} lcore(s): {:.2f}x, {}\n",
                 lc, r, r >= 1.5 ? "met" : "MISSED");
    }
  }
  for (int lc : {1, 2})
    for (uint32_t f : flows) {
      double r = med(lc, f, 64, Kind::Builtin, &Measure::packets) /
                 med(lc, f, 1, Kind::Builtin, &Measure::packets);
      fmt::print(
          "- builtin vector 64 >= 8x the packets/s of vector 1 ({} lcore(s), {} flows): "
          "{:.1f}x, {}\n",
          lc,
          f == (1u << 20) ? "1M"
          : f == 1024     ? "1k"
                          : std::to_string(f),
          r, r >= 8 ? "met" : "MISSED");
    }
  double share_min = 1, share_sum = 0;
  size_t share_n = 0;
  for (auto& [key, ms] : res)
    for (auto& m : ms) {
      share_min = std::min(share_min, m.cpu_share);
      share_sum += m.cpu_share;
      ++share_n;
    }
  getloadavg(load, 3);
  fmt::print(
      "\n# load average at end: {:.2f} {:.2f} {:.2f}; CPU share of the busiest thread: "
      "mean {:.0f}%, lowest {:.0f}% (rates are per CPU second of that thread)\n",
      load[0], load[1], load[2], 100 * share_sum / std::max<size_t>(share_n, 1), 100 * share_min);
  for (auto& by_kind : g_schedulers)
    for (auto& s : by_kind)
      s.reset();
  return 0;
}
