// Ten million packets through each kind of port, received and sent back out on one core, then
// idle again: the pool's buffers in use, and the buffers an AF_XDP socket lends the kernel,
// must be exactly what they were at idle before the traffic.
#include <net/if.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "io/afxdp/afxdp_port.h"
#include "io/dpdk/dpdk_port.h"
#include "io/packet_pool.h"
#include "io_fixtures.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

#ifdef VECFLOW_SANITIZE
// The sanitizer build checks memory errors on the same paths; a tenth of the packets walks
// every one of them, at a tenth of a much slower build's time.
constexpr uint64_t kPackets = 1'000'000;
#else
constexpr uint64_t kPackets = 10'000'000;
#endif
// Upper bound on one run; a machine that cannot forward 10 M packets in this time is too
// loaded for the test to say anything, and it fails rather than hang.
constexpr auto kTimeLimit = std::chrono::seconds(240);

struct LoopResult {
  uint64_t forwarded = 0;
  double seconds = 0;
};

// Receives on queue 0 and sends straight back out until `want` packets went through or the
// time limit passed. A refused transmission is retried (briefly), so traffic that circulates
// between two reflectors is not thinned out by a momentarily full ring.
LoopResult forward_loop(Port& port, uint64_t want) {
  LoopResult r;
  auto t0 = std::chrono::steady_clock::now();
  rte_mbuf* burst[64];
  while (r.forwarded < want) {
    uint16_t n = port.rx_burst(0, burst, 64);
    if (n == 0) {
      if (std::chrono::steady_clock::now() - t0 > kTimeLimit) break;
      continue;
    }
    uint16_t sent = 0;
    for (int tries = 0; sent < n && tries < 1000; ++tries)
      sent += port.tx_burst(0, burst + sent, static_cast<uint16_t>(n - sent));
    for (uint16_t i = sent; i < n; ++i)
      rte_pktmbuf_free(burst[i]);
    r.forwarded += n;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Reads and frees whatever still arrives, and lets transmissions complete, until quiet.
void drain(Port& port) {
  rte_mbuf* burst[64];
  auto quiet_since = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - quiet_since < std::chrono::milliseconds(300)) {
    uint16_t n = port.rx_burst(0, burst, 64);
    for (uint16_t i = 0; i < n; ++i)
      rte_pktmbuf_free(burst[i]);
    port.tx_burst(0, nullptr, 0);
    if (n) quiet_since = std::chrono::steady_clock::now();
  }
}

std::string mac_of(const VethLab& lab, const char* dev) {
  std::string out =
      sh_output("ip netns exec " + lab.ns() + " cat /sys/class/net/" + dev + "/address");
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

TEST(NoLeak, AfXdpOnVethAfterTenMillionPackets) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  TestXdp xdp(ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  const uint32_t before = pool.in_use();
  AfXdpOptions o;
  o.interface = VethLab::a;
  o.ring_size = 2048;
  auto port = AfXdpPort::create("wan", PortId{1}, o, pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*port)->start());
  const uint32_t idle = pool.in_use();
  const uint64_t idle_lent = (*port)->status().queues[0].kernel_buffers;
  EXPECT_EQ(idle_lent, 2048u) << "at idle the fill ring is full and nothing else is lent";

  // The peer sends frames addressed to the port's side, which the peer's own stack ignores
  // when they come back.
  std::string gen = "ip netns exec " + lab.ns() + " " + built_tool("trafgen") + " send --dev " +
                    VethLab::b + " --src 192.0.2.2 --dst 198.51.100.2 --dst-mac " +
                    mac_of(lab, VethLab::a) + " --flows 64 --duration 600 >/dev/null 2>&1";
  Background generator(gen);
  ASSERT_TRUE(generator.ok());
  LoopResult r = forward_loop(**port, kPackets);
  generator.stop();
  drain(**port);
  EXPECT_GE(r.forwarded, kPackets) << "in " << r.seconds << " s";
  PortStatus st = (*port)->status();
  EXPECT_EQ(st.queues[0].kernel_buffers, idle_lent) << "UMEM frames lent to the kernel";
  EXPECT_EQ(pool.in_use(), idle) << "pool buffers in use at idle";
  std::printf("AF_XDP: %lu packets in %.1f s\n", static_cast<unsigned long>(r.forwarded),
              r.seconds);
  // And stopped in the middle of traffic: frames in the rings, in flight, set aside by the
  // kernel after a full rx ring. stop() returns them all.
  Background again(gen);
  forward_loop(**port, 200'000);
  (*port)->stop();
  again.stop();
  EXPECT_EQ(pool.in_use(), before);
}

TEST(NoLeak, RingAfterTenMillionPackets) {
  PacketPool& pool = test_pool();
  const uint32_t before = pool.in_use();
  DpdkOptions o;
  o.devargs = "net_ring0";
  auto port = DpdkPort::create("loop", PortId{2}, o, pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->start());
  const uint32_t idle = pool.in_use();
  // 512 packets circulate: net_ring hands back what is sent to it.
  std::vector<rte_mbuf*> seed;
  for (uint16_t i = 0; i < 512; ++i)
    seed.push_back(mbuf_of(pool, udp_frame(i)));
  size_t in = 0;
  while (in < seed.size())
    in += (*port)->tx_burst(0, seed.data() + in, static_cast<uint16_t>(seed.size() - in));
  LoopResult r = forward_loop(**port, kPackets);
  drain(**port);
  EXPECT_GE(r.forwarded, kPackets);
  EXPECT_EQ(pool.in_use(), idle);
  std::printf("net_ring: %lu packets in %.1f s\n", static_cast<unsigned long>(r.forwarded),
              r.seconds);
  port->reset();
  EXPECT_EQ(pool.in_use(), before);
}

TEST(NoLeak, VhostUserPackedAfterTenMillionPackets) {
  PacketPool& pool = test_pool();
  std::string sock = "/tmp/" + unique_name("vpo") + "-leak.sock";
  const uint32_t before = pool.in_use();
  {
    DpdkOptions o;
    o.devargs = "net_vhost0,iface=" + sock;
    auto port = DpdkPort::create("vm", PortId{3}, o, pool);
    ASSERT_TRUE(port) << port.error().message;
    ASSERT_TRUE((*port)->start());
    const uint32_t idle = pool.in_use();
    // The guest injects 256 frames and reflects whatever it receives: they circulate.
    std::string cmd = built_tool("virtio_peer") + " --socket " + sock +
                      " --packed 1 --lcore 1 reflect --count 256 >/dev/null 2>&1";
    Background guest(cmd);
    ASSERT_TRUE(guest.ok());
    LoopResult r = forward_loop(**port, kPackets);
    guest.stop();
    drain(**port);
    EXPECT_GE(r.forwarded, kPackets);
    EXPECT_EQ(pool.in_use(), idle);
    std::printf("vhost (packed): %lu packets in %.1f s\n", static_cast<unsigned long>(r.forwarded),
                r.seconds);
  }
  EXPECT_EQ(pool.in_use(), before);
  std::filesystem::remove(sock);
}

}  // namespace
