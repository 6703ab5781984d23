// One interface, two owners: queues 0-1 read by vecflow's AF_XDP sockets, queues 2-3 by
// DPDK's net_af_xdp, all under one XDP program and its XSKMAP; and frames crossing between
// port kinds (AF_XDP -> DPDK -> AF_XDP) without a copy.
#include <net/if.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/packet.h"
#include "io/afxdp/afxdp_port.h"
#include "io/dpdk/dpdk_port.h"
#include "io/packet_pool.h"
#include "io_fixtures.h"
#include "support/port_io.h"

using namespace vecflow;
using namespace vecflow::test;
using testing::HasSubstr;

namespace {

constexpr PortId kWan{1};

AfXdpOptions hybrid_options() {
  AfXdpOptions o;
  o.interface = VethLab::a;
  o.queues = {XskQueueRange{0, 2, QueueOwner::Vecflow}, XskQueueRange{2, 2, QueueOwner::Dpdk}};
  o.ring_size = 1024;
  o.dpdk_xdp_prog.clear();  // the PMD loads libxdp's default program (detached at once)
  return o;
}

TEST(HybridQueues, VecflowAndDpdkOwnQueuesOfOneInterfaceUnderOneProgram) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab(4);
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  ASSERT_TRUE(in_ns.ok());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  const uint32_t idle_before_pmd = pool.in_use();
  {
    auto port = AfXdpPort::create("wan", kWan, hybrid_options(), pool);
    ASSERT_TRUE(port) << port.error().message;
    EXPECT_EQ(attached_xdp_prog(ifindex), 0u)
        << "the PMD's own program must be gone so the steering program can attach";
    // The steering program attaches after the port is made (here a stand-in with xsks_map).
    TestXdp xdp(ifindex, TestXdp::Kind::LibxdpDefault);
    ASSERT_TRUE(xdp.ok()) << xdp.error();
    const uint32_t steering = attached_xdp_prog(ifindex);
    ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
    ASSERT_TRUE((*port)->start());
    ASSERT_EQ((*port)->rx_queue_count(), 4);

    PortStatus st = (*port)->status();
    ASSERT_EQ(st.queues.size(), 4u);
    for (uint16_t q = 0; q < 4; ++q) {
      EXPECT_EQ(st.queues[q].device_queue, q);
      EXPECT_EQ(st.queues[q].owner, q < 2 ? QueueOwner::Vecflow : QueueOwner::Dpdk);
      EXPECT_TRUE(st.queues[q].can_sleep);
    }
    EXPECT_THAT(st.queues[2].served_by, HasSubstr("net_af_xdp"));

    RawSocket peer(VethLab::b);
    constexpr int kFlows = 256;
    std::set<Bytes> sent;
    for (int f = 0; f < kFlows; ++f) {
      sent.insert(udp_frame(static_cast<uint16_t>(3000 + f)));
      ASSERT_TRUE(peer.send(udp_frame(static_cast<uint16_t>(3000 + f))));
    }
    std::vector<uint16_t> queue_of;
    auto got = receive(**port, kFlows, 4000, &queue_of);
    EXPECT_EQ(got.size(), static_cast<size_t>(kFlows));
    std::map<uint16_t, int> per_queue;
    for (size_t i = 0; i < got.size(); ++i) {
      ++per_queue[queue_of[i]];
      EXPECT_EQ(got[i]->port, to_index(kWan)) << "DPDK-owned queues deliver as the same port";
      EXPECT_TRUE(got[i]->ol_flags & RTE_MBUF_F_RX_RSS_HASH);
      EXPECT_TRUE(sent.count(mbuf_bytes(got[i])));
    }
    EXPECT_EQ(per_queue.size(), 4u) << "both owners received frames";
    // And back out through both kinds of queue.
    size_t out = 0;
    for (size_t i = 0; i < got.size(); ++i)
      out += (*port)->tx_burst(queue_of[i], &got[i], 1);
    EXPECT_EQ(out, got.size());
    auto back = peer.recv_n(got.size(), 2000);
    EXPECT_EQ(std::set<Bytes>(back.begin(), back.end()), sent);

    (*port)->stop();
    port->reset();  // closes the PMD's devices, which detach the interface's program ...
    EXPECT_EQ(attached_xdp_prog(ifindex), steering) << "... and the port puts it back";
  }
  EXPECT_EQ(pool.in_use(), idle_before_pmd);
}

TEST(HybridQueues, RefusesWhenTheSteeringProgramIsAttachedFirst) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab(4);
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  TestXdp xdp(ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  const uint32_t idle = pool.in_use();
  auto port = AfXdpPort::create("wan", kWan, hybrid_options(), pool);
  ASSERT_FALSE(port);
  EXPECT_THAT(port.error().message, HasSubstr("port wan"));
  EXPECT_THAT(port.error().message, HasSubstr("before the steering program attaches"));
  EXPECT_EQ(pool.in_use(), idle);
}

// A frame received over AF_XDP leaves through a DPDK port, comes back in on it, and leaves
// through AF_XDP again: the same buffer all the way, no copy made.
TEST(ForwardingBetweenKinds, AfXdpToDpdkAndBackWithoutACopy) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  VethLab lab;
  ASSERT_TRUE(lab.ok());
  NetnsScope in_ns(lab.ns());
  int ifindex = static_cast<int>(if_nametoindex(VethLab::a));
  TestXdp xdp(ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  const uint32_t idle = pool.in_use();
  {
    AfXdpOptions ao;
    ao.interface = VethLab::a;
    ao.ring_size = 1024;
    auto wan = AfXdpPort::create("wan", kWan, ao, pool);
    ASSERT_TRUE(wan) << wan.error().message;
    ASSERT_TRUE((*wan)->set_xsks_map(xdp.map_fd()));
    ASSERT_TRUE((*wan)->start());
    DpdkOptions dopt;
    dopt.devargs = "net_ring0";
    auto ring = DpdkPort::create("loop", PortId{2}, dopt, pool);
    ASSERT_TRUE(ring) << ring.error().message;
    ASSERT_TRUE((*ring)->start());

    RawSocket peer(VethLab::b);
    Bytes f = udp_frame(777, 9, 300);
    ASSERT_TRUE(peer.send(f));
    std::vector<uint16_t> q;
    auto got = receive(**wan, 1, 4000, &q);
    ASSERT_EQ(got.size(), 1u);
    rte_mbuf* m = got[0];
    ASSERT_EQ((*ring)->tx_burst(0, &m, 1), 1);
    std::vector<uint16_t> q2;
    auto again = receive(**ring, 1, 4000, &q2);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0], m) << "the AF_XDP frame is an mbuf: the DPDK port carried it as is";
    EXPECT_EQ(again[0]->port, 2);
    ASSERT_EQ((*wan)->tx_burst(0, &again[0], 1), 1);
    auto back = peer.recv(2000);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, f);
    EXPECT_EQ((*wan)->status().queues[0].tx_copies, 0u);
    (*wan)->stop();
  }
  EXPECT_EQ(pool.in_use(), idle);
}

}  // namespace
