// NAT44 in the conntrack stage (`nat:`): source NAT with endpoint-independent mapping over a
// port range, destination NAT, hairpinning, ICMP echo, checksums, port exhaustion, the ports'
// release on expiry, and the receive-side flow hash that brings a translated reply to its
// connection's flow bucket (pipeline/conntrack/nat_map.h).

#include <barrier>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rte_ip.h>
#include <rte_tcp.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/conntrack/conntrack_stage.h"
#include "pipeline/packet_view.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/stage_registry.h"
#include "pipeline/vrf.h"
#include "support/appliances.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr uint8_t kSyn = 0x02, kAck = 0x10;
constexpr const char* kPool = "192.0.2.1";       // the box's address on wan
constexpr const char* kClient = "198.51.100.7";  // a lan host
constexpr const char* kServer = "203.0.113.5";   // a host beyond wan
constexpr const char* kLanServer = "198.51.100.9";

// What a packet carries after the pipeline, in host order.
struct Seen {
  std::string src, dst;
  uint16_t sport = 0, dport = 0;
  bool ip_sum_ok = false, l4_sum_ok = false;
};

// A pool of the addresses of `text` (an address or a prefix).
std::vector<IpPrefix> pool(const std::string& text) {
  if (text.find('/') != std::string::npos) return {prefix(text)};
  return {IpPrefix{address(text), 32}};
}

uint32_t address_v4(const std::string& text) {
  uint32_t a;
  std::memcpy(&a, address(text).bytes.data(), 4);
  return a;
}

std::string v4_text(const uint8_t* p) {
  return fmt::format("{}.{}.{}.{}", p[0], p[1], p[2], p[3]);
}

// The L4 checksum of a test frame (make_frame leaves it 0), so that a translation must keep it
// right rather than leave it alone.
void fill_l4_checksum(rte_mbuf* m) {
  auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
  uint8_t* l4 = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len);
  const uint16_t len = static_cast<uint16_t>(rte_be_to_cpu_16(ip->total_length) - m->l3_len);
  if (ip->next_proto_id == IPPROTO_ICMP) {
    std::memset(l4 + 2, 0, 2);
    const uint16_t sum = static_cast<uint16_t>(~rte_raw_cksum(l4, len));
    std::memcpy(l4 + 2, &sum, 2);
    return;
  }
  uint8_t* at = l4 + (ip->next_proto_id == IPPROTO_TCP ? 16 : 6);
  std::memset(at, 0, 2);
  const uint16_t sum = rte_ipv4_udptcp_cksum(ip, l4);
  std::memcpy(at, &sum, 2);
}

Seen seen(rte_mbuf* m) {
  Seen s;
  auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
  const uint8_t* h = reinterpret_cast<const uint8_t*>(ip);
  s.src = v4_text(h + 12);
  s.dst = v4_text(h + 16);
  const uint8_t* l4 = h + m->l3_len;
  s.ip_sum_ok = rte_raw_cksum(ip, m->l3_len) == 0xffff;
  const uint16_t len = static_cast<uint16_t>(rte_be_to_cpu_16(ip->total_length) - m->l3_len);
  if (ip->next_proto_id == IPPROTO_ICMP) {
    s.sport = s.dport = static_cast<uint16_t>(l4[4] << 8 | l4[5]);
    s.l4_sum_ok = rte_raw_cksum(l4, len) == 0xffff;
  } else {
    s.sport = static_cast<uint16_t>(l4[0] << 8 | l4[1]);
    s.dport = static_cast<uint16_t>(l4[2] << 8 | l4[3]);
    uint32_t sum = uint32_t{rte_ipv4_phdr_cksum(ip, 0)} + rte_raw_cksum(l4, len);
    sum = (sum & 0xffff) + (sum >> 16);
    s.l4_sum_ok = (sum & 0xffff) + (sum >> 16) == 0xffff;
  }
  return s;
}

// A frame as its port would hand it on: the L4 checksum filled, the flow hash through the
// NAT's receive-side rewrite.
rte_mbuf* nat_frame(const NatMap& nat, const std::string& src, uint16_t sport,
                    const std::string& dst, uint16_t dport, uint16_t port,
                    uint8_t proto = IPPROTO_UDP, uint8_t tcp_flags = 0) {
  FrameSpec s;
  s.src = src, s.dst = dst, s.sport = sport, s.dport = dport, s.port = port, s.proto = proto;
  rte_mbuf* m = make_frame(s);
  uint8_t* l4 = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len);
  if (proto == IPPROTO_TCP) {
    auto* t = reinterpret_cast<rte_tcp_hdr*>(l4);
    t->sent_seq = rte_cpu_to_be_32(1000);
    // Both sides start at 1000: an answer acknowledges the SYN's 1000 + 1.
    t->recv_ack = rte_cpu_to_be_32(tcp_flags & kAck ? 1001 : 0);
    t->tcp_flags = tcp_flags;
    t->rx_win = rte_cpu_to_be_16(65535);
  }
  if (proto == IPPROTO_ICMP) {
    l4[0] = tcp_flags;  // echo request 8, reply 0
    const uint16_t id = rte_cpu_to_be_16(sport);
    std::memcpy(l4 + 4, &id, 2);
    m->hash.rss = flow_hash(pkt::flow_key(m), true);
  }
  fill_l4_checksum(m);
  nat.apply(&m, 1);
  return m;
}

class Nat : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }

  // conntrack with `nat`, then the route stage (fused): lan is 198.51.100.0/24 and
  // 2001:db8:2::/64, the rest is beyond wan. The default NAT: lan's connections leave from
  // kPool, ports 20000-20099.
  void build(ConntrackConfig ct) {
    RouteConfig r;
    r.routes = {route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254"),
                route("2001:db8:2::/64", "lan"), route("::/0", "wan", "2001:db8:1::1")};
    ASSERT_TRUE(h.build({stage("conntrack", ct), stage("route", r, true)}));
    stage_ = h.pipeline->find<ConntrackStage>("conntrack");
    ASSERT_NE(stage_, nullptr);
    ASSERT_NE(stage_->nat(), nullptr);
  }
  // Port forwarding: kPool:`public_port` entering at `in_port` ("": any) goes to
  // kLanServer:`to_port`.
  static DnatRuleConfig forward(uint8_t proto, uint16_t public_port, uint16_t to_port,
                                const std::string& in_port) {
    DnatRuleConfig d;
    d.in_port = in_port;
    d.proto = proto;
    d.dst = address(kPool);
    d.dst_port = public_port;
    d.to = address(kLanServer);
    d.to_port = to_port;
    return d;
  }
  static ConntrackConfig snat_config(uint16_t lo = 20000, uint16_t hi = 20099) {
    ConntrackConfig c;
    SnatRuleConfig s;
    s.in_port = "lan";
    s.src = prefix("198.51.100.0/24");
    s.to = pool(kPool);
    s.ports = {lo, hi};
    c.snat.push_back(s);
    return c;
  }

  rte_mbuf* frame(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport,
                  uint16_t port, uint8_t proto = IPPROTO_UDP, uint8_t tcp_flags = 0) {
    return nat_frame(*stage_->nat(), src, sport, dst, dport, port, proto, tcp_flags);
  }

  // Runs one packet: what left (nullopt when nothing did).
  std::optional<Seen> run(rte_mbuf* m) {
    h.sinks.free_all();
    h.run({m});
    if (h.sinks.tx.empty()) return std::nullopt;
    return seen(h.sinks.tx.front());
  }

  Harness h;
  ConntrackStage* stage_ = nullptr;
};

TEST_F(Nat, SourceNatTranslatesTheConnectionAndItsRepliesBothWays) {
  build(snat_config());
  rte_mbuf* syn = frame(kClient, 40000, kServer, 80, kLan, IPPROTO_TCP, kSyn);
  const uint32_t hash = syn->hash.rss;
  const auto out = run(syn);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->src, kPool);
  EXPECT_GE(out->sport, 20000);
  EXPECT_LE(out->sport, 20099);
  EXPECT_EQ(out->dst, kServer);
  EXPECT_EQ(out->dport, 80);
  EXPECT_TRUE(out->ip_sum_ok);
  EXPECT_TRUE(out->l4_sum_ok);

  // The server answers the pool's port: the port's rewrite hashes it as the connection, and
  // the stage gives it back to the client.
  rte_mbuf* synack = frame(kServer, 80, kPool, out->sport, kWan, IPPROTO_TCP, kSyn | kAck);
  EXPECT_EQ(synack->hash.rss, hash);
  const auto back = run(synack);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->src, kServer);
  EXPECT_EQ(back->sport, 80);
  EXPECT_EQ(back->dst, kClient);
  EXPECT_EQ(back->dport, 40000);
  EXPECT_TRUE(back->ip_sum_ok);
  EXPECT_TRUE(back->l4_sum_ok);

  const auto all = stage_->sessions({});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, ConnState::TcpSynRecv);
  EXPECT_EQ(all[0].key.src_port, rte_cpu_to_be_16(40000));  // keyed untranslated
  EXPECT_EQ(rte_be_to_cpu_16(all[0].nat_port), out->sport);
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Tcp), 1u);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// RFC 4787 REQ-1: one internal endpoint keeps its external port whichever server it talks to;
// another endpoint gets another port.
TEST_F(Nat, OneInternalEndpointHasOneMappingForEveryDestination) {
  build(snat_config());
  const auto a = run(frame(kClient, 5000, kServer, 53, kLan));
  const auto b = run(frame(kClient, 5000, "203.0.113.99", 123, kLan));
  const auto c = run(frame(kClient, 5001, kServer, 53, kLan));
  const auto d = run(frame("198.51.100.8", 5000, kServer, 53, kLan));
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(a->sport, b->sport);
  EXPECT_NE(a->sport, c->sport);
  EXPECT_NE(a->sport, d->sport);
  EXPECT_NE(c->sport, d->sport);
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Udp), 3u);
  // Replies from both servers reach the one client port.
  const auto ra = run(frame(kServer, 53, kPool, a->sport, kWan));
  const auto rb = run(frame("203.0.113.99", 123, kPool, a->sport, kWan));
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->dst, kClient);
  EXPECT_EQ(ra->dport, 5000);
  EXPECT_EQ(rb->dst, kClient);
  EXPECT_EQ(rb->dport, 5000);
}

// Filtering is address- and port-dependent: a host the client never talked to reaches the
// pool port untranslated (the later stages decide; here it is the box's own address).
TEST_F(Nat, AnUnsolicitedPacketToAMappedPortIsNotTranslated) {
  build(snat_config());
  const auto a = run(frame(kClient, 5000, kServer, 53, kLan));
  ASSERT_TRUE(a);
  const auto stray = run(frame("203.0.113.66", 53, kPool, a->sport, kWan));
  if (stray) {
    EXPECT_EQ(stray->dst, kPool);
  }
  for (const auto& s : stage_->sessions({}))
    if (s.key.src[0] == 203 && s.key.src[3] == 66) {
      EXPECT_FALSE(s.flags & kConnSnat);
    }
}

TEST_F(Nat, UdpChecksumZeroStaysZeroAndTheAddressesStillChange) {
  build(snat_config());
  FrameSpec s;
  s.src = kClient, s.dst = kServer, s.sport = 5000, s.dport = 53, s.port = kLan;
  rte_mbuf* m = make_frame(s);  // UDP checksum 0: none
  stage_->nat()->apply(&m, 1);
  h.sinks.free_all();
  h.run({m});
  ASSERT_EQ(h.sinks.tx.size(), 1u);
  rte_mbuf* out = h.sinks.tx.front();
  const uint8_t* l4 = rte_pktmbuf_mtod_offset(out, const uint8_t*, out->l2_len + out->l3_len);
  EXPECT_EQ(l4[6], 0);
  EXPECT_EQ(l4[7], 0);
  EXPECT_EQ(seen(out).src, kPool);
  EXPECT_TRUE(seen(out).ip_sum_ok);
}

TEST_F(Nat, IcmpEchoIdentifiersAreMappedAndTheRepliesGoBack) {
  build(snat_config());
  rte_mbuf* req = frame(kClient, 77, kServer, 0, kLan, IPPROTO_ICMP, 8);
  const uint32_t hash = req->hash.rss;
  const auto out = run(req);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->src, kPool);
  EXPECT_GE(out->sport, 20000);
  EXPECT_TRUE(out->l4_sum_ok);
  rte_mbuf* rep = frame(kServer, out->sport, kPool, 0, kWan, IPPROTO_ICMP, 0);
  EXPECT_EQ(rep->hash.rss, hash);
  const auto back = run(rep);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dst, kClient);
  EXPECT_EQ(back->sport, 77);
  EXPECT_TRUE(back->ip_sum_ok);
  EXPECT_TRUE(back->l4_sum_ok);
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Icmp), 1u);
}

// A range of two ports: the third connection is refused and counted, the two keep working,
// and once they expire their ports serve new connections.
TEST_F(Nat, PortExhaustionIsCountedAndExpiredSessionsGiveTheirPortsBack) {
  ConntrackConfig c = snat_config(20000, 20001);
  c.timeouts.udp_unreplied = 1;
  build(c);
  const auto a = run(frame(kClient, 6000, kServer, 53, kLan));
  const auto b = run(frame(kClient, 6001, kServer, 53, kLan));
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->sport, b->sport);
  EXPECT_FALSE(run(frame(kClient, 6002, kServer, 53, kLan)));
  EXPECT_EQ(stage_->counters().nat_no_port, 1u);
  AccountingSnapshot acc = h.accounting();
  EXPECT_EQ(acc.drops[size_t(DropReason::NAT_NO_PORT)], 1u);
  EXPECT_EQ(acc.unaccounted(), 0) << acc.to_string();
  // A second connection of a mapped endpoint needs no new port.
  EXPECT_TRUE(run(frame(kClient, 6000, "203.0.113.99", 53, kLan)));
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Udp), 2u);

  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  // Late replies find their sessions expired: the sessions go, and their ports with the last
  // of them; the replies themselves are not translated.
  const std::tuple<const char*, uint16_t> late[] = {
      {kServer, a->sport}, {kServer, b->sport}, {"203.0.113.99", a->sport}};
  for (const auto& [server, port] : late) {
    const auto r = run(frame(server, 53, kPool, port, kWan));
    if (r) {
      EXPECT_EQ(r->dst, kPool);
    }
  }
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Udp), 0u);
  EXPECT_GE(stage_->counters().expired, 3u);
  EXPECT_TRUE(run(frame(kClient, 6003, kServer, 53, kLan)));
  EXPECT_TRUE(run(frame(kClient, 6004, kServer, 53, kLan)));
  acc = h.accounting();
  EXPECT_EQ(acc.drops[size_t(DropReason::NAT_NO_PORT)], 1u);
  EXPECT_EQ(acc.unaccounted(), 0) << acc.to_string();
}

// Port forwarding: wan's 192.0.2.1:8080 is a lan server's port 80; the server's replies leave
// from the public endpoint, and hash as the connection did on the way in.
TEST_F(Nat, DestinationNatForwardsAPublicPortAndRepliesLeaveFromIt) {
  ConntrackConfig c;
  c.dnat.push_back(forward(IPPROTO_TCP, 8080, 80, "wan"));
  build(c);
  rte_mbuf* syn = frame(kServer, 33000, kPool, 8080, kWan, IPPROTO_TCP, kSyn);
  const uint32_t hash = syn->hash.rss;
  const auto in = run(syn);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->dst, kLanServer);
  EXPECT_EQ(in->dport, 80);
  EXPECT_EQ(in->src, kServer);
  EXPECT_TRUE(in->ip_sum_ok);
  EXPECT_TRUE(in->l4_sum_ok);
  rte_mbuf* synack = frame(kLanServer, 80, kServer, 33000, kLan, IPPROTO_TCP, kSyn | kAck);
  EXPECT_EQ(synack->hash.rss, hash);
  const auto out = run(synack);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->src, kPool);
  EXPECT_EQ(out->sport, 8080);
  EXPECT_EQ(out->dst, kServer);
  EXPECT_TRUE(out->l4_sum_ok);
  // The same public port over UDP, or another port, is not forwarded.
  const auto udp = run(frame(kServer, 33000, kPool, 8080, kWan));
  if (udp) {
    EXPECT_EQ(udp->dst, kPool);
  }
}

// Hairpinning: a lan host reaches a lan server through the public endpoint; with source NAT
// as well the server answers the box, which sends the answer back as from the public side.
TEST_F(Nat, HairpinAConnectionFromLanToThePublicEndpointOfALanServer) {
  ConntrackConfig c = snat_config();
  c.dnat.push_back(forward(IPPROTO_TCP, 8080, 80, ""));  // "": any port
  build(c);
  rte_mbuf* syn = frame(kClient, 41000, kPool, 8080, kLan, IPPROTO_TCP, kSyn);
  const uint32_t hash = syn->hash.rss;
  const auto to_server = run(syn);
  ASSERT_TRUE(to_server);
  EXPECT_EQ(to_server->dst, kLanServer);
  EXPECT_EQ(to_server->dport, 80);
  EXPECT_EQ(to_server->src, kPool);
  EXPECT_GE(to_server->sport, 20000);
  EXPECT_TRUE(to_server->l4_sum_ok);
  rte_mbuf* synack = frame(kLanServer, 80, kPool, to_server->sport, kLan, IPPROTO_TCP, kSyn | kAck);
  EXPECT_EQ(synack->hash.rss, hash);
  const auto to_client = run(synack);
  ASSERT_TRUE(to_client);
  EXPECT_EQ(to_client->src, kPool);
  EXPECT_EQ(to_client->sport, 8080);
  EXPECT_EQ(to_client->dst, kClient);
  EXPECT_EQ(to_client->dport, 41000);
  EXPECT_TRUE(to_client->ip_sum_ok);
  EXPECT_TRUE(to_client->l4_sum_ok);
}

// A reload of nat.snat: the open connection keeps its mapping both ways, a new one takes the
// new rule.
TEST_F(Nat, AReloadOfTheSourceRulesKeepsTheSessionsAndTheirMappings) {
  const ConntrackConfig first = snat_config();
  build(first);
  const auto a = run(frame(kClient, 5000, kServer, 53, kLan));
  ASSERT_TRUE(a);
  ASSERT_EQ(a->src, kPool);
  ConntrackConfig second = first;
  second.snat[0].to = pool("192.0.2.77");
  second.snat[0].ports = {30000, 30099};
  const StageModule* ct = StageRegistry::builtin().find("conntrack");
  ASSERT_NE(ct, nullptr);
  ASSERT_NE(ct->reload.apply, nullptr);
  const auto params = [](const ConntrackConfig& c) { return stage("conntrack", c).params; };
  ASSERT_TRUE(ct->reload.apply(*stage_, h.ctx, params(first), params(second)));

  const auto again = run(frame(kClient, 5000, kServer, 53, kLan));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->src, kPool);
  EXPECT_EQ(again->sport, a->sport);
  const auto back = run(frame(kServer, 53, kPool, a->sport, kWan));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dst, kClient);
  EXPECT_EQ(back->dport, 5000);
  const auto fresh = run(frame(kClient, 5001, kServer, 53, kLan));
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->src, "192.0.2.77");
  EXPECT_GE(fresh->sport, 30000);
  EXPECT_LE(fresh->sport, 30099);
  EXPECT_EQ(stage_->nat()->pools(), 2u);  // the old address stays while its session lives

  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// A reload of nat.dnat: a forwarding the reload drops takes no new connection, but the one it
// forwarded keeps going both ways (as Linux keeps a NAT binding in its conntrack entry); the
// new rule forwards; a rule that comes back takes its old place.
TEST_F(Nat, AReloadOfTheForwardingRulesKeepsTheForwardedConnections) {
  ConntrackConfig first;
  DnatRuleConfig a;
  a.dst = address(kPool);
  a.dst_port = 8080;
  a.to = address(kLanServer);
  a.to_port = 80;
  first.dnat.push_back(a);
  build(first);
  const auto in = run(frame(kServer, 41000, kPool, 8080, kWan, IPPROTO_TCP, kSyn));
  ASSERT_TRUE(in);
  EXPECT_EQ(in->dst, kLanServer);
  EXPECT_EQ(in->dport, 80);

  ConntrackConfig second;
  DnatRuleConfig b = a;
  b.dst_port = 8081;
  b.to_port = 81;
  second.dnat.push_back(b);
  const StageModule* ct = StageRegistry::builtin().find("conntrack");
  const auto params = [](const ConntrackConfig& c) { return stage("conntrack", c).params; };
  ASSERT_TRUE(ct->reload.apply(*stage_, h.ctx, params(first), params(second)));

  // The forwarded connection's answer still leaves from the public endpoint.
  const auto answer = run(frame(kLanServer, 80, kServer, 41000, kLan, IPPROTO_TCP, kSyn | kAck));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->src, kPool);
  EXPECT_EQ(answer->sport, 8080);
  EXPECT_TRUE(answer->l4_sum_ok);
  // A new connection to the dropped public port goes on as addressed.
  const auto dropped = run(frame(kServer, 41001, kPool, 8080, kWan, IPPROTO_TCP, kSyn));
  ASSERT_TRUE(dropped);
  EXPECT_EQ(dropped->dst, kPool);
  EXPECT_EQ(dropped->dport, 8080);
  const auto added = run(frame(kServer, 41002, kPool, 8081, kWan, IPPROTO_TCP, kSyn));
  ASSERT_TRUE(added);
  EXPECT_EQ(added->dst, kLanServer);
  EXPECT_EQ(added->dport, 81);

  ASSERT_TRUE(ct->reload.apply(*stage_, h.ctx, params(second), params(first)));
  const auto back = run(frame(kServer, 41003, kPool, 8080, kWan, IPPROTO_TCP, kSyn));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dst, kLanServer);
  EXPECT_EQ(back->dport, 80);
  EXPECT_EQ(
      stage_->nat()->dnat_match(kWan, NatProto::Tcp, {address_v4(kPool), rte_cpu_to_be_16(8080)}),
      0);  // its old index
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// The stage looks a flow up once per run of its packets in a vector: the next packet with the
// same key, hash, ingress port and shape takes the session the one before found. A vector
// must leave exactly as its packets do one call at a time, whatever runs, replies, new
// connections and ingress ports it mixes: the same translations, sessions and marks.
TEST_F(Nat, AVectorLeavesAsItsPacketsDoOneCallAtATime) {
  ConntrackConfig c = snat_config();
  c.dnat.push_back(forward(IPPROTO_TCP, 8080, 80, "wan"));
  build(c);
  struct Spec {
    std::string src;
    uint16_t sport;
    std::string dst;
    uint16_t dport;
    uint16_t port;
    uint8_t proto;
    uint8_t flags;
  };
  const Spec syn{kClient, 40000, kServer, 80, kLan, IPPROTO_TCP, kSyn};
  // The flow hash each frame had from its port's receive-side rewrite (NatMap::apply), which
  // names a reply by its connection once the mapping exists.
  std::vector<uint32_t> hashes;
  const auto make = [&](const Spec& x) {
    rte_mbuf* m = frame(x.src, x.sport, x.dst, x.dport, x.port, x.proto, x.flags);
    hashes.push_back(m->hash.rss);
    return m;
  };
  const std::optional<Seen> first = run(make(syn));
  ASSERT_TRUE(first);
  const uint16_t mapped = first->sport;
  const Spec forwarded{kServer, 33000, kPool, 8080, kWan, IPPROTO_TCP, kSyn};
  Spec from_lan = forwarded;  // the same key from the other port: no destination NAT for it
  from_lan.port = kLan;
  const std::vector<Spec> specs = {
      syn,
      syn,  // retransmitted
      {kClient, 40000, kServer, 80, kLan, IPPROTO_UDP, 0},
      {kClient, 40000, kServer, 80, kLan, IPPROTO_UDP, 0},
      {kServer, 80, kPool, mapped, kWan, IPPROTO_TCP, kSyn | kAck},
      {kClient, 40000, kServer, 80, kLan, IPPROTO_TCP, kAck},
      {kClient, 40000, kServer, 80, kLan, IPPROTO_TCP, kAck},
      {kServer, 80, kPool, mapped, kWan, IPPROTO_TCP, kAck},
      {kServer, 80, kPool, mapped, kWan, IPPROTO_UDP, 0},
      forwarded,
      from_lan,
      from_lan,
      forwarded,
      {kClient, 7, kServer, 7, kLan, IPPROTO_ICMP, 8},
      {kClient, 7, kServer, 7, kLan, IPPROTO_ICMP, 8},
  };
  std::vector<std::optional<Seen>> one_by_one = {first};
  for (size_t i = 1; i < specs.size(); ++i)
    one_by_one.push_back(run(make(specs[i])));
  // What the single calls did, where it is known beforehand.
  ASSERT_TRUE(one_by_one[4] && one_by_one[9] && one_by_one[10]);
  EXPECT_EQ(one_by_one[4]->dst, kClient);
  EXPECT_EQ(one_by_one[4]->dport, 40000);
  EXPECT_EQ(one_by_one[9]->dst, kLanServer);
  EXPECT_EQ(one_by_one[10]->dst, kPool);
  EXPECT_EQ(one_by_one[10]->dport, 8080);

  ConntrackStage* const single = stage_;
  Harness vector_run;
  RouteConfig r;
  r.routes = {route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254")};
  ASSERT_TRUE(vector_run.build({stage("conntrack", c), stage("route", r, true)}));
  stage_ = vector_run.pipeline->find<ConntrackStage>("conntrack");
  ASSERT_NE(stage_, nullptr);
  // Built before any of them ran, the replies carry the hash their port gives them once the
  // connection is mapped, as when they arrive after the packet that mapped it.
  std::vector<rte_mbuf*> pkts;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& x = specs[i];
    pkts.push_back(frame(x.src, x.sport, x.dst, x.dport, x.port, x.proto, x.flags));
    pkts.back()->hash.rss = hashes[i];
  }
  vector_run.run(pkts);
  ASSERT_EQ(vector_run.sinks.tx.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(one_by_one[i]);
    const Seen v = seen(vector_run.sinks.tx[i]);
    EXPECT_EQ(v.src, one_by_one[i]->src);
    EXPECT_EQ(v.dst, one_by_one[i]->dst);
    EXPECT_EQ(v.sport, one_by_one[i]->sport);
    EXPECT_EQ(v.dport, one_by_one[i]->dport);
    EXPECT_TRUE(v.ip_sum_ok);
    EXPECT_TRUE(v.l4_sum_ok);
  }
  const auto a = single->sessions({});
  const auto b = stage_->sessions({});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(a[i].key == b[i].key);
    EXPECT_EQ(a[i].state, b[i].state);
    EXPECT_EQ(a[i].flags, b[i].flags);
    EXPECT_EQ(a[i].packets, b[i].packets);
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    EXPECT_EQ(a[i].nat_port, b[i].nat_port);
    EXPECT_EQ(a[i].nat_pool, b[i].nat_pool);
    EXPECT_EQ(a[i].nat_rule, b[i].nat_rule);
  }
  EXPECT_EQ(single->counters().marks, stage_->counters().marks);
  EXPECT_EQ(single->counters().created, stage_->counters().created);
  vector_run.sinks.free_all();
  EXPECT_EQ(vector_run.accounting().unaccounted(), 0) << vector_run.accounting().to_string();
}

// A UDP datagram of 48 bytes (header and 40 bytes of payload) from src:sport to dst:dport,
// entering at `port`, in three IPv4 fragments of 24, 16 and 8 bytes, each classified as a
// port would (the NAT's receive-side hash included).
std::vector<rte_mbuf*> fragmented(ConntrackStage& stage, const std::string& src, uint16_t sport,
                                  const std::string& dst, uint16_t dport, uint16_t port,
                                  uint16_t id) {
  FrameSpec s;
  s.src = src, s.dst = dst, s.sport = sport, s.dport = dport, s.port = port;
  std::vector<rte_mbuf*> out = make_fragments(s, id, {24, 16, 8});
  stage.nat()->apply(out.data(), static_cast<uint16_t>(out.size()));
  return out;
}

// The datagram the fragments `pkts` carry, put back together: its addresses (from the first)
// and whether each IP header checksum and the UDP checksum over the whole datagram hold.
struct Reassembled {
  Seen first;  // the first fragment's addresses and ports
  bool ip_sums_ok = true;
  bool udp_sum_ok = false;
  bool same_addresses = true;
};
Reassembled reassemble(const std::vector<rte_mbuf*>& pkts) {
  Reassembled r;
  std::array<uint8_t, 48> data{};
  uint32_t src = 0, dst = 0;
  for (size_t i = 0; i < pkts.size(); ++i) {
    rte_mbuf* m = pkts[i];
    auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
    if (i == 0) {
      r.first = seen(m);
      src = ip->src_addr;
      dst = ip->dst_addr;
    }
    r.same_addresses &= ip->src_addr == src && ip->dst_addr == dst;
    r.ip_sums_ok &= rte_raw_cksum(ip, m->l3_len) == 0xffff;
    const size_t off = size_t(rte_be_to_cpu_16(ip->fragment_offset) & RTE_IPV4_HDR_OFFSET_MASK) * 8;
    const size_t len = rte_be_to_cpu_16(ip->total_length) - m->l3_len;
    if (off + len > data.size()) return r;
    std::memcpy(data.data() + off, reinterpret_cast<uint8_t*>(ip) + m->l3_len, len);
  }
  const struct __attribute__((packed)) {
    uint32_t src, dst;
    uint8_t zero, proto;
    uint16_t len;
  } pseudo = {src, dst, 0, IPPROTO_UDP, rte_cpu_to_be_16(48)};
  uint32_t sum =
      uint32_t{rte_raw_cksum(&pseudo, sizeof(pseudo))} + rte_raw_cksum(data.data(), data.size());
  sum = (sum & 0xffff) + (sum >> 16);
  r.udp_sum_ok = ((sum & 0xffff) + (sum >> 16)) == 0xffff;
  return r;
}

// NAT without reassembly: a first fragment carries its ports and is translated as its
// connection; the later ones (no ports) reach the same worker through the receive-side hash
// and leave with the addresses their first fragment left with. Both ways, the datagram put
// back together has its translated endpoints and a UDP checksum that holds.
TEST_F(Nat, FragmentedDatagramsAreTranslatedAsTheirFirstFragment) {
  build(snat_config());
  std::vector<rte_mbuf*> out = fragmented(*stage_, kClient, 40000, kServer, 53, kLan, 77);
  const uint32_t hash = out[0]->hash.rss;
  EXPECT_EQ(out[1]->hash.rss, hash);
  EXPECT_EQ(out[2]->hash.rss, hash);
  h.sinks.free_all();
  h.run(out);
  ASSERT_EQ(h.sinks.tx.size(), 3u);
  const Reassembled up = reassemble(h.sinks.tx);
  EXPECT_EQ(up.first.src, kPool);
  EXPECT_GE(up.first.sport, 20000);
  EXPECT_LE(up.first.sport, 20099);
  EXPECT_EQ(up.first.dst, kServer);
  EXPECT_TRUE(up.same_addresses);
  EXPECT_TRUE(up.ip_sums_ok);
  EXPECT_TRUE(up.udp_sum_ok);

  // The server's fragmented answer to the pool's port, one fragment per call.
  std::vector<rte_mbuf*> back = fragmented(*stage_, kServer, 53, kPool, up.first.sport, kWan, 9);
  EXPECT_EQ(back[0]->hash.rss, hash);  // its connection's, as the port's rewrite hashes it
  EXPECT_EQ(back[2]->hash.rss, hash);
  std::vector<rte_mbuf*> down;
  for (rte_mbuf* m : back) {
    h.sinks.free_all();
    h.run({m});
    ASSERT_EQ(h.sinks.tx.size(), 1u);
    down.push_back(h.sinks.tx.front());
    h.sinks.tx.clear();
  }
  const Reassembled r = reassemble(down);
  for (rte_mbuf* m : down)
    rte_pktmbuf_free(m);
  EXPECT_EQ(r.first.src, kServer);
  EXPECT_EQ(r.first.dst, kClient);
  EXPECT_EQ(r.first.dport, 40000);
  EXPECT_TRUE(r.same_addresses);
  EXPECT_TRUE(r.ip_sums_ok);
  EXPECT_TRUE(r.udp_sum_ok);

  // One session (the connection), one port; the fragments made no session of their own.
  EXPECT_EQ(stage_->sessions({}).size(), 1u);
  EXPECT_EQ(stage_->counters().fragments_known, 4u);
  EXPECT_EQ(stage_->counters().fragments_unknown, 0u);
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Udp), 1u);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// NAT44 leaves IPv6 alone, fragments too: beside it, an IPv6 datagram's later fragments get
// their first fragment's hash from the NAT's receive-side rewrite and its connection's mark
// in the stage, and all of them leave as they came.
TEST_F(Nat, IPv6FragmentsGoUntranslatedWithTheirFirstFragment) {
  build(snat_config());
  FrameSpec s;
  s.version = 6, s.src = "2001:db8:2::7", s.dst = "2001:db8:9::5", s.sport = 40000, s.dport = 53;
  s.port = kLan;
  std::vector<rte_mbuf*> out = make_fragments(s, 0x12345, {24, 16, 8});
  stage_->nat()->apply(out.data(), static_cast<uint16_t>(out.size()));
  EXPECT_EQ(out[1]->hash.rss, out[0]->hash.rss);
  EXPECT_EQ(out[2]->hash.rss, out[0]->hash.rss);
  std::vector<std::vector<uint8_t>> before;
  for (rte_mbuf* m : out) {
    const auto* p = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len);
    before.emplace_back(p, p + m->pkt_len - m->l2_len);
  }
  h.sinks.free_all();
  h.run(out);
  ASSERT_EQ(h.sinks.tx.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    rte_mbuf* m = h.sinks.tx[i];
    auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, m->l2_len);
    ++ip->hop_limits;  // the route stage's one change
    const auto* p = reinterpret_cast<const uint8_t*>(ip);
    EXPECT_EQ(std::vector<uint8_t>(p, p + m->pkt_len - m->l2_len), before[i]) << i;
  }
  EXPECT_EQ(stage_->sessions({}).size(), 1u);
  EXPECT_EQ(stage_->counters().fragments_known, 2u);
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Udp), 0u);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// A later fragment whose first fragment was not seen (lost, reordered, or its entry gone)
// cannot be translated: if the NAT would rewrite its source it is dropped and counted
// (nat_fragment), never sent with the internal address; others go on as addressed.
TEST_F(Nat, ALaterFragmentWithoutItsFirstIsDroppedWhereItWouldLeakAnAddress) {
  ConntrackConfig c = snat_config();
  c.dnat.push_back(forward(IPPROTO_UDP, 5353, 53, "wan"));
  build(c);
  // The later fragments only (the first is freed unseen): from the lan host the source NAT
  // takes, and from the forwarded server entering on wan (its address is rewritten to the
  // public one).
  for (const auto& [src, port] : {std::pair{kClient, kLan}, std::pair{kLanServer, kWan}}) {
    std::vector<rte_mbuf*> f = fragmented(*stage_, src, 40000, kServer, 53, port, 5);
    rte_pktmbuf_free(f[0]);
    EXPECT_FALSE(run(f[1]));
    EXPECT_FALSE(run(f[2]));
  }
  AccountingSnapshot a = h.accounting();
  EXPECT_EQ(a.drops[size_t(DropReason::NAT_FRAGMENT)], 4u) << a.to_string();
  EXPECT_TRUE(stage_->sessions({}).empty());
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Udp), 0u);

  // To the pool address from outside: as addressed (to the box itself).
  std::vector<rte_mbuf*> in = fragmented(*stage_, kServer, 53, kPool, 20001, kWan, 6);
  rte_pktmbuf_free(in[0]);
  rte_pktmbuf_free(in[2]);
  const auto to_box = run(in[1]);
  ASSERT_TRUE(to_box);
  EXPECT_EQ(to_box->src, kServer);
  EXPECT_EQ(to_box->dst, kPool);
  a = h.accounting();
  EXPECT_EQ(a.drops[size_t(DropReason::NAT_FRAGMENT)], 4u);
  EXPECT_EQ(stage_->counters().fragments_unknown, 5u);
  EXPECT_EQ(stage_->counters().fragments_known, 0u);
  EXPECT_EQ(a.unaccounted(), 0) << a.to_string();
}

// A pool of four addresses (a /30) is paired (RFC 4787 REQ-2): every connection of an internal
// address leaves from the same pool address, the clients spread over the four, and the
// replies to each address come back.
TEST_F(Nat, APoolOfAddressesGivesEachInternalAddressOneOfThem) {
  ConntrackConfig c = snat_config();
  c.snat[0].to = pool("192.0.2.8/30");
  build(c);
  std::set<std::string> used;
  for (int host = 10; host < 42; ++host) {
    const std::string client = fmt::format("198.51.100.{}", host);
    const auto a = run(frame(client, 5000, kServer, 53, kLan));
    const auto b = run(frame(client, 5001, "203.0.113.99", 123, kLan));
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->src, b->src) << client;
    EXPECT_TRUE(prefix("192.0.2.8/30").contains(address(a->src))) << a->src;
    used.insert(a->src);
    const auto back = run(frame(kServer, 53, a->src, a->sport, kWan));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->dst, client);
    EXPECT_EQ(back->dport, 5000);
    EXPECT_TRUE(back->l4_sum_ok);
  }
  EXPECT_GE(used.size(), 3u);  // 32 clients over 4 addresses by hash
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// With one port per address, a client's second connection takes the pool's other address
// rather than being refused; the third finds none and is counted.
TEST_F(Nat, AFullPoolAddressHandsOverToTheNextOne) {
  ConntrackConfig c = snat_config(20000, 20000);
  c.snat[0].to = pool("192.0.2.8/31");
  build(c);
  const auto a = run(frame(kClient, 5000, kServer, 53, kLan));
  const auto b = run(frame(kClient, 5001, kServer, 53, kLan));
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->src, b->src);
  EXPECT_EQ(a->sport, 20000);
  EXPECT_EQ(b->sport, 20000);
  EXPECT_FALSE(run(frame(kClient, 5002, kServer, 53, kLan)));
  EXPECT_EQ(stage_->counters().nat_no_port, 1u);
  const auto back = run(frame(kServer, 53, b->src, 20000, kWan));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dport, 5001);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// Masquerade: connections leave from the address wan's kernel interface has when they open
// (here the loopback's, as the kernel reports it); when it changes, new connections take the
// new one and open sessions keep theirs, replies included; while it has none, new
// connections are refused as nat_no_port.
TEST_F(Nat, MasqueradeFollowsThePortsAddress) {
  h.ctx.ports[kWan].interface = "lo";
  ConntrackConfig c;
  SnatRuleConfig rule;
  rule.in_port = "lan";
  rule.masquerade = "wan";
  c.snat.push_back(rule);
  RouteConfig r;
  r.routes = {route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254")};
  r.checks.martians = false;  // the loopback's address leaves wan here
  ASSERT_TRUE(h.build({stage("conntrack", c), stage("route", r, true)}));
  stage_ = h.pipeline->find<ConntrackStage>("conntrack");
  ASSERT_NE(stage_, nullptr);

  const auto first = run(frame(kClient, 5000, kServer, 53, kLan));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->src, "127.0.0.1");
  EXPECT_GE(first->sport, 1024);

  std::vector<PortAddresses> now(2);
  now[kWan].v4 = address("192.0.2.50");
  stage_->set_port_addresses(now);
  const auto second = run(frame(kClient, 5001, kServer, 53, kLan));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->src, "192.0.2.50");
  const auto again = run(frame(kClient, 5000, kServer, 53, kLan));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->src, "127.0.0.1");
  EXPECT_EQ(again->sport, first->sport);
  const auto back = run(frame(kServer, 53, "127.0.0.1", first->sport, kWan));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->dst, kClient);
  EXPECT_EQ(back->dport, 5000);

  stage_->set_port_addresses(std::vector<PortAddresses>(2));
  EXPECT_FALSE(run(frame(kClient, 5002, kServer, 53, kLan)));
  EXPECT_EQ(stage_->counters().nat_no_port, 1u);
  EXPECT_TRUE(run(frame(kClient, 5001, kServer, 53, kLan)));
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// Masquerade needs a kernel interface to take an address from; a port without one is refused
// when the stage is built, named.
TEST_F(Nat, MasqueradeOnAPortWithoutAKernelInterfaceIsRefused) {
  ConntrackConfig c;
  SnatRuleConfig rule;
  rule.masquerade = "wan";
  c.snat.push_back(rule);
  const auto built = h.build({stage("conntrack", c)});
  ASSERT_FALSE(built);
  EXPECT_NE(std::string(built.message()).find("port 'wan' has no kernel interface"),
            std::string::npos)
      << built.message();
}

// A port unreachable (type 3 code 3) from `from` to `to`, quoting a UDP datagram
// qsrc:qsport -> qdst:qdport (its IP header with a right checksum, its UDP header and 4 bytes
// of data), entering through `port`; checksums right.
rte_mbuf* unreachable(const std::string& from, const std::string& to, const std::string& qsrc,
                      uint16_t qsport, const std::string& qdst, uint16_t qdport, uint16_t port) {
  FrameSpec s;
  s.proto = IPPROTO_ICMP;
  s.src = from, s.dst = to, s.port = port;
  s.payload = 28;  // after the 8-byte ICMP header: the quoted 20 + 8, and 4 of data
  rte_mbuf* m = make_frame(s);
  uint8_t* l4 = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len);
  l4[0] = 3;
  l4[1] = 3;
  l4[4] = l4[5] = l4[6] = l4[7] = 0;
  uint8_t* in = l4 + 8;
  std::memset(in, 0, 32);
  in[0] = 0x45;
  in[3] = 32;  // total length
  in[8] = 64;
  in[9] = IPPROTO_UDP;
  std::memcpy(in + 12, address(qsrc).bytes.data(), 4);
  std::memcpy(in + 16, address(qdst).bytes.data(), 4);
  const uint16_t ipsum = rte_ipv4_cksum(reinterpret_cast<rte_ipv4_hdr*>(in));
  std::memcpy(in + 10, &ipsum, 2);
  const uint16_t sp = rte_cpu_to_be_16(qsport), dp = rte_cpu_to_be_16(qdport);
  std::memcpy(in + 20, &sp, 2);
  std::memcpy(in + 22, &dp, 2);
  in[25] = 12;  // UDP length
  const uint16_t usum = rte_ipv4_udptcp_cksum(reinterpret_cast<rte_ipv4_hdr*>(in), in + 20);
  std::memcpy(in + 26, &usum, 2);
  fill_l4_checksum(m);
  return m;
}

// What the error carries after the pipeline: the outer addresses, the quote's endpoints, and
// whether every checksum (outer IP, ICMP, quoted IP, quoted UDP) is right.
struct SeenError {
  Seen outer, quoted;
  bool quoted_ip_ok = false, quoted_udp_ok = false;
};
SeenError seen_error(rte_mbuf* m) {
  SeenError e;
  e.outer = seen(m);
  const uint8_t* in = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len + m->l3_len + 8);
  e.quoted.src = v4_text(in + 12);
  e.quoted.dst = v4_text(in + 16);
  e.quoted.sport = static_cast<uint16_t>(in[20] << 8 | in[21]);
  e.quoted.dport = static_cast<uint16_t>(in[22] << 8 | in[23]);
  e.quoted_ip_ok = rte_raw_cksum(in, 20) == 0xffff;
  uint32_t sum = uint32_t{rte_ipv4_phdr_cksum(reinterpret_cast<const rte_ipv4_hdr*>(in), 0)} +
                 rte_raw_cksum(in + 20, 12);
  sum = (sum & 0xffff) + (sum >> 16);
  e.quoted_udp_ok = (sum & 0xffff) + (sum >> 16) == 0xffff;
  return e;
}

// The server refuses a datagram the client sent through source NAT: the error reaches the
// client, about the datagram as the client sent it.
TEST_F(Nat, AnIcmpErrorAboutASourceNatedConnectionReachesTheClientTranslated) {
  build(snat_config());
  const auto out = run(frame(kClient, 5000, kServer, 53, kLan));
  ASSERT_TRUE(out);
  h.sinks.free_all();
  h.run({unreachable(kServer, kPool, kPool, out->sport, kServer, 53, kWan)});
  ASSERT_EQ(h.sinks.tx.size(), 1u);
  const SeenError e = seen_error(h.sinks.tx.front());
  EXPECT_EQ(e.outer.src, kServer);
  EXPECT_EQ(e.outer.dst, kClient);
  EXPECT_EQ(e.quoted.src, kClient);
  EXPECT_EQ(e.quoted.sport, 5000);
  EXPECT_EQ(e.quoted.dst, kServer);
  EXPECT_EQ(e.quoted.dport, 53);
  EXPECT_TRUE(e.outer.ip_sum_ok);
  EXPECT_TRUE(e.outer.l4_sum_ok);  // the ICMP checksum
  EXPECT_TRUE(e.quoted_ip_ok);
  EXPECT_TRUE(e.quoted_udp_ok);
  EXPECT_EQ(stage_->counters().marks[size_t(CtMark::Related)], 1u);
}

// A forwarded server refuses a datagram: the error leaves from the public address, about the
// datagram as its sender addressed it.
TEST_F(Nat, AnIcmpErrorFromAForwardedServerLeavesFromThePublicEndpoint) {
  ConntrackConfig c;
  c.dnat.push_back(forward(IPPROTO_UDP, 5353, 53, "wan"));
  build(c);
  const auto in = run(frame(kServer, 7000, kPool, 5353, kWan));
  ASSERT_TRUE(in);
  ASSERT_EQ(in->dst, kLanServer);
  h.sinks.free_all();
  h.run({unreachable(kLanServer, kServer, kServer, 7000, kLanServer, 53, kLan)});
  ASSERT_EQ(h.sinks.tx.size(), 1u);
  const SeenError e = seen_error(h.sinks.tx.front());
  EXPECT_EQ(e.outer.src, kPool);
  EXPECT_EQ(e.outer.dst, kServer);
  EXPECT_EQ(e.quoted.src, kServer);
  EXPECT_EQ(e.quoted.sport, 7000);
  EXPECT_EQ(e.quoted.dst, kPool);
  EXPECT_EQ(e.quoted.dport, 5353);
  EXPECT_TRUE(e.outer.ip_sum_ok);
  EXPECT_TRUE(e.outer.l4_sum_ok);
  EXPECT_TRUE(e.quoted_ip_ok);
  EXPECT_TRUE(e.quoted_udp_ok);
}

// Two workers run the stage at once, each on the flow buckets it holds, and the buckets change
// hands between rounds as a migration moves them (a barrier stands for the scheduler's
// hand-off). Each flow keeps the one external port it got, whichever worker sends its packets;
// its replies, hashed by the ports' rewrite, fall in the flow's own bucket and are translated
// back to it.
TEST(NatWorkers, TranslatedFlowsKeepTheirMappingAcrossWorkersAndMigrations) {
  VECFLOW_REQUIRE_EAL();
  Harness two(2);
  RouteConfig r;
  r.routes = {route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254")};
  ConntrackConfig c;
  SnatRuleConfig rule;
  rule.in_port = "lan";
  rule.to = pool(kPool);
  rule.ports = {20000, 29999};
  c.snat.push_back(rule);
  ASSERT_TRUE(two.build({stage("conntrack", c), stage("route", r, true)}));
  auto* st = two.pipeline->find<ConntrackStage>("conntrack");
  const NatMap& nat = *st->nat();
  constexpr uint16_t kFlows = 1024;
  constexpr unsigned kBuckets = 16;  // the rx adapter's flow buckets: hash & 15
  constexpr unsigned kRounds = 8;
  // Flow f: the client's port 10000 + f to the server's port 1024 + f (which names the flow
  // in what leaves).
  const auto original = [&](uint16_t f) {
    FrameSpec s;
    s.src = kClient, s.dst = kServer, s.sport = uint16_t(10000 + f), s.dport = uint16_t(1024 + f);
    s.port = kLan;
    rte_mbuf* m = make_frame(s);
    nat.apply(&m, 1);
    return m;
  };
  std::vector<std::vector<uint16_t>> flows_of(kBuckets);
  for (uint16_t f = 0; f < kFlows; ++f) {
    rte_mbuf* m = original(f);
    flows_of[m->hash.rss & (kBuckets - 1)].push_back(f);
    rte_pktmbuf_free(m);
  }
  std::vector<std::atomic<uint16_t>> ext(kFlows);  // the flow's external port, once seen
  std::atomic<uint64_t> wrong{0}, replies_back{0};
  std::barrier handoff(2);
  auto work = [&](unsigned slot) {
    CollectSinks sinks;
    for (unsigned round = 0; round < kRounds; ++round) {
      for (unsigned b = 0; b < kBuckets; ++b) {
        if ((b + round) % 2 != slot) continue;  // this round, bucket b is the other worker's
        std::vector<rte_mbuf*> vec;
        for (uint16_t f : flows_of[b]) {
          vec.push_back(original(f));
          const uint16_t port = ext[f].load();
          if (round % 2 == 1 && port != 0) {
            FrameSpec s;
            s.src = kServer, s.dst = kPool, s.sport = uint16_t(1024 + f), s.dport = port;
            s.port = kWan;
            rte_mbuf* m = make_frame(s);
            nat.apply(&m, 1);
            if ((m->hash.rss & (kBuckets - 1)) != b) ++wrong;  // not in its flow's bucket
            vec.push_back(m);
          }
        }
        two.workers[slot]->run_vector(0, vec, sinks);
        for (rte_mbuf* m : sinks.tx) {
          const Seen out = seen(m);
          if (out.dst == kServer) {  // an original: its flow's port never changes
            const uint16_t f = uint16_t(out.dport - 1024);
            uint16_t expected = 0;
            if (!ext[f].compare_exchange_strong(expected, out.sport) && expected != out.sport)
              ++wrong;
            if (out.src != kPool) ++wrong;
          } else {  // a reply: back to its flow's client port
            const uint16_t f = uint16_t(out.sport - 1024);
            if (out.dst != kClient || out.dport != 10000 + f) ++wrong;
            ++replies_back;
          }
        }
        sinks.free_all();
      }
      handoff.arrive_and_wait();
    }
  };
  std::thread w0(work, 0), w1(work, 1);
  w0.join();
  w1.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(replies_back.load(), uint64_t{kFlows} * (kRounds / 2));
  EXPECT_EQ(nat.ports_in_use(0, NatProto::Udp), kFlows);
  const auto all = st->sessions({});
  ASSERT_EQ(all.size(), kFlows);
  for (const auto& s : all) {
    EXPECT_TRUE(s.flags & kConnSnat);
    EXPECT_EQ(s.packets[0], kRounds);
    EXPECT_EQ(s.packets[1], kRounds / 2);
  }
}

std::string load_errors(const std::string& text) {
  auto cfg = config::load_config_text(text, "t.yaml", builtin_stage_types());
  std::string all;
  if (!cfg)
    for (const auto& e : cfg.error())
      all += e.to_string() + "\n";
  return all;
}

// Mistakes in `nat:` are refused at their key, located; the good form loads.
TEST(NatConfigTest, MistakesAreRefusedAtTheirKey) {
  const std::string sched = "scheduler:\n  flow_id: software\n";
  // What the keys say.
  std::string errors = load_errors(router_appliance(R"(  - stage: conntrack
    sched: atomic
    nat:
      snat:
        - {in_port: lan, to: 2001:db8::1, ports: 0-100}
        - {in_port: lan, src: 198.51.100.0/24}
        - {in_port: lan, to: [192.0.2.1, 192.0.2.9/30]}
        - {in_port: lan, to: 192.0.2.1, masquerade: wan}
      dnat:
        - {proto: sctp, dst: 192.0.2.1, dst_port: 80, to: 198.51.100.2}
        - {proto: udp, dst: 192.0.2.1, dst_port: 8082, to: 198.51.100.2, to_prt: 80}
)") + sched);
  for (const char* want :
       {"t.yaml:28:30: pipeline[3].nat.snat[0].to: NAT translates IPv4 only (NAT44)",
        "t.yaml:28:50: pipeline[3].nat.snat[0].ports: port 0 cannot be a source port",
        "t.yaml:29:11: pipeline[3].nat.snat[1]: give `to` (pool addresses) or `masquerade` (a "
        "port whose address to take), one of them",
        "t.yaml:30:42: pipeline[3].nat.snat[2].to[1]: invalid pool address '192.0.2.9/30': host "
        "bits set past /30 (did you mean 192.0.2.8/30?)",
        "t.yaml:31:11: pipeline[3].nat.snat[3]: give `to` (pool addresses) or `masquerade`",
        "t.yaml:33:19: pipeline[3].nat.dnat[0].proto: 'sctp' is not one of 'tcp' or 'udp'",
        "t.yaml:34:74: pipeline[3].nat.dnat[1].to_prt: unknown key 'to_prt' (did you mean "
        "'to_port'?)"}) {
    EXPECT_NE(errors.find(want), std::string::npos) << want << "\n" << errors;
  }
  // What the rest of the file must agree with: port names, one rule per public endpoint and
  // per target.
  errors = load_errors(router_appliance(R"(  - stage: conntrack
    sched: atomic
    nat:
      snat: [{in_port: dmz, to: 192.0.2.1}, {masquerade: dmz}, {to: 10.0.0.0/23}]
      dnat:
        - {proto: tcp, dst: 192.0.2.1, dst_port: 8080, to: 198.51.100.2, to_port: 80}
        - {proto: tcp, dst: 192.0.2.1, dst_port: 8080, to: 198.51.100.3, to_port: 80}
        - {proto: tcp, dst: 192.0.2.1, dst_port: 8081, to: 198.51.100.2, to_port: 80}
)") + sched);
  for (const char* want :
       {"t.yaml:27:24: pipeline[3].nat.snat[0].in_port: no port named 'dmz' (ports: wan, lan)",
        "t.yaml:30:11: pipeline[3].nat.dnat[1]: forwards the same public endpoint 192.0.2.1:8080 "
        "as dnat[0]",
        "t.yaml:31:11: pipeline[3].nat.dnat[2]: has the same target 198.51.100.2:80 as dnat[0]",
        "t.yaml:27:58: pipeline[3].nat.snat[1].masquerade: no port named 'dmz'",
        "t.yaml:27:13: pipeline[3].nat.snat: more than 255 pool addresses"}) {
    EXPECT_NE(errors.find(want), std::string::npos) << want << "\n" << errors;
  }
  // Two conntrack stages may not both translate: one flow hash rewrite serves the ports.
  errors = load_errors(router_appliance(R"(  - stage: conntrack
    sched: atomic
    nat: {snat: [{to: 192.0.2.1}]}
  - stage: conntrack
    sched: atomic
    nat: {snat: [{to: 192.0.2.2}]}
)") + sched);
  EXPECT_NE(errors.find("only one conntrack stage may translate"), std::string::npos) << errors;
  const std::string good = router_appliance(R"(  - stage: conntrack
    sched: atomic
    nat:
      snat: [{in_port: lan, src: 198.51.100.0/24, to: 192.0.2.1, ports: 20000-29999}]
      dnat: [{in_port: wan, proto: udp, dst: 192.0.2.1, dst_port: 53, to: 198.51.100.2}]
)") + sched;
  EXPECT_EQ(load_errors(good), "");
}

// Many internal endpoints take and drop mappings from two threads at once, some the same
// endpoints: every reference is counted, and when all are dropped every port is free.
TEST(NatMapTest, ConcurrentAcquireAndReleaseKeepEveryReference) {
  NatMap map({0x010200c0u}, {});
  constexpr unsigned kEndpoints = 300, kRounds = 20;
  std::barrier go(2);
  auto work = [&](unsigned t) {
    std::vector<std::pair<NatEndpoint, uint16_t>> held;
    go.arrive_and_wait();
    for (unsigned r = 0; r < kRounds; ++r) {
      for (unsigned e = 0; e < kEndpoints; ++e) {
        const NatEndpoint ep{0x0700a8c0u + (e << 24), static_cast<uint16_t>(1000 + e)};
        const auto port = map.acquire(0, NatProto::Udp, ep, 1024, 65535);
        ASSERT_TRUE(port) << t;
        EXPECT_EQ(map.internal(0, NatProto::Udp, *port), ep);
        held.emplace_back(ep, *port);
      }
      for (const auto& [ep, port] : held)
        map.release(0, NatProto::Udp, port);
      held.clear();
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(map.ports_in_use(0, NatProto::Udp), 0u);
}

// ---- VRFs: two tenants with the same addresses behind one uplink ----

// Ports: each tenant's LAN, and the uplink in the default VRF. Both tenants use 10.0.0.0/24 and
// leave through the uplink, source-NATed to one pool address.
constexpr uint16_t kRed = 0, kBlue = 1, kUplink = 2;
constexpr const char* kTenantHost = "10.0.0.5";

class NatVrf : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }

  static std::vector<PortInfo> ports() {
    std::vector<PortInfo> out;
    for (const char* name : {"red", "blue", "uplink"}) {
      const auto i = static_cast<uint8_t>(out.size());
      out.push_back(PortInfo{name, MacAddress{{0x02, 0xdd, 0, 0, 0, i}}, ""});
    }
    return out;
  }
  // conntrack (with `snat`: each tenant's LAN to kPool) and route: each tenant's VRF has its
  // LAN and a default route out of the uplink, a port of the default VRF.
  // `forward`: kPool:8080 at the uplink goes to kTenantHost:80 in red, reached from the default
  // VRF through a leak of red's LAN.
  void build(bool snat, bool forward = false) {
    config::VrfConfig red, blue;
    red.name = "red";
    red.ports = {"red"};
    blue.name = "blue";
    blue.ports = {"blue"};
    h.ctx.vrfs = {red, blue};
    ConntrackConfig ct;
    if (snat) {
      for (const char* lan : snat_lans) {
        SnatRuleConfig r;
        r.in_port = lan;
        r.src = prefix("10.0.0.0/24");
        r.to = pool(kPool);
        r.ports = {20000, 20099};
        ct.snat.push_back(r);
      }
    }
    if (forward) {
      DnatRuleConfig d;
      d.in_port = "uplink";
      d.proto = IPPROTO_TCP;
      d.dst = address(kPool);
      d.dst_port = 8080;
      d.to = address(kTenantHost);
      d.to_port = 80;
      ct.dnat.push_back(d);
    }
    RouteConfig r;
    if (forward) {
      StaticRoute to_red;
      to_red.prefix = prefix("10.0.0.0/24");
      NextHop nh;
      nh.vrf = "red";
      to_red.nexthops.push_back(nh);
      r.routes.push_back(to_red);
    }
    for (const char* vrf : {"red", "blue"}) {
      StaticRoute lan = route("10.0.0.0/24", vrf),
                  out = route("0.0.0.0/0", "uplink", "192.0.2.254");
      lan.vrf = out.vrf = vrf;
      r.routes.push_back(lan);
      r.routes.push_back(out);
    }
    r.routes.push_back(route("0.0.0.0/0", "uplink", "192.0.2.254"));
    r.icmp_unreachable = false;
    ASSERT_TRUE(h.build({stage("conntrack", ct), stage("route", r, true)}));
    stage_ = h.pipeline->find<ConntrackStage>("conntrack");
    ASSERT_NE(stage_, nullptr);
  }
  rte_mbuf* frame(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport,
                  uint16_t port, uint8_t proto = IPPROTO_UDP, uint8_t tcp_flags = 0) {
    if (stage_->nat() != nullptr)
      return nat_frame(*stage_->nat(), src, sport, dst, dport, port, proto, tcp_flags);
    FrameSpec s;
    s.src = src, s.dst = dst, s.sport = sport, s.dport = dport, s.port = port;
    s.proto = IPPROTO_UDP;
    return make_frame(s);
  }
  // Runs one packet: what left and by which port (nullopt when nothing did).
  std::optional<std::pair<Seen, uint16_t>> run(rte_mbuf* m) {
    h.sinks.free_all();
    h.run({m});
    if (h.sinks.tx.empty()) return std::nullopt;
    rte_mbuf* out = h.sinks.tx.front();
    return std::pair{seen(out), meta(out).out_port};
  }
  size_t sessions_in(const std::string& vrf) const {
    const auto names = stage_->zone_names();
    const auto it = std::ranges::find(names, vrf);
    if (it == names.end()) return 0;
    SessionFilter f;
    f.zone = static_cast<uint8_t>(it - names.begin());
    return stage_->sessions(f).size();
  }

  Harness h{1, ports()};
  ConntrackStage* stage_ = nullptr;
  std::vector<const char*> snat_lans = {"red", "blue"};  // the LANs build(true) translates
};

// The issue's case: both tenants' 10.0.0.5:4000 talk to one server through the shared uplink.
// They are two connections, with two mappings on the pool address, and each reply is de-NATed
// into its own tenant's session and routed in that tenant's VRF, out of its own LAN (the
// uplink's VRF has no route to 10.0.0.0/24 but its default one back out of the uplink).
TEST_F(NatVrf, TenantsWithTheSameAddressesShareAnUplinkThroughSourceNat) {
  build(true);
  const auto red = run(frame(kTenantHost, 4000, kServer, 53, kRed));
  const auto blue = run(frame(kTenantHost, 4000, kServer, 53, kBlue));
  ASSERT_TRUE(red && blue);
  EXPECT_EQ(red->second, kUplink);
  EXPECT_EQ(blue->second, kUplink);
  EXPECT_EQ(red->first.src, kPool);
  EXPECT_EQ(blue->first.src, kPool);
  EXPECT_NE(red->first.sport, blue->first.sport);
  EXPECT_EQ(stage_->nat()->ports_in_use(0, NatProto::Udp), 2u);
  EXPECT_EQ(sessions_in("red"), 1u);
  EXPECT_EQ(sessions_in("blue"), 1u);
  EXPECT_EQ(sessions_in("default"), 0u);

  // The replies, blue's first: each goes back to its tenant, translated, checksums right.
  for (const auto& [tenant, out_port] : {std::pair{blue, kBlue}, std::pair{red, kRed}}) {
    rte_mbuf* reply = frame(kServer, 53, kPool, tenant->first.sport, kUplink);
    const auto back = run(reply);
    ASSERT_TRUE(back) << out_port;
    EXPECT_EQ(back->second, out_port);
    EXPECT_EQ(back->first.dst, kTenantHost);
    EXPECT_EQ(back->first.dport, 4000);
    EXPECT_EQ(back->first.src, kServer);
    EXPECT_TRUE(back->first.ip_sum_ok);
    EXPECT_TRUE(back->first.l4_sum_ok);
  }
  // Both sessions saw their reply.
  for (const auto& s : stage_->sessions({})) {
    EXPECT_EQ(s.state, ConnState::UdpAssured);
    EXPECT_EQ(s.packets[1], 1u);
  }
  // A second run of each flow takes the fast path (an established datagram): still apart.
  for (int round = 0; round < 2; ++round) {
    const auto again = run(frame(kTenantHost, 4000, kServer, 53, kRed));
    ASSERT_TRUE(again);
    EXPECT_EQ(again->first.sport, red->first.sport);
    const auto back = run(frame(kServer, 53, kPool, blue->first.sport, kUplink));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->second, kBlue);
  }
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// A reload that removes red keeps blue's id: blue's session, keyed by that id, still takes its
// replies home, and red's place is retired (its session's replies route nowhere).
// Fragments without reassembly remember a first fragment's outcome by its datagram, and the
// datagram's identity includes its zone: red (translated) and blue (not) send the same
// datagram, addresses and IP id alike, at the same moment; each tenant's later fragments leave
// as its own first fragment did, red's never with blue's internal source.
TEST_F(NatVrf, TwoTenantsFragmentsOfTheSameDatagramLeaveAsTheirOwnFirstFragment) {
  snat_lans = {"red"};
  build(true);
  auto red = fragmented(*stage_, kTenantHost, 4000, kServer, 53, kRed, 77);
  auto blue = fragmented(*stage_, kTenantHost, 4000, kServer, 53, kBlue, 77);
  h.sinks.free_all();
  h.run({red[0], blue[0]});
  h.run({red[1], red[2], blue[1], blue[2]});
  ASSERT_EQ(h.sinks.tx.size(), 6u);
  std::vector<rte_mbuf*> red_out, blue_out;
  for (rte_mbuf* m : h.sinks.tx)
    (seen(m).src == kPool ? red_out : blue_out).push_back(m);
  ASSERT_EQ(red_out.size(), 3u) << "red's three fragments, all translated";
  ASSERT_EQ(blue_out.size(), 3u);
  const Reassembled r = reassemble(red_out);
  EXPECT_TRUE(r.same_addresses);
  EXPECT_TRUE(r.ip_sums_ok);
  EXPECT_TRUE(r.udp_sum_ok);
  for (rte_mbuf* m : blue_out)
    EXPECT_EQ(seen(m).src, kTenantHost);
  EXPECT_EQ(stage_->counters().fragments_known, 4u);
  EXPECT_EQ(stage_->counters().fragments_unknown, 0u);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

TEST_F(NatVrf, AReloadRemovingAVrfKeepsTheOthersSessionsGoing) {
  build(true);
  const auto red = run(frame(kTenantHost, 4000, kServer, 53, kRed));
  const auto blue = run(frame(kTenantHost, 4000, kServer, 53, kBlue));
  ASSERT_TRUE(red && blue);
  auto* rs = h.pipeline->find<RouteStage>("route");
  ASSERT_NE(rs, nullptr);
  std::vector<StaticRoute> blue_routes;
  for (const auto& r : rs->config_routes()) {
    if (r.vrf != "red") blue_routes.push_back(r);
  }
  const auto next = keep_vrf_ids(rs->vrfs(), {h.ctx.vrfs[1]});
  ASSERT_TRUE(rs->replace_vrfs(next, blue_routes));
  ASSERT_TRUE(stage_->replace_vrfs(next));
  EXPECT_EQ(stage_->zone_names(), (std::vector<std::string>{"default", "", "blue"}));

  const auto back = run(frame(kServer, 53, kPool, blue->first.sport, kUplink));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->second, kBlue);
  EXPECT_EQ(back->first.dst, kTenantHost);
  EXPECT_FALSE(run(frame(kServer, 53, kPool, red->first.sport, kUplink)));
  // blue's new connections go on in its zone.
  ASSERT_TRUE(run(frame(kTenantHost, 4001, kServer, 53, kBlue)));
  EXPECT_EQ(sessions_in("blue"), 2u);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// Without NAT: the same five-tuple in two VRFs is two sessions, each established by its own
// tenant's reply, and a reply in one VRF does not make the other's established.
TEST_F(NatVrf, TheSameConnectionInTwoVrfsIsTwoSessions) {
  build(false);
  ASSERT_TRUE(run(frame(kTenantHost, 4000, kServer, 53, kRed)));
  ASSERT_TRUE(run(frame(kTenantHost, 4000, kServer, 53, kBlue)));
  EXPECT_EQ(sessions_in("red"), 1u);
  EXPECT_EQ(sessions_in("blue"), 1u);
  // The server's answer comes back on red's port (red's server is on its LAN here).
  rte_mbuf* reply = frame(kServer, 53, kTenantHost, 4000, kRed);
  h.run_one(reply);
  for (const auto& s : stage_->sessions({})) {
    const bool is_red = s.key.zone == 1;
    EXPECT_EQ(s.state, is_red ? ConnState::UdpAssured : ConnState::UdpUnreplied) << is_red;
  }
}

// Port forwarding into a tenant: the connection enters at the uplink (the default VRF's zone),
// reaches red's server through a leak, and the server's answer, arriving in red, finds the
// session in the uplink's zone: it leaves from the public endpoint, routed in the default VRF.
TEST_F(NatVrf, PortForwardingIntoATenantsVrfTranslatesTheAnswers) {
  build(true, true);
  const auto in = run(frame(kServer, 5555, kPool, 8080, kUplink, IPPROTO_TCP, kSyn));
  ASSERT_TRUE(in);
  EXPECT_EQ(in->second, kRed);
  EXPECT_EQ(in->first.dst, kTenantHost);
  EXPECT_EQ(in->first.dport, 80);
  const auto out = run(frame(kTenantHost, 80, kServer, 5555, kRed, IPPROTO_TCP, kSyn | kAck));
  ASSERT_TRUE(out);
  EXPECT_EQ(out->second, kUplink);
  EXPECT_EQ(out->first.src, kPool);
  EXPECT_EQ(out->first.sport, 8080);
  EXPECT_TRUE(out->first.l4_sum_ok);
  const auto all = stage_->sessions({});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key.zone, 0);
  EXPECT_EQ(all[0].state, ConnState::TcpSynRecv);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

// Across a route leak without NAT the replies arrive in the other VRF: apart, they look new
// there and the tenant's session never sees one; with red sharing the default VRF's zone
// (conntrack_zone: default, here by a reload of the VRFs) the reply finds red's session.
TEST_F(NatVrf, AVrfSharingTheUplinksZoneSeesItsRepliesAcrossALeak) {
  build(false);
  ASSERT_TRUE(run(frame(kTenantHost, 4000, kServer, 53, kRed)));
  h.run_one(frame(kServer, 53, kTenantHost, 4000, kUplink));
  auto all = stage_->sessions({});
  ASSERT_EQ(all.size(), 2u);  // red's, unreplied, and the reply taken for a new one
  for (const auto& s : all)
    EXPECT_EQ(s.state, ConnState::UdpUnreplied);

  auto vrfs = h.ctx.vrfs;
  vrfs[0].conntrack_zone = "default";
  ASSERT_TRUE(stage_->replace_vrfs(vrfs));
  ASSERT_TRUE(run(frame(kTenantHost, 4001, kServer, 53, kRed)));
  h.run_one(frame(kServer, 53, kTenantHost, 4001, kUplink));
  all = stage_->sessions({});
  ASSERT_EQ(all.size(), 3u);
  const auto shared = std::ranges::find_if(
      all, [](const ConnSnapshot& s) { return s.key.src_port == rte_cpu_to_be_16(4001); });
  ASSERT_NE(shared, all.end());
  EXPECT_EQ(shared->key.zone, kDefaultVrfId);
  EXPECT_EQ(shared->state, ConnState::UdpAssured);
  EXPECT_EQ(shared->packets[1], 1u);
}

// A mapping carries its endpoint's zone: the same endpoint in two zones is two mappings, and a
// mapping serves at most 255 sessions at once before its endpoint is given another.
TEST(NatMapTest, AMappingIsOneZonesAndHoldsAtMost255Sessions) {
  NatMap map({0x010200c0u}, {});
  const NatEndpoint red{0x0500000au, 4000, 1}, blue{0x0500000au, 4000, 2};
  const auto r = map.acquire(0, NatProto::Udp, red, 1024, 65535);
  const auto b = map.acquire(0, NatProto::Udp, blue, 1024, 65535);
  ASSERT_TRUE(r && b);
  EXPECT_NE(*r, *b);
  EXPECT_EQ(map.internal(0, NatProto::Udp, *r), red);
  EXPECT_EQ(map.internal(0, NatProto::Udp, *b), blue);
  for (int i = 1; i < 255; ++i)
    EXPECT_EQ(map.acquire(0, NatProto::Udp, red, 1024, 65535), r);
  const auto more = map.acquire(0, NatProto::Udp, red, 1024, 65535);
  ASSERT_TRUE(more);
  EXPECT_NE(*more, *r);
  EXPECT_EQ(map.internal(0, NatProto::Udp, *more), red);
  for (int i = 0; i < 255; ++i)
    map.release(0, NatProto::Udp, *r);
  EXPECT_FALSE(map.internal(0, NatProto::Udp, *r));
  EXPECT_EQ(map.ports_in_use(0, NatProto::Udp), 2u);
}

}  // namespace
