#include "corpus.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "vecflow/parse.h"

namespace vecflow::test {
namespace {

using D = DropReason;

const auto A = ip4(192, 0, 2, 2), B = ip4(198, 51, 100, 1);
const auto A6 = ip6("2001:db8:1::2"), B6 = ip6("2001:db8:2::1");

// The usual jumbo frame: larger than an mbuf (2 KiB), an AF_XDP frame (2 or 4 KiB) and the
// largest single-buffer XDP frame (one page less headroom and tail room).
constexpr size_t kJumbo = 9000;
// Above a 1500-byte MTU by more than the 4 bytes of VLAN tag interfaces allow for: 14 bytes of
// Ethernet header and a 1586-byte IP packet.
constexpr size_t kAboveMtu = 1600;

// The IPv4 header checksum (RFC 1071) of the header at `l3`, written in place when the whole
// header is in the frame. FrameBuilder leaves it zero; the corpus carries correct checksums so
// that the one case with a wrong checksum is the only one, and so a Linux receiver in a lab
// replay would accept the rest. L4 checksums stay zero: a forwarder does not read them.
void fix_ipv4_checksum(Bytes& f, size_t l3) {
  if (l3 + 20 > f.size()) return;
  size_t hlen = size_t(f[l3] & 0x0f) * 4;
  if (hlen < 20 || l3 + hlen > f.size()) return;
  f[l3 + 10] = f[l3 + 11] = 0;
  uint32_t sum = 0;
  for (size_t i = 0; i < hlen; i += 2)
    sum += uint32_t(f[l3 + i] << 8 | f[l3 + i + 1]);
  while (sum >> 16)
    sum = (sum & 0xffff) + (sum >> 16);
  FrameBuilder::set16(f, l3 + 10, uint16_t(~sum));
}

// build() with the IPv4 checksum filled in.
Bytes v4(const FrameBuilder& b, size_t size = FrameBuilder::npos) {
  Bytes f = b.build();
  fix_ipv4_checksum(f, b.l3());
  if (size != FrameBuilder::npos) f.resize(size);
  return f;
}

// An IPv4 frame changed after the fact (a lying field), checksum recomputed over the change.
template <typename Edit>
Bytes v4_edit(const FrameBuilder& b, Edit edit) {
  Bytes f = b.build();
  edit(f);
  fix_ipv4_checksum(f, b.l3());
  return f;
}

FrameBuilder udp4(size_t payload = 18) {
  return std::move(FrameBuilder().ipv4(A, B, 17).udp(40000, 53).payload(payload));
}
FrameBuilder tcp4(size_t payload = 6) {
  return std::move(FrameBuilder().ipv4(A, B, 6).tcp(40000, 443).payload(payload));
}

class Cases {
 public:
  void add(std::string name, Outcome xdp, Outcome user, std::string what, std::vector<Bytes> f) {
    cases_.push_back({std::move(name), xdp, user, std::move(what), std::move(f)});
  }
  // Both sides must agree: the common case.
  void both(std::string name, Outcome o, std::string what, std::vector<Bytes> f) {
    add(std::move(name), o, o, std::move(what), std::move(f));
  }
  std::vector<CorpusCase> take() { return std::move(cases_); }

 private:
  std::vector<CorpusCase> cases_;
};

const Outcome kAccept = Outcome::accept();
Outcome drop(D r) {
  return Outcome::drop(r);
}

void ethernet_and_vlan(Cases& c) {
  Bytes whole = v4(udp4());
  c.add("eth_shorter_than_header", Outcome::refused(), drop(D::L2_TRUNCATED),
        "1, 6, 12 and 13 bytes: no Ethernet header. XDP never sees such a frame (drivers drop "
        "it, BPF_PROG_TEST_RUN refuses it); a DPDK port can deliver it",
        {Bytes(whole.begin(), whole.begin() + 1), Bytes(whole.begin(), whole.begin() + 6),
         Bytes(whole.begin(), whole.begin() + 12), Bytes(whole.begin(), whole.begin() + 13)});
  c.both("eth_header_only", kAccept,
         "14 bytes, an ethertype nobody parses (0x88b5, local experimental): steered on L2",
         {FrameBuilder().ethertype(0x88b5).build(14)});

  auto tagged = FrameBuilder().vlan(7).ipv4(A, B, 17).udp(1, 2).payload(8);
  auto qinq = FrameBuilder().vlan(7, 0x88a8).vlan(8).ipv4(A, B, 17).udp(1, 2).payload(8);
  c.both("vlan_cut_in_tag", drop(D::VLAN_TRUNCATED),
         "TPID 0x8100 then 0, 1, 2 or 3 bytes of the tag; a QinQ frame cut in its inner tag",
         {v4(tagged, 14), v4(tagged, 15), v4(tagged, 16), v4(tagged, 17), v4(qinq, 20)});
  c.both("vlan_cut_after_tag", drop(D::IPV4_TRUNCATED),
         "one complete tag naming IPv4, then the frame ends (18 bytes) or ends 10 bytes into "
         "the IPv4 header",
         {v4(tagged, 18), v4(tagged, 28)});
  c.both("vlan_1_tag", kAccept, "802.1Q tag 7, and tag 100 with priority bits set",
         {v4(tagged), v4(FrameBuilder().vlan(0xe064).ipv4(A, B, 6).tcp(1, 2))});
  c.both("vlan_2_tags_qinq", kAccept,
         "802.1ad outer + 802.1Q inner (QinQ), and two 802.1Q tags (the older double tagging)",
         {v4(qinq), v4(FrameBuilder().vlan(7).vlan(8).ipv4(A, B, 6).tcp(1, 2))});
  c.both("vlan_3_tags", drop(D::VLAN_TOO_DEEP), "802.1ad + 802.1Q + 802.1Q",
         {v4(FrameBuilder().vlan(1, 0x88a8).vlan(2).vlan(3).ipv4(A, B, 17).udp(1, 2))});
  {
    FrameBuilder over;
    for (int i = 0; i <= VF_MAX_VLAN_TAGS; ++i)
      over.vlan(uint16_t(10 + i));
    over.ipv4(A, B, 17).udp(1, 2);
    FrameBuilder eight;
    for (int i = 0; i < 8; ++i)
      eight.vlan(uint16_t(20 + i));
    eight.ipv4(A, B, 17).udp(1, 2);
    c.both("vlan_limit_plus_1", drop(D::VLAN_TOO_DEEP),
           fmt::format("VF_MAX_VLAN_TAGS + 1 = {} 802.1Q tags, and 8 tags", VF_MAX_VLAN_TAGS + 1),
           {v4(over), v4(eight)});
  }
}

void ipv4(Cases& c) {
  auto u = udp4();
  c.both("ipv4_shorter_than_header", drop(D::IPV4_TRUNCATED),
         "IPv4 ethertype with 0, 1, 10 and 19 bytes of header",
         {v4(u, 14), v4(u, 15), v4(u, 24), v4(u, 33)});
  c.both("ipv4_bad_version", drop(D::IPV4_BAD_VERSION), "IPv4 ethertype, version field 6 and 0",
         {v4_edit(u, [](Bytes& f) { f[14] = 0x65; }), v4_edit(u, [](Bytes& f) { f[14] = 0x05; })});
  c.both("ipv4_ihl_below_5", drop(D::IPV4_BAD_IHL), "IHL 0, 1 and 4 words",
         {v4_edit(u, [](Bytes& f) { f[14] = 0x40; }), v4_edit(u, [](Bytes& f) { f[14] = 0x41; }),
          v4_edit(u, [](Bytes& f) { f[14] = 0x44; })});
  c.both("ipv4_ihl_beyond_frame", drop(D::IPV4_BAD_IHL),
         "IHL 15 (60 bytes) in a 60-byte frame; IHL 6 with 23 bytes of IP in the frame",
         {v4_edit(FrameBuilder().ipv4(A, B, 253),
                  [](Bytes& f) {
                    f[14] = 0x4f;
                    FrameBuilder::set16(f, 16, 46);
                  }),
          v4_edit(FrameBuilder().ipv4(A, B, 253, 4), [](Bytes& f) { f.resize(14 + 23); })});
  c.both("ipv4_total_length_above_frame", drop(D::IPV4_BAD_LEN),
         "total length one byte past the frame, and 65535",
         {v4_edit(u,
                  [](Bytes& f) {
                    f.resize(14 + 46);
                    FrameBuilder::set16(f, 16, 47);
                  }),
          v4_edit(u, [](Bytes& f) { FrameBuilder::set16(f, 16, 65535); })});
  c.both("ipv4_total_length_below_header", drop(D::IPV4_BAD_LEN),
         "total length 0, 19, and 23 under a 24-byte header with options",
         {v4_edit(u, [](Bytes& f) { FrameBuilder::set16(f, 16, 0); }),
          v4_edit(u, [](Bytes& f) { FrameBuilder::set16(f, 16, 19); }),
          v4_edit(FrameBuilder().ipv4(A, B, 17, 4).udp(1, 2),
                  [](Bytes& f) { FrameBuilder::set16(f, 16, 23); })});
  c.both("ipv4_total_length_below_frame", kAccept,
         "total length shorter than the frame: the rest is Ethernet padding, outside the packet",
         {v4_edit(udp4(4), [](Bytes& f) { f.resize(f.size() + 200, 0x5a); })});
  {
    // Built with a correct checksum, then one bit flipped.
    Bytes a = v4(u), b = v4(tcp4());
    a[14 + 11] ^= 1;
    b[14 + 10] ^= 0x80;
    c.both("ipv4_bad_checksum", kAccept,
           "header checksum wrong (UDP, TCP). Neither parser verifies it: they classify; "
           "verifying belongs to the IP forwarding stage",
           {a, b});
  }
  c.both("ipv4_options", kAccept, "IHL 6 (4 bytes of NOPs) over UDP, IHL 15 (40 bytes) over TCP",
         {v4(FrameBuilder().ipv4(A, B, 17, 4).udp(1, 2).payload(8)),
          v4(FrameBuilder().ipv4(A, B, 6, 40).tcp(1, 2))});
}

// Fragments as a stack sends them over a 1500-byte MTU: one datagram of kDatagram bytes (an L4
// header and its payload, e.g. a large DNS answer or `ping -s 3000`) cut into pieces of
// kFragData4 (IPv4) or kFragData6 (IPv6) bytes, the last one shorter. Only the first fragment
// holds the L4 header, and a UDP header there carries the length of the whole datagram, which
// the fragment's own IP length does not cover.
constexpr size_t kDatagram = 3008;
constexpr size_t kFragData4 = 1500 - 20;
constexpr size_t kFragData6 = (1500 - 40 - 8) / 8 * 8;

// Appends the L4 header of a first fragment of a `datagram`-byte datagram; returns its size.
size_t first_header(FrameBuilder& b, uint8_t proto, size_t datagram) {
  switch (proto) {
    case 17:
      b.udp(40000, 53).udp_length(uint16_t(datagram));
      return 8;
    case 6:
      b.tcp(40000, 443);
      return 20;
    default:
      b.icmp(proto == 58 ? 128 : 8);
      return 8;
  }
}

// The fragment of datagram `id` that carries `data` bytes from `offset` (a multiple of 8).
Bytes frag4(uint8_t proto, uint16_t id, size_t offset, size_t data, bool more,
            size_t datagram = kDatagram) {
  FrameBuilder b;
  b.ipv4(A, B, proto).fragment4(id, uint16_t(offset / 8), more);
  const size_t header = offset == 0 ? first_header(b, proto, datagram) : 0;
  return v4(b.payload(data - header));
}
Bytes frag6(uint8_t proto, uint32_t id, size_t offset, size_t data, bool more,
            size_t datagram = kDatagram) {
  FrameBuilder b;
  b.ipv6(A6, B6, 44).fragment6(proto, id, uint16_t(offset / 8), more);
  const size_t header = offset == 0 ? first_header(b, proto, datagram) : 0;
  return b.payload(data - header).build();
}

void fragments(Cases& c) {
  // RFC 1858's tiny fragment: the first 8 bytes of a TCP header (the ports and the sequence
  // number), the rest of the header left to the next fragment.
  FrameBuilder tiny4;
  tiny4.ipv4(A, B, 6).fragment4(0x1002, 0, true).tcp(40000, 443).ip_length(20 + 8);
  Bytes tiny4_frame = v4(tiny4, 14 + 20 + 8);
  tiny4_frame.resize(60, 0);  // Ethernet padding
  FrameBuilder tiny6;
  tiny6.ipv6(A6, B6, 44).fragment6(6, 0x2003, 0, true).tcp(40000, 443).ip_length(8 + 8);

  c.both("ipv4_fragment_first", kAccept,
         fmt::format("first fragments (MF, offset 0, {} bytes of data) of {}-byte UDP, TCP and "
                     "ICMP echo datagrams; the UDP length counts the whole datagram: classified "
                     "on their ports",
                     kFragData4, kDatagram),
         {frag4(17, 0x1001, 0, kFragData4, true), frag4(6, 0x1004, 0, kFragData4, true),
          frag4(1, 0x1005, 0, kFragData4, true)});
  c.both("ipv4_fragment_first_tiny", drop(D::TCP_TRUNCATED),
         "MF set, offset 0, 8 bytes of TCP (RFC 1858 tiny fragment): the ports are in the "
         "fragment but the header is not whole",
         {tiny4_frame});
  c.both("ipv4_fragment_middle", kAccept,
         fmt::format("MF set, offset {}: no L4 header, classified on addresses and protocol",
                     kFragData4),
         {frag4(17, 0x1001, kFragData4, kFragData4, true)});
  c.both("ipv4_fragment_last", kAccept,
         fmt::format("MF clear, offset {}: the datagram's last {} bytes", 2 * kFragData4,
                     kDatagram - 2 * kFragData4),
         {frag4(17, 0x1001, 2 * kFragData4, kDatagram - 2 * kFragData4, false)});
  c.both("ipv4_fragment_overlapping", kAccept,
         "two fragments of one 48-byte UDP datagram whose data overlap (bytes 8-23): forwarded "
         "as they come, reassembly (and RFC 5722-style rejection) is the receiver's",
         {frag4(17, 0x1003, 0, 24, true, 48), frag4(17, 0x1003, 8, 40, false, 48)});

  c.both("ipv6_fragment_first", kAccept,
         fmt::format("fragment header, offset 0, M set, {} bytes of data: first fragments of "
                     "{}-byte UDP, TCP and ICMPv6 echo datagrams; the UDP length counts the "
                     "whole datagram",
                     kFragData6, kDatagram),
         {frag6(17, 0x2001, 0, kFragData6, true), frag6(6, 0x2004, 0, kFragData6, true),
          frag6(58, 0x2005, 0, kFragData6, true)});
  c.both("ipv6_fragment_first_tiny", drop(D::TCP_TRUNCATED),
         "offset 0, M set, 8 bytes of TCP: RFC 8200 wants the whole upper-layer header in the "
         "first fragment",
         {tiny6.build(14 + 40 + 8 + 8)});
  c.both("ipv6_fragment_middle", kAccept, fmt::format("offset {}, M set: no L4 header", kFragData6),
         {frag6(17, 0x2001, kFragData6, kFragData6, true)});
  c.both("ipv6_fragment_last", kAccept,
         fmt::format("offset {}, M clear: the datagram's last {} bytes", 2 * kFragData6,
                     kDatagram - 2 * kFragData6),
         {frag6(17, 0x2001, 2 * kFragData6, kDatagram - 2 * kFragData6, false)});
  c.both("ipv6_fragment_overlapping", kAccept,
         "two fragments of one 48-byte UDP datagram whose data overlap (bytes 8-23): forwarded "
         "as they come",
         {frag6(17, 0x2002, 0, 24, true, 48), frag6(17, 0x2002, 8, 40, false, 48)});
}

void ipv6(Cases& c) {
  auto t = FrameBuilder().ipv6(A6, B6, 6).tcp(40000, 443).payload(6);
  c.both("ipv6_shorter_than_header", drop(D::IPV6_TRUNCATED),
         "IPv6 ethertype with 0, 1, 16 and 39 bytes of header",
         {t.build(14), t.build(15), t.build(30), t.build(53)});
  {
    Bytes a = t.build(), b = t.build();
    a[14] = 0x45;
    b[14] = 0x00;
    c.both("ipv6_bad_version", drop(D::IPV6_BAD_VERSION), "IPv6 ethertype, version field 4 and 0",
           {a, b});
  }
  {
    Bytes a = t.build();
    FrameBuilder::set16(a, 14 + 4, uint16_t(a.size() - 14 - 40 + 1));
    c.both("ipv6_truncated", drop(D::IPV6_BAD_LEN),
           "payload length one byte past the frame; a frame cut 6 bytes into its TCP header",
           {a, t.build(14 + 40 + 6)});
  }
  {
    auto hbh = FrameBuilder().ipv6(A6, B6, 0).ext6(0, 6, 8).tcp(1, 2);
    Bytes a = hbh.build();
    a[14 + 40 + 1] = 3;  // 32 bytes claimed, 28 present
    auto dst = FrameBuilder().ipv6(A6, B6, 60).ext6(60, 17, 16).udp(1, 2);
    Bytes b = dst.build();
    b[14 + 40 + 1] = 255;  // 2048 bytes claimed
    auto ah = FrameBuilder().ipv6(A6, B6, 51).ext6(51, 6, 12).payload(8);
    Bytes d = ah.build();
    d[14 + 40 + 1] = 10;  // 48 bytes claimed
    c.both("ipv6_ext_length_beyond_frame", drop(D::IPV6_EXT_TRUNCATED),
           "hop-by-hop claiming 32 bytes of 28, destination options claiming 2048, AH claiming "
           "48 of 20, a routing header cut at its length byte, a fragment header cut at 6 bytes",
           {a, b, d, FrameBuilder().ipv6(A6, B6, 43).payload(1).build(),
            FrameBuilder().ipv6(A6, B6, 44).payload(6).build()});
  }
  auto chain = [](int headers) {
    FrameBuilder f;
    f.ipv6(A6, B6, 0);
    for (int i = 0; i < headers; ++i)
      f.ext6(i == 0 ? 0 : 60, i + 1 == headers ? 6 : 60);
    f.tcp(40000, 443);
    return f.build();
  };
  c.both("ipv6_ext_chain_at_bound", kAccept,
         fmt::format("hop-by-hop then destination options, {} extension headers "
                     "(VF_MAX_IPV6_EXT): the longest chain walked",
                     VF_MAX_IPV6_EXT),
         {chain(VF_MAX_IPV6_EXT)});
  c.both("ipv6_ext_chain_beyond_bound", drop(D::IPV6_EXT_TOO_LONG),
         fmt::format("{} and {} extension headers: rejected rather than half-read",
                     VF_MAX_IPV6_EXT + 1, VF_MAX_IPV6_EXT + 4),
         {chain(VF_MAX_IPV6_EXT + 1), chain(VF_MAX_IPV6_EXT + 4)});
}

void transport(Cases& c) {
  {
    auto t = FrameBuilder().ipv4(A, B, 6).tcp(40000, 443).payload(6);
    auto t6 = FrameBuilder().ipv6(A6, B6, 6).tcp(40000, 443).payload(6);
    auto doff = [](const FrameBuilder& b, uint8_t words) {
      Bytes f = b.build();
      f[b.l4() + 12] = uint8_t(words << 4);
      fix_ipv4_checksum(f, b.l3());
      return f;
    };
    c.both("tcp_data_offset_below_5", drop(D::TCP_BAD_DOFF),
           "data offset 0 and 4 words (IPv4), 4 words (IPv6)",
           {doff(t, 0), doff(t, 4), doff(t6, 4)});
    auto bare = FrameBuilder().ipv4(A, B, 6).tcp(40000, 443);
    c.both("tcp_data_offset_beyond_segment", drop(D::TCP_BAD_DOFF),
           "data offset 15 words in a 20-byte segment (IPv4, in a padded frame), 7 words in a "
           "26-byte segment (IPv6)",
           {doff(bare, 15), doff(t6, 7)});
    c.both("tcp_shorter_than_header", drop(D::TCP_TRUNCATED),
           "10 bytes of TCP (IPv4), 19 bytes (IPv6); the IP lengths agree with the frame",
           {v4(FrameBuilder().ipv4(A, B, 6).payload(10)),
            FrameBuilder().ipv6(A6, B6, 6).payload(19).build()});
  }
  {
    auto u = udp4(4);
    auto u6 = FrameBuilder().ipv6(A6, B6, 17).udp(40000, 53).payload(4);
    // v4() leaves an IPv6 header alone (its version byte reads as IHL 0).
    auto len = [](FrameBuilder b, uint16_t l) { return v4(b.udp_length(l)); };
    c.both("udp_length_zero", drop(D::UDP_BAD_LEN),
           "UDP length 0 over IPv4 and IPv6 (RFC 2675 jumbograms, the one legal use, are not "
           "supported)",
           {len(u, 0), len(u6, 0)});
    c.both("udp_length_below_header", drop(D::UDP_BAD_LEN), "UDP length 7", {len(u, 7)});
    c.both("udp_length_beyond_payload", drop(D::UDP_BAD_LEN),
           "UDP length one past the IP payload (IPv4, IPv6), and 65535",
           {len(u, 13), len(u6, 13), len(u, 65535)});
    c.both("udp_length_below_payload", kAccept,
           "UDP length 10 in a 12-byte IP payload: the datagram ends early, the rest is ignored",
           {len(u, 10)});
    c.both("udp_shorter_than_header", drop(D::UDP_TRUNCATED), "7 bytes of UDP",
           {v4(FrameBuilder().ipv4(A, B, 17).payload(7))});
  }
  c.both("icmp_shorter_than_header", drop(D::ICMP_TRUNCATED), "7 bytes of ICMP, 3 bytes of ICMPv6",
         {v4(FrameBuilder().ipv4(A, B, 1).payload(7)),
          FrameBuilder().ipv6(A6, B6, 58).payload(3).build()});
  c.both("sctp_shorter_than_header", drop(D::SCTP_TRUNCATED), "11 bytes of SCTP",
         {v4(FrameBuilder().ipv4(A, B, 132).payload(11))});
  c.both("arp_truncated", drop(D::ARP_TRUNCATED),
         "ARP cut in its fixed header (20 bytes), and in its addresses (40 bytes)",
         {FrameBuilder().arp().build(20), FrameBuilder().arp().build(40)});
}

void sizes(Cases& c) {
  c.both("jumbo_9000", kAccept,
         "9000-byte IPv4/UDP and IPv6/TCP frames: more than one buffer on both sides "
         "(BPF_PROG_TEST_RUN hands the program a first buffer and fragments, a DPDK port an "
         "mbuf chain); both parsers read the headers in the first and hold the IP length "
         "against the whole frame",
         {v4(udp4(kJumbo - 42)),
          FrameBuilder().ipv6(A6, B6, 6).tcp(1, 2).payload(kJumbo - 74).build()});
  c.both("jumbo_total_length_above_frame", drop(D::IPV4_BAD_LEN),
         "a 9000-byte IPv4 frame whose total length claims 9100 bytes: the length is held "
         "against the whole frame, not its first buffer",
         {v4_edit(udp4(kJumbo - 42),
                  [](Bytes& f) { FrameBuilder::set16(f, 16, kJumbo + 100 - 14); })});
  c.both("above_mtu", kAccept,
         "1600 bytes, over a 1500-byte MTU. Well-formed to both parsers; enforcing the MTU is "
         "the receiving interface's job (corpus_xdp_test shows a veth drops it before XDP)",
         {v4(udp4(kAboveMtu - 42))});
  c.both("runts", kAccept,
         "well-formed frames under the 60-byte Ethernet minimum, not padded: ARP (42), TCP SYN "
         "(54), UDP (42), ICMP echo (42)",
         {FrameBuilder().arp().build(42), v4(FrameBuilder().ipv4(A, B, 6).tcp(1, 2), 54),
          v4(FrameBuilder().ipv4(A, B, 17).udp(1, 2), 42),
          v4(FrameBuilder().ipv4(A, B, 1).icmp(), 42)});
  c.both("padded", kAccept,
         "frames padded past their IP length: to the 60-byte minimum with zeros, with 100 "
         "bytes of 0xff, an IPv6 datagram with 30 bytes of 0xee",
         {v4(udp4(1)), v4_edit(udp4(1), [](Bytes& f) { f.resize(f.size() + 100, 0xff); }), [] {
            Bytes f = FrameBuilder().ipv6(A6, B6, 17).udp(1, 2).payload(2).build();
            f.resize(f.size() + 30, 0xee);
            return f;
          }()});
}

void well_formed(Cases& c) {
  c.both("well_formed", kAccept,
         "reference frames: IPv4 TCP, UDP, ICMP, SCTP, GRE; IPv6 TCP, UDP, ICMPv6, AH; ARP",
         {v4(tcp4()), v4(udp4()), v4(FrameBuilder().ipv4(A, B, 1).icmp().payload(56)),
          v4(FrameBuilder().ipv4(A, B, 132).sctp(1, 2).payload(16)),
          v4(FrameBuilder().ipv4(A, B, 47).payload(24)),
          FrameBuilder().ipv6(A6, B6, 6).tcp(40000, 443).payload(6).build(),
          FrameBuilder().ipv6(A6, B6, 17).udp(40000, 53).payload(18).build(),
          FrameBuilder().ipv6(A6, B6, 58).icmp(128).payload(56).build(),
          FrameBuilder().ipv6(A6, B6, 51).ext6(51, 6, 16).tcp(1, 22).build(),
          FrameBuilder().arp().build()});
}

}  // namespace

std::vector<CorpusCase> corpus_cases() {
  Cases c;
  well_formed(c);
  ethernet_and_vlan(c);
  ipv4(c);
  fragments(c);
  ipv6(c);
  transport(c);
  sizes(c);
  return c.take();
}

std::string to_string(const Outcome& o) {
  switch (o.kind) {
    case Outcome::Accept:
      return "accept";
    case Outcome::Refused:
      return "refused";
    case Outcome::Drop:
      break;
  }
  return std::string(drop_reason_name(o.reason));
}

std::optional<Outcome> outcome_from_string(std::string_view s) {
  if (s == "accept") return Outcome::accept();
  if (s == "refused") return Outcome::refused();
  if (auto r = drop_reason_from_name(s)) return Outcome::drop(*r);
  return std::nullopt;
}

namespace {
constexpr std::string_view kManifestHeader =
    "# The malformed-traffic corpus: one pcap per line, every frame in it comes to the same\n"
    "# outcome. Generated by tests/corpus/gen_corpus (from corpus.cc); regenerate with\n"
    "#   ninja -C build corpus-update\n"
    "# Columns: file, frames, xdp outcome, user-space outcome, what the frames are.\n"
    "#   accept   well-formed: classified (XDP: lifted to AF_XDP with metadata)\n"
    "#   refused  XDP never runs on the frame (BPF_PROG_TEST_RUN refuses it, see corpus.h)\n"
    "#   <reason> dropped as malformed, counted under that drop reason\n";
}  // namespace

std::string manifest_text(const std::vector<CorpusCase>& cases) {
  std::string s(kManifestHeader);
  for (const auto& c : cases) {
    s += fmt::format("{:<38} {:>2} {:<20} {:<20} {}\n", c.name + ".pcap", c.frames.size(),
                     to_string(c.xdp), to_string(c.user), c.what);
  }
  return s;
}

Result<std::vector<ManifestEntry>> parse_manifest(std::string_view text) {
  std::vector<ManifestEntry> out;
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream l(line);
    ManifestEntry e;
    std::string xdp, user;
    if (!(l >> e.file >> e.frames >> xdp >> user)) {
      return fail("MANIFEST line {}: expected file, frames, xdp, user, what", n);
    }
    auto x = outcome_from_string(xdp), u = outcome_from_string(user);
    if (!x || !u) return fail("MANIFEST line {}: unknown outcome '{}' or '{}'", n, xdp, user);
    e.xdp = *x;
    e.user = *u;
    std::getline(l >> std::ws, e.what);
    out.push_back(std::move(e));
  }
  return out;
}

namespace {
struct PcapCloser {
  void operator()(pcap_t* p) const { pcap_close(p); }
};
struct DumperCloser {
  void operator()(pcap_dumper_t* d) const { pcap_dump_close(d); }
};
constexpr int kSnapLen = 65535;
}  // namespace

Result<void> write_pcap(const std::string& path, const std::vector<Bytes>& frames) {
  std::unique_ptr<pcap_t, PcapCloser> p(pcap_open_dead(DLT_EN10MB, kSnapLen));
  if (!p) return fail("pcap_open_dead failed");
  std::unique_ptr<pcap_dumper_t, DumperCloser> d(pcap_dump_open(p.get(), path.c_str()));
  if (!d) return fail("{}: {}", path, pcap_geterr(p.get()));
  for (size_t i = 0; i < frames.size(); ++i) {
    pcap_pkthdr h{};
    h.ts.tv_sec = 0;
    h.ts.tv_usec = suseconds_t(i);
    h.caplen = h.len = uint32_t(frames[i].size());
    pcap_dump(reinterpret_cast<u_char*>(d.get()), &h, frames[i].data());
  }
  if (pcap_dump_flush(d.get()) != 0) return fail("{}: write failed", path);
  return {};
}

Result<std::vector<Bytes>> read_pcap(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE];
  std::unique_ptr<pcap_t, PcapCloser> p(pcap_open_offline(path.c_str(), err));
  if (!p) return fail("{}: {}", path, err);
  if (pcap_datalink(p.get()) != DLT_EN10MB) return fail("{}: not an Ethernet capture", path);
  std::vector<Bytes> frames;
  pcap_pkthdr* h;
  const u_char* data;
  int rc;
  while ((rc = pcap_next_ex(p.get(), &h, &data)) == 1) {
    if (h->caplen != h->len)
      return fail("{}: frame {} was cut by the snap length", path, frames.size());
    frames.emplace_back(data, data + h->caplen);
  }
  if (rc != PCAP_ERROR_BREAK) return fail("{}: {}", path, pcap_geterr(p.get()));
  return frames;
}

rte_mbuf* to_mbuf(rte_mempool* pool, const Bytes& frame) {
  rte_mbuf* head = nullptr;
  size_t done = 0;
  do {
    rte_mbuf* seg = rte_pktmbuf_alloc(pool);
    if (!seg) break;
    size_t n = std::min<size_t>(frame.size() - done, rte_pktmbuf_tailroom(seg));
    std::memcpy(rte_pktmbuf_mtod(seg, uint8_t*), frame.data() + done, n);
    seg->data_len = uint16_t(n);
    seg->pkt_len = uint32_t(n);
    done += n;
    if (!head) {
      head = seg;
    } else if (rte_pktmbuf_chain(head, seg) != 0) {
      rte_pktmbuf_free(seg);
      break;
    }
    if (done == frame.size()) return head;
  } while (true);
  rte_pktmbuf_free(head);
  return nullptr;
}

std::string corpus_dir() {
  return std::string(VECFLOW_SOURCE_DIR) + "/tests/corpus";
}

}  // namespace vecflow::test
