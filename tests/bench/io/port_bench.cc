// Single-core rx -> tx forwarding rate per port kind, each next to its reference, measured in
// interleaved rounds in one run so that machine load hits both alike:
//
//   AF_XDP on veth    AfXdpPort vs the raw AF_XDP ceiling: a libxdp socket on the same veth
//                     queue whose loop only moves descriptors rx -> tx and completion -> fill
//   net_ring          DpdkPort vs raw rte_eth_rx_burst/rte_eth_tx_burst on the same ring
//   vhost-user        DpdkPort on net_vhost, guest (virtio-user, second process) with packed
//                     vs split virtqueues, both sides reflecting
//
//   vf_port_bench [--seconds S] [--rounds N] [--only afxdp|ring|vhost] [--hugepages auto|off]
//
// Prints a table (medians of the rounds, Mpps, ratios). Needs root. Uses hugepages when they
// are reserved and mounted (tools/bench-ports.sh does that); the numbers say which.
#include <net/if.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <rte_ethdev.h>
#include <xdp/xsk.h>
#include <CLI/CLI.hpp>

#include "core/log.h"
#include "core/packet.h"
#include "io/afxdp/afxdp_port.h"
#include "io/dpdk/dpdk_port.h"
#include "io/packet_pool.h"
#include "io_fixtures.h"
#include "runtime/eal.h"

using namespace vecflow;
using namespace vecflow::test;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  double seconds = 2.0;
  int rounds = 3;
  std::string only;
  std::string hugepages = "auto";
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `step` (one poll, returns packets forwarded) for `seconds`; returns Mpps.
double run_for(double seconds, const std::function<uint32_t()>& step) {
  uint64_t total = 0;
  auto t0 = Clock::now();
  auto end = t0 + std::chrono::duration<double>(seconds);
  uint32_t polls = 0;
  while (true) {
    total += step();
    if ((++polls & 255) == 0 && Clock::now() >= end) break;
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(total) / s / 1e6;
}

// One poll of a reflector: what arrives goes back out; a refused transmission is retried
// briefly, so traffic circulating between two reflectors keeps its size.
uint32_t port_forward(Port& port) {
  rte_mbuf* burst[64];
  uint16_t n = port.rx_burst(0, burst, 64);
  if (n == 0) return 0;
  uint16_t sent = 0;
  for (int tries = 0; sent < n && tries < 1000; ++tries)
    sent += port.tx_burst(0, burst + sent, static_cast<uint16_t>(n - sent));
  for (uint16_t i = sent; i < n; ++i)
    rte_pktmbuf_free(burst[i]);
  return n;
}

// The ceiling: an AF_XDP socket on its own small UMEM whose loop touches no packet.
class RawXsk {
 public:
  static constexpr uint32_t kFrames = 4096, kRing = 2048, kFrame = 2048;
  bool open(const char* ifname, int map_fd) {
    area_ =
        mmap(nullptr, kFrames * kFrame, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area_ == MAP_FAILED) return false;
    xsk_umem_config uc{kRing, kRing, kFrame, 0, 0};
    if (xsk_umem__create(&umem_, area_, kFrames * kFrame, &fq_, &cq_, &uc) != 0) return false;
    xsk_socket_config sc{};
    sc.rx_size = kRing;
    sc.tx_size = kRing;
    sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    sc.bind_flags = XDP_COPY | XDP_USE_NEED_WAKEUP;
    if (xsk_socket__create(&xsk_, ifname, 0, umem_, &rx_, &tx_, &sc) != 0) return false;
    uint32_t idx = 0;
    xsk_ring_prod__reserve(&fq_, kRing, &idx);
    for (uint32_t i = 0; i < kRing; ++i)
      *xsk_ring_prod__fill_addr(&fq_, idx + i) = uint64_t{i} * kFrame;
    xsk_ring_prod__submit(&fq_, kRing);
    uint32_t key = 0;
    int fd = xsk_socket__fd(xsk_);
    return bpf_map_update_elem(map_fd, &key, &fd, BPF_ANY) == 0;
  }
  ~RawXsk() {
    if (xsk_) xsk_socket__delete(xsk_);
    if (umem_) xsk_umem__delete(umem_);
    if (area_ && area_ != MAP_FAILED) munmap(area_, kFrames * kFrame);
  }
  uint32_t step() {
    uint32_t idx_rx = 0, idx_tx = 0, idx = 0;
    // Completions back to the fill ring.
    uint32_t c = xsk_ring_cons__peek(&cq_, 64, &idx);
    if (c) {
      uint32_t f = 0;
      xsk_ring_prod__reserve(&fq_, c, &f);
      for (uint32_t i = 0; i < c; ++i)
        *xsk_ring_prod__fill_addr(&fq_, f + i) = *xsk_ring_cons__comp_addr(&cq_, idx + i);
      xsk_ring_prod__submit(&fq_, c);
      xsk_ring_cons__release(&cq_, c);
    }
    uint32_t n = xsk_ring_cons__peek(&rx_, 64, &idx_rx);
    if (n == 0) return 0;
    uint32_t room = xsk_prod_nb_free(&tx_, n);
    uint32_t out = std::min(n, room);
    if (out) xsk_ring_prod__reserve(&tx_, out, &idx_tx);
    for (uint32_t i = 0; i < out; ++i) {
      *xsk_ring_prod__tx_desc(&tx_, idx_tx + i) = *xsk_ring_cons__rx_desc(&rx_, idx_rx + i);
    }
    // Frames that found no room go straight back to the fill ring.
    if (out < n) {
      uint32_t f = 0;
      xsk_ring_prod__reserve(&fq_, n - out, &f);
      for (uint32_t i = out; i < n; ++i)
        *xsk_ring_prod__fill_addr(&fq_, f + i - out) =
            xsk_ring_cons__rx_desc(&rx_, idx_rx + i)->addr;
      xsk_ring_prod__submit(&fq_, n - out);
    }
    xsk_ring_cons__release(&rx_, n);
    if (out) xsk_ring_prod__submit(&tx_, out);
    if (xsk_ring_prod__needs_wakeup(&tx_)) {
      for (int k = 0; k < 8; ++k) {
        if (sendto(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0 ||
            errno != EAGAIN)
          break;
      }
    }
    return n;
  }

 private:
  void* area_ = nullptr;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  xsk_ring_prod fq_{}, tx_{};
  xsk_ring_cons cq_{}, rx_{};
};

struct Row {
  std::string what;
  double mpps;
  std::string note;
};

std::string mac_of(const VethLab& lab, const char* dev) {
  std::string out =
      sh_output("ip netns exec " + lab.ns() + " cat /sys/class/net/" + dev + "/address");
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

void bench_afxdp(const Options& o, PacketPool& pool, std::vector<Row>& rows) {
  VethLab lab;
  if (!lab.ok()) {
    rows.push_back({"AF_XDP on veth", 0, "skipped: no namespace"});
    return;
  }
  // The receive side runs in its own kthread, not in the generator's softirq.
  lab.run(std::string("echo 1 > /sys/class/net/") + VethLab::a + "/threaded");
  NetnsScope in_ns(lab.ns());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  TestXdp xdp(ifindex, TestXdp::Kind::LibxdpDefault);
  if (!xdp.ok()) {
    rows.push_back({"AF_XDP on veth", 0, "skipped: " + xdp.error()});
    return;
  }
  double total = (o.seconds + 1.5) * o.rounds * 2 + 5;
  Background generator(fmt::format(
      "ip netns exec {} taskset -c 0 {} send --dev {} --src 192.0.2.2 --dst 198.51.100.2 "
      "--dst-mac {} --flows 64 --duration {} >/dev/null 2>&1",
      lab.ns(), built_tool("trafgen"), VethLab::b, mac_of(lab, VethLab::a),
      static_cast<int>(total)));
  std::vector<double> raw, port;
  for (int r = 0; r < o.rounds; ++r) {
    {
      RawXsk x;
      if (x.open(VethLab::a, xdp.map_fd())) {
        run_for(0.3, [&] { return x.step(); });  // settle
        raw.push_back(run_for(o.seconds, [&] { return x.step(); }));
      }
    }
    AfXdpOptions ao;
    ao.interface = VethLab::a;
    ao.ring_size = 2048;
    auto p = AfXdpPort::create("wan", PortId{1}, ao, pool);
    if (p && (*p)->set_xsks_map(xdp.map_fd()) && (*p)->start()) {
      run_for(0.3, [&] { return port_forward(**p); });
      port.push_back(run_for(o.seconds, [&] { return port_forward(**p); }));
      (*p)->stop();
    }
  }
  generator.stop();
  double r = median(raw), p = median(port);
  rows.push_back({"AF_XDP veth: raw xsk ceiling", r, "copy mode, descriptors only"});
  rows.push_back({"AF_XDP veth: AfXdpPort", p,
                  fmt::format("{:.2f} of the ceiling (mbufs, parse, stats)", r > 0 ? p / r : 0)});
}

void bench_ring(const Options& o, PacketPool& pool, std::vector<Row>& rows) {
  DpdkOptions d;
  d.devargs = "net_ring0";
  auto port = DpdkPort::create("loop", PortId{2}, d, pool);
  if (!port || !(*port)->start()) {
    rows.push_back({"net_ring", 0, "skipped: " + (port ? std::string() : port.error().message)});
    return;
  }
  std::vector<rte_mbuf*> seed;
  for (uint16_t i = 0; i < 512; ++i)
    seed.push_back(mbuf_of(pool, udp_frame(i)));
  size_t in = 0;
  while (in < seed.size())
    in += (*port)->tx_burst(0, seed.data() + in, static_cast<uint16_t>(seed.size() - in));
  uint16_t eth = (*port)->ethdev();
  auto raw_step = [eth] {
    rte_mbuf* burst[64];
    uint16_t n = rte_eth_rx_burst(eth, 0, burst, 64);
    uint16_t s = 0;
    for (int tries = 0; s < n && tries < 1000; ++tries)
      s += rte_eth_tx_burst(eth, 0, burst + s, static_cast<uint16_t>(n - s));
    for (uint16_t i = s; i < n; ++i)
      rte_pktmbuf_free(burst[i]);
    return static_cast<uint32_t>(n);
  };
  std::vector<double> raw, ours;
  for (int r = 0; r < o.rounds; ++r) {
    raw.push_back(run_for(o.seconds, raw_step));
    ours.push_back(run_for(o.seconds, [&] { return port_forward(**port); }));
  }
  double a = median(raw), b = median(ours);
  rows.push_back({"net_ring: raw ethdev rx+tx", a, "no parse, no stats"});
  rows.push_back(
      {"net_ring: DpdkPort", b,
       fmt::format("{:.2f} of raw (one parse + flow hash per packet)", a > 0 ? b / a : 0)});
}

void bench_vhost(const Options& o, PacketPool& pool, std::vector<Row>& rows) {
  std::vector<double> packed, split;
  for (int r = 0; r < o.rounds; ++r) {
    for (int pk = 1; pk >= 0; --pk) {
      std::string sock = "/tmp/" + unique_name("vpo") + "-bench.sock";
      DpdkOptions d;
      d.devargs = "net_vhost0,iface=" + sock;
      d.rx_interrupts = false;
      {
        auto port = DpdkPort::create("vm", PortId{3}, d, pool);
        if (!port || !(*port)->start()) {
          rows.push_back({"vhost", 0, "skipped: cannot create the vhost port"});
          return;
        }
        Background guest(
            fmt::format("{} --socket {} --packed {} --lcore 0 reflect --count 256 >/dev/null 2>&1",
                        built_tool("virtio_peer"), sock, pk));
        // Wait for the guest, let the circulation settle, then measure.
        auto until = Clock::now() + std::chrono::seconds(10);
        while ((*port)->link_state() != LinkState::Up && Clock::now() < until)
          port_forward(**port);
        run_for(0.5, [&] { return port_forward(**port); });
        double mpps = run_for(o.seconds, [&] { return port_forward(**port); });
        (pk ? packed : split).push_back(mpps);
        guest.stop();
      }
      std::filesystem::remove(sock);
    }
  }
  double a = median(packed), b = median(split);
  rows.push_back({"vhost <-> virtio-user: packed", a, "both sides reflect, 256 in flight"});
  rows.push_back(
      {"vhost <-> virtio-user: split", b, fmt::format("packed/split = {:.2f}", b > 0 ? a / b : 0)});
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vecflow port benchmark: single-core rx->tx forwarding per port kind"};
  Options o;
  app.add_option("--seconds", o.seconds, "Seconds per measurement");
  app.add_option("--rounds", o.rounds, "Interleaved rounds (the table shows medians)");
  app.add_option("--only", o.only, "afxdp, ring or vhost");
  app.add_option("--hugepages", o.hugepages, "auto (use reserved, mounted ones) or off")
      ->check(CLI::IsMember({"auto", "off"}));
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "vf_port_bench: needs root (namespaces, AF_XDP, vhost sockets)\n");
    return 2;
  }
  log::init(spdlog::level::warn);
  EalOptions eo;
  eo.control_lcore = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
  eo.memory_mb = 256;
  eo.hugepages = o.hugepages == "off" ? HugePagePolicy::Off : HugePagePolicy::Auto;
  eo.telemetry = false;
  eo.file_prefix = "vpo-bench-" + std::to_string(getpid());
  auto eal = Eal::init(eo);
  if (!eal) {
    std::fprintf(stderr, "%s\n", eal.error().message.c_str());
    return 2;
  }
  if (auto r = register_packet_meta(); !r) return 2;
  PacketPoolOptions po;
  po.name = "vpo_bench_pool";
  auto pool = PacketPool::create(po);
  if (!pool) {
    std::fprintf(stderr, "%s\n", pool.error().message.c_str());
    return 2;
  }
  std::string load_before = loadavg();
  std::vector<Row> rows;
  if (o.only.empty() || o.only == "afxdp") bench_afxdp(o, **pool, rows);
  if (o.only.empty() || o.only == "ring") bench_ring(o, **pool, rows);
  if (o.only.empty() || o.only == "vhost") bench_vhost(o, **pool, rows);
  std::printf("\nvecflow port benchmark: %d round(s) of %.1f s, medians; %s; load %s -> %s\n",
              o.rounds, o.seconds, (*eal)->hugepages() ? "hugepages" : "no hugepages (--no-huge)",
              load_before.c_str(), loadavg().c_str());
  std::printf("%-34s %8s  %s\n", "forwarding on one core", "Mpps", "");
  for (const Row& r : rows)
    std::printf("%-34s %8.3f  %s\n", r.what.c_str(), r.mpps, r.note.c_str());
  return 0;
}
