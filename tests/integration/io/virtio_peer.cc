// The guest side of the vhost-user tests and benchmark: a second DPDK process with
// net_virtio_user connected to the vhost-user socket of a vecflow DpdkPort, as a VM's
// virtio-net would be, with packed or split virtqueues.
//
//   vf_virtio_peer --socket PATH [--packed 0|1] [--lcore N] exchange --count N --expect M
//                  [--delay-ms D] [--size S]
//       sends N UDP frames of S bytes (60; up to 9014, chained), source ports 1..N, D ms after
//       the link came up, and receives until M frames came back;
//       prints "sent N received M bytes B" and exits 0 when both counts were reached.
//   vf_virtio_peer --socket PATH [--packed 0|1] reflect --count N
//       injects N frames, then sends back everything it receives until SIGTERM/SIGINT;
//       prints "reflected R" at exit. With the vecflow side forwarding too, the N frames
//       circulate: that is the benchmark's and the leak test's traffic.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <CLI/CLI.hpp>

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}

// EAL's runtime directory once it started: DPDK 22.11 leaves it behind (~19 MB each run), so
// the peer removes it on every way out, as vecflow's Eal does.
std::string g_runtime_dir;
void remove_runtime_dir() {
  if (g_runtime_dir.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(g_runtime_dir, ignored);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "vf_virtio_peer: %s\n", what.c_str());
  remove_runtime_dir();
  std::exit(2);
}

// A UDP/IPv4 frame of `size` bytes (60 .. 9014), source port `sport`, in `m` and as many
// further mbufs of `mp` chained to it as the size needs (a jumbo frame).
void fill_frame(rte_mempool* mp, rte_mbuf* m, uint16_t sport, uint32_t size) {
  uint8_t* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, 60));
  const uint8_t hdr[42] = {2,
                           0,
                           0,
                           0,
                           0,
                           2,
                           2,
                           0,
                           0,
                           0,
                           0,
                           1,
                           0x08,
                           0x00,  // Ethernet
                           0x45,
                           0,
                           0,
                           46,
                           0,
                           0,
                           0,
                           0,
                           64,
                           17,
                           0,
                           0,  // IPv4 ...
                           192,
                           0,
                           2,
                           2,
                           198,
                           51,
                           100,
                           2,  // ... addresses
                           static_cast<uint8_t>(sport >> 8),
                           static_cast<uint8_t>(sport),
                           0,
                           9,
                           0,
                           26,
                           0,
                           0};  // UDP
  std::memcpy(p, hdr, sizeof(hdr));
  std::memset(p + sizeof(hdr), 0xab, 60 - sizeof(hdr));
  if (size <= 60) return;
  const uint16_t ip_len = static_cast<uint16_t>(size - 14),
                 udp_len = static_cast<uint16_t>(size - 34);
  p[16] = static_cast<uint8_t>(ip_len >> 8);
  p[17] = static_cast<uint8_t>(ip_len);
  p[38] = static_cast<uint8_t>(udp_len >> 8);
  p[39] = static_cast<uint8_t>(udp_len);
  uint32_t left = size - 60;
  rte_mbuf* last = m;
  while (left > 0) {
    const uint16_t room = rte_pktmbuf_tailroom(last);
    if (room == 0) {
      rte_mbuf* seg = rte_pktmbuf_alloc(mp);
      if (!seg || rte_pktmbuf_chain(m, seg) != 0) die("cannot chain a jumbo frame");
      last = seg;
      continue;
    }
    const uint16_t n = static_cast<uint16_t>(std::min<uint32_t>(left, room));
    std::memset(rte_pktmbuf_append(m, n), 0xab, n);  // appends to the last segment
    left -= n;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"virtio-user peer of the vhost-user tests"};
  std::string socket;
  int packed = 1;
  unsigned lcore = 0;
  uint32_t count = 64, expect = 64, timeout_ms = 20000;
  app.add_option("--socket", socket, "vhost-user socket")->required();
  app.add_option("--packed", packed, "packed virtqueues (1) or split (0)");
  app.add_option("--lcore", lcore, "CPU to run on");
  auto* exchange = app.add_subcommand("exchange", "send and receive a fixed number of frames");
  exchange->add_option("--count", count);
  exchange->add_option("--expect", expect);
  exchange->add_option("--timeout-ms", timeout_ms);
  uint32_t delay_ms = 0;
  exchange->add_option("--delay-ms", delay_ms,
                       "wait this long after the link is up before sending");
  uint32_t size = 60;
  exchange->add_option("--size", size, "frame size, 60..9014 (jumbo frames as mbuf chains)")
      ->check(CLI::Range(60u, 9014u));
  auto* reflect = app.add_subcommand("reflect", "send back what arrives until stopped");
  reflect->add_option("--count", count);
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);

  std::string prefix = "vpo-peer-" + std::to_string(getpid());
  std::string vdev = "net_virtio_user0,path=" + socket +
                     ",queues=1,queue_size=1024,packed_vq=" + std::to_string(packed);
  std::vector<std::string> args = {"vf_virtio_peer",
                                   "--no-huge",
                                   "-m",
                                   "256",
                                   "--no-pci",
                                   "--file-prefix",
                                   prefix,
                                   "-l",
                                   std::to_string(lcore),
                                   "--vdev",
                                   vdev,
                                   "--no-telemetry",
                                   "--log-level=*:warning"};
  std::vector<char*> eargv;
  for (auto& a : args)
    eargv.push_back(a.data());
  if (rte_eal_init(static_cast<int>(eargv.size()), eargv.data()) < 0) die("EAL did not start");
  g_runtime_dir = rte_eal_get_runtime_dir();
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  // Closing the device writes to the vhost-user socket; a backend that left first would end
  // the process by SIGPIPE before it cleans up.
  signal(SIGPIPE, SIG_IGN);

  rte_mempool* mp = rte_pktmbuf_pool_create("peer", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                            static_cast<int>(rte_socket_id()));
  if (!mp) die("no mempool");
  uint16_t port = 0;
  if (rte_eth_dev_count_avail() != 1) die("net_virtio_user did not come up");
  rte_eth_conf conf{};
  if (size > 1514) {  // jumbo frames: sent as chains, received as chains (mergeable buffers)
    conf.rxmode.mtu = size - 14;
    conf.rxmode.offloads = RTE_ETH_RX_OFFLOAD_SCATTER;
    conf.txmode.offloads = RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  }
  if (rte_eth_dev_configure(port, 1, 1, &conf) != 0 ||
      rte_eth_rx_queue_setup(port, 0, 1024, rte_eth_dev_socket_id(port), nullptr, mp) != 0 ||
      rte_eth_tx_queue_setup(port, 0, 1024, rte_eth_dev_socket_id(port), nullptr) != 0 ||
      rte_eth_dev_start(port) != 0) {
    die("cannot start net_virtio_user");
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  // Frames sent before the backend is ready are dropped by it: wait for the link first.
  for (;;) {
    rte_eth_link link{};
    rte_eth_link_get_nowait(port, &link);
    if (link.link_status == RTE_ETH_LINK_UP || g_stop) break;
    if (std::chrono::steady_clock::now() > deadline) die("the vhost-user backend never came up");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  // Inject `count` frames (retrying while the ring is full or the backend not ready).
  uint64_t sent = 0;
  while (sent < count && !g_stop && std::chrono::steady_clock::now() < deadline) {
    rte_mbuf* m = rte_pktmbuf_alloc(mp);
    if (!m) die("mempool ran dry");
    fill_frame(mp, m, static_cast<uint16_t>(1 + sent), size);
    while (rte_eth_tx_burst(port, 0, &m, 1) == 0 && !g_stop &&
           std::chrono::steady_clock::now() < deadline) {
      rte_pause();
    }
    ++sent;
  }

  rte_mbuf* burst[64];
  uint64_t received = 0, bytes = 0, reflected = 0;
  if (exchange->parsed()) {
    while (received < expect && !g_stop && std::chrono::steady_clock::now() < deadline) {
      uint16_t n = rte_eth_rx_burst(port, 0, burst, 64);
      for (uint16_t i = 0; i < n; ++i) {
        bytes += burst[i]->pkt_len;
        rte_pktmbuf_free(burst[i]);
      }
      received += n;
      if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    std::printf("sent %lu received %lu bytes %lu\n", static_cast<unsigned long>(sent),
                static_cast<unsigned long>(received), static_cast<unsigned long>(bytes));
  } else {
    while (!g_stop) {
      uint16_t n = rte_eth_rx_burst(port, 0, burst, 64);
      if (n == 0) continue;
      // Retried while the backend's ring is full, so the circulating frames keep their number.
      uint16_t out = 0;
      for (int tries = 0; out < n && tries < 1000 && !g_stop; ++tries)
        out += rte_eth_tx_burst(port, 0, burst + out, static_cast<uint16_t>(n - out));
      for (uint16_t i = out; i < n; ++i)
        rte_pktmbuf_free(burst[i]);
      reflected += out;
    }
    std::printf("reflected %lu\n", static_cast<unsigned long>(reflected));
  }
  std::fflush(stdout);
  rte_eth_dev_stop(port);
  rte_eth_dev_close(port);
  rte_eal_cleanup();
  remove_runtime_dir();
  bool ok = exchange->parsed() ? sent == count && received >= expect : true;
  return ok ? 0 : 1;
}
