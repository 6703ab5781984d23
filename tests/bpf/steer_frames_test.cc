// The steering program on crafted frames, as a table: each case is a frame from the builder
// and the verdict it must get (XDP action, which counter moves, the metadata written). Every
// frame also goes through the user-space wrapper of the same parser, which must agree.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/parse.h"
#include "harness.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// What a frame must come to. `rule` -1: the default; `malformed`: the parse error.
struct Expect {
  int xdp_action;
  std::optional<DropReason> malformed;
  int rule = -1;
  // For frames lifted to user space: the metadata the program writes.
  uint8_t l2_len = 0;
  uint16_t l3_len = 0;
  uint8_t ip_version = 0;
  uint8_t l4_proto = 0;
  uint8_t flags = 0;
};

struct Case {
  std::string name;
  Bytes frame;
  Expect expect;
};

constexpr int kPass = XDP_PASS, kDrop = XDP_DROP, kTx = XDP_TX, kLift = XDP_REDIRECT;

Expect bad(DropReason r) {
  return {kDrop, r};
}
Expect lifted(uint8_t l2, uint16_t l3, uint8_t ipv, uint8_t proto, uint8_t flags = 0,
              int rule = -1) {
  return {kLift, std::nullopt, rule, l2, l3, ipv, proto, flags};
}

// The rules the table runs against.
config::SteeringSection table_rules() {
  auto prefix = [](const char* t) { return *parse_ip_prefix(t); };
  config::SteeringSection s;
  s.default_action = {config::SteerActionKind::Userspace, {}};
  s.malformed = {config::SteerActionKind::Drop, {}};
  s.no_socket = {config::SteerActionKind::Pass, {}};
  auto add = [&](std::string name, config::SteerMatch m, config::SteerActionKind a,
                 uint32_t prio = 0) {
    config::SteerRule r;
    r.name = std::move(name);
    r.match = std::move(m);
    r.action = {a, {}};
    r.priority = prio;
    s.rules.push_back(std::move(r));
  };
  config::SteerMatch m;
  m.l3 = config::L3Proto::Arp;
  add("arp", m, config::SteerActionKind::Pass);  // rule 0
  m = {};
  m.l4_proto = 6;
  m.dst_port = config::PortRange{22, 22};
  add("ssh", m, config::SteerActionKind::Pass);  // rule 1
  m = {};
  m.src = prefix("203.0.113.0/24");
  add("block", m, config::SteerActionKind::Drop);  // rule 2
  m = {};
  m.l3 = config::L3Proto::Ipv6;
  m.l4_proto = 17;
  m.dst_port = config::PortRange{5000, 5999};
  add("v6-udp-range", m, config::SteerActionKind::Tx);  // rule 3
  m = {};
  m.vlan = 100;
  add("vlan100", m, config::SteerActionKind::Drop, 5);  // rule 4: beats every other rule
  m = {};
  m.l4_proto = 17;
  m.dst_port = config::PortRange{4789, 4789};
  add("vxlan", m, config::SteerActionKind::Userspace);  // rule 5
  return s;
}

const auto A = ip4(192, 0, 2, 2), B = ip4(192, 0, 2, 1), BLOCKED = ip4(203, 0, 113, 9);
const auto A6 = ip6("2001:db8:1::2"), B6 = ip6("2001:db8:1::1");

// Every case of the table.
std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, Bytes f, Expect e) {
    c.push_back({std::move(name), std::move(f), e});
  };
  using D = DropReason;

  // ---- well-formed ----
  auto v4tcp = FrameBuilder().ipv4(A, B, 6).tcp(40000, 80).payload(10);
  add("ipv4 tcp", v4tcp.build(), lifted(14, 20, 4, 6));
  add("ipv4 tcp ssh -> pass", FrameBuilder().ipv4(A, B, 6).tcp(40000, 22).build(), {kPass, {}, 1});
  add("ipv4 blocked source -> drop", FrameBuilder().ipv4(BLOCKED, B, 17).udp(1, 2).build(),
      {kDrop, {}, 2});
  add("ipv4 udp vxlan -> userspace rule", FrameBuilder().ipv4(A, B, 17).udp(999, 4789).build(),
      lifted(14, 20, 4, 17, 0, 5));
  add("ipv4 options", FrameBuilder().ipv4(A, B, 17, 12).udp(1, 2).build(), lifted(14, 32, 4, 17));
  add("ipv4 max options (IHL 15)", FrameBuilder().ipv4(A, B, 6, 40).tcp(1, 2).build(),
      lifted(14, 60, 4, 6));
  add("ipv4 icmp", FrameBuilder().ipv4(A, B, 1).icmp().build(), lifted(14, 20, 4, 1));
  add("ipv4 sctp", FrameBuilder().ipv4(A, B, 132).sctp(1, 2).build(), lifted(14, 20, 4, 132));
  add("ipv4 gre (no ports)", FrameBuilder().ipv4(A, B, 47).payload(8).build(),
      lifted(14, 20, 4, 47));
  add("ipv4 first fragment", FrameBuilder().ipv4(A, B, 6, 0, 0x2000).tcp(1, 22).build(),
      {kPass, {}, 1});
  add("ipv4 first fragment, udp length of the whole datagram: its port rule matches",
      FrameBuilder()
          .ipv4(A, B, 17)
          .fragment4(9, 0, true)
          .udp(999, 4789)
          .udp_length(3008)
          .payload(1472)
          .build(),
      lifted(14, 20, 4, 17, VF_META_FRAGMENT, 5));
  add("ipv4 later fragment: no L4, port rule does not match",
      FrameBuilder().ipv4(A, B, 6, 0, 0x0010).payload(20).build(),
      lifted(14, 20, 4, 6, VF_META_FRAGMENT | VF_META_LATER_FRAG));
  add("ipv4 later fragment with garbage where TCP would be",
      FrameBuilder().ipv4(A, B, 6, 0, 0x2008).payload(3).build(),
      lifted(14, 20, 4, 6, VF_META_FRAGMENT | VF_META_LATER_FRAG));
  add("ipv4 blocked later fragment -> drop",
      FrameBuilder().ipv4(BLOCKED, B, 17, 0, 0x0001).payload(8).build(), {kDrop, {}, 2});
  add("ipv4 total length below the frame (padding)",
      FrameBuilder().ipv4(A, B, 17).udp(1, 2).payload(1).build(), lifted(14, 20, 4, 17));
  add("minimum frame (60 bytes)", FrameBuilder().ipv4(A, B, 17).udp(1, 2).build(),
      lifted(14, 20, 4, 17));
  add("largest single-buffer frame (3500 bytes)",
      FrameBuilder().ipv4(A, B, 17).udp(1, 2).payload(3500 - 42).build(), lifted(14, 20, 4, 17));
  add("ipv6 tcp", FrameBuilder().ipv6(A6, B6, 6).tcp(1, 443).build(), lifted(14, 40, 6, 6));
  add("ipv6 tcp ssh -> pass", FrameBuilder().ipv6(A6, B6, 6).tcp(1, 22).build(), {kPass, {}, 1});
  add("ipv6 udp in range -> tx", FrameBuilder().ipv6(A6, B6, 17).udp(1, 5500).build(),
      {kTx, {}, 3});
  add("ipv6 udp range edge 5999 -> tx", FrameBuilder().ipv6(A6, B6, 17).udp(1, 5999).build(),
      {kTx, {}, 3});
  add("ipv6 udp out of range 6000", FrameBuilder().ipv6(A6, B6, 17).udp(1, 6000).build(),
      lifted(14, 40, 6, 17));
  add("ipv4 udp in v6-only range", FrameBuilder().ipv4(A, B, 17).udp(1, 5500).build(),
      lifted(14, 20, 4, 17));
  add("ipv6 icmpv6", FrameBuilder().ipv6(A6, B6, 58).icmp(128).build(), lifted(14, 40, 6, 58));
  add("ipv6 hop-by-hop + dstopts + routing",
      FrameBuilder()
          .ipv6(A6, B6, 0)
          .ext6(0, 60)
          .ext6(60, 43, 16)
          .ext6(43, 17, 24)
          .udp(1, 5001)
          .build(),
      {kTx, {}, 3});
  add("ipv6 AH", FrameBuilder().ipv6(A6, B6, 51).ext6(51, 6, 16).tcp(1, 22).build(),
      {kPass, {}, 1});
  add("ipv6 first fragment",
      FrameBuilder().ipv6(A6, B6, 44).ext6(44, 17, 8, 0).udp(1, 5002).build(), {kTx, {}, 3});
  add("ipv6 first fragment, udp length of the whole datagram",
      FrameBuilder()
          .ipv6(A6, B6, 44)
          .fragment6(17, 9, 0, true)
          .udp(1, 5002)
          .udp_length(3008)
          .payload(1440)
          .build(),
      {kTx, {}, 3});
  add("ipv6 later fragment", FrameBuilder().ipv6(A6, B6, 44).ext6(44, 17, 8, 50).payload(8).build(),
      lifted(14, 48, 6, 17, VF_META_FRAGMENT | VF_META_LATER_FRAG));
  {
    auto f = FrameBuilder().ipv6(A6, B6, 0);
    for (int i = 0; i < VF_MAX_IPV6_EXT - 1; ++i)
      f.ext6(i == 0 ? 0 : 60, 60);
    f.ext6(60, 6).tcp(1, 2);
    add("ipv6 extension chain at the bound", f.build(), lifted(14, 40 + 8 * VF_MAX_IPV6_EXT, 6, 6));
    auto g = FrameBuilder().ipv6(A6, B6, 0);
    for (int i = 0; i < VF_MAX_IPV6_EXT; ++i)
      g.ext6(i == 0 ? 0 : 60, 60);
    g.ext6(60, 6).tcp(1, 2);
    add("ipv6 extension chain beyond the bound", g.build(), bad(D::IPV6_EXT_TOO_LONG));
  }
  add("vlan 802.1Q", FrameBuilder().vlan(7).ipv4(A, B, 6).tcp(1, 80).build(),
      lifted(18, 20, 4, 6, VF_META_VLAN));
  add("vlan 100 -> drop by priority", FrameBuilder().vlan(100).ipv4(A, B, 6).tcp(1, 22).build(),
      {kDrop, {}, 4});
  add("vlan 100 with priority bits", FrameBuilder().vlan(0xe064).arp().build(), {kDrop, {}, 4});
  add("QinQ 802.1ad + 802.1Q",
      FrameBuilder().vlan(7, 0x88a8).vlan(8).ipv6(A6, B6, 6).tcp(1, 2).build(),
      lifted(22, 40, 6, 6, VF_META_VLAN));
  add("QinQ outer vlan 100 -> drop", FrameBuilder().vlan(100, 0x88a8).vlan(8).arp().build(),
      {kDrop, {}, 4});
  add("three VLAN tags",
      FrameBuilder().vlan(1, 0x88a8).vlan(2).vlan(3).ipv4(A, B, 6).tcp(1, 2).build(),
      bad(D::VLAN_TOO_DEEP));
  add("arp -> pass", FrameBuilder().arp().build(), {kPass, {}, 0});
  add("arp in a vlan -> pass", FrameBuilder().vlan(5).arp().build(), {kPass, {}, 0});
  add("non-IP ethertype (LLDP)", FrameBuilder().ethertype(0x88cc).payload(30).build(),
      lifted(14, 0, 0, 0));
  add("ethernet header only", FrameBuilder().ethertype(0x88b5).build(14), lifted(14, 0, 0, 0));

  // ---- malformed: every header cut at its boundaries ----
  add("cut inside the first vlan tag", FrameBuilder().vlan(7).ipv4(A, B, 6).build(16),
      bad(D::VLAN_TRUNCATED));
  add("cut at the end of the vlan tag's TPID", FrameBuilder().vlan(7).ipv4(A, B, 6).build(14),
      bad(D::VLAN_TRUNCATED));
  add("cut inside the second vlan tag",
      FrameBuilder().vlan(7, 0x88a8).vlan(8).ipv4(A, B, 6).build(20), bad(D::VLAN_TRUNCATED));
  for (size_t cut : {14, 15, 21, 33}) {
    add(fmt::format("ipv4 cut at {}", cut), v4tcp.build(cut), bad(D::IPV4_TRUNCATED));
  }
  for (size_t cut : {34, 40, 53, 54}) {
    add(fmt::format("ipv4 frame cut at {} (total length past the frame)", cut), v4tcp.build(cut),
        bad(D::IPV4_BAD_LEN));
  }
  for (size_t cut : {14, 30, 53}) {
    add(fmt::format("ipv6 cut at {}", cut), FrameBuilder().ipv6(A6, B6, 6).tcp(1, 2).build(cut),
        bad(D::IPV6_TRUNCATED));
  }
  add("ipv6 frame cut in tcp (payload length past the frame)",
      FrameBuilder().ipv6(A6, B6, 6).tcp(1, 2).build(60), bad(D::IPV6_BAD_LEN));
  add("arp cut in fixed header", FrameBuilder().arp().build(20), bad(D::ARP_TRUNCATED));
  add("arp cut in addresses", FrameBuilder().arp().build(40), bad(D::ARP_TRUNCATED));
  {
    auto f = v4tcp.build();
    f[14] = 0x44;
    add("ipv4 IHL 4", f, bad(D::IPV4_BAD_IHL));
    f[14] = 0x40;
    add("ipv4 IHL 0", f, bad(D::IPV4_BAD_IHL));
    auto g = FrameBuilder().ipv4(A, B, 253).build(60);
    g[14] = 0x4f;  // 60-byte header in a 46-byte IP payload area
    add("ipv4 IHL past the frame", g, bad(D::IPV4_BAD_IHL));
    auto h = v4tcp.build();
    FrameBuilder::set16(h, 16, 19);
    add("ipv4 total length below the header", h, bad(D::IPV4_BAD_LEN));
    FrameBuilder::set16(h, 16, uint16_t(h.size()));
    add("ipv4 total length one past the frame", h, bad(D::IPV4_BAD_LEN));
    auto v = v4tcp.build();
    v[14] = 0x65;
    add("ipv4 ethertype, version 6", v, bad(D::IPV4_BAD_VERSION));
    auto w = FrameBuilder().ipv6(A6, B6, 6).tcp(1, 2).build();
    w[14] = 0x40;
    add("ipv6 ethertype, version 4", w, bad(D::IPV6_BAD_VERSION));
  }
  // L4 headers cut with consistent IP lengths.
  add("tcp header cut at 10 bytes", FrameBuilder().ipv4(A, B, 6).payload(10).build(),
      bad(D::TCP_TRUNCATED));
  add("tcp header cut at 19 bytes (ipv6)", FrameBuilder().ipv6(A6, B6, 6).payload(19).build(),
      bad(D::TCP_TRUNCATED));
  {
    auto t = FrameBuilder().ipv4(A, B, 6).tcp(1, 2);
    auto f = t.build();
    f[t.l4() + 12] = 0x40;
    add("tcp data offset 4", f, bad(D::TCP_BAD_DOFF));
    f[t.l4() + 12] = 0xf0;
    add("tcp data offset past the segment", f, bad(D::TCP_BAD_DOFF));
    add("tcp options", FrameBuilder().ipv4(A, B, 6).tcp(1, 2, 12).build(), lifted(14, 20, 4, 6));
  }
  add("udp header cut at 7 bytes", FrameBuilder().ipv4(A, B, 17).payload(7).build(),
      bad(D::UDP_TRUNCATED));
  {
    auto u = FrameBuilder().ipv4(A, B, 17).udp(1, 2).payload(4);
    auto f = u.build();
    FrameBuilder::set16(f, u.l4() + 4, 7);
    add("udp length 7", f, bad(D::UDP_BAD_LEN));
    FrameBuilder::set16(f, u.l4() + 4, 13);
    add("udp length past the ip payload", f, bad(D::UDP_BAD_LEN));
    FrameBuilder::set16(f, u.l4() + 4, 11);
    add("udp length below the ip payload", f, lifted(14, 20, 4, 17));
  }
  add("sctp header cut", FrameBuilder().ipv4(A, B, 132).payload(11).build(),
      bad(D::SCTP_TRUNCATED));
  add("icmp header cut", FrameBuilder().ipv4(A, B, 1).payload(7).build(), bad(D::ICMP_TRUNCATED));
  add("icmpv6 header cut", FrameBuilder().ipv6(A6, B6, 58).payload(3).build(),
      bad(D::ICMP_TRUNCATED));
  add("ipv6 hop-by-hop cut at its length byte", FrameBuilder().ipv6(A6, B6, 0).payload(1).build(),
      bad(D::IPV6_EXT_TRUNCATED));
  {
    auto f = FrameBuilder().ipv6(A6, B6, 0).ext6(0, 6, 8).payload(8).build();
    f[14 + 40 + 1] = 3;  // claims 32 bytes, 16 present
    add("ipv6 hop-by-hop longer than the packet", f, bad(D::IPV6_EXT_TRUNCATED));
  }
  add("ipv6 fragment header cut", FrameBuilder().ipv6(A6, B6, 44).payload(6).build(),
      bad(D::IPV6_EXT_TRUNCATED));
  add("ipv6 AH cut", FrameBuilder().ipv6(A6, B6, 51).payload(1).build(),
      bad(D::IPV6_EXT_TRUNCATED));
  return c;
}

std::string describe(const RunResult& r, const steer::SteerCounters& before,
                     const steer::SteerCounters& after) {
  std::string s = fmt::format("xdp action {}", r.xdp_action);
  for (size_t i = 0; i < kDropReasonCount; ++i)
    if (after.malformed[i] != before.malformed[i])
      s += fmt::format(", malformed {}", drop_reason_name(DropReason(i)));
  for (size_t i = 0; i < after.rules.size(); ++i)
    if (after.rules[i].packets != before.rules[i].packets) s += fmt::format(", rule {}", i);
  if (after.default_hits != before.default_hits) s += ", default";
  if (r.meta_size)
    s += fmt::format(", meta l2 {} l3 {} ipv{} proto {} flags {:#x} rule {:#x}", r.meta.l2_len,
                     r.meta.l3_len, r.meta.ip_version, r.meta.l4_proto, r.meta.flags,
                     r.meta.rule_id);
  return s;
}

}  // namespace

TEST(SteerFrames, TableOfCraftedFrames) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  ASSERT_TRUE(h.install(table_rules()));
  LoopbackXsk xsk(unique_name("vst"));
  ASSERT_TRUE(xsk.ok()) << "cannot bind an AF_XDP socket for the userspace path";
  uint32_t q0 = 0;
  int xfd = xsk.fd();
  ASSERT_EQ(bpf_map_update_elem(h.program().xsks_map_fd(), &q0, &xfd, BPF_ANY), 0);

  auto table = cases();
  EXPECT_GE(table.size(), 50u);
  size_t malformed_cases = 0;
  for (const auto& c : table) {
    SCOPED_TRACE(c.name);
    const auto& e = c.expect;
    auto before = *h.program().counters();
    auto r = h.run(c.frame);
    auto after = *h.program().counters();
    auto got = describe(r, before, after);

    EXPECT_EQ(r.xdp_action, e.xdp_action) << "got: " << got;
    EXPECT_EQ(after.rx_packets - before.rx_packets, 1u);
    uint64_t verdicts = 0;
    for (size_t i = 0; i < VF_VERDICT_COUNT; ++i)
      verdicts += after.verdict[i] - before.verdict[i];
    EXPECT_EQ(verdicts, 1u) << "exactly one verdict per frame";

    // The user-space parser agrees with the program.
    ParsedFrame p;
    auto user = parse_frame(c.frame, p);
    EXPECT_EQ(user, e.malformed) << "user-space parser";

    if (e.malformed) {
      ++malformed_cases;
      size_t i = size_t(*e.malformed);
      EXPECT_EQ(after.malformed[i] - before.malformed[i], 1u) << "got: " << got;
      EXPECT_EQ(after.drop[i] - before.drop[i], 1u) << "got: " << got;
      continue;
    }
    if (e.rule >= 0) {
      EXPECT_EQ(after.rules[e.rule].packets - before.rules[e.rule].packets, 1u) << "got: " << got;
      EXPECT_EQ(after.rules[e.rule].bytes - before.rules[e.rule].bytes, c.frame.size());
    } else {
      EXPECT_EQ(after.default_hits - before.default_hits, 1u) << "got: " << got;
    }
    if (e.xdp_action == kDrop) {
      EXPECT_EQ(
          after.drop[size_t(DropReason::STEER_RULE)] - before.drop[size_t(DropReason::STEER_RULE)],
          1u);
    }
    if (e.xdp_action == kLift && !steer::kernel_allows_xdp_metadata()) {
      // A kernel without XDP metadata: lifted bare, and counted so.
      EXPECT_EQ(r.meta_size, 0u) << "got: " << got;
      EXPECT_EQ(after.meta_unavailable - before.meta_unavailable, 1u) << "got: " << got;
    } else if (e.xdp_action == kLift) {
      ASSERT_EQ(r.meta_size, sizeof(vf_xdp_meta)) << "got: " << got;
      EXPECT_EQ(r.meta.magic, VF_XDP_META_MAGIC);
      EXPECT_EQ(r.meta.l2_len, e.l2_len) << "got: " << got;
      EXPECT_EQ(r.meta.l3_len, e.l3_len) << "got: " << got;
      EXPECT_EQ(r.meta.ip_version, e.ip_version) << "got: " << got;
      EXPECT_EQ(r.meta.l4_proto, e.l4_proto) << "got: " << got;
      EXPECT_EQ(r.meta.flags, e.flags) << "got: " << got;
      EXPECT_EQ(r.meta.rule_id, e.rule >= 0 ? uint32_t(e.rule) : VF_NO_RULE) << "got: " << got;
      EXPECT_EQ(r.meta.flow_hash, vf_flow_hash(&p.key, 1)) << "same hash as user space";
      EXPECT_EQ(r.meta.l2_len, p.l2_len);
      EXPECT_EQ(r.meta.l3_len, p.l3_len);
    }
  }
  EXPECT_GE(malformed_cases, 25u);
}

TEST(SteerFrames, UserspaceWithoutSocketFallsBackAndCounts) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  auto rules = table_rules();
  ASSERT_TRUE(h.install(rules));
  auto frame = FrameBuilder().ipv4(A, B, 6).tcp(1, 80).build();
  auto r = h.run(frame);
  EXPECT_EQ(r.xdp_action, kPass) << "no_socket: pass";
  EXPECT_EQ(r.meta_size, 0u) << "no metadata in front of a frame the kernel gets";
  rules.no_socket = {config::SteerActionKind::Drop, {}};
  ASSERT_TRUE(h.install(rules));
  EXPECT_EQ(h.run(frame).xdp_action, kDrop);
  auto c = *h.program().counters();
  EXPECT_EQ(c.no_socket_fallback, 2u);
  EXPECT_EQ(c.drop[size_t(DropReason::NO_XSK)], 1u);
  EXPECT_EQ(c.action[VF_ACT_USERSPACE], 2u);
  EXPECT_EQ(c.verdict[VF_VERDICT_PASS], 1u);
  EXPECT_EQ(c.verdict[VF_VERDICT_DROP], 1u);
}

// A frame for user space on an rx queue the port does not read meets other_queues, counted
// as queue_not_read (and under that drop reason when dropped), not no_socket; frames that
// steering keeps in XDP are not affected.
TEST(SteerFrames, UserspaceOnAQueueNotReadMeetsOtherQueues) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  auto rules = table_rules();
  rules.no_socket = {config::SteerActionKind::Drop, {}};
  steer::RxQueuePlan plan;
  plan.read = 0b10;  // queue 1 only: the frames of the test run arrive on queue 0
  plan.other = config::SteerActionKind::Pass;
  ASSERT_TRUE(h.install(rules, plan));
  auto frame = FrameBuilder().ipv4(A, B, 6).tcp(1, 80).build();
  EXPECT_EQ(h.run(frame).xdp_action, kPass) << "other_queues: pass";
  plan.other = config::SteerActionKind::Drop;
  ASSERT_TRUE(h.install(rules, plan));
  EXPECT_EQ(h.run(frame).xdp_action, kDrop) << "other_queues: drop";
  // A rule that keeps the frame in XDP applies whatever the queue.
  EXPECT_EQ(h.run(FrameBuilder().ipv4(A, B, 6).tcp(1, 22).build()).xdp_action, kPass);
  auto c = *h.program().counters();
  EXPECT_EQ(c.queue_not_read, 2u);
  EXPECT_EQ(c.no_socket_fallback, 0u);
  EXPECT_EQ(c.drop[size_t(DropReason::QUEUE_NOT_READ)], 1u);
  EXPECT_EQ(c.drop[size_t(DropReason::NO_XSK)], 0u);
  EXPECT_EQ(c.verdict[VF_VERDICT_PASS], 2u);
  EXPECT_EQ(c.verdict[VF_VERDICT_DROP], 1u);
}

TEST(SteerFrames, MalformedPassWhenConfigured) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  auto rules = table_rules();
  rules.malformed = {config::SteerActionKind::Pass, {}};
  ASSERT_TRUE(h.install(rules));
  auto frame = FrameBuilder().ipv4(A, B, 6).payload(5).build();
  EXPECT_EQ(h.run(frame).xdp_action, kPass);
  auto c = *h.program().counters();
  EXPECT_EQ(c.malformed[size_t(DropReason::TCP_TRUNCATED)], 1u);
  EXPECT_EQ(c.drop[size_t(DropReason::TCP_TRUNCATED)], 0u);
  EXPECT_EQ(c.verdict[VF_VERDICT_PASS], 1u);
}

TEST(SteerFrames, UnconfiguredProgramPassesEverything) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  EXPECT_EQ(h.run(FrameBuilder().ipv4(A, B, 6).tcp(1, 2).build()).xdp_action, kPass);
  auto c = *h.program().counters();
  EXPECT_EQ(c.unconfigured, 1u);
  EXPECT_EQ(c.verdict[VF_VERDICT_PASS], 1u);
}

// A frame a `tx` or `redirect` rule would send out of an interface whose MTU it exceeds is
// lifted to user space instead (which answers or fragments it): sent in XDP, the kernel would
// drop it after the program returned, uncounted. The test runs in a namespace of its own whose
// loopback (the interface frames arrive on under BPF_PROG_TEST_RUN, and the redirect target
// here) is set to an MTU of 1280.
TEST(SteerFrames, TxAndRedirectOverTheTargetMtuAreLiftedInstead) {
  VECFLOW_REQUIRE_NETNS();
  SteerHarness h;
  ASSERT_TRUE(h.ok()) << h.error();
  auto rules = table_rules();
  config::SteerRule redirect;
  redirect.name = "to-lo";
  redirect.match.l4_proto = 17;
  redirect.match.dst_port = config::PortRange{7000, 7000};
  redirect.action = {config::SteerActionKind::Redirect, "lo"};
  rules.rules.push_back(redirect);  // rule 6
  ASSERT_TRUE(h.install(rules));
  const std::string ns = unique_name("vsm");
  LoopbackXsk xsk(ns);
  ASSERT_TRUE(xsk.ok()) << "cannot bind an AF_XDP socket for the userspace path";
  uint32_t q0 = 0;
  int xfd = xsk.fd();
  ASSERT_EQ(bpf_map_update_elem(h.program().xsks_map_fd(), &q0, &xfd, BPF_ANY), 0);
  ASSERT_EQ(sh("ip netns exec " + ns + " ip link set lo mtu 1280"), 0);
  NetnsScope in(ns);
  ASSERT_TRUE(in.ok());

  // IPv6 UDP to 5500 (rule 3, tx) and IPv4 UDP to 7000 (rule 6, redirect), with IP packets of
  // 1280 and 1281 bytes.
  auto v6 = [](uint32_t l3) {
    return FrameBuilder().ipv6(A6, B6, 17).udp(1, 5500).payload(l3 - 40 - 8).build();
  };
  auto v4 = [](uint32_t l3) {
    return FrameBuilder().ipv4(A, B, 17).udp(1, 7000).payload(l3 - 20 - 8).build();
  };
  auto before = *h.program().counters();
  EXPECT_EQ(h.run(v6(1280)).xdp_action, kTx);
  auto lifted_tx = h.run(v6(1281));
  EXPECT_EQ(lifted_tx.xdp_action, kLift);
  // Lifted with its metadata, where the kernel lets the program write it.
  const bool meta = steer::kernel_allows_xdp_metadata();
  EXPECT_EQ(lifted_tx.meta_size, meta ? sizeof(vf_xdp_meta) : 0u);
  if (meta) {
    EXPECT_EQ(lifted_tx.meta.rule_id, 3u);
  }
  auto redirected = h.run(v4(1280));
  EXPECT_EQ(redirected.xdp_action, XDP_REDIRECT);
  EXPECT_EQ(redirected.meta_size, 0u) << "redirected, not lifted";
  auto lifted_redirect = h.run(v4(1281));
  EXPECT_EQ(lifted_redirect.xdp_action, kLift);
  EXPECT_EQ(lifted_redirect.meta_size, meta ? sizeof(vf_xdp_meta) : 0u);
  if (meta) {
    EXPECT_EQ(lifted_redirect.meta.rule_id, 6u);
  }
  auto after = *h.program().counters();
  EXPECT_EQ(after.mtu_lifted - before.mtu_lifted, 2u);
  EXPECT_EQ(after.verdict[VF_VERDICT_TX] - before.verdict[VF_VERDICT_TX], 1u);
  EXPECT_EQ(after.verdict[VF_VERDICT_REDIRECT] - before.verdict[VF_VERDICT_REDIRECT], 1u);
  EXPECT_EQ(after.verdict[VF_VERDICT_USERSPACE] - before.verdict[VF_VERDICT_USERSPACE], 2u);
}
