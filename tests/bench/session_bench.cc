// Session setup rate per core: new connections through the pipeline, each packet the first of
// a flow never seen before. Three pipelines on the same packets, measured side by side in
// interleaved rounds: (a) route alone (stateless), (b) conntrack + route, (c) conntrack with
// source NAT (every flow translated, a port taken from a pool) + route. Each round builds the
// pipeline afresh (an empty table) and times the first packets of --sessions flows (UDP,
// 60000 source ports per source address, as trafgen lays out its flows). The figures: new
// sessions per second per core, and the nanoseconds a new session adds over (a).
//
// The frames are written into mbufs as a port's rx path would leave them (parse, flow hash,
// for (c) the NAT's receive-side rewrite) in every variant alike, so the differences are the
// stages' own.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>
#include <CLI/CLI.hpp>

#include "core/log.h"
#include "core/packet.h"
#include "core/parse.h"
#include "pipeline/conntrack/conntrack_stage.h"
#include "pipeline/pipeline.h"
#include "pipeline/pipeline_worker.h"
#include "pipeline/route/route_stage.h"
#include "runtime/eal.h"
#include "runtime/qsbr.h"

using namespace vecflow;

namespace {

constexpr uint16_t kVector = 64;
constexpr uint32_t kPortsPerAddress = 60000;

class FreeSinks final : public Sinks {
 public:
  void transmit(std::span<rte_mbuf*> p) noexcept override { free(p); }
  void kernel(std::span<rte_mbuf*> p) noexcept override { free(p); }
  void next(std::span<rte_mbuf*> p) noexcept override { free(p); }
  void copies(std::span<rte_mbuf*> p) noexcept override { free(p); }
  uint64_t sent = 0;

 private:
  void free(std::span<rte_mbuf*> p) noexcept {
    sent += p.size();
    rte_pktmbuf_free_bulk(p.data(), static_cast<unsigned>(p.size()));
  }
};

// Flow f's first packet: UDP from 10.1.x.y:(1024 + f % 60000) to 198.51.100.2:53, parsed and
// hashed as a port would leave it.
void write_frame(rte_mbuf* m, uint32_t f) noexcept {
  constexpr uint16_t kLen = 64;
  m->data_off = RTE_PKTMBUF_HEADROOM;
  m->data_len = m->pkt_len = kLen;
  auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
  eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
  std::memset(ip, 0, sizeof(*ip));
  ip->version_ihl = RTE_IPV4_VHL_DEF;
  ip->total_length = rte_cpu_to_be_16(kLen - sizeof(rte_ether_hdr));
  ip->time_to_live = 64;
  ip->next_proto_id = IPPROTO_UDP;
  const uint32_t spread = f / kPortsPerAddress;
  ip->src_addr = rte_cpu_to_be_32(0x0a010000u + spread);
  ip->dst_addr = rte_cpu_to_be_32(0xc6336402u);  // 198.51.100.2
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
  udp->src_port = rte_cpu_to_be_16(static_cast<uint16_t>(1024 + f % kPortsPerAddress));
  udp->dst_port = rte_cpu_to_be_16(53);
  udp->dgram_len = rte_cpu_to_be_16(kLen - sizeof(rte_ether_hdr) - sizeof(rte_ipv4_hdr));
  udp->dgram_cksum = 0;
  parse_packet(m, true);
  m->port = 0;
  reset_meta(m);
}

config::StageConfig route_stage(bool fused) {
  RouteConfig r;
  StaticRoute e;
  e.prefix = *parse_ip_prefix("0.0.0.0/0");
  NextHop nh;
  nh.port = "out";
  nh.via = parse_ip_address("203.0.113.254");
  e.nexthops.push_back(nh);
  r.routes = {e};
  config::StageConfig s;
  s.type = s.name = "route";
  s.fuse = fused;
  s.params = r;
  return s;
}

// Conntrack sized for `sessions`; with `nat`, one source NAT rule per source address of the
// flows, each to a pool address of its own.
config::StageConfig conntrack_stage(uint32_t sessions, bool nat) {
  ConntrackConfig c;
  c.max_sessions = sessions + sessions / 8;
  if (nat) {
    for (uint32_t a = 0; a <= sessions / kPortsPerAddress; ++a) {
      SnatRuleConfig r;
      r.src = parse_ip_prefix(fmt::format("10.1.{}.{}/32", a >> 8, a & 0xff));
      r.to = {*parse_ip_prefix(fmt::format("100.64.{}.{}/32", a >> 8, a & 0xff))};
      r.ports = {1024, 65535};
      c.snat.push_back(r);
    }
  }
  config::StageConfig s;
  s.type = s.name = "conntrack";
  s.sched = SchedType::Atomic;
  s.params = c;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t sessions = 1 << 20;
  int rounds = 3;
  CLI::App app{"vecflow session setup rate: new connections per second per core"};
  app.add_option("--sessions", sessions, "new flows per round")
      ->check(CLI::Range(uint32_t{kVector}, uint32_t{1} << 24));
  app.add_option("--rounds", rounds, "interleaved rounds (median reported)");
  bool no_huge = false;
  app.add_flag("--no-huge", no_huge, "run DPDK without hugepages (slower; for smoke tests)");
  CLI11_PARSE(app, argc, argv);
  log::init(spdlog::level::warn);

  EalOptions eo;
  eo.memory_mb = 512;
  eo.hugepages = no_huge ? HugePagePolicy::Off : HugePagePolicy::Auto;
  eo.file_prefix = fmt::format("vsb-bench-{}", getpid());
  eo.telemetry = false;
  eo.extra_args = {"--log-level=lib.eal:warning"};
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
      rte_pktmbuf_pool_create("vsb_bench", 4095, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  auto qsbr = Qsbr::create(1);
  if (pool == nullptr || !qsbr) {
    fmt::print(stderr, "cannot create the mbuf pool or the RCU state\n");
    return 1;
  }
  StageContext ctx;
  ctx.ports = {PortInfo{"in", MacAddress{{2, 0, 0, 0, 0, 1}}, ""},
               PortInfo{"out", MacAddress{{2, 0, 0, 0, 0, 2}}, ""}};
  ctx.lcore_slots = 1;
  ctx.qsbr = qsbr->get();

  struct Variant {
    const char* name;
    std::vector<config::StageConfig> stages;
    std::vector<double> ns;  // per new flow, by round
  };
  std::vector<Variant> variants = {
      {"route (stateless)",
       {[] {
         auto r = route_stage(false);
         r.sched = SchedType::Atomic;
         return r;
       }()},
       {}},
      {"conntrack + route", {conntrack_stage(sessions, false), route_stage(true)}, {}},
      {"conntrack + nat + route", {conntrack_stage(sessions, true), route_stage(true)}, {}},
  };

  const double hz = static_cast<double>(rte_get_tsc_hz());
  OutcomeTable outcomes(1, 2);
  for (int round = 0; round < rounds; ++round) {
    for (Variant& v : variants) {
      auto p = Pipeline::build(v.stages, ctx);
      if (!p) {
        fmt::print(stderr, "{}: {}\n", v.name, p.error().message);
        return 1;
      }
      const NatMap* nat = nullptr;
      if (auto* ct = (*p)->find<ConntrackStage>("conntrack")) nat = ct->nat();
      PipelineWorker worker(**p, outcomes, 0);
      FreeSinks sinks;
      rte_mbuf* vec[kVector];
      const uint64_t start = rte_rdtsc();
      for (uint32_t f = 0; f < sessions; f += kVector) {
        const uint16_t n = static_cast<uint16_t>(std::min<uint32_t>(kVector, sessions - f));
        if (rte_pktmbuf_alloc_bulk(pool, vec, n) != 0) {
          fmt::print(stderr, "mbuf pool empty\n");
          return 1;
        }
        for (uint16_t i = 0; i < n; ++i)
          write_frame(vec[i], f + i);
        if (nat) nat->apply(vec, n);
        worker.run_vector(0, std::span(vec, n), sinks);
      }
      const double ns = double(rte_rdtsc() - start) / hz * 1e9 / sessions;
      if (sinks.sent != sessions) {
        fmt::print(stderr, "{}: {} of {} packets came out\n", v.name, sinks.sent, sessions);
        return 1;
      }
      if (auto* ct = (*p)->find<ConntrackStage>("conntrack")) {
        const auto c = ct->counters();
        if (c.created != sessions || c.table_full != 0 || c.nat_no_port != 0) {
          fmt::print(stderr, "{}: {} sessions created of {}, {} refused (table), {} (nat)\n",
                     v.name, c.created, sessions, c.table_full, c.nat_no_port);
          return 1;
        }
      }
      v.ns.push_back(ns);
    }
  }
  fmt::print(
      "vecflow session setup rate: {} new UDP flows per round, vectors of {}, one core; {} "
      "interleaved rounds, medians; EAL {}\n\n",
      sessions, kVector, rounds, (*eal)->hugepages() ? "2 MB hugepages" : "without hugepages");
  fmt::print("{:<26} {:>14} {:>12} {:>20}\n", "pipeline", "M sessions/s", "ns/flow",
             "ns/flow over route");
  const double base = median(variants[0].ns);
  for (const Variant& v : variants) {
    const double ns = median(v.ns);
    fmt::print("{:<26} {:>14.3f} {:>12.1f} {:>20}\n", v.name, 1e3 / ns, ns,
               &v == &variants[0] ? std::string("-") : fmt::format("{:.1f}", ns - base));
  }
  return 0;
}
