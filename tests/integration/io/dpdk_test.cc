// DpdkPort with real PMDs: net_ring (loopback), net_pcap (a pcap in, a pcap out, byte-exact),
// net_tap (frames through the kernel), net_af_xdp on a veth, vhost-user against a virtio-user
// guest in a second process (packed and split rings), rx interrupts, and start-up errors.
#include <pcap/pcap.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_ip.h>

#include "core/flow.h"
#include "core/packet.h"
#include "core/parse.h"
#include "io/dpdk/dpdk_port.h"
#include "io/packet_pool.h"
#include "io/vlan/vlan_port.h"
#include "io_fixtures.h"
#include "support/port_io.h"

using namespace vecflow;
using namespace vecflow::test;
using testing::HasSubstr;

namespace {

constexpr PortId kPort{5};

DpdkOptions options(std::string devargs, uint16_t queues = 1) {
  DpdkOptions o;
  o.devargs = std::move(devargs);
  o.queues = queues;
  o.rx_descriptors = 256;
  o.tx_descriptors = 256;
  return o;
}

uint16_t ethdev_count() {
  return rte_eth_dev_count_avail();
}

std::string temp_path(const std::string& what) {
  return "/tmp/" + unique_name("vpo") + "-" + what;
}

TEST(DpdkPort, RingLoopbackRewritesPortAndSetsFlowId) {
  PacketPool& pool = test_pool();
  const uint32_t idle = pool.in_use();
  auto port = DpdkPort::create("lan", kPort, options("net_ring0"), pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->start());
  EXPECT_EQ((*port)->link_state(), LinkState::Up);
  std::vector<Bytes> frames = {
      udp_frame(1111),
      FrameBuilder().ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), 6).tcp(1, 2).build(),
      FrameBuilder().arp().build(),
  };
  std::vector<rte_mbuf*> out;
  for (auto& f : frames)
    out.push_back(mbuf_of(pool, f));
  ASSERT_EQ((*port)->tx_burst(0, out.data(), 3), 3);
  auto got = receive(**port, 3);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    rte_mbuf* m = got[i];
    EXPECT_EQ(m, out[i]) << "net_ring hands the same mbuf back: no copy anywhere";
    EXPECT_EQ(m->port, to_index(kPort));
    EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_RX_RSS_HASH);
    ParsedFrame p;
    ASSERT_FALSE(parse_frame(frames[i], p));
    EXPECT_EQ(m->hash.rss, flow_hash(p.key, true));
    EXPECT_EQ(m->packet_type, packet_type_of(p));
    EXPECT_EQ(meta(m).verdict, Verdict::Continue);
    EXPECT_EQ(meta(m).out_port, kNoPort);
  }
  EXPECT_EQ(got[2]->packet_type, 0u) << "ARP is not IP";
  free_all(got);
  PortStatus st = (*port)->status();
  EXPECT_EQ(st.queues[0].rx_packets, 3u);
  EXPECT_EQ(st.queues[0].tx_packets, 3u);
  EXPECT_EQ(st.device, "net_ring0");
  EXPECT_FALSE(st.device_stats.empty()) << "xstats are passed through";
  port->reset();
  EXPECT_EQ(pool.in_use(), idle);
}

TEST(DpdkPort, MalformedFramesAreDroppedAndCountedByReason) {
  PacketPool& pool = test_pool();
  auto port = DpdkPort::create("lan", kPort, options("net_ring1"), pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->start());
  Bytes bad = udp_frame(1);
  bad[14] = 0x42;  // IPv4 header length 2 words
  rte_mbuf* out[2] = {mbuf_of(pool, bad), mbuf_of(pool, udp_frame(2))};
  ASSERT_EQ((*port)->tx_burst(0, out, 2), 2);
  auto got = receive(**port, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(mbuf_bytes(got[0]), udp_frame(2));
  free_all(got);
  PortStatus st = (*port)->status();
  ASSERT_EQ(st.queues[0].drops.size(), 1u);
  EXPECT_EQ(st.queues[0].drops[0].first, DropReason::IPV4_BAD_IHL);
  EXPECT_EQ(st.queues[0].drops[0].second, 1u);
  EXPECT_EQ(st.queues[0].rx_packets, 1u);
}

void write_pcap(const std::string& path, const std::vector<Bytes>& frames) {
  pcap_t* p = pcap_open_dead(DLT_EN10MB, 65535);
  pcap_dumper_t* d = pcap_dump_open(p, path.c_str());
  for (size_t i = 0; i < frames.size(); ++i) {
    pcap_pkthdr h{};
    h.ts.tv_sec = static_cast<time_t>(i);
    h.caplen = h.len = static_cast<bpf_u_int32>(frames[i].size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, frames[i].data());
  }
  pcap_dump_close(d);
  pcap_close(p);
}

std::vector<Bytes> read_pcap(const std::string& path) {
  std::vector<Bytes> out;
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  if (!p) return out;
  pcap_pkthdr* h;
  const u_char* data;
  while (pcap_next_ex(p, &h, &data) == 1)
    out.emplace_back(data, data + h->caplen);
  pcap_close(p);
  return out;
}

TEST(DpdkPort, PcapInPcapOutByteExact) {
  PacketPool& pool = test_pool();
  const uint32_t idle = pool.in_use();
  std::string in = temp_path("in.pcap"), out = temp_path("out.pcap");
  std::vector<Bytes> frames;
  for (int i = 0; i < 100; ++i) {
    frames.push_back(i % 3 == 0
                         ? FrameBuilder()
                               .vlan(static_cast<uint16_t>(i))
                               .ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), 17)
                               .udp(static_cast<uint16_t>(i), 53)
                               .payload(static_cast<size_t>(i * 7))
                               .build()
                         : udp_frame(static_cast<uint16_t>(i), 9, static_cast<size_t>(i * 13)));
  }
  write_pcap(in, frames);
  {
    auto port = DpdkPort::create("cap", kPort,
                                 options("net_pcap0,rx_pcap=" + in + ",tx_pcap=" + out), pool);
    ASSERT_TRUE(port) << port.error().message;
    ASSERT_TRUE((*port)->start());
    auto got = receive(**port, frames.size());
    ASSERT_EQ(got.size(), frames.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(mbuf_bytes(got[i]), frames[i]) << "frame " << i;
    size_t sent = 0;
    while (sent < got.size()) {
      uint16_t n = (*port)->tx_burst(
          0, got.data() + sent, static_cast<uint16_t>(std::min<size_t>(64, got.size() - sent)));
      ASSERT_GT(n, 0);
      sent += n;
    }
  }  // closing the port flushes and closes the output file
  EXPECT_EQ(read_pcap(out), frames);
  EXPECT_EQ(pool.in_use(), idle);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

// VLANs of a DPDK port: the port's rx bursts hand a claimed VLAN's frames to its VLAN port,
// untagged; an unclaimed VLAN's are dropped as vlan_unknown; untagged frames stay the port's.
// What the VLAN port sends leaves the DPDK port tagged with its VLAN (the pcap written).
TEST(DpdkPort, VlansOfADpdkPortInAndOutThroughPcaps) {
  PacketPool& pool = test_pool();
  const uint32_t idle = pool.in_use();
  std::string in = temp_path("in.pcap"), out = temp_path("out.pcap");
  const auto tagged = [](uint16_t vlan, uint16_t sport) {
    return FrameBuilder()
        .vlan(vlan)
        .ipv4(ip4(10, 1, 0, 2), ip4(10, 2, 0, 2), 17)
        .udp(sport, 9)
        .payload(18)
        .build();
  };
  const std::vector<Bytes> frames = {tagged(100, 1), udp_frame(2), tagged(300, 3), tagged(100, 4)};
  write_pcap(in, frames);
  {
    auto port = DpdkPort::create("trunk", kPort,
                                 options("net_pcap0,rx_pcap=" + in + ",tx_pcap=" + out), pool);
    ASSERT_TRUE(port) << port.error().message;
    VlanPort office("office", PortId{6}, **port, VlanOptions{100, "", "", {}});
    VlanPort lab("lab", PortId{7}, **port, VlanOptions{200, "", "", {}});
    VlanDemux demux;
    demux.claim(RTE_ETHER_TYPE_VLAN, 100, 6);
    demux.claim(RTE_ETHER_TYPE_VLAN, 200, 7);
    (*port)->set_vlans(&demux);
    ASSERT_TRUE((*port)->start());
    ASSERT_TRUE(office.start()) << "no kernel device to make for a DPDK port's VLAN";
    auto got = receive(**port, 3);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0]->port, 6);
    Bytes untagged = tagged(100, 1);
    untagged.erase(untagged.begin() + 12, untagged.begin() + 16);
    EXPECT_EQ(mbuf_bytes(got[0]), untagged) << "as VLAN 100 received it: untagged";
    EXPECT_EQ(got[1]->port, to_index(kPort));
    EXPECT_EQ(got[2]->port, 6);
    EXPECT_EQ((*port)->status().queues[0].drops,
              (std::vector<std::pair<DropReason, uint64_t>>{{DropReason::VLAN_UNKNOWN, 1}}));
    // Out through VLAN 200: tagged 200 on the trunk.
    ASSERT_EQ(lab.tx_burst(0, &got[0], 1), 1);
    rte_pktmbuf_free(got[1]);
    rte_pktmbuf_free(got[2]);
    EXPECT_EQ(lab.status().queues[0].tx_packets, 1u);
  }  // closing the port flushes and closes the output file
  const auto written = read_pcap(out);
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0], tagged(200, 1));
  EXPECT_EQ(pool.in_use(), idle);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST(DpdkPort, TapCarriesFramesThroughTheKernelAndWakesOnRxInterrupt) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;  // only for its namespace
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  ASSERT_TRUE(in_ns.ok());
  const uint32_t idle = pool.in_use();
  {
    auto port = DpdkPort::create("tap", kPort, options("net_tap0,iface=vptap0"), pool);
    ASSERT_TRUE(port) << port.error().message;
    ASSERT_TRUE((*port)->start());
    ASSERT_EQ(lab.run("ip link set vptap0 up"), 0);
    RawSocket kernel_side("vptap0");
    ASSERT_TRUE(kernel_side.ok());
    // Drain what the kernel sends by itself when the link comes up (IPv6 router solicitations).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto noise = receive(**port, 1000, 200);
    free_all(noise);

    int fd = (*port)->arm_wakeup(0);
    ASSERT_GE(fd, 0) << "net_tap offers rx interrupts";
    EXPECT_EQ((*port)->status().queues[0].wake, WakeMode::Interrupt);
    Bytes f = udp_frame(3030);
    ASSERT_TRUE(kernel_side.send(f));
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 2000), 1);
    (*port)->disarm_wakeup(0);
    auto got = receive(**port, 1);
    ASSERT_GE(got.size(), 1u);
    bool seen = false;
    for (auto* m : got)
      seen |= mbuf_bytes(m) == f;
    EXPECT_TRUE(seen);
    free_all(got);

    // The port asks the device to verify IPv4 header checksums where it can (net_tap can, in
    // software), and the mbuf carries the verdict the route stage takes: udp_frame leaves the
    // checksum zero, wrong; the second frame's is right.
    Bytes right = udp_frame(3031);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(right.data() + 14);
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    ASSERT_TRUE(kernel_side.send(f));
    ASSERT_TRUE(kernel_side.send(right));
    got = receive(**port, 2);
    size_t verdicts = 0;
    for (auto* m : got) {
      const uint64_t verdict = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
      if (mbuf_bytes(m) == f) {
        EXPECT_EQ(verdict, RTE_MBUF_F_RX_IP_CKSUM_BAD);
        ++verdicts;
      } else if (mbuf_bytes(m) == right) {
        EXPECT_EQ(verdict, RTE_MBUF_F_RX_IP_CKSUM_GOOD);
        ++verdicts;
      }
    }
    EXPECT_EQ(verdicts, 2u);
    free_all(got);

    rte_mbuf* m = mbuf_of(pool, udp_frame(4040));
    ASSERT_EQ((*port)->tx_burst(0, &m, 1), 1);
    bool back = false;
    for (int i = 0; i < 10 && !back; ++i) {
      auto r = kernel_side.recv(500);
      back = r && *r == udp_frame(4040);
    }
    EXPECT_TRUE(back) << "the PMD's transmission reaches the kernel's side of the TAP";
  }
  EXPECT_EQ(pool.in_use(), idle);
}

// Jumbo frames on a DPDK port: the file's MTU 9000 is set on the device's kernel interface,
// the port asks for scatter since a frame outgrows one mbuf, and a 9000-byte frame arrives as
// a chain, parsed; chains go out as one frame.
TEST(DpdkPort, TapReceivesJumboFramesAsChainsAndSendsChains) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;  // only for its namespace
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  ASSERT_TRUE(in_ns.ok());
  const uint32_t idle = pool.in_use();
  {
    DpdkOptions o = options("net_tap1,iface=vptap1");
    o.interface = "vptap1";
    o.mtu = 9000;
    auto port = DpdkPort::create("tap", kPort, o, pool);
    ASSERT_TRUE(port) << port.error().message;
    EXPECT_EQ((*port)->device_mtu(), 9000u);
    ASSERT_TRUE((*port)->start());
    ASSERT_EQ(lab.run("ip link set vptap1 up"), 0);
    RawSocket kernel_side("vptap1");
    ASSERT_TRUE(kernel_side.ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto noise = receive(**port, 1000, 200);
    free_all(noise);

    const Bytes jumbo = udp_frame(5050, 9, 9000 - 42);
    ASSERT_TRUE(kernel_side.send(jumbo));
    auto got = receive(**port, 1);
    rte_mbuf* chain = nullptr;
    for (auto*& m : got) {
      if (mbuf_bytes(m) == jumbo) std::swap(chain, m);
    }
    free_all(got);
    ASSERT_NE(chain, nullptr) << "the 9000-byte frame, whole";
    EXPECT_GT(chain->nb_segs, 1u);
    EXPECT_EQ(chain->pkt_len, 9000u);
    EXPECT_EQ(chain->packet_type & RTE_PTYPE_L4_MASK, RTE_PTYPE_L4_UDP) << "parsed";
    rte_pktmbuf_free(chain);

    // A chain leaves as one frame. (Not a 9000-byte one: net_tap in DPDK 22.11 sends nothing
    // over its ethdev's MTU, which it caps at 1500; jumbo frames leave by AF_XDP ports.)
    const Bytes frame = udp_frame(5151, 9, 1400);
    rte_mbuf* head = mbuf_of(pool, Bytes(frame.begin(), frame.begin() + 600));
    ASSERT_EQ(rte_pktmbuf_chain(head, mbuf_of(pool, Bytes(frame.begin() + 600, frame.end()))), 0);
    ASSERT_EQ((*port)->tx_burst(0, &head, 1), 1);
    bool back = false;
    for (int i = 0; i < 10 && !back; ++i) {
      auto r = kernel_side.recv(500);
      back = r && *r == frame;
    }
    EXPECT_TRUE(back) << "the chain leaves as one frame";
  }
  EXPECT_EQ(pool.in_use(), idle);
}

TEST(DpdkPort, AfXdpPmdOnVeth) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  ASSERT_TRUE(in_ns.ok());
  auto port =
      DpdkPort::create("xdp", kPort, options(std::string("net_af_xdp0,iface=") + VethLab::a), pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->start());
  RawSocket peer(VethLab::b);
  std::set<Bytes> sent;
  for (uint16_t i = 0; i < 16; ++i) {
    sent.insert(udp_frame(static_cast<uint16_t>(600 + i)));
    ASSERT_TRUE(peer.send(udp_frame(static_cast<uint16_t>(600 + i))));
  }
  auto got = receive(**port, sent.size());
  ASSERT_EQ(got.size(), sent.size());
  for (auto* m : got) {
    EXPECT_TRUE(sent.count(mbuf_bytes(m)));
    EXPECT_EQ(m->port, to_index(kPort));
    EXPECT_TRUE(pool.owns(m)) << "net_af_xdp receives into the appliance's pool";
  }
  ASSERT_EQ((*port)->tx_burst(0, got.data(), static_cast<uint16_t>(got.size())), got.size());
  auto back = peer.recv_n(sent.size(), 2000);
  EXPECT_EQ(std::set<Bytes>(back.begin(), back.end()), sent);
}

// A vhost-user port and a virtio-user guest in a second process: both directions.
void vhost_exchange(bool packed) {
  PacketPool& pool = test_pool();
  std::string sock = temp_path(packed ? "packed.sock" : "split.sock");
  const uint32_t idle = pool.in_use();
  {
    auto port = DpdkPort::create("vm", kPort, options("net_vhost0,iface=" + sock), pool);
    ASSERT_TRUE(port) << port.error().message;
    ASSERT_TRUE((*port)->start());
    constexpr int kEach = 200;
    std::string cmd = built_tool("virtio_peer") + " --socket " + sock + " --packed " +
                      (packed ? "1" : "0") + " --lcore 1 exchange --count " +
                      std::to_string(kEach) + " --expect " + std::to_string(kEach);
    FILE* peer = popen(cmd.c_str(), "r");
    ASSERT_NE(peer, nullptr);
    // Guest -> vecflow: receive its frames. vecflow -> guest: send ours once the guest's first
    // frame has arrived. The link comes up when the guest connects, while its driver may still
    // be starting its queues, and a frame put into a queue the guest then sets up again is gone:
    // the likely cause of the one frame of 200 the guest missed in some runs (not proven: the
    // loss came and went with load, 1 run in 5 at worst).
    std::vector<rte_mbuf*> got;
    int sent = 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    rte_mbuf* burst[64];
    std::string ring;  // the virtqueue layout the guest negotiated, as the status shows it
    while ((got.size() < kEach || sent < kEach) && std::chrono::steady_clock::now() < until) {
      uint16_t n = (*port)->rx_burst(0, burst, 64);
      got.insert(got.end(), burst, burst + n);
      if (ring.empty() && (*port)->link_state() == LinkState::Up) {
        for (auto& [k, v] : (*port)->status().device_info) {
          if (k == "vhost.ring" && v != "no guest") ring = v;
        }
      }
      if (sent < kEach && !got.empty() && (*port)->link_state() == LinkState::Up) {
        rte_mbuf* m = mbuf_of(pool, udp_frame(static_cast<uint16_t>(9000 + sent)));
        if ((*port)->tx_burst(0, &m, 1) == 1) {
          ++sent;
        } else {
          rte_pktmbuf_free(m);
        }
      }
      if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    EXPECT_EQ(ring, packed ? "packed" : "split");
    char line[256] = {};
    bool have_line = fgets(line, sizeof(line), peer) != nullptr;
    int rc = pclose(peer);
    EXPECT_EQ(got.size(), static_cast<size_t>(kEach)) << "frames from the guest";
    EXPECT_EQ(sent, kEach);
    ASSERT_TRUE(have_line);
    EXPECT_THAT(line, HasSubstr("received " + std::to_string(kEach)));
    EXPECT_EQ(WEXITSTATUS(rc), 0) << line;
    for (auto* m : got) {
      EXPECT_EQ(m->port, to_index(kPort));
      EXPECT_EQ(m->packet_type, RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP);
    }
    free_all(got);
  }
  EXPECT_EQ(pool.in_use(), idle);
  std::filesystem::remove(sock);
}

TEST(DpdkPort, VhostUserWithPackedRings) {
  vhost_exchange(true);
}

TEST(DpdkPort, VhostUserWithSplitRings) {
  vhost_exchange(false);
}

// A VM at MTU 9000: net_vhost has no MTU to set, so the file's is the port's; the guest's
// 9014-byte frames arrive as mbuf chains (vhost copies a frame into as many of the port's mbufs
// as it needs), parsed whole, and go back to the guest as the chains they are (mergeable rx
// buffers on its side).
TEST(DpdkPort, VhostUserCarriesJumboFramesAsChains) {
  PacketPool& pool = test_pool();
  std::string sock = temp_path("jumbo.sock");
  const uint32_t idle = pool.in_use();
  {
    DpdkOptions o = options("net_vhost0,iface=" + sock);
    o.mtu = 9000;  // as `ports[].mtu: 9000` gives it
    auto port = DpdkPort::create("vm", kPort, o, pool);
    ASSERT_TRUE(port) << port.error().message;
    EXPECT_EQ((*port)->device_mtu(), 9000u);
    ASSERT_TRUE((*port)->start());
    constexpr int kEach = 8;
    constexpr uint32_t kSize = 9014;
    FILE* peer = popen((built_tool("virtio_peer") + " --socket " + sock +
                        " --packed 1 --lcore 1 exchange --size " + std::to_string(kSize) +
                        " --count " + std::to_string(kEach) + " --expect " + std::to_string(kEach))
                           .c_str(),
                       "r");
    ASSERT_NE(peer, nullptr);
    std::vector<rte_mbuf*> got = receive(**port, kEach, 20000);
    ASSERT_EQ(got.size(), static_cast<size_t>(kEach)) << "frames from the guest";
    for (rte_mbuf* m : got) {
      EXPECT_EQ(m->pkt_len, kSize);
      EXPECT_GT(m->nb_segs, 1u);
      EXPECT_EQ(m->packet_type & RTE_PTYPE_L4_MASK, RTE_PTYPE_L4_UDP) << "parsed whole";
    }
    uint16_t sent = 0;
    for (int tries = 0; sent < kEach && tries < 1000; ++tries) {
      sent += (*port)->tx_burst(0, got.data() + sent, static_cast<uint16_t>(kEach - sent));
      if (sent < kEach) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(sent, kEach);
    for (size_t i = sent; i < got.size(); ++i)
      rte_pktmbuf_free(got[i]);
    char line[256] = {};
    bool have_line = fgets(line, sizeof(line), peer) != nullptr;
    int rc = pclose(peer);
    ASSERT_TRUE(have_line);
    EXPECT_THAT(line, HasSubstr("received " + std::to_string(kEach) + " bytes " +
                                std::to_string(kEach * kSize)));
    EXPECT_EQ(WEXITSTATUS(rc), 0) << line;
  }
  std::filesystem::remove(sock);
  EXPECT_EQ(pool.in_use(), idle);
}

// A VM that goes quiet: the port sleeps on the vhost rx interrupt (the guest's kick) and the
// guest's next frame wakes it.
TEST(DpdkPort, VhostUserQueueSleepsUntilTheGuestSends) {
  PacketPool& pool = test_pool();
  std::string sock = temp_path("sleep.sock");
  {
    auto port = DpdkPort::create("vm", kPort, options("net_vhost0,iface=" + sock), pool);
    ASSERT_TRUE(port) << port.error().message;
    ASSERT_TRUE((*port)->start());
    std::string cmd = built_tool("virtio_peer") + " --socket " + sock +
                      " --packed 1 --lcore 1 exchange --count 1 --expect 1 --timeout-ms 6000 "
                      "--delay-ms 1500";
    FILE* peer = popen(cmd.c_str(), "r");
    ASSERT_NE(peer, nullptr);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int fd = -1;
    while (fd < 0 && std::chrono::steady_clock::now() < until) {
      if ((*port)->link_state() == LinkState::Up) fd = (*port)->arm_wakeup(0);
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GE(fd, 0) << "net_vhost offers rx interrupts once the guest is up";
    EXPECT_EQ((*port)->status().queues[0].wake, WakeMode::Interrupt);
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 8000), 1) << "the guest's frame wakes the sleeper";
    (*port)->disarm_wakeup(0);
    // The guest stays connected after sending (it waits, in vain, for a frame back until its
    // 6 s run ends): a guest that left at once took its frame's ring with it, now and then
    // before the port read it.
    auto got = receive(**port, 1, 6000);
    std::string said;
    char buf[256];
    while (got.size() != 1 && fgets(buf, sizeof(buf), peer))
      said += buf;
    EXPECT_EQ(got.size(), 1u) << "virtio_peer said: " << said;
    free_all(got);
    pclose(peer);
  }
  std::filesystem::remove(sock);
}

TEST(DpdkPort, StartUpErrorsNameThePortAndLeaveNothing) {
  PacketPool& pool = test_pool();
  const uint32_t idle = pool.in_use();
  const uint16_t devices = ethdev_count();

  auto r = DpdkPort::create("lan", kPort, options("net_nosuchpmd0"), pool);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("port lan"));
  EXPECT_THAT(r.error().message, HasSubstr("no driver"));

  r = DpdkPort::create("lan", kPort, options("net_pcap0,rx_pcap=/nonexistent/vpo.pcap"), pool);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("port lan"));
  EXPECT_THAT(r.error().message, HasSubstr("/nonexistent/vpo.pcap"));

  r = DpdkPort::create("lan", kPort, options("net_ring0", 64), pool);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("port lan"));
  EXPECT_THAT(r.error().message, HasSubstr("device net_ring0 offers at most 16 rx"));
  EXPECT_THAT(r.error().message, HasSubstr("64 asked"));

  // A socket path someone listens on, and one left behind by a process that is gone.
  std::string taken = temp_path("taken.sock");
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", taken.c_str());
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(s, 1), 0);
  r = DpdkPort::create("vm1", kPort, options("net_vhost0,iface=" + taken), pool);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("port vm1"));
  EXPECT_THAT(r.error().message, HasSubstr("another process listens"));
  close(s);
  r = DpdkPort::create("vm1", kPort, options("net_vhost0,iface=" + taken), pool);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("nobody listens"));
  std::filesystem::remove(taken);

  EXPECT_EQ(ethdev_count(), devices) << "a failed port must not leave its device behind";
  EXPECT_EQ(pool.in_use(), idle);
}

}  // namespace
