// The conntrack stage and its table: connection states and marks for TCP, UDP, ICMP echo and
// ICMP errors, the TCP window check, the table's limit and expiry, and a stateful firewall
// (conntrack + acl with ct: and in_port:).

#include <algorithm>
#include <barrier>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <rte_cycles.h>
#include <rte_tcp.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/acl/acl_stage.h"
#include "pipeline/conntrack/conntrack_stage.h"
#include "pipeline/conntrack/fragment_table.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"
#include "support/appliances.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kAck = 0x10;

class Conntrack : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }

  // conntrack, then (fused) an acl if given, then the route stage: what goes on is routed and
  // sent, so every packet ends in the sinks or under a drop reason.
  void build(ConntrackConfig ct = {}, std::optional<AclConfig> acl = std::nullopt) {
    RouteConfig r;
    r.routes = {route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254"),
                route("2001:db8:2::/64", "lan"), route("::/0", "wan", "2001:db8:1::1")};
    std::vector<config::StageConfig> stages = {stage("conntrack", ct)};
    if (acl) stages.push_back(stage("acl", *acl, true));
    stages.push_back(stage("route", r, true));
    ASSERT_TRUE(h.build(stages));
    stage_ = h.pipeline->find<ConntrackStage>("conntrack");
    ASSERT_NE(stage_, nullptr);
  }

  // Runs one packet; returns its mark, and whether it was sent.
  CtMark run(rte_mbuf* m, bool* sent = nullptr) {
    h.sinks.free_all();
    h.run({m});
    const bool out = !h.sinks.tx.empty();
    if (sent) *sent = out;
    // A dropped packet is freed by the runner: its mark is read from the counters instead.
    const ConntrackCounters now = stage_->counters();
    CtMark mark = CtMark::None;
    for (size_t c = 0; c < kCtMarkCount; ++c)
      if (now.marks[c] != last_.marks[c]) mark = static_cast<CtMark>(c);
    last_ = now;
    return mark;
  }

  std::vector<ConnSnapshot> sessions() const { return stage_->sessions({}); }

  // A stateful firewall: replies in, new connections from lan only, the rest denied.
  static AclConfig firewall() {
    AclConfig acl;
    acl.default_action = AclAction::Deny;
    AclRule back;
    back.name = "established";
    back.action = AclAction::Permit;
    back.ct = {CtMark::Established, CtMark::Related};
    AclRule out;
    out.name = "new-from-lan";
    out.action = AclAction::Permit;
    out.ct = {CtMark::New};
    out.in_port = "lan";
    acl.rules = {back, out};
    return acl;
  }

  Harness h;
  ConntrackStage* stage_ = nullptr;
  ConntrackCounters last_;
};

// A TCP segment from lan host 198.51.100.7:40000 to wan host 203.0.113.5:80 (or back).
rte_mbuf* tcp(bool from_lan, uint8_t flags, uint32_t seq, uint32_t ack, uint16_t payload = 0,
              uint16_t win = 65535, uint16_t lan_port = 40000) {
  FrameSpec s;
  s.proto = IPPROTO_TCP;
  s.payload = payload;
  if (from_lan) {
    s.src = "198.51.100.7", s.dst = "203.0.113.5", s.sport = lan_port, s.dport = 80, s.port = kLan;
  } else {
    s.src = "203.0.113.5", s.dst = "198.51.100.7", s.sport = 80, s.dport = lan_port, s.port = kWan;
  }
  rte_mbuf* m = make_frame(s);
  auto* t = rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, m->l2_len + m->l3_len);
  t->sent_seq = rte_cpu_to_be_32(seq);
  t->recv_ack = rte_cpu_to_be_32(ack);
  t->tcp_flags = flags;
  t->rx_win = rte_cpu_to_be_16(win);
  return m;
}

// A UDP packet between lan host 198.51.100.7 (2001:db8:2::7) and wan host 203.0.113.5
// (2001:db8:9::5), from lan port `lan_port` to wan port 53 or back.
FrameSpec udp_spec(bool from_lan, uint16_t lan_port = 5353, uint8_t version = 4) {
  FrameSpec s;
  s.version = version;
  const std::string lan = version == 4 ? "198.51.100.7" : "2001:db8:2::7";
  const std::string wan = version == 4 ? "203.0.113.5" : "2001:db8:9::5";
  if (from_lan) {
    s.src = lan, s.dst = wan, s.sport = lan_port, s.dport = 53, s.port = kLan;
  } else {
    s.src = wan, s.dst = lan, s.sport = 53, s.dport = lan_port, s.port = kWan;
  }
  return s;
}

rte_mbuf* udp(bool from_lan, uint16_t lan_port = 5353, uint8_t version = 4) {
  return make_frame(udp_spec(from_lan, lan_port, version));
}

// An ICMP echo request (lan -> wan) or reply (wan -> lan) with identifier `id`.
rte_mbuf* echo(bool request, uint16_t id, uint8_t version = 4) {
  FrameSpec s;
  s.version = version;
  s.proto = version == 4 ? uint8_t{IPPROTO_ICMP} : uint8_t{IPPROTO_ICMPV6};
  const std::string lan = version == 4 ? "198.51.100.7" : "2001:db8:2::7";
  const std::string wan = version == 4 ? "203.0.113.5" : "2001:db8:9::5";
  s.src = request ? lan : wan;
  s.dst = request ? wan : lan;
  s.port = request ? kLan : kWan;
  rte_mbuf* m = make_frame(s);
  uint8_t* l4 = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len);
  l4[0] = request ? (version == 4 ? 8 : 128) : (version == 4 ? 0 : 129);
  const uint16_t be = rte_cpu_to_be_16(id);
  std::memcpy(l4 + 4, &be, 2);
  return m;
}

// A destination unreachable from router 192.0.2.254 to the lan host, quoting a UDP packet the
// lan host sent from `lan_port` to 203.0.113.5:53.
rte_mbuf* unreachable(uint16_t lan_port) {
  FrameSpec s;
  s.proto = IPPROTO_ICMP;
  s.src = "192.0.2.254", s.dst = "198.51.100.7", s.port = kWan;
  s.payload = 28;
  rte_mbuf* m = make_frame(s);
  uint8_t* l4 = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len);
  l4[0] = 3;
  l4[1] = 3;  // port unreachable
  uint8_t* in = l4 + 8;
  in[0] = 0x45;
  in[9] = IPPROTO_UDP;
  const IpAddress a = address("198.51.100.7"), b = address("203.0.113.5");
  std::memcpy(in + 12, a.bytes.data(), 4);
  std::memcpy(in + 16, b.bytes.data(), 4);
  const uint16_t sp = rte_cpu_to_be_16(lan_port), dp = rte_cpu_to_be_16(53);
  std::memcpy(in + 20, &sp, 2);
  std::memcpy(in + 22, &dp, 2);
  return m;
}

TEST_F(Conntrack, TcpHandshakeDataAndCloseWalkTheStates) {
  build();
  EXPECT_EQ(run(tcp(true, kSyn, 1000, 0)), CtMark::New);
  ASSERT_EQ(sessions().size(), 1u);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpSynSent);
  EXPECT_EQ(run(tcp(true, kSyn, 1000, 0)), CtMark::New);  // retransmitted
  EXPECT_EQ(run(tcp(false, kSyn | kAck, 5000, 1001)), CtMark::Established);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpSynRecv);
  EXPECT_EQ(run(tcp(true, kAck, 1001, 5001)), CtMark::Established);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpEstablished);
  EXPECT_EQ(run(tcp(true, kAck, 1001, 5001, 100)), CtMark::Established);
  EXPECT_EQ(run(tcp(false, kAck, 5001, 1101, 200)), CtMark::Established);
  EXPECT_EQ(run(tcp(true, kFin | kAck, 1101, 5201)), CtMark::Established);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpFinWait);
  EXPECT_EQ(run(tcp(false, kFin | kAck, 5201, 1102)), CtMark::Established);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpTimeWait);
  EXPECT_EQ(run(tcp(true, kAck, 1102, 5202)), CtMark::Established);

  const ConnSnapshot s = sessions()[0];
  EXPECT_EQ(s.packets[0], 6u);  // SYN x2, ACK, data, FIN, last ACK
  EXPECT_EQ(s.packets[1], 3u);
  EXPECT_EQ(s.key.src_port, rte_cpu_to_be_16(40000));  // the originator's view
  EXPECT_EQ(stage_->counters().created, 1u);

  // The port pair is used again: a new SYN starts a new connection in the same session.
  EXPECT_EQ(run(tcp(true, kSyn, 90000, 0)), CtMark::New);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpSynSent);
  EXPECT_EQ(sessions()[0].packets[0], 1u);
}

TEST_F(Conntrack, SegmentsOutsideTheWindowAndImpossibleOnesAreInvalid) {
  ConntrackConfig c;
  c.drop_invalid = true;
  build(c);
  ASSERT_EQ(run(tcp(true, kSyn, 1000, 0)), CtMark::New);
  ASSERT_EQ(run(tcp(false, kSyn | kAck, 5000, 1001, 0, 1000)), CtMark::Established);
  ASSERT_EQ(run(tcp(true, kAck, 1001, 5001, 0, 1000)), CtMark::Established);

  bool sent = true;
  // Far past what the other side allowed (ack + window).
  EXPECT_EQ(run(tcp(true, kAck, 1001 + 500000, 5001), &sent), CtMark::Invalid);
  EXPECT_FALSE(sent);
  // Acknowledging data the other side never sent.
  EXPECT_EQ(run(tcp(true, kAck, 1001, 5001 + 100000), &sent), CtMark::Invalid);
  EXPECT_FALSE(sent);
  // A reset outside the window does not close the connection.
  EXPECT_EQ(run(tcp(false, kRst | kAck, 5001 + 900000, 1001), &sent), CtMark::Invalid);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpEstablished);
  // SYN and FIN together; no flags at all.
  EXPECT_EQ(run(tcp(true, kSyn | kFin, 1001, 0), &sent), CtMark::Invalid);
  EXPECT_EQ(run(tcp(true, 0, 1001, 0), &sent), CtMark::Invalid);
  // A reset or SYN/ACK for no connection.
  EXPECT_EQ(run(tcp(false, kRst, 1, 0, 0, 65535, 40001), &sent), CtMark::Invalid);
  EXPECT_EQ(run(tcp(false, kSyn | kAck, 1, 0, 0, 65535, 40002), &sent), CtMark::Invalid);
  EXPECT_EQ(sessions().size(), 1u);
  // An in-window reset closes it.
  EXPECT_EQ(run(tcp(false, kRst | kAck, 5001, 1001), &sent), CtMark::Established);
  EXPECT_TRUE(sent);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpClose);

  const AccountingSnapshot a = h.accounting();
  EXPECT_EQ(a.drops[size_t(DropReason::CT_INVALID)], 7u);
  EXPECT_EQ(a.unaccounted(), 0) << a.to_string();
}

TEST_F(Conntrack, MidStreamTcpIsPickedUpAsANewConnection) {
  build();
  EXPECT_EQ(run(tcp(true, kAck, 77777, 88888, 10)), CtMark::New);
  EXPECT_EQ(run(tcp(false, kAck, 88888, 77787, 10)), CtMark::Established);
  EXPECT_EQ(sessions()[0].state, ConnState::TcpEstablished);
}

TEST_F(Conntrack, UdpIsNewUntilAReplyThenAssured) {
  build();
  EXPECT_EQ(run(udp(true)), CtMark::New);
  EXPECT_EQ(run(udp(true)), CtMark::New);
  EXPECT_EQ(sessions()[0].state, ConnState::UdpUnreplied);
  EXPECT_EQ(run(udp(false)), CtMark::Established);
  EXPECT_EQ(run(udp(true)), CtMark::Established);
  EXPECT_EQ(sessions()[0].state, ConnState::UdpAssured);
  // Another source port is another connection.
  EXPECT_EQ(run(udp(true, 5354)), CtMark::New);
  EXPECT_EQ(sessions().size(), 2u);
}

TEST_F(Conntrack, IcmpEchoIsTrackedByIdentifierAndUnaskedRepliesAreInvalid) {
  build();
  for (uint8_t v : {4, 6}) {
    SCOPED_TRACE(int{v});
    EXPECT_EQ(run(echo(true, 7, v)), CtMark::New);
    EXPECT_EQ(run(echo(false, 7, v)), CtMark::Established);
    EXPECT_EQ(run(echo(false, 8, v)), CtMark::Invalid);  // nobody asked with id 8
  }
  const auto all = sessions();
  ASSERT_EQ(all.size(), 2u);
  for (const auto& s : all)
    EXPECT_EQ(s.state, ConnState::IcmpReplied);
}

TEST_F(Conntrack, IcmpErrorsAboutATrackedConnectionAreRelated) {
  build();
  ASSERT_EQ(run(udp(true, 6000)), CtMark::New);
  EXPECT_EQ(run(unreachable(6000)), CtMark::Related);
  EXPECT_EQ(run(unreachable(6001)), CtMark::Invalid);  // about no known connection
  EXPECT_EQ(sessions().size(), 1u);                    // errors open no session
}

TEST_F(Conntrack, AFullTableRefusesNewConnectionsAndKeepsTheOnesItHas) {
  ConntrackConfig c;
  c.max_sessions = 4;
  build(c);
  for (uint16_t p = 0; p < 4; ++p)
    ASSERT_EQ(run(udp(true, static_cast<uint16_t>(7000 + p))), CtMark::New);
  bool sent = true;
  EXPECT_EQ(run(udp(true, 7004), &sent), CtMark::None);
  EXPECT_FALSE(sent);
  EXPECT_EQ(stage_->counters().table_full, 1u);
  // The sessions it has still work, both ways.
  EXPECT_EQ(run(udp(false, 7002), &sent), CtMark::Established);
  EXPECT_TRUE(sent);
  const AccountingSnapshot a = h.accounting();
  EXPECT_EQ(a.drops[size_t(DropReason::CT_TABLE_FULL)], 1u);
  EXPECT_EQ(a.unaccounted(), 0) << a.to_string();
}

TEST_F(Conntrack, BothDirectionsShareASessionWhicheverWorkerRunsThem) {
  // The flow bucket moved between two workers (a migration): the session is found by the
  // other worker, because it belongs to the flow bucket, not to a worker.
  Harness two(2);
  ASSERT_TRUE(two.build({stage("conntrack", ConntrackConfig{})}));
  auto* st = two.pipeline->find<ConntrackStage>("conntrack");
  two.run({tcp(true, kSyn, 1, 0)}, 0);
  two.run({tcp(false, kSyn | kAck, 9, 2)}, 1);
  two.run({tcp(true, kAck, 2, 10)}, 0);
  ASSERT_EQ(st->sessions({}).size(), 1u);
  EXPECT_EQ(st->sessions({}).front().state, ConnState::TcpEstablished);
  const ConntrackCounters c = st->counters();
  EXPECT_EQ(c.marks[size_t(CtMark::New)], 1u);
  EXPECT_EQ(c.marks[size_t(CtMark::Established)], 2u);
}

// Two workers run the stage at once, each on the flow buckets it holds, and the buckets change
// hands between rounds as a migration moves them (a barrier stands for the scheduler's
// hand-off). Every connection keeps one session whose counts and state add up, whichever
// worker saw which of its packets: the state belongs to the flow bucket.
TEST_F(Conntrack, SessionsFollowTheirFlowBucketAcrossConcurrentWorkers) {
  Harness two(2);
  RouteConfig r;
  r.routes = {route("0.0.0.0/0", "wan", "192.0.2.254"), route("198.51.100.0/24", "lan")};
  ASSERT_TRUE(two.build({stage("conntrack", ConntrackConfig{}), stage("route", r, true)}));
  auto* st = two.pipeline->find<ConntrackStage>("conntrack");
  constexpr uint16_t kFlows = 2048;
  constexpr unsigned kBuckets = 16;  // the rx adapter's flow buckets: hash & 15
  constexpr unsigned kRounds = 8;
  // Round r: the originator's packet of every flow; odd rounds also the reply.
  std::vector<std::vector<uint16_t>> flows_of(kBuckets);  // lan ports by flow bucket
  for (uint16_t f = 0; f < kFlows; ++f) {
    rte_mbuf* m = udp(true, static_cast<uint16_t>(10000 + f));
    flows_of[m->hash.rss & (kBuckets - 1)].push_back(static_cast<uint16_t>(10000 + f));
    rte_pktmbuf_free(m);
  }
  std::barrier handoff(2);
  auto work = [&](unsigned slot) {
    CollectSinks sinks;
    for (unsigned round = 0; round < kRounds; ++round) {
      for (unsigned b = 0; b < kBuckets; ++b) {
        if ((b + round) % 2 != slot) continue;  // this round, bucket b is the other worker's
        std::vector<rte_mbuf*> vec;
        for (uint16_t lan_port : flows_of[b]) {
          for (bool reply : {false, true}) {
            if (reply && round % 2 == 0) continue;
            vec.push_back(udp(!reply, lan_port));
            if (vec.size() == 64) {
              two.workers[slot]->run_vector(0, vec, sinks);
              sinks.free_all();
              vec.clear();
            }
          }
        }
        if (!vec.empty()) two.workers[slot]->run_vector(0, vec, sinks);
        sinks.free_all();
      }
      handoff.arrive_and_wait();
    }
  };
  std::thread w0(work, 0), w1(work, 1);
  w0.join();
  w1.join();

  const auto all = st->sessions({});
  ASSERT_EQ(all.size(), kFlows);
  for (const auto& s : all) {
    ASSERT_EQ(s.packets[0], kRounds) << rte_be_to_cpu_16(s.key.src_port);
    ASSERT_EQ(s.packets[1], kRounds / 2);
    ASSERT_EQ(s.state, ConnState::UdpAssured);
  }
  const ConntrackCounters c = st->counters();
  EXPECT_EQ(c.created, kFlows);
  EXPECT_EQ(c.table_full, 0u);
  // New: the originator's packets of rounds 0 and 1, before the first reply; the rest after.
  EXPECT_EQ(c.marks[size_t(CtMark::New)], 2u * kFlows);
  EXPECT_EQ(c.marks[size_t(CtMark::Established)], uint64_t{kFlows} * (kRounds + kRounds / 2 - 2));
  EXPECT_EQ(st->table().in_use(), kFlows);
}

TEST_F(Conntrack, AStatefulFirewallLetsRepliesInAndRefusesNewConnectionsFromWan) {
  build({}, firewall());

  bool sent = false;
  EXPECT_EQ(run(udp(true, 8000), &sent), CtMark::New);
  EXPECT_TRUE(sent);
  EXPECT_EQ(run(udp(false, 8000), &sent), CtMark::Established);
  EXPECT_TRUE(sent);
  EXPECT_EQ(run(unreachable(8000), &sent), CtMark::Related);
  EXPECT_TRUE(sent);
  // From wan, nothing new gets in: a SYN, a UDP packet to another port.
  EXPECT_EQ(run(tcp(false, kSyn, 1, 0), &sent), CtMark::New);
  EXPECT_FALSE(sent);
  EXPECT_EQ(run(udp(false, 8001), &sent), CtMark::New);
  EXPECT_FALSE(sent);
  const auto rules = h.pipeline->find<AclStage>("acl")->rules();
  EXPECT_EQ(rules[0].count.packets, 2u);
  EXPECT_EQ(rules[1].count.packets, 1u);
  EXPECT_EQ(rules[2].count.packets, 2u);  // default: deny
  const AccountingSnapshot a = h.accounting();
  EXPECT_EQ(a.drops[size_t(DropReason::ACL_DENY)], 2u);
  EXPECT_EQ(a.unaccounted(), 0) << a.to_string();
}

// A reply too large for one packet arrives in fragments; only the first carries the ports
// that name its connection. The later ones take what the first became (through the ports'
// receive-side hash and the stage's fragment table): the firewall lets the whole reply in,
// and keeps a whole unasked datagram out. IPv4 and IPv6 (whose fragment header carries a
// 32-bit identification; the two datagrams of each version share their low 16 bits).
TEST_F(Conntrack, AStatefulFirewallTakesAFragmentedReplyWholeAndAnUnaskedOneNot) {
  build({}, firewall());
  for (const uint8_t version : {4, 6}) {
    SCOPED_TRACE(version);
    ASSERT_EQ(run(udp(true, 8000, version)), CtMark::New);
    const auto from_wan = [&](uint16_t lan_port, uint32_t id) {
      std::vector<rte_mbuf*> f =
          make_fragments(udp_spec(false, lan_port, version), id, {24, 16, 8});
      stage_->flow_hash_rewrite()->apply(f.data(), static_cast<uint16_t>(f.size()));
      return f;
    };
    const std::vector<rte_mbuf*> reply = from_wan(8000, 0x10001);
    EXPECT_EQ(reply[1]->hash.rss, reply[0]->hash.rss);
    EXPECT_EQ(reply[2]->hash.rss, reply[0]->hash.rss);
    for (rte_mbuf* m : reply) {
      bool sent = false;
      EXPECT_EQ(run(m, &sent), CtMark::Established);
      EXPECT_TRUE(sent);
    }
    for (rte_mbuf* m : from_wan(8001, version == 4 ? 2 : 0x20001)) {
      bool sent = true;
      EXPECT_EQ(run(m, &sent), CtMark::New);
      EXPECT_FALSE(sent);
    }
  }
  // Per version: the connection, and the unasked datagram's first fragment.
  EXPECT_EQ(sessions().size(), 4u);
  EXPECT_EQ(stage_->counters().fragments_known, 8u);
  const AccountingSnapshot a = h.accounting();
  EXPECT_EQ(a.drops[size_t(DropReason::ACL_DENY)], 6u);
  EXPECT_EQ(a.unaccounted(), 0) << a.to_string();
}

// The errors a file gets, one string.
std::string load_errors(const std::string& text) {
  auto cfg = config::load_config_text(text, "t.yaml", builtin_stage_types());
  std::string all;
  if (!cfg)
    for (const auto& e : cfg.error())
      all += e.to_string() + "\n";
  return all;
}

TEST(ConntrackConfigTest, TheFileMustGiveTheStageWhatItsTableNeeds) {
  // What the keys say, located.
  std::string errors = load_errors(router_appliance(R"(  - stage: conntrack
    timeouts: {udp_assured: 60, tcp_establshed: 10}
  - stage: acl
    fuse: true
    rules:
      - {action: permit, ct: [established, bogus]}
)"));
  EXPECT_NE(errors.find("t.yaml:25:33: pipeline[3].timeouts.tcp_establshed: unknown key"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("'bogus' is not one of new, established, related, invalid"),
            std::string::npos)
      << errors;
  // What the rest of the file must give it: an atomic queue, the hash vecflow computes.
  errors = load_errors(router_appliance(R"(  - stage: conntrack
    sched: parallel
  - stage: acl
    fuse: true
    rules:
      - {action: permit, ct: new, in_port: dmz}
)"));
  EXPECT_NE(errors.find("needs an atomic queue"), std::string::npos) << errors;
  EXPECT_NE(errors.find("scheduler.flow_id: software, or xdp"), std::string::npos) << errors;
  EXPECT_NE(errors.find("dmz"), std::string::npos) << errors;
  // xdp is the XDP program's hash: a DPDK port's frames carry none and keep their NIC's.
  errors = load_errors(router_appliance(R"(  - stage: conntrack
    sched: atomic
)") + "scheduler:\n  flow_id: xdp\n");
  EXPECT_NE(errors.find("scheduler.flow_id: software, or xdp"), std::string::npos) << errors;

  // Given an atomic queue and the software hash, it loads; ct: before any conntrack does not.
  const std::string good = router_appliance(R"(  - stage: conntrack
    sched: atomic
  - stage: acl
    fuse: true
    rules:
      - {action: permit, ct: new, in_port: lan}
)") + "scheduler:\n  flow_id: software\n";
  EXPECT_EQ(load_errors(good), "");
  const std::string early = router_appliance(R"(  - stage: acl
    sched: atomic
    rules:
      - {action: permit, ct: new}
)");
  EXPECT_NE(load_errors(early).find("needs a conntrack stage before"), std::string::npos)
      << load_errors(early);
}

TEST_F(Conntrack, ATableTheMachineCannotHoldIsRefusedByName) {
  ConntrackConfig c;
  c.max_sessions = 1u << 26;  // the most the file accepts: ~18 GiB of table
  const size_t ram = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGE_SIZE));
  if (ConnTable::memory_for(c.max_sessions) <= ram / 2) GTEST_SKIP() << "this machine holds it";
  Harness h2;
  const auto built = h2.build({stage("conntrack", c)});
  ASSERT_FALSE(built);
  EXPECT_NE(std::string(built.message()).find("max_sessions 67108864 needs"), std::string::npos)
      << built.message();
}

TEST(ConnTableTest, SessionsExpireOnLookupAndInTheSweep) {
  ConnTable t(100);
  EXPECT_GE(t.capacity(), 100u);
  ConnKey k;
  k.version = 4, k.proto = IPPROTO_UDP, k.src_port = 1, k.dst_port = 2;
  k.src[0] = 10, k.dst[0] = 11;
  const uint64_t tsc = uint64_t{1000} << ConnTable::kTickShift;
  const uint32_t now = ConnTable::tick(tsc);
  ConnEntry* e = t.insert(0xabcd1234, k, tsc);
  ASSERT_NE(e, nullptr);
  t.set_expiry(e, now + 10);
  bool reply = true;
  uint64_t expired = 0;
  EXPECT_EQ(t.find(0xabcd1234, k, now + 5, reply, expired), e);
  EXPECT_FALSE(reply);
  EXPECT_EQ(t.find(0xabcd1234, k.reversed(), now + 5, reply, expired), e);
  EXPECT_TRUE(reply);
  EXPECT_EQ(t.in_use(), 1u);
  // Past its expiry: gone when looked up.
  EXPECT_EQ(t.find(0xabcd1234, k, now + 11, reply, expired), nullptr);
  EXPECT_EQ(expired, 1u);
  EXPECT_EQ(t.in_use(), 0u);

  // Past its expiry: gone when the sweep of its class passes (every bucket of the class).
  e = t.insert(0xabcd1234, k, tsc);
  t.set_expiry(e, now + 10);
  unsigned gone = 0;
  for (uint32_t i = 0; i < t.capacity() / ConnTable::kWays / ConnTable::kClasses; ++i)
    gone += t.sweep(0xabcd1234, now + 11, 1);
  EXPECT_EQ(gone, 1u);
  EXPECT_EQ(t.in_use(), 0u);
}

// A table sized for a million sessions that holds a thousand keeps them within a few hundred
// kilobytes (the lookups' lines and pages stay cached), and a session that goes gives its
// place to the next one of its class. Every session stays found by its key meanwhile.
TEST(ConnTableTest, FewSessionsInALargeTableLieTogether) {
  ConnTable t(1'100'000);
  const uint64_t tsc = uint64_t{1000} << ConnTable::kTickShift;
  const uint32_t now = ConnTable::tick(tsc);
  const auto key = [](uint32_t i) {
    ConnKey k = ConnKey::v4(0x0a000000u + i, 0x0b000000u, IPPROTO_UDP);
    k.set_ports(uint16_t(i), 53);
    return k;
  };
  const auto hash = [](uint32_t i) { return i * 0x9e3779b1u; };  // spread over every class
  constexpr uint32_t kSessions = 1000;
  std::vector<ConnEntry*> entries;
  for (uint32_t i = 0; i < kSessions; ++i) {
    ConnEntry* e = t.insert(hash(i), key(i), tsc);
    ASSERT_NE(e, nullptr) << i;
    t.set_expiry(e, now + 100);
    entries.push_back(e);
  }
  const auto [lo, hi] = std::minmax_element(entries.begin(), entries.end());
  const size_t span = size_t(reinterpret_cast<uint8_t*>(*hi) - reinterpret_cast<uint8_t*>(*lo));
  EXPECT_LE(span, size_t{ConnTable::kClasses} * 2 * sizeof(ConnEntry))
      << "of " << t.memory_bytes() / (1 << 20) << " MiB";
  for (uint32_t i = 0; i < kSessions; ++i) {
    bool reply = true;
    uint64_t expired = 0;
    ASSERT_EQ(t.find(hash(i), key(i), now, reply, expired), entries[i]) << i;
    EXPECT_FALSE(reply);
  }
  // Session 7 expires and is removed by its lookup; a new one of its class takes its place.
  t.set_expiry(entries[7], now + 1);
  bool reply = false;
  uint64_t expired = 0;
  EXPECT_EQ(t.find(hash(7), key(7), now + 2, reply, expired), nullptr);
  EXPECT_EQ(expired, 1u);
  ConnEntry* e = t.insert(hash(7), key(kSessions), tsc);
  ASSERT_EQ(e, entries[7]);
  t.set_expiry(e, now + 100);
  EXPECT_EQ(t.find(hash(7), key(kSessions), now, reply, expired), e);
  EXPECT_EQ(t.find(hash(7), key(7), now, reply, expired), nullptr);
  EXPECT_EQ(t.in_use(), kSessions);
}

// The first fragments' outcomes: found by datagram until they expire; a full bucket gives
// the way that expires first to a new datagram, and a first fragment seen again updates its
// own entry.
TEST(FragmentTableTest, DatagramsLiveTheirTimeAndAFullBucketGivesUpTheOldest) {
  FragmentTable t;
  const uint32_t hash = 0x5a5a0001, now = 1000;
  const auto datagram = [](uint32_t id) {
    FragmentTable::Datagram d{};
    d.src[0] = 10, d.dst[0] = 20, d.id = id, d.proto = 17, d.version = 4;
    return d;
  };
  for (uint16_t id = 1; id <= FragmentTable::kWays; ++id)
    t.remember(hash, datagram(id), {100u + id, 200, CtMark::New}, now, now + 10u * id);
  for (uint16_t id = 1; id <= FragmentTable::kWays; ++id) {
    const FragmentTable::Outcome* o = t.find(hash, datagram(id), now + 5);
    ASSERT_NE(o, nullptr) << id;
    EXPECT_EQ(o->src, 100u + id);
  }
  EXPECT_EQ(t.find(hash, datagram(99), now), nullptr);
  // Another class's bucket does not hold them.
  EXPECT_EQ(t.find(hash + 1, datagram(1), now), nullptr);
  // Past its time a datagram is gone.
  EXPECT_EQ(t.find(hash, datagram(1), now + 10), nullptr);
  EXPECT_NE(t.find(hash, datagram(2), now + 10), nullptr);

  // Seen again: its own entry, with the new outcome.
  t.remember(hash, datagram(3), {7, 8, CtMark::Established}, now + 1, now + 100);
  ASSERT_NE(t.find(hash, datagram(3), now + 50), nullptr);
  EXPECT_EQ(t.find(hash, datagram(3), now + 50)->mark, CtMark::Established);
  // Full, none expired: the new datagram takes the way that expires first (id 2 at now + 20,
  // id 1's way has expired by now + 15 and goes first).
  t.remember(hash, datagram(50), {1, 2, CtMark::New}, now + 15, now + 200);
  EXPECT_NE(t.find(hash, datagram(2), now + 16), nullptr);
  t.remember(hash, datagram(51), {1, 2, CtMark::New}, now + 16, now + 200);
  EXPECT_EQ(t.find(hash, datagram(2), now + 17), nullptr);
  EXPECT_NE(t.find(hash, datagram(3), now + 17), nullptr);
  EXPECT_NE(t.find(hash, datagram(4), now + 17), nullptr);
  EXPECT_NE(t.find(hash, datagram(50), now + 17), nullptr);
  EXPECT_NE(t.find(hash, datagram(51), now + 17), nullptr);
}

// The conntrack stage's short path (ConntrackStage::track_established) looks in the first
// bucket only and takes only a live session; what it cannot answer it leaves untouched for
// find(), which looks further and removes what expired.
TEST(ConnTableTest, TheFirstBucketSearchAnswersOnlyWhatFindWouldAnswerTheSame) {
  ConnTable t(1000);
  const uint64_t tsc = uint64_t{5} << 40;
  const uint32_t now = ConnTable::tick(tsc);
  std::vector<std::pair<ConnKey, ConnEntry*>> keys;
  for (uint16_t p = 1; p <= 2 * ConnTable::kWays; ++p) {
    ConnKey k;
    k.version = 4, k.proto = IPPROTO_UDP, k.src_port = p, k.dst_port = 53;
    ConnEntry* e = t.insert(42, k, tsc);  // one hash: both of its buckets fill
    ASSERT_NE(e, nullptr);
    t.set_expiry(e, now + 100);
    keys.emplace_back(k, e);
  }
  unsigned first = 0;
  for (const auto& [k, e] : keys) {
    bool reply = true;
    uint64_t expired = 0;
    ASSERT_EQ(t.find(42, k, now, reply, expired), e);
    ConnEntry* f = t.find_first_live(42, k, now, reply);
    if (f == nullptr) continue;  // in the second bucket
    ++first;
    EXPECT_EQ(f, e);
    EXPECT_FALSE(reply);
    EXPECT_EQ(t.find_first_live(42, k.reversed(), now, reply), e);
    EXPECT_TRUE(reply);
  }
  EXPECT_EQ(first, ConnTable::kWays);  // the rest only find() reaches

  // Expired: left in place by the first-bucket search, removed and counted by find().
  ConnEntry* gone = nullptr;
  ConnKey key;
  for (const auto& [k, e] : keys) {
    bool reply;
    if (t.find_first_live(42, k, now, reply) == e) {
      gone = e, key = k;
      break;
    }
  }
  ASSERT_NE(gone, nullptr);
  t.set_expiry(gone, now + 1);
  bool reply;
  uint64_t expired = 0;
  EXPECT_EQ(t.find_first_live(42, key, now + 2, reply), nullptr);
  EXPECT_EQ(t.in_use(), 2 * ConnTable::kWays);
  EXPECT_EQ(t.find(42, key, now + 2, reply, expired), nullptr);
  EXPECT_EQ(expired, 1u);
  EXPECT_EQ(t.in_use(), 2 * ConnTable::kWays - 1);
}

TEST(ConnTableTest, OneHashClassFillsBothItsBucketsBeforeRefusing) {
  // Every key with the same hash: the two buckets of that hash hold 2 x 8.
  ConnTable t(1000);
  const uint64_t tsc = uint64_t{5} << 40;
  unsigned placed = 0;
  for (uint16_t p = 1; p <= 20; ++p) {
    ConnKey k;
    k.version = 4, k.proto = IPPROTO_UDP, k.src_port = p;
    if (ConnEntry* e = t.insert(42, k, tsc)) {
      t.set_expiry(e, ConnTable::tick(tsc) + 100);
      ++placed;
    }
  }
  EXPECT_EQ(placed, 2 * ConnTable::kWays);
}

}  // namespace
