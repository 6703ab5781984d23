// Pipeline rate per core: an in-memory pcap replay (DPDK net_pcap, infinite_rx) into an ACL
// of 1 000 rules and a route stage of IPv4 prefixes (--routes, default 1 000 and 100 000;
// fused: one run to completion per vector), out through net_null. Vector size 1 against 64,
// the DPDK heap each table takes, the cost of the hook call points with no hook installed
// against a loop without them, what a `count` stage (by: flow) in front costs, and a
// `neighbour` stage after them whose next hops are all resolved, with `unresolved: drop`
// against `hold` (the resolved path must not pay for the hold queues).
//
// Every figure is a median of interleaved rounds, measured side by side in one run, so load
// from elsewhere on the machine hits all variants alike. tests/bench/run_pipeline_bench.sh
// reserves hugepages for the run and gives them back.
#include <pcap/pcap.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_udp.h>
#include <CLI/CLI.hpp>

#include "core/accounting.h"
#include "core/log.h"
#include "core/packet.h"
#include "core/parse.h"
#include "hooks/hook_table.h"
#include "pipeline/acl/acl_table.h"
#include "pipeline/count/count_stage.h"
#include "pipeline/neighbour/neighbour_stage.h"
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_worker.h"
#include "pipeline/route/route_stage.h"
#include "runtime/eal.h"
#include "runtime/qsbr.h"

using namespace vecflow;

namespace {

// Packets per rx burst (and the largest vector measured).
constexpr uint16_t kBurst = 64;
// Distinct frames in the replayed capture: more flows than a cache holds tables for.
constexpr size_t kFrames = 8192;
constexpr uint16_t kIn = 0;  // vecflow port ids: the pcap port and the null port
constexpr uint16_t kOut = 1;
constexpr size_t kGateways = 64;

struct Options {
  double seconds = 1.0;  // per round
  int rounds = 5;
  std::string pcap = "/tmp/vecflow-pipeline-bench.pcap";
  // Route table sizes measured (IPv4 prefixes besides the default route); the replay aims at
  // the largest. The hook comparison runs on the 1000-route table, or the first one listed.
  std::vector<size_t> routes = {1'000, 100'000};
};

IpPrefix random_prefix(std::mt19937_64& rng, unsigned len) {
  IpAddress a;
  a.version = 4;
  uint32_t v = static_cast<uint32_t>(rng()) & (len ? ~0u << (32 - len) : 0);
  v = rte_cpu_to_be_32(v);
  std::memcpy(a.bytes.data(), &v, 4);
  return IpPrefix{a, static_cast<uint8_t>(len)};
}

std::vector<IpPrefix> make_prefixes(std::mt19937_64& rng, size_t n) {
  std::set<std::pair<std::array<uint8_t, 16>, unsigned>> seen;
  std::vector<IpPrefix> out;
  while (out.size() < n) {
    unsigned r = rng() % 100;  // the Internet's shape: mostly /16../24
    unsigned len = r < 2 ? 8 + rng() % 8 : r < 90 ? 16 + rng() % 9 : 25 + rng() % 8;
    IpPrefix p = random_prefix(rng, len);  // never /0: the default route is added apart
    if (seen.emplace(p.addr.bytes, len).second) out.push_back(p);
  }
  return out;
}

RouteConfig make_routes(const std::vector<IpPrefix>& prefixes) {
  RouteConfig rs;
  StaticRoute def;
  def.prefix = *parse_ip_prefix("0.0.0.0/0");
  def.nexthops.push_back(NextHop{*parse_ip_address("100.64.0.254"), "out"});
  rs.routes.push_back(def);
  for (size_t i = 0; i < prefixes.size(); ++i) {
    StaticRoute r;
    r.prefix = prefixes[i];
    IpAddress gw = *parse_ip_address(fmt::format("100.64.0.{}", 1 + i % kGateways));
    r.nexthops.push_back(NextHop{gw, "out"});
    rs.routes.push_back(r);
  }
  return rs;
}

AclConfig make_acl(std::mt19937_64& rng, size_t n) {
  AclConfig acl;
  acl.default_action = AclAction::Permit;
  for (size_t i = 0; i < n; ++i) {
    AclRule r;
    r.name = fmt::format("r{}", i);
    r.action = AclAction::Deny;
    if (rng() % 2) r.match.src = random_prefix(rng, 16 + rng() % 17);
    r.match.dst = random_prefix(rng, 16 + rng() % 17);
    r.match.l4_proto = rng() % 2 ? IPPROTO_TCP : IPPROTO_UDP;
    uint16_t p = static_cast<uint16_t>(rng());
    r.match.dst_port = config::PortRange{p, static_cast<uint16_t>(std::min(65535, p + 10))};
    acl.rules.push_back(r);
  }
  return acl;
}

// 64-byte UDP frames; most destinations inside a route, some anywhere.
void write_pcap(const std::string& path, std::mt19937_64& rng,
                const std::vector<IpPrefix>& prefixes) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  if (d == nullptr) throw std::runtime_error(pcap_geterr(dead));
  for (size_t i = 0; i < kFrames; ++i) {
    uint8_t f[60] = {};
    auto* eth = reinterpret_cast<rte_ether_hdr*>(f);
    eth->dst_addr.addr_bytes[0] = 0x02;
    eth->src_addr.addr_bytes[0] = 0x02;
    eth->src_addr.addr_bytes[5] = 1;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
    ip->version_ihl = RTE_IPV4_VHL_DEF;
    ip->total_length = rte_cpu_to_be_16(46);
    ip->time_to_live = 64;
    ip->next_proto_id = IPPROTO_UDP;
    // A unicast source: the route stage drops martian ones (0/8, 127/8, 224.0.0.0 and up).
    uint32_t src = 0;
    while ((src >> 24) == 0 || (src >> 24) == 127 || src >= 0xe0000000)
      src = static_cast<uint32_t>(rng());
    ip->src_addr = rte_cpu_to_be_32(src);
    uint32_t dst = static_cast<uint32_t>(rng());
    if (rng() % 10) {
      const IpPrefix& p = prefixes[rng() % prefixes.size()];
      uint32_t net;
      std::memcpy(&net, p.addr.bytes.data(), 4);
      uint32_t host_mask = p.length == 32 ? 0 : ~0u >> p.length;
      dst = net | (rte_cpu_to_be_32(static_cast<uint32_t>(rng())) & rte_cpu_to_be_32(host_mask));
    }
    ip->dst_addr = dst;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    udp->src_port = static_cast<uint16_t>(rng());
    udp->dst_port = static_cast<uint16_t>(rng());
    udp->dgram_len = rte_cpu_to_be_16(26);
    pcap_pkthdr h{};
    h.caplen = h.len = sizeof(f);
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f);
  }
  pcap_dump_close(d);
  pcap_close(dead);
}

// What a DPDK port's rx path does before the pipeline: the shared frame parser (packet type,
// header lengths, flow hash), the vecflow port id, fresh metadata.
void receive(rte_mbuf* m) noexcept {
  parse_packet(m, true);
  m->port = kIn;
  reset_meta(m);
}

template <bool kHooks>
class NullSinks final : public Sinks {
 public:
  NullSinks(uint16_t tx_port, HookTable& hooks) : tx_port_(tx_port), hooks_(hooks) {}
  void transmit(std::span<rte_mbuf*> p) noexcept override {
    if constexpr (kHooks) hooks_.run_tx(PortId{kOut}, QueueId{0}, p);
    uint16_t n = rte_eth_tx_burst(tx_port_, 0, p.data(), static_cast<uint16_t>(p.size()));
    if (n < p.size()) rte_pktmbuf_free_bulk(p.data() + n, static_cast<unsigned>(p.size() - n));
  }
  void kernel(std::span<rte_mbuf*> p) noexcept override {
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }
  void next(std::span<rte_mbuf*> p) noexcept override {
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }
  void copies(std::span<rte_mbuf*> p) noexcept override {
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }

 private:
  uint16_t tx_port_;
  HookTable& hooks_;
};

struct Bench {
  uint16_t rx_port = 0, tx_port = 0;
  std::unique_ptr<Qsbr> qsbr;
  std::unique_ptr<HookTable> hooks;
  OutcomeTable outcomes{1, 2};

  // Packets per second over `seconds`, vectors of `vector` packets.
  template <bool kHooks>
  double rate(Pipeline& p, unsigned vector, double seconds) {
    PipelineWorker worker(p, outcomes, 0);
    NullSinks<kHooks> sinks(tx_port, *hooks);
    rte_mbuf* burst[kBurst];
    uint64_t packets = 0;
    const uint64_t start = rte_rdtsc();
    const uint64_t end = start + static_cast<uint64_t>(seconds * rte_get_tsc_hz());
    uint64_t now = start;
    while (now < end) {
      for (int i = 0; i < 64; ++i) {  // check the clock once per 64 bursts
        uint16_t n = rte_eth_rx_burst(rx_port, 0, burst, kBurst);
        for (uint16_t k = 0; k < n; ++k)
          receive(burst[k]);
        if constexpr (kHooks) hooks->run_rx(PortId{kIn}, QueueId{0}, std::span(burst, n));
        for (uint16_t k = 0; k < n; k += vector)
          worker.run_vector(0, std::span(burst + k, std::min<uint16_t>(vector, n - k)), sinks);
        worker.tick(sinks);  // as a worker's service loop does on every round
        packets += n;
      }
      now = rte_rdtsc();
    }
    return packets / (double(now - start) / rte_get_tsc_hz());
  }
};

// Bytes allocated from DPDK's heaps on every socket.
size_t dpdk_heap_bytes() {
  size_t total = 0;
  for (unsigned i = 0; i < rte_socket_count(); ++i) {
    rte_malloc_socket_stats st{};
    if (rte_malloc_get_socket_stats(rte_socket_id_by_idx(i), &st) == 0)
      total += st.heap_allocsz_bytes;
  }
  return total;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Two ways of running the same packets measured side by side, interleaved `rounds` * 2 times
// at vectors of 64 and of 1: a row per vector size with both medians and the median ratio b/a.
template <typename RateA, typename RateB>
void print_side_by_side(const char* a_name, const char* b_name, int rounds, RateA rate_a,
                        RateB rate_b) {
  fmt::print("{:>8} {:>14} {:>14} {:>10}\n", "vector", a_name, b_name, "ratio");
  for (unsigned vec : {64u, 1u}) {
    std::vector<double> a, b, ratio;
    for (int i = 0; i < rounds * 2; ++i) {
      a.push_back(rate_a(vec));
      b.push_back(rate_b(vec));
      ratio.push_back(b.back() / a.back());
    }
    fmt::print("{:>8} {:>14.2f} {:>14.2f} {:>10.4f}\n", vec, median(a) / 1e6, median(b) / 1e6,
               median(ratio));
  }
}

Result<uint16_t> port_by_name(const char* name) {
  uint16_t id;
  if (rte_eth_dev_get_port_by_name(name, &id) != 0) return fail("no ethdev {}", name);
  return id;
}

Result<void> start_port(uint16_t port, rte_mempool* pool) {
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(port, 1, 1, &conf);
  if (rc == 0) rc = rte_eth_rx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr, pool);
  if (rc == 0) rc = rte_eth_tx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr);
  if (rc == 0) rc = rte_eth_dev_start(port);
  if (rc != 0) return fail("port {}: {}", port, errno_text(rc));
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "vecflow pipeline benchmark: ACL (1k rules) + route (1k / 100k prefixes by default)"};
  app.add_option("--seconds", opt.seconds, "length of one measurement round");
  app.add_option("--rounds", opt.rounds, "interleaved rounds per figure (median reported)");
  app.add_option("--pcap", opt.pcap, "where to write the replayed capture");
  app.add_option("--routes", opt.routes, "route table sizes to measure (e.g. 1,1000,100000)")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{10'000'000}));
  CLI11_PARSE(app, argc, argv);
  log::init(spdlog::level::warn);

  std::mt19937_64 rng(42);
  std::vector<std::vector<IpPrefix>> tables;
  for (size_t n : opt.routes)
    tables.push_back(make_prefixes(rng, n));
  const auto acl = make_acl(rng, 1'000);
  // Destinations aim at the largest table's prefixes; every table has a default route, so
  // every packet is forwarded and the tables differ only in what a lookup walks through.
  const auto& largest =
      *std::max_element(tables.begin(), tables.end(),
                        [](const auto& x, const auto& y) { return x.size() < y.size(); });
  write_pcap(opt.pcap, rng, largest);
  const auto hooked_table = std::find(opt.routes.begin(), opt.routes.end(), 1'000);
  const size_t hooked = hooked_table == opt.routes.end() ? 0 : hooked_table - opt.routes.begin();

  EalOptions eo;
  eo.memory_mb = 1024;
  eo.hugepages = HugePagePolicy::Auto;
  eo.file_prefix = fmt::format("vpi-bench-{}", getpid());
  eo.telemetry = false;
  eo.extra_args = {"--vdev=net_pcap0,rx_pcap=" + opt.pcap + ",infinite_rx=1", "--vdev=net_null0",
                   "--log-level=lib.eal:warning"};
  auto eal = Eal::init(eo);
  if (!eal) {
    fmt::print(stderr, "{}\n", eal.error().message);
    return 1;
  }
  if (auto r = register_packet_meta(); !r) {
    fmt::print(stderr, "{}\n", r.error().message);
    return 1;
  }
  rte_mempool* pool =
      rte_pktmbuf_pool_create("vpi_bench", 16383, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  Bench b;
  auto rx = port_by_name("net_pcap0");
  auto tx = port_by_name("net_null0");
  if (!pool || !rx || !tx) {
    fmt::print(stderr, "cannot set up the ports or the pool\n");
    return 1;
  }
  b.rx_port = *rx;
  b.tx_port = *tx;
  for (uint16_t p : {b.rx_port, b.tx_port}) {
    if (auto r = start_port(p, pool); !r) {
      fmt::print(stderr, "{}\n", r.error().message);
      return 1;
    }
  }
  b.qsbr = std::move(*Qsbr::create(1));
  b.hooks = std::make_unique<HookTable>(*b.qsbr, 2, 1);

  StageContext ctx;
  ctx.ports = {PortInfo{"in", MacAddress{{2, 0, 0, 0, 0, 1}}, ""},
               PortInfo{"out", MacAddress{{2, 0, 0, 0, 0, 2}}, ""}};
  ctx.lcore_slots = 1;
  ctx.qsbr = b.qsbr.get();
  auto pipeline_for = [&](const std::vector<IpPrefix>& prefixes) {
    config::StageConfig a;
    a.type = a.name = "acl";
    a.params = acl;
    config::StageConfig r;
    r.type = r.name = "route";
    r.fuse = true;
    r.params = make_routes(prefixes);
    auto p = Pipeline::build({a, r}, ctx);
    if (!p) throw std::runtime_error(p.error().message);
    return std::move(*p);
  };

  fmt::print(
      "vecflow pipeline benchmark: acl (1000 rules) + route, fused; net_pcap replay of {} "
      "64-byte frames -> net_null; one core; {} rounds of {} s, medians\n",
      kFrames, opt.rounds, opt.seconds);
  fmt::print("EAL: {}\n", (*eal)->hugepages() ? "2 MB hugepages" : "no hugepages (--no-huge)");
  fmt::print("\n{:<18} {:>8} {:>12} {:>14} {:>10}\n", "routes", "vector", "Mpps", "cycles/packet",
             "heap KiB");
  const double hz = static_cast<double>(rte_get_tsc_hz());
  std::unique_ptr<Pipeline> keep_small;
  for (size_t t = 0; t < tables.size(); ++t) {
    const auto* prefixes = &tables[t];
    // DPDK heap the pipeline takes (ACL, FIB, next hops): what a table of this size costs.
    const size_t heap_before = dpdk_heap_bytes();
    auto p = pipeline_for(*prefixes);
    const size_t heap = dpdk_heap_bytes() - heap_before;
    std::vector<double> v1, v64;
    b.rate<true>(*p, 64, opt.seconds / 4);  // warm the caches and the replay
    for (int i = 0; i < opt.rounds; ++i) {
      v1.push_back(b.rate<true>(*p, 1, opt.seconds));
      v64.push_back(b.rate<true>(*p, 64, opt.seconds));
    }
    for (auto [vec, v] : {std::pair{1, &v1}, std::pair{64, &v64}}) {
      double r = median(*v);
      fmt::print("{:<18} {:>8} {:>12.2f} {:>14.0f} {:>10}\n",
                 fmt::format("{} IPv4", prefixes->size()), vec, r / 1e6, hz / r, heap / 1024);
    }
    if (t == hooked) keep_small = std::move(p);
  }

  // Hook call points with no hook installed against a loop compiled without them.
  fmt::print("\nhook call points, no hook installed, {} routes:\n", opt.routes[hooked]);
  print_side_by_side(
      "without Mpps", "with Mpps", opt.rounds,
      [&](unsigned vec) { return b.rate<false>(*keep_small, vec, opt.seconds / 2); },
      [&](unsigned vec) { return b.rate<true>(*keep_small, vec, opt.seconds / 2); });

  // What a `count` stage (by: flow) in front adds per packet: one flow-table lookup (rte_hash
  // on the 5-tuple) and two counters. Every frame of the replay is a flow of its own, so the
  // table holds kFrames flows, more than the caches keep close.
  auto counted = [&]() {
    config::StageConfig c;
    c.type = c.name = "count";
    c.params = CountConfig{CountBy::Flow, 65536};
    config::StageConfig a;
    a.type = a.name = "acl";
    a.fuse = true;
    a.params = acl;
    config::StageConfig r;
    r.type = r.name = "route";
    r.fuse = true;
    r.params = make_routes(tables[hooked]);
    auto p = Pipeline::build({c, a, r}, ctx);
    if (!p) throw std::runtime_error(p.error().message);
    return std::move(*p);
  }();
  fmt::print("\ncount stage (by: flow, {} flows) in front of acl + route, {} routes:\n", kFrames,
             opt.routes[hooked]);
  fmt::print("{:>8} {:>14} {:>14} {:>10}\n", "vector", "without Mpps", "with Mpps", "ratio");
  b.rate<true>(*counted, 64, opt.seconds / 4);  // fills the flow table
  for (unsigned vec : {64u, 1u}) {
    std::vector<double> with, without, ratio;
    for (int i = 0; i < opt.rounds; ++i) {
      double a = b.rate<true>(*keep_small, vec, opt.seconds / 2);
      double c = b.rate<true>(*counted, vec, opt.seconds / 2);
      without.push_back(a);
      with.push_back(c);
      ratio.push_back(c / a);
    }
    fmt::print("{:>8} {:>14.2f} {:>14.2f} {:>10.4f}\n", vec, median(without) / 1e6,
               median(with) / 1e6, median(ratio));
  }
  for (const auto& s : counted->report()) {
    if (s.name == "count") {
      fmt::print("  count stage: {:.1f} cycles per packet\n",
                 s.stats.packets ? double(s.stats.cycles) / s.stats.packets : 0.0);
    }
  }

  // The neighbour stage after acl + route, every next hop resolved (static entries): policy
  // drop against hold, whose resolved path must cost nothing more.
  auto with_neighbour = [&](Unresolved policy) {
    config::StageConfig a;
    a.type = a.name = "acl";
    a.params = acl;
    config::StageConfig r;
    r.type = r.name = "route";
    r.fuse = true;
    r.params = make_routes(tables[hooked]);
    NeighbourConfig ns;
    ns.unresolved = policy;
    ns.from_kernel = false;
    for (size_t i = 1; i <= kGateways; ++i) {
      ns.entries.push_back({*parse_ip_address(fmt::format("100.64.0.{}", i)),
                            MacAddress{{2, 0, 0, 0, 1, static_cast<uint8_t>(i)}}, "out"});
    }
    ns.entries.push_back(
        {*parse_ip_address("100.64.0.254"), MacAddress{{2, 0, 0, 0, 1, 0xfe}}, "out"});
    config::StageConfig n;
    n.type = n.name = "neighbour";
    n.fuse = true;
    n.params = ns;
    auto p = Pipeline::build({a, r, n}, ctx);
    if (!p) throw std::runtime_error(p.error().message);
    return std::move(*p);
  };
  auto dropping = with_neighbour(Unresolved::Drop);
  auto holding = with_neighbour(Unresolved::Hold);
  fmt::print("\nneighbour stage after acl + route ({} gateways, all resolved), {} routes:\n",
             kGateways + 1, opt.routes[hooked]);
  print_side_by_side(
      "drop Mpps", "hold Mpps", opt.rounds,
      [&](unsigned vec) { return b.rate<true>(*dropping, vec, opt.seconds / 2); },
      [&](unsigned vec) { return b.rate<true>(*holding, vec, opt.seconds / 2); });
  for (const auto* p : {dropping.get(), holding.get()}) {
    for (const auto& s : p->report()) {
      if (s.name == "neighbour") {
        fmt::print("  neighbour stage, {}: {:.1f} cycles per packet\n",
                   p == dropping.get() ? "drop" : "hold",
                   s.stats.packets ? double(s.stats.cycles) / s.stats.packets : 0.0);
      }
    }
  }

  fmt::print("\nper stage, {} routes, all rounds (cycles per packet):\n", opt.routes[hooked]);
  for (const auto& s : keep_small->report()) {
    fmt::print("  {:<8} {:>10.1f}   ({:.1f} packets per call)\n", s.name,
               s.stats.packets ? double(s.stats.cycles) / s.stats.packets : 0.0,
               s.stats.calls ? double(s.stats.packets) / s.stats.calls : 0.0);
  }
  std::remove(opt.pcap.c_str());
  keep_small.reset();
  counted.reset();
  dropping.reset();
  holding.reset();
  rte_eth_dev_stop(b.rx_port);
  rte_eth_dev_stop(b.tx_port);
  return 0;
}
