// Idle without burning a core: an lcore whose service polls an AF_XDP queue and a DPDK (TAP)
// queue goes to sleep on their descriptors after cpu.spin_us, and wakes when a frame arrives
// on either. And the exception path: packets handed to the kernel arrive in its stack.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "io/afxdp/afxdp_port.h"
#include "io/dpdk/dpdk_port.h"
#include "io/kernel_path.h"
#include "io/packet_pool.h"
#include "io_fixtures.h"
#include "runtime/lcore.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// What an rx adapter does with the ports' wake-up contract: polls queues, and hands the lcore
// every queue's descriptor, or none.
class Poller final : public Service {
 public:
  explicit Poller(std::vector<std::pair<Port*, uint16_t>> queues)
      : Service("poller"), queues_(std::move(queues)) {}
  bool poll() noexcept override {
    rte_mbuf* burst[32];
    uint16_t total = 0;
    for (auto& [port, q] : queues_) {
      uint16_t n = port->rx_burst(q, burst, 32);
      for (uint16_t i = 0; i < n; ++i)
        rte_pktmbuf_free(burst[i]);
      total += n;
    }
    received += total;
    return total > 0;
  }
  bool arm_wakeup(WakeFds& fds) noexcept override {
    for (armed_ = 0; armed_ < queues_.size(); ++armed_) {
      auto [port, q] = queues_[armed_];
      const int fd = port->arm_wakeup(q);
      if (fd < 0) break;
      fds.add(fd);
    }
    if (armed_ == queues_.size()) return true;
    disarm_wakeup();
    return false;
  }
  void disarm_wakeup() noexcept override {
    for (size_t i = 0; i < armed_; ++i)
      queues_[i].first->disarm_wakeup(queues_[i].second);
    armed_ = 0;
  }
  std::atomic<uint64_t> received{0};

 private:
  std::vector<std::pair<Port*, uint16_t>> queues_;
  size_t armed_ = 0;
};

bool wait_for(const std::function<bool()>& cond, int ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST(Sleep, LcoreSleepsOnAfXdpAndTapQueuesAndWakesForAFrame) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  TestXdp xdp(ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  AfXdpOptions ao;
  ao.interface = VethLab::a;
  ao.ring_size = 512;
  auto wan = AfXdpPort::create("wan", PortId{1}, ao, pool);
  ASSERT_TRUE(wan) << wan.error().message;
  ASSERT_TRUE((*wan)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*wan)->start());
  DpdkOptions dopt;
  dopt.devargs = "net_tap0,iface=vptap1";
  auto tap = DpdkPort::create("tap", PortId{2}, dopt, pool);
  ASSERT_TRUE(tap) << tap.error().message;
  ASSERT_TRUE((*tap)->start());
  ASSERT_EQ(lab.run("ip link set vptap1 up"), 0);

  auto poller = std::make_shared<Poller>(
      std::vector<std::pair<Port*, uint16_t>>{{wan->get(), 0}, {tap->get(), 0}});
  Lcore lcore(0, BackoffConfig{});
  lcore.set_services({poller});
  std::thread runner([&] { lcore.run(); });

  // Idle (the TAP's own start-up chatter aside): the lcore ends up asleep on the descriptors.
  ASSERT_TRUE(wait_for([&] { return poller->stats().sleeping.load(); }, 3000))
      << "the lcore never slept on the queues' descriptors";
  EXPECT_EQ((*wan)->status().queues[0].wake, WakeMode::Interrupt);
  EXPECT_EQ((*tap)->status().queues[0].wake, WakeMode::Interrupt);

  // A frame on the AF_XDP queue wakes it ...
  uint64_t seen = poller->received;
  RawSocket peer(VethLab::b);
  ASSERT_TRUE(peer.send(udp_frame(11)));
  EXPECT_TRUE(wait_for([&] { return poller->received > seen; }, 2000));
  // ... and once idle again, it sleeps again; a frame on the TAP wakes it too.
  ASSERT_TRUE(wait_for([&] { return poller->stats().sleeping.load(); }, 3000));
  seen = poller->received;
  RawSocket kernel_side("vptap1");
  ASSERT_TRUE(kernel_side.send(udp_frame(12)));
  EXPECT_TRUE(wait_for([&] { return poller->received > seen; }, 2000));
  EXPECT_GE(lcore.stats().interrupt_sleeps.load(), 2u);

  lcore.request_stop();
  runner.join();
  EXPECT_EQ((*wan)->status().queues[0].wake, WakeMode::Polling);
  (*wan)->stop();
}

// An IPv4/UDP frame to `dst`:`port` from 192.0.2.2, with a correct header checksum (the
// kernel checks it).
Bytes udp_to(const uint8_t dst_mac[6], std::array<uint8_t, 4> dst, uint16_t port) {
  Bytes f =
      FrameBuilder().ipv4(ip4(192, 0, 2, 2), dst, 17).udp(40000, port).payload(5, 'x').build();
  std::memcpy(f.data(), dst_mac, 6);
  uint32_t sum = 0;
  for (size_t i = 14; i < 34; i += 2)
    sum += (uint32_t(f[i]) << 8) | f[i + 1];
  while (sum >> 16)
    sum = (sum & 0xffff) + (sum >> 16);
  uint16_t csum = static_cast<uint16_t>(~sum);
  f[24] = uint8_t(csum >> 8);
  f[25] = uint8_t(csum);
  return f;
}

TEST(KernelPath, HandsPacketsToTheKernelStackOfTheHost) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;
  ASSERT_TRUE(lab.ok());
  ASSERT_EQ(lab.run(std::string("ip addr add 192.0.2.1/24 dev ") + VethLab::a), 0);
  NetnsScope in_ns(lab.ns());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  TestXdp xdp(ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  std::string tap_name;
  {
    AfXdpOptions ao;
    ao.interface = VethLab::a;
    ao.ring_size = 512;
    auto wan = AfXdpPort::create("wan", PortId{3}, ao, pool);
    ASSERT_TRUE(wan) << wan.error().message;
    rte_mbuf* m = mbuf_of(pool, udp_frame(1));
    EXPECT_EQ((*wan)->to_kernel(0, &m, 1), 0) << "no kernel path yet: the caller drops";
    rte_pktmbuf_free(m);
    ASSERT_TRUE((*wan)->enable_kernel_path());
    tap_name = (*wan)->status().kernel_path;
    EXPECT_EQ(tap_name, "vfk3-wan");
    EXPECT_NE(if_nametoindex(tap_name.c_str()), 0u);

    int s = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(5555);
    inet_pton(AF_INET, "192.0.2.1", &sa.sin_addr);
    ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);

    MacAddress mac = (*wan)->mac();
    m = mbuf_of(pool, udp_to(mac.bytes.data(), ip4(192, 0, 2, 1), 5555));
    // Even with the strict reverse-path filter on every interface.
    ASSERT_EQ(lab.run("sysctl -qw net.ipv4.conf.all.rp_filter=1"), 0);
    ASSERT_EQ((*wan)->to_kernel(0, &m, 1), 1);
    pollfd p{s, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 2000), 1) << "the kernel delivered the packet to the local socket";
    char buf[64];
    EXPECT_EQ(recv(s, buf, sizeof(buf), 0), 5);
    close(s);
    PortStatus st = (*wan)->status();
    EXPECT_EQ(st.queues[0].to_kernel, 1u);
  }
  EXPECT_EQ(if_nametoindex(tap_name.c_str()), 0u) << "the TAP goes with the port";
}

}  // namespace
