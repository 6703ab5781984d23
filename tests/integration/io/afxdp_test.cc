// AfXdpPort over a veth pair in a namespace of its own: real frames in and out, single- and
// multi-queue, metadata from an XDP program, sleeping on the socket, teardown that returns
// every buffer, and start-up errors that leave nothing behind.
#include <net/if.h>
#include <poll.h>

#include <chrono>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/flow.h"
#include "core/packet.h"
#include "core/parse.h"
#include "io/afxdp/afxdp_port.h"
#include "io/packet_pool.h"
#include "io_fixtures.h"
#include "steer/program.h"
#include "support/port_io.h"

using namespace vecflow;
using namespace vecflow::test;
using testing::HasSubstr;

namespace {

constexpr PortId kPort{3};

struct Rig {
  explicit Rig(int queues = 1) : lab(queues) {}
  VethLab lab;
  std::unique_ptr<NetnsScope> in_ns;
  int ifindex = 0;

  bool enter() {
    if (!lab.ok()) return false;
    in_ns = std::make_unique<NetnsScope>(lab.ns());
    ifindex = static_cast<int>(if_nametoindex(VethLab::a));
    return in_ns->ok() && ifindex != 0;
  }
};

AfXdpOptions options(uint16_t queues = 1) {
  AfXdpOptions o;
  o.interface = VethLab::a;
  o.queues = {XskQueueRange{0, queues, QueueOwner::Vecflow}};
  o.ring_size = 1024;
  return o;
}

TEST(AfXdpPort, ReceivesAndTransmitsRealFrames) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  Rig rig;
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  const uint32_t idle = pool.in_use();
  {
    auto port = AfXdpPort::create("wan", kPort, options(), pool);
    ASSERT_TRUE(port) << port.error().message;
    ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
    ASSERT_TRUE((*port)->start()) << "";
    EXPECT_EQ((*port)->link_state(), LinkState::Up);

    RawSocket peer(VethLab::b);
    ASSERT_TRUE(peer.ok());
    std::vector<Bytes> sent;
    for (uint16_t i = 0; i < 32; ++i) {
      sent.push_back(udp_frame(static_cast<uint16_t>(1000 + i)));
      ASSERT_TRUE(peer.send(sent.back()));
    }
    auto got = receive(**port, sent.size());
    ASSERT_EQ(got.size(), sent.size());
    std::set<Bytes> want(sent.begin(), sent.end());
    for (rte_mbuf* m : got) {
      EXPECT_EQ(m->port, to_index(kPort));
      EXPECT_TRUE(pool.owns(m));
      EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_RX_RSS_HASH);
      EXPECT_EQ(m->packet_type, RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP);
      EXPECT_EQ(m->l2_len, 14);
      EXPECT_EQ(m->l3_len, 20);
      EXPECT_EQ(meta(m).verdict, Verdict::Continue);
      EXPECT_EQ(meta(m).steer_rule, kNoRule);  // libxdp's program writes no metadata
      Bytes b = mbuf_bytes(m);
      EXPECT_TRUE(want.count(b)) << "a frame was received that was not sent";
      ParsedFrame p;
      ASSERT_FALSE(parse_frame(b, p));
      EXPECT_EQ(m->hash.rss, flow_hash(p.key, true));
    }
    // Out again: the peer gets the same bytes, and the port took the pool's buffers as they
    // were (no copy).
    uint16_t took = (*port)->tx_burst(0, got.data(), static_cast<uint16_t>(got.size()));
    EXPECT_EQ(took, got.size());
    auto back = peer.recv_n(sent.size(), 2000);
    ASSERT_EQ(back.size(), sent.size());
    EXPECT_EQ(std::set<Bytes>(back.begin(), back.end()), want);
    PortStatus st = (*port)->status();
    ASSERT_EQ(st.queues.size(), 1u);
    EXPECT_EQ(st.queues[0].rx_packets, 32u);
    EXPECT_EQ(st.queues[0].tx_packets, 32u);
    EXPECT_EQ(st.queues[0].tx_copies, 0u);
    EXPECT_EQ(st.queues[0].copy, CopyMode::Copy) << "veth has no zero-copy AF_XDP";
    EXPECT_EQ(st.queues[0].owner, QueueOwner::Vecflow);
    EXPECT_EQ(st.device, VethLab::a);
    (*port)->stop();
    EXPECT_EQ(pool.in_use(), idle) << "stop() must return every buffer the socket held";
  }
  EXPECT_EQ(pool.in_use(), idle);
}

// A chain of the pool's own buffers leaves as it is, a descriptor a buffer (multi-buffer
// AF_XDP); a buffer someone else still holds is copied once, and counted.
TEST(AfXdpPort, SendsChainsAsTheyAreAndCopiesSharedBuffers) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  Rig rig;
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  const uint32_t idle = pool.in_use();
  auto port = AfXdpPort::create("wan", kPort, options(), pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*port)->start());
  RawSocket peer(VethLab::b);
  Bytes frame = udp_frame(4242, 9, 200);
  // Two segments: the headers in one buffer, the payload in another.
  rte_mbuf* head = mbuf_of(pool, Bytes(frame.begin(), frame.begin() + 42));
  rte_mbuf* tail = mbuf_of(pool, Bytes(frame.begin() + 42, frame.end()));
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  // And one shared buffer (refcnt 2): may not be handed to the kernel as it is either.
  rte_mbuf* shared = mbuf_of(pool, udp_frame(4343));
  rte_mbuf_refcnt_update(shared, 1);
  rte_mbuf* burst[2] = {head, shared};
  ASSERT_EQ((*port)->tx_burst(0, burst, 2), 2);
  auto back = peer.recv_n(2, 2000);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0], frame);
  EXPECT_EQ(back[1], udp_frame(4343));
  EXPECT_EQ((*port)->status().queues[0].tx_copies, 1u);
  rte_pktmbuf_free(shared);  // our own reference
  (*port)->stop();
  EXPECT_EQ(pool.in_use(), idle);
}

TEST(AfXdpPort, ReadsTheXdpMetadataInsteadOfParsing) {
  VECFLOW_REQUIRE_NETNS();
  if (!steer::kernel_allows_xdp_metadata())
    GTEST_SKIP() << "this kernel refuses XDP metadata (bpf_xdp_adjust_meta)";
  PacketPool& pool = test_pool();
  Rig rig;
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::MetaFixture);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  auto port = AfXdpPort::create("wan", kPort, options(), pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*port)->start());
  RawSocket peer(VethLab::b);
  Bytes tagged = FrameBuilder()
                     .vlan(100)
                     .ipv6(ip6("2001:db8:1::2"), ip6("2001:db8:2::2"), 6)
                     .tcp(40000, 443)
                     .build();
  ASSERT_TRUE(peer.send(tagged));
  ASSERT_TRUE(peer.send(udp_frame(5000)));
  auto got = receive(**port, 2);
  ASSERT_EQ(got.size(), 2u);
  for (rte_mbuf* m : got) {
    Bytes b = mbuf_bytes(m);
    ParsedFrame p;
    ASSERT_FALSE(parse_frame(b, p));
    // The metadata carried what a software parse finds, and the rule id only it knows.
    EXPECT_EQ(meta(m).steer_rule, 7) << "rule id comes from vf_xdp_meta";
    EXPECT_EQ(m->hash.rss, flow_hash(p.key, true));
    EXPECT_EQ(m->l2_len, p.l2_len);
    EXPECT_EQ(m->l3_len, p.l3_len);
    EXPECT_EQ(m->packet_type, packet_type_of(p));
    // The magic was consumed: a recycled buffer cannot pass it off again.
    auto* md = rte_pktmbuf_mtod_offset(m, const vf_xdp_meta*, -int(sizeof(vf_xdp_meta)));
    EXPECT_EQ(md->magic, 0);
  }
  EXPECT_EQ(got[0]->packet_type, RTE_PTYPE_L2_ETHER_VLAN | RTE_PTYPE_L3_IPV6 | RTE_PTYPE_L4_TCP);
  EXPECT_EQ(got[0]->vlan_tci, 100);
  free_all(got);
  (*port)->stop();
}

TEST(AfXdpPort, MultiQueueVethSpreadsFlowsOverSockets) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  Rig rig(4);
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  const uint32_t idle = pool.in_use();
  auto port = AfXdpPort::create("wan", kPort, options(4), pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_EQ((*port)->rx_queue_count(), 4);
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*port)->start());
  RawSocket peer(VethLab::b);
  constexpr int kFlows = 256;
  for (int f = 0; f < kFlows; ++f)
    ASSERT_TRUE(peer.send(udp_frame(static_cast<uint16_t>(2000 + f))));
  std::vector<uint16_t> queue_of;
  auto got = receive(**port, kFlows, 3000, &queue_of);
  EXPECT_EQ(got.size(), static_cast<size_t>(kFlows));
  std::set<uint16_t> used(queue_of.begin(), queue_of.end());
  EXPECT_EQ(used.size(), 4u) << "the peer's tx queue choice should spread 256 flows over 4 queues";
  PortStatus st = (*port)->status();
  uint64_t sum = 0;
  for (const auto& q : st.queues)
    sum += q.rx_packets;
  EXPECT_EQ(sum, static_cast<uint64_t>(kFlows));
  free_all(got);
  (*port)->stop();
  EXPECT_EQ(pool.in_use(), idle);
}

TEST(AfXdpPort, SleepsOnTheSocketUntilAFrameArrives) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  Rig rig;
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  auto port = AfXdpPort::create("wan", kPort, options(), pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*port)->start());
  int fd = (*port)->arm_wakeup(0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ((*port)->status().queues[0].wake, WakeMode::Interrupt);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 50), 0) << "nothing arrived: the descriptor must not be readable";
  RawSocket peer(VethLab::b);
  ASSERT_TRUE(peer.send(udp_frame(7)));
  EXPECT_EQ(poll(&p, 1, 2000), 1) << "a frame arrived: the descriptor must wake the sleeper";
  (*port)->disarm_wakeup(0);
  EXPECT_EQ((*port)->status().queues[0].wake, WakeMode::Polling);
  EXPECT_EQ((*port)->status().queues[0].sleeps, 1u);
  auto got = receive(**port, 1);
  EXPECT_EQ(got.size(), 1u);
  free_all(got);
  (*port)->stop();
}

TEST(AfXdpPort, StartUpErrorsNameThePortAndLeaveNothing) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  Rig rig(2);
  ASSERT_TRUE(rig.enter());
  const uint32_t idle = pool.in_use();

  AfXdpOptions o = options();
  o.interface = "vpnosuch0";
  auto r = AfXdpPort::create("wan", kPort, o, pool);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("port wan"));
  EXPECT_THAT(r.error().message, HasSubstr("'vpnosuch0' does not exist"));

  r = AfXdpPort::create("wan", kPort, options(4), pool);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, HasSubstr("has 2 rx queue(s)"));
  EXPECT_THAT(r.error().message, HasSubstr("queues 0-3"));

  // Without the steering program's map there is nothing to start.
  auto p = AfXdpPort::create("wan", kPort, options(), pool);
  ASSERT_TRUE(p) << p.error().message;
  auto s = (*p)->start();
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("xsks_map"));

  // A queue that another socket holds already.
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  ASSERT_TRUE((*p)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*p)->start());
  auto twin = AfXdpPort::create("lan", PortId{4}, options(), pool);
  ASSERT_TRUE(twin);
  ASSERT_TRUE((*twin)->set_xsks_map(xdp.map_fd()));
  s = (*twin)->start();
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("port lan"));
  EXPECT_THAT(s.error().message, HasSubstr("queue 0"));
  (*p)->stop();
  EXPECT_EQ(pool.in_use(), idle) << "failed starts must not keep buffers";
}

// Busy polling asked for: the socket options are set and frames flow; and 4096-byte buffers
// (frame_size: 4096) make 4096-byte UMEM chunks.
TEST(AfXdpPort, BusyPollingAndLargeFrames) {
  VECFLOW_REQUIRE_NETNS();
  test_pool();  // EAL
  PacketPoolOptions po;
  po.name = "vpo_pool_4k";
  po.mbufs = 8192;
  po.frame_size = 4096;
  auto pool = PacketPool::create(po);
  ASSERT_TRUE(pool) << pool.error().message;
  Rig rig;
  // Room for 3 KB frames, below what veth's XDP allows without multi-buffer support.
  ASSERT_EQ(rig.lab.run(std::string("ip link set mtu 3200 dev ") + VethLab::a +
                        " && ip link set mtu 3200 dev " + VethLab::b),
            0);
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  AfXdpOptions o = options();
  o.busy_poll = true;
  o.busy_poll_budget = 32;
  o.busy_poll_timeout_us = 20;
  auto port = AfXdpPort::create("wan", kPort, o, **pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*port)->start());
  EXPECT_TRUE((*port)->status().queues[0].busy_poll);
  RawSocket peer(VethLab::b);
  Bytes big = udp_frame(1, 9, 3000);  // fits a 4096-byte buffer, not a 2048-byte one
  ASSERT_TRUE(peer.send(big));
  auto got = receive(**port, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(mbuf_bytes(got[0]), big);
  EXPECT_EQ((*pool)->frame_addr(got[0]) % 4096, 0u);
  ASSERT_EQ((*port)->tx_burst(0, got.data(), 1), 1);
  auto back = peer.recv(2000);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, big);
  (*port)->stop();
  EXPECT_EQ((*pool)->in_use(), 0u);
}

// A Spread pool (objects 2112 bytes apart) is an unaligned-chunk UMEM: frames arrive in the
// right mbuf at the right offset, leave from it, and every buffer comes back.
TEST(AfXdpPort, UnalignedChunksOfASpreadPool) {
  VECFLOW_REQUIRE_NETNS();
  test_pool();  // EAL
  PacketPoolOptions po;
  po.name = "vpo_pool_spread";
  po.mbufs = 4096;
  po.layout = PoolLayout::Spread;
  auto pool = PacketPool::create(po);
  ASSERT_TRUE(pool) << pool.error().message;
  Rig rig;
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  AfXdpOptions o = options();
  o.bind = XskBind::Copy;
  auto port = AfXdpPort::create("wan", kPort, o, **pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*port)->start());
  RawSocket peer(VethLab::b);
  std::vector<Bytes> sent;
  for (uint16_t i = 0; i < 100; ++i) {
    sent.push_back(udp_frame(static_cast<uint16_t>(7000 + i), 9, 60 + i * 13));
    ASSERT_TRUE(peer.send(sent.back()));
  }
  auto got = receive(**port, sent.size());
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(mbuf_bytes(got[i]), sent[i]) << "frame " << i;
    EXPECT_EQ((*pool)->mbuf_of((*pool)->frame_addr(got[i])), got[i]);
  }
  // Out again from where they arrived (descriptors carry the offset in their top bits).
  ASSERT_EQ((*port)->tx_burst(0, got.data(), static_cast<uint16_t>(got.size())), got.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    auto back = peer.recv(2000);
    ASSERT_TRUE(back) << "frame " << i << " did not come back";
    EXPECT_EQ(*back, sent[i]) << "frame " << i;
  }
  // Completions return the buffers: nothing stays taken once the port stops.
  (*port)->stop();
  EXPECT_EQ((*pool)->in_use(), 0u);
}

TEST(AfXdpPort, ZeroCopyDemandedWhereTheDriverHasNone) {
  VECFLOW_REQUIRE_NETNS();
  PacketPool& pool = test_pool();
  Rig rig;
  ASSERT_TRUE(rig.enter());
  TestXdp xdp(rig.ifindex, TestXdp::Kind::LibxdpDefault);
  ASSERT_TRUE(xdp.ok()) << xdp.error();
  const uint32_t idle = pool.in_use();
  AfXdpOptions o = options();
  o.bind = XskBind::ZeroCopy;
  auto port = AfXdpPort::create("wan", kPort, o, pool);
  ASSERT_TRUE(port) << port.error().message;
  ASSERT_TRUE((*port)->set_xsks_map(xdp.map_fd()));
  auto s = (*port)->start();
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("port wan"));
  EXPECT_THAT(s.error().message, HasSubstr("zero-copy mode"));
  EXPECT_EQ(pool.in_use(), idle);
  // mode: auto on the same driver falls back to copy and says so.
  o.bind = XskBind::Auto;
  auto fallback = AfXdpPort::create("wan", kPort, o, pool);
  ASSERT_TRUE(fallback);
  ASSERT_TRUE((*fallback)->set_xsks_map(xdp.map_fd()));
  ASSERT_TRUE((*fallback)->start());
  EXPECT_EQ((*fallback)->status().queues[0].copy, CopyMode::Copy);
}

}  // namespace
