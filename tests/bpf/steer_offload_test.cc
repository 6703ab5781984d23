// The steering program's flow offload table through BPF_PROG_TEST_RUN: an installed entry
// rewrites MACs, TTL and addresses with checksums that verify from scratch and forwards with
// XDP_REDIRECT or XDP_TX; what it does not cover goes the normal way and is counted by
// reason; per-entry and per-port counters and the verdict sum stay exact; an entry behind a
// closed gate lifts its flow's frames until every one lifted is done.
//
// Each test runs in a namespace of its own holding a veth pair (the redirect target o0) and
// its loopback (the interface frames arrive on under BPF_PROG_TEST_RUN, ifindex 1).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>

#include <chrono>
#include <thread>

#include "core/offload_feed.h"
#include "harness.h"
#include "steer/offload_table.h"
#include "support/checksums.h"
#include "vecflow/parse.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr uint32_t kLoopback = 1;
const std::array<uint8_t, 4> A = ip4(10, 0, 0, 1), B = ip4(10, 0, 1, 2);
const std::array<uint8_t, 16> A6 = ip6("2001:db8::1"), B6 = ip6("2001:db8:1::2");
const std::array<uint8_t, 6> kNextHop = {0x02, 0xaa, 0, 0, 0, 0x01};
const std::array<uint8_t, 6> kOurMac = {0x02, 0xbb, 0, 0, 0, 0x02};

struct Out {
  int action = -1;
  Bytes frame;
};

class SteerOffload : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_NETNS();
    ns_ = unique_name("vof");
    ASSERT_EQ(sh("ip netns add " + ns_ + " && ip -n " + ns_ + " link set lo up && ip -n " + ns_ +
                 " link add o0 type veth peer name o1 && ip -n " + ns_ +
                 " link set o0 up && ip -n " + ns_ + " link set o1 up"),
              0);
    in_ = std::make_unique<NetnsScope>(ns_);
    ASSERT_TRUE(in_->ok());
    egress_ = if_nametoindex("o0");
    ASSERT_NE(egress_, 0u);
    steer::SteerProgram::Limits limits;
    limits.offload_entries = 4;
    h_ = std::make_unique<SteerHarness>(limits);
    ASSERT_TRUE(h_->ok()) << h_->error();
    config::SteeringSection s;
    s.default_action = {config::SteerActionKind::Pass, {}};
    s.malformed = {config::SteerActionKind::Drop, {}};
    ASSERT_TRUE(h_->install(s));
  }
  void TearDown() override {
    h_.reset();
    in_.reset();
    if (!ns_.empty()) sh("ip netns del " + ns_ + " 2>/dev/null");
  }

  steer::OffloadTable& table() { return h_->program().offload(); }
  steer::SteerCounters counters() { return *h_->program().counters(); }

  Out run(const Bytes& frame) {
    Out o;
    o.frame.resize(frame.size() + 64);
    bpf_test_run_opts opts = test_run_opts(frame, 1);
    opts.data_out = o.frame.data();
    opts.data_size_out = uint32_t(o.frame.size());
    if (bpf_prog_test_run_opts(h_->program().prog_fd(), &opts) != 0) return o;
    o.action = int(opts.retval);
    o.frame.resize(opts.data_size_out);
    return o;
  }

  steer::OffloadAction forward(uint32_t egress) const {
    steer::OffloadAction a;
    a.dst_mac = kNextHop;
    a.src_mac = kOurMac;
    a.egress_ifindex = egress;
    return a;
  }

  std::string ns_;
  std::unique_ptr<NetnsScope> in_;
  std::unique_ptr<SteerHarness> h_;
  uint32_t egress_ = 0;
};

// The key of a frame as the program parses it.
steer::OffloadKey key_of(const Bytes& f) {
  vf_parsed p{};
  EXPECT_EQ(vf_parse_frame(f.data(), f.data() + f.size(), f.data() + f.size(), &p), VF_PARSE_OK);
  return steer::offload_key(p.key, kLoopback);
}

Bytes udp4(uint16_t sport = 1000, uint16_t dport = 2000, size_t payload = 32) {
  Bytes f = FrameBuilder().ipv4(A, B, 17).udp(sport, dport).payload(payload).build();
  fill_checksums(f);
  return f;
}

Bytes tcp4(uint8_t flags = 0x10) {
  Bytes f = FrameBuilder().ipv4(A, B, 6).tcp(40000, 443).payload(20).build();
  f[14 + 20 + 13] = flags;
  fill_checksums(f);
  return f;
}

uint64_t verdict_sum(const steer::SteerCounters& c) {
  uint64_t n = 0;
  for (uint64_t v : c.verdict)
    n += v;
  return n;
}

TEST_F(SteerOffload, RewritesMacsTtlAndChecksumAndRedirects) {
  const Bytes in = udp4();
  ASSERT_EQ(run(in).action, XDP_PASS) << "no entry yet: the normal path";
  ASSERT_EQ(*table().install(key_of(in), forward(egress_)), steer::InstallStatus::Installed);
  Out o = run(in);
  ASSERT_EQ(o.action, XDP_REDIRECT);
  ASSERT_EQ(o.frame.size(), in.size());
  EXPECT_TRUE(std::equal(kNextHop.begin(), kNextHop.end(), o.frame.begin()));
  EXPECT_TRUE(std::equal(kOurMac.begin(), kOurMac.end(), o.frame.begin() + 6));
  EXPECT_EQ(o.frame[14 + 8], 63) << "TTL decremented";
  EXPECT_TRUE(ipv4_checksum_ok(o.frame));
  EXPECT_TRUE(l4_checksum_ok(o.frame));
  EXPECT_TRUE(std::equal(in.begin() + 14 + 12, in.end(), o.frame.begin() + 14 + 12))
      << "addresses, ports and payload untouched";
}

TEST_F(SteerOffload, EgressIsIngressSendsBackWithTx) {
  Bytes in = FrameBuilder().ipv6(A6, B6, 17).udp(5, 6).payload(10).build();
  fill_checksums(in);
  ASSERT_TRUE(table().install(key_of(in), forward(kLoopback)));
  Out o = run(in);
  EXPECT_EQ(o.action, XDP_TX);
  EXPECT_EQ(o.frame[14 + 7], 63) << "hop limit decremented";
  EXPECT_TRUE(l4_checksum_ok(o.frame));
}

TEST_F(SteerOffload, NatKeepsTcpAndUdpChecksumsValid) {
  steer::OffloadAction a = forward(egress_);
  a.snat = steer::NatRewrite{{htonl(0xc0000201)}, htons(61000)};
  a.dnat = steer::NatRewrite{{htonl(0xac100005)}, htons(8443)};
  for (const Bytes& in : {tcp4(), udp4()}) {
    ASSERT_TRUE(table().install(key_of(in), a));
    Out o = run(in);
    ASSERT_EQ(o.action, XDP_REDIRECT);
    EXPECT_TRUE(ipv4_checksum_ok(o.frame));
    EXPECT_TRUE(l4_checksum_ok(o.frame)) << "protocol " << int(in[14 + 9]);
    uint32_t src, dst;
    uint16_t sport, dport;
    std::memcpy(&src, &o.frame[26], 4);
    std::memcpy(&dst, &o.frame[30], 4);
    std::memcpy(&sport, &o.frame[34], 2);
    std::memcpy(&dport, &o.frame[36], 2);
    EXPECT_EQ(src, a.snat->addr[0]);
    EXPECT_EQ(dst, a.dnat->addr[0]);
    EXPECT_EQ(sport, a.snat->port);
    EXPECT_EQ(dport, a.dnat->port);
  }
  // IPv6 UDP, and an IPv4 UDP datagram without a checksum, which stays without.
  Bytes v6 = FrameBuilder().ipv6(A6, B6, 17).udp(5, 6).payload(10).build();
  fill_checksums(v6);
  steer::OffloadAction a6 = forward(egress_);
  a6.dnat = steer::NatRewrite{};
  std::memcpy(a6.dnat->addr.data(), ip6("2001:db8:9::9").data(), 16);
  a6.dnat->port = htons(53);
  ASSERT_TRUE(table().install(key_of(v6), a6));
  Out o6 = run(v6);
  ASSERT_EQ(o6.action, XDP_REDIRECT);
  EXPECT_TRUE(l4_checksum_ok(o6.frame));
  Bytes none = udp4(7, 8);
  none[14 + 20 + 6] = none[14 + 20 + 7] = 0;
  ASSERT_TRUE(table().install(key_of(none), a));
  Out o0 = run(none);
  ASSERT_EQ(o0.action, XDP_REDIRECT);
  EXPECT_EQ(o0.frame[14 + 20 + 6] | o0.frame[14 + 20 + 7], 0);
  EXPECT_TRUE(ipv4_checksum_ok(o0.frame));
}

TEST_F(SteerOffload, WhatTheEntryDoesNotCoverGoesTheNormalWay) {
  struct Case {
    const char* name;
    Bytes frame;
    vf_offload_decline reason;
  };
  Bytes ttl1 = udp4();
  ttl1[14 + 8] = 1;
  fill_checksums(ttl1);
  Bytes frag = FrameBuilder().ipv4(A, B, 17).udp(1000, 2000).payload(32).build();
  frag[14 + 6] = 0x20;  // more fragments, offset 0: a first fragment with the ports
  fill_checksums(frag);
  Bytes options = FrameBuilder().ipv4(A, B, 17, 4).udp(1000, 2000).payload(32).build();
  Bytes tagged = FrameBuilder().vlan(7).ipv4(A, B, 17).udp(1000, 2000).payload(32).build();
  const Case cases[] = {
      {"fin", tcp4(0x11), VF_OFFLOAD_DECLINE_TCP_FIN_RST},
      {"rst", tcp4(0x04), VF_OFFLOAD_DECLINE_TCP_FIN_RST},
      {"ttl 1", ttl1, VF_OFFLOAD_DECLINE_TTL},
      {"fragment", frag, VF_OFFLOAD_DECLINE_FRAGMENT},
      {"ip options", options, VF_OFFLOAD_DECLINE_IP_OPTIONS},
      {"vlan", tagged, VF_OFFLOAD_DECLINE_VLAN},
  };
  ASSERT_TRUE(table().install(key_of(tcp4()), forward(egress_)));
  ASSERT_TRUE(table().install(key_of(udp4()), forward(egress_)));
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto before = counters();
    Out o = run(c.frame);
    EXPECT_EQ(o.action, XDP_PASS);
    EXPECT_EQ(o.frame, c.frame) << "untouched";
    auto after = counters();
    EXPECT_EQ(after.offload_declined[c.reason] - before.offload_declined[c.reason], 1u);
    EXPECT_EQ(after.verdict[VF_VERDICT_PASS] - before.verdict[VF_VERDICT_PASS], 1u);
    EXPECT_EQ(after.verdict[VF_VERDICT_OFFLOAD], before.verdict[VF_VERDICT_OFFLOAD]);
  }
  EXPECT_EQ(table().read(key_of(udp4()))->value().packets, 0u);
  // An ACK of the same flow is offloaded.
  EXPECT_EQ(run(tcp4()).action, XDP_REDIRECT);
}

TEST_F(SteerOffload, OverTheEgressMtuGoesTheNormalWay) {
  ASSERT_EQ(sh("ip link set o0 mtu 1280"), 0);
  const Bytes fits = udp4(1000, 2000, 1280 - 20 - 8);
  const Bytes over = udp4(1000, 2000, 1281 - 20 - 8);
  ASSERT_TRUE(table().install(key_of(fits), forward(egress_)));
  auto before = counters();
  EXPECT_EQ(run(fits).action, XDP_REDIRECT);
  Out o = run(over);
  EXPECT_EQ(o.action, XDP_PASS);
  EXPECT_EQ(o.frame, over);
  auto after = counters();
  EXPECT_EQ(after.offload_declined[VF_OFFLOAD_DECLINE_MTU] -
                before.offload_declined[VF_OFFLOAD_DECLINE_MTU],
            1u);
  EXPECT_EQ(after.verdict[VF_VERDICT_OFFLOAD] - before.verdict[VF_VERDICT_OFFLOAD], 1u);
}

TEST_F(SteerOffload, CountersLastSeenRemovalAndTheVerdictSum) {
  const Bytes in = udp4();
  const auto key = key_of(in);
  ASSERT_TRUE(table().install(key, forward(egress_)));
  const uint64_t t0 = steer::OffloadTable::now_ns();
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(run(in).action, XDP_REDIRECT);
  auto s = *table().read(key);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->packets, 3u);
  EXPECT_EQ(s->bytes, 3 * in.size());
  // The coarse clock lags the fine one by up to a jiffy (10 ms at HZ=100).
  EXPECT_GE(s->last_seen_ns + 10'000'000, t0);
  EXPECT_LE(s->last_seen_ns, steer::OffloadTable::now_ns());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_EQ(run(in).action, XDP_REDIRECT);
  auto later = *table().read(key);
  EXPECT_GT(later->last_seen_ns, s->last_seen_ns);

  size_t seen = 0;
  ASSERT_TRUE(table().for_each([&](const steer::OffloadEntry& e) {
    ++seen;
    EXPECT_EQ(e.stats.packets, 4u);
    EXPECT_EQ(e.action.egress_ifindex, egress_);
    EXPECT_EQ(e.action.dst_mac, kNextHop);
  }));
  EXPECT_EQ(seen, 1u);

  auto last = *table().remove(key);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->packets, 4u);
  EXPECT_FALSE(*table().remove(key)) << "already gone";
  EXPECT_EQ(run(in).action, XDP_PASS) << "removed: back to the normal path";
  auto c = counters();
  EXPECT_EQ(c.verdict[VF_VERDICT_OFFLOAD], 4u) << "the port keeps the removed entry's count";
  EXPECT_EQ(c.offload_bytes, 4 * in.size());
  EXPECT_EQ(c.rx_packets, verdict_sum(c));
  EXPECT_EQ(table().size(), 0u);
}

TEST_F(SteerOffload, AFullTableRefusesAndClearEmptiesIt) {
  for (uint16_t p = 1; p <= 4; ++p)
    ASSERT_EQ(*table().install(key_of(udp4(p)), forward(egress_)), steer::InstallStatus::Installed);
  EXPECT_EQ(*table().install(key_of(udp4(5)), forward(egress_)), steer::InstallStatus::TableFull);
  EXPECT_EQ(run(udp4(5)).action, XDP_PASS);
  EXPECT_EQ(*table().install(key_of(udp4(4)), forward(kLoopback)), steer::InstallStatus::Replaced);
  EXPECT_EQ(run(udp4(4)).action, XDP_TX);
  ASSERT_TRUE(table().clear());
  EXPECT_EQ(table().size(), 0u);
  EXPECT_EQ(run(udp4(1)).action, XDP_PASS);
  auto c = counters();
  EXPECT_EQ(c.rx_packets, verdict_sum(c));
}

TEST_F(SteerOffload, InstallRefusesWhatTheProgramCannotDo) {
  steer::OffloadAction a = forward(egress_);
  a.snat = steer::NatRewrite{{htonl(0x01020304)}, htons(1)};
  Bytes icmp = FrameBuilder().ipv4(A, B, 1).icmp().build();
  EXPECT_FALSE(table().install(key_of(icmp), a)) << "NAT of ICMP";
  steer::OffloadKey k{};
  k.ifindex = kLoopback;
  EXPECT_FALSE(table().install(k, forward(egress_))) << "not IP";
}

TEST_F(SteerOffload, AClosedGateLiftsTheFlowUntilItsLastLiftedFrameIsSettled) {
  const Bytes in = udp4();
  const auto g = table().take_gate(steer::OffloadTable::now_ns());
  ASSERT_TRUE(g);
  const vf_offload_gate& gate = table().gates()[*g];
  steer::OffloadAction a = forward(egress_);
  a.gate = *g;
  ASSERT_TRUE(table().install(key_of(in), a));

  // Closed: lifted, numbered 0 and 1 (no AF_XDP socket here: they fall back to the normal path).
  auto before = counters();
  EXPECT_EQ(run(in).action, XDP_PASS) << "gate closed: not forwarded";
  EXPECT_EQ(run(in).action, XDP_PASS);
  auto after = counters();
  EXPECT_EQ(after.offload_declined[VF_OFFLOAD_DECLINE_GATED] -
                before.offload_declined[VF_OFFLOAD_DECLINE_GATED],
            2u);
  EXPECT_EQ(gate.lifted, 2u);
  EXPECT_FALSE(table().gate_open(*g));

  // The worker that sends a lifted frame settles it; only the last one lifted opens the gate.
  auto feed = OffloadFeed::create(1, 1);
  ASSERT_TRUE(feed);
  (*feed)->set_gates(0, table().gates());
  (*feed)->settle(0, *g, 0);
  EXPECT_FALSE(table().gate_open(*g)) << "frame 1 may still be in user space";
  (*feed)->settle(0, *g, 1);
  EXPECT_TRUE(table().gate_open(*g));
  EXPECT_EQ(run(in).action, XDP_REDIRECT) << "open: forwarded in XDP";
  EXPECT_EQ(counters().offload_declined[VF_OFFLOAD_DECLINE_GATED],
            after.offload_declined[VF_OFFLOAD_DECLINE_GATED]);

  // The control plane opens a quiet gate only if nothing was lifted since it looked.
  const Bytes other = udp4(1001);
  const auto g2 = table().take_gate(steer::OffloadTable::now_ns());
  ASSERT_TRUE(g2);
  a.gate = *g2;
  ASSERT_TRUE(table().install(key_of(other), a));
  const uint64_t seen = table().gate_lifted(*g2);
  EXPECT_EQ(run(other).action, XDP_PASS);
  EXPECT_FALSE(table().open_gate(*g2, seen)) << "a frame was lifted since";
  EXPECT_TRUE(table().open_gate(*g2, table().gate_lifted(*g2)));
  EXPECT_EQ(run(other).action, XDP_REDIRECT);
  auto c = counters();
  EXPECT_EQ(c.rx_packets, verdict_sum(c));
}

}  // namespace
