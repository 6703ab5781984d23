// The user-space wrapper of the shared parser. The table of malformed and edge-case frames
// runs in tests/bpf, through both the XDP program and this wrapper, and checks they agree.
#include <gtest/gtest.h>

#include "core/flow.h"
#include "core/packet.h"
#include "core/parse.h"
#include "support/eal_env.h"
#include "support/frame_builder.h"

using namespace vecflow;
using vecflow::test::Bytes;
using vecflow::test::FrameBuilder;
using vecflow::test::ip4;
using vecflow::test::ip6;

TEST(Parse, Ipv4TcpWithOptionsAndPadding) {
  auto f =
      FrameBuilder().vlan(100).ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 6, 8).tcp(1234, 80).build();
  ParsedFrame p;
  EXPECT_EQ(parse_frame(f, p), std::nullopt);
  EXPECT_EQ(p.l2_len, 18);
  EXPECT_EQ(p.l3_len, 28);
  EXPECT_EQ(p.l4_len, 20);
  EXPECT_EQ(p.vlan_tci, 100);
  EXPECT_EQ(p.key.ip_version, 4);
  EXPECT_EQ(p.key.l4_proto, 6);
  EXPECT_EQ(ntohs(p.key.src_port), 1234);
  EXPECT_EQ(ntohs(p.key.dst_port), 80);
  EXPECT_EQ(ntohl(p.key.src[0]), 0x0a000001u);
  EXPECT_EQ(packet_type_of(p), RTE_PTYPE_L2_ETHER_VLAN | RTE_PTYPE_L3_IPV4_EXT | RTE_PTYPE_L4_TCP);
}

TEST(Parse, Ipv6ExtensionChainAndLaterFragment) {
  auto f = FrameBuilder()
               .ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), 0)
               .ext6(0, 44)
               .ext6(44, 17, 8, 100)
               .payload(16)
               .build();
  ParsedFrame p;
  EXPECT_EQ(parse_frame(f, p), std::nullopt);
  EXPECT_EQ(p.l3_len, 56);
  EXPECT_EQ(p.key.l4_proto, 17);
  EXPECT_EQ(p.key.src_port, 0) << "a later fragment has no L4 header";
  EXPECT_TRUE(p.flags & VF_PARSED_LATER_FRAG);
  EXPECT_EQ(packet_type_of(p), RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV6_EXT | RTE_PTYPE_L4_FRAG);
}

TEST(Parse, ReportsTheHeaderAtFault) {
  auto ok = FrameBuilder().ipv4(ip4(1, 2, 3, 4), ip4(5, 6, 7, 8), 17).udp(1, 2).payload(4);
  ParsedFrame p;
  auto f = ok.build();
  f[ok.l3()] = 0x44;  // IHL 4
  EXPECT_EQ(parse_frame(f, p), DropReason::IPV4_BAD_IHL);
  f = ok.build();
  FrameBuilder::set16(f, ok.l4() + 4, 200);  // UDP length past the IP payload
  EXPECT_EQ(parse_frame(f, p), DropReason::UDP_BAD_LEN);
  EXPECT_EQ(parse_frame(ok.build(ok.l4() + 3), p), DropReason::IPV4_BAD_LEN);
  EXPECT_EQ(parse_frame(ok.build(10), p), DropReason::L2_TRUNCATED);
  EXPECT_EQ(parse_frame({}, p), DropReason::L2_TRUNCATED) << "an empty span without a buffer";
}

// A first fragment holds the L4 header, but its UDP length counts the whole datagram, which
// the fragment's IP length does not cover: the header is read (ports, flow id) and the length
// is held against the packet only when there are no fragments.
TEST(Parse, FirstFragmentIsReadOnItsPortsWhateverItsUdpLength) {
  const auto a4 = ip4(192, 0, 2, 1), b4 = ip4(198, 51, 100, 7);
  const auto a6 = ip6("2001:db8::1"), b6 = ip6("2001:db8::2");
  struct Case {
    const char* what;
    Bytes frame;
    uint8_t proto;
    uint16_t l3_len;
    uint16_t l4_len;
    uint16_t sport;
  };
  const std::vector<Case> cases = {
      {"ipv4 udp",
       FrameBuilder()
           .ipv4(a4, b4, 17)
           .fragment4(7, 0, true)
           .udp(5000, 53)
           .udp_length(3008)
           .payload(1472)
           .build(),
       17, 20, 8, 5000},
      {"ipv4 tcp", FrameBuilder().ipv4(a4, b4, 6).fragment4(8, 0, true).tcp(40000, 443).build(), 6,
       20, 20, 40000},
      {"ipv4 icmp", FrameBuilder().ipv4(a4, b4, 1).fragment4(9, 0, true).icmp().payload(64).build(),
       1, 20, 8, 0},
      {"ipv6 udp",
       FrameBuilder()
           .ipv6(a6, b6, 44)
           .fragment6(17, 7, 0, true)
           .udp(5000, 53)
           .udp_length(3008)
           .payload(1440)
           .build(),
       17, 48, 8, 5000},
      {"ipv6 tcp", FrameBuilder().ipv6(a6, b6, 44).fragment6(6, 8, 0, true).tcp(40000, 443).build(),
       6, 48, 20, 40000},
      {"ipv6 icmpv6",
       FrameBuilder().ipv6(a6, b6, 44).fragment6(58, 9, 0, true).icmp(128).payload(64).build(), 58,
       48, 8, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    ParsedFrame p;
    ASSERT_EQ(parse_frame(c.frame, p), std::nullopt);
    EXPECT_EQ(p.key.l4_proto, c.proto);
    EXPECT_EQ(p.l3_len, c.l3_len);
    EXPECT_EQ(p.l4_len, c.l4_len);
    EXPECT_EQ(ntohs(p.key.src_port), c.sport);
    EXPECT_EQ(p.flags & (VF_PARSED_FRAGMENT | VF_PARSED_LATER_FRAG), VF_PARSED_FRAGMENT);
    EXPECT_EQ(packet_type_of(p) & RTE_PTYPE_L4_MASK, RTE_PTYPE_L4_FRAG);
    RxFields common;
    EXPECT_FALSE(classify_common(c.frame.data(), uint32_t(c.frame.size()), true, true, common))
        << "fragments are the full parse's";
  }

  // The same UDP length in a packet that is not a fragment lies about the payload.
  auto whole = FrameBuilder().ipv4(a4, b4, 17).udp(5000, 53).udp_length(3008).payload(1472);
  ParsedFrame p;
  EXPECT_EQ(parse_frame(whole.build(), p), DropReason::UDP_BAD_LEN);
  // Below its own header a UDP length is wrong in any fragment.
  auto short_len =
      FrameBuilder().ipv4(a4, b4, 17).fragment4(7, 0, true).udp(5000, 53).udp_length(7);
  EXPECT_EQ(parse_frame(short_len.build(), p), DropReason::UDP_BAD_LEN);
  // The header itself must still be whole in the first fragment (RFC 1858, RFC 8200 §4.5).
  auto cut = FrameBuilder().ipv4(a4, b4, 17).fragment4(7, 0, true).payload(4);
  EXPECT_EQ(parse_frame(cut.build(), p), DropReason::UDP_TRUNCATED);
}

// A later fragment has no L4 header: whatever its first bytes say (here a UDP length of 0 and
// a TCP data offset of 0) is data, and it is classified on addresses and protocol.
TEST(Parse, LaterFragmentIsReadOnAddressesAndProtocol) {
  for (uint8_t proto : {uint8_t(17), uint8_t(6)}) {
    SCOPED_TRACE(int(proto));
    auto v4 = FrameBuilder()
                  .ipv4(ip4(192, 0, 2, 1), ip4(198, 51, 100, 7), proto)
                  .fragment4(7, 185, false)
                  .payload(40, 0)
                  .build();
    auto v6 = FrameBuilder()
                  .ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), 44)
                  .fragment6(proto, 7, 181, true)
                  .payload(40, 0)
                  .build();
    for (const Bytes* f : {&v4, &v6}) {
      ParsedFrame p;
      ASSERT_EQ(parse_frame(*f, p), std::nullopt);
      EXPECT_EQ(p.key.l4_proto, proto);
      EXPECT_EQ(p.key.src_port, 0);
      EXPECT_EQ(p.key.dst_port, 0);
      EXPECT_EQ(p.l4_len, 0);
      EXPECT_EQ(p.flags & (VF_PARSED_FRAGMENT | VF_PARSED_LATER_FRAG | VF_PARSED_L4),
                VF_PARSED_FRAGMENT | VF_PARSED_LATER_FRAG);
    }
  }
}

TEST(Parse, FillsTheMbuf) {
  VECFLOW_REQUIRE_EAL();
  rte_mempool* pool = rte_pktmbuf_pool_create("parse_test", 64, 0, 0, 2048, SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr);
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  auto f = FrameBuilder().ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17).udp(5000, 53).build();
  std::memcpy(rte_pktmbuf_append(m, uint16_t(f.size())), f.data(), f.size());
  EXPECT_EQ(parse_packet(m, true), std::nullopt);
  EXPECT_EQ(m->l2_len, 14);
  EXPECT_EQ(m->l3_len, 20);
  EXPECT_EQ(m->packet_type, RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP);
  EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_RX_RSS_HASH);
  ParsedFrame p;
  ASSERT_EQ(parse_frame(f, p), std::nullopt);
  EXPECT_EQ(m->hash.rss, flow_hash(p.key, true));
  // The reply direction gets the same flow id with the symmetric hash.
  auto r = FrameBuilder().ipv4(ip4(10, 0, 0, 2), ip4(10, 0, 0, 1), 17).udp(53, 5000).build();
  rte_mbuf* m2 = rte_pktmbuf_alloc(pool);
  std::memcpy(rte_pktmbuf_append(m2, uint16_t(r.size())), r.data(), r.size());
  EXPECT_EQ(parse_packet(m2, true), std::nullopt);
  EXPECT_EQ(m2->hash.rss, m->hash.rss);
  // A first fragment whose UDP length counts the whole datagram leaves the straight-line
  // reading for the full parse, which classifies it on its ports like the rest of its flow.
  auto first = FrameBuilder()
                   .ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17)
                   .fragment4(3, 0, true)
                   .udp(5000, 53)
                   .udp_length(2000)
                   .payload(1000)
                   .build();
  rte_mbuf* m3 = rte_pktmbuf_alloc(pool);
  std::memcpy(rte_pktmbuf_append(m3, uint16_t(first.size())), first.data(), first.size());
  EXPECT_EQ(parse_packet(m3, true), std::nullopt);
  EXPECT_EQ(m3->packet_type, RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_FRAG);
  EXPECT_EQ(m3->hash.rss, m->hash.rss) << "same 5-tuple, same flow id";
  rte_pktmbuf_free(m);
  rte_pktmbuf_free(m2);
  rte_pktmbuf_free(m3);
  rte_mempool_free(pool);
}

// The receive path's straight-line reading takes the common shapes, describes them as the
// full parse does, and leaves every other frame (another shape, or any fault) to the full
// parse. The frame fuzz target checks the same on arbitrary bytes.
TEST(Parse, CommonFramesReadAsTheFullParseReadsThem) {
  auto v4 = [](uint8_t proto) {
    return FrameBuilder().ipv4(ip4(192, 0, 2, 1), ip4(198, 51, 100, 7), proto);
  };
  auto v6 = [](uint8_t next) {
    return FrameBuilder().ipv6(ip6("2001:db8::1"), ip6("2001:db8::2"), next);
  };
  const std::vector<std::pair<Bytes, bool>> frames = {
      {v4(17).udp(5000, 53).payload(18).build(), true},
      {v4(6).tcp(40000, 443).build(), true},
      {v4(6).tcp(40000, 443, 12).build(), true},         // TCP options: still common
      {v4(17).udp(1, 2).payload(100).build(200), true},  // Ethernet padding after the packet
      {v6(17).udp(5000, 53).build(), true},
      {v6(6).tcp(1, 2).build(), true},
      {v4(1).icmp().build(), false},
      {v6(58).icmp(128).build(), false},
      {FrameBuilder().vlan(7).ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17).udp(1, 2).build(),
       false},
      {FrameBuilder().ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17, 4).udp(1, 2).build(), false},
      {v6(0).ext6(0, 17).udp(1, 2).build(), false},
      {FrameBuilder().arp().build(), false},
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& [f, common] = frames[i];
    RxFields got;
    ASSERT_EQ(classify_common(f.data(), uint32_t(f.size()), true, true, got), common)
        << "frame " << i;
    if (!common) continue;
    ParsedFrame p;
    ASSERT_EQ(parse_frame(f, p), std::nullopt) << "frame " << i;
    EXPECT_EQ(got.packet_type, packet_type_of(p)) << "frame " << i;
    EXPECT_EQ(got.l2_len, p.l2_len) << "frame " << i;
    EXPECT_EQ(got.l3_len, p.l3_len) << "frame " << i;
    EXPECT_EQ(got.hash, flow_hash(p.key, true)) << "frame " << i;
    RxFields asym;
    ASSERT_TRUE(classify_common(f.data(), uint32_t(f.size()), false, true, asym));
    EXPECT_EQ(asym.hash, flow_hash(p.key, false)) << "frame " << i;
  }
  // Faults are the full parse's to name: a common-looking frame that breaks a rule is refused.
  const auto ok = v4(17).udp(1, 2);
  Bytes bad_udp = ok.build();
  FrameBuilder::set16(bad_udp, ok.l4() + 4, 300);  // UDP length past the IP payload
  Bytes long_ip = ok.build();
  FrameBuilder::set16(long_ip, ok.l3() + 2, 900);  // IP length past the frame
  Bytes fragment = FrameBuilder()
                       .ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17, 0, 0x2000)
                       .udp(1, 2)
                       .build();  // MF: a first fragment
  Bytes datagram_length = FrameBuilder()
                              .ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17)
                              .fragment4(1, 0, true)
                              .udp(1, 2)
                              .udp_length(3008)
                              .build();  // well-formed, but a fragment: not common
  for (const Bytes* f : {&bad_udp, &long_ip, &fragment, &datagram_length}) {
    RxFields got;
    EXPECT_FALSE(classify_common(f->data(), uint32_t(f->size()), true, true, got));
  }
}
