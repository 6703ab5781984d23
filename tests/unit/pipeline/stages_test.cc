// The neighbour, l2, mirror, count and dscp stages.

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <rte_ether.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/count/count_stage.h"
#include "pipeline/dscp_stage.h"
#include "pipeline/l2_stage.h"
#include "pipeline/mirror_stage.h"
#include "pipeline/neighbour/neighbour_stage.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/packet_view.h"
#include "support/pcapng_file.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

class Stages : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

RouteConfig lab_routes() {
  RouteConfig r;
  r.routes = {route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254"),
              route("2001:db8:2::/64", "lan")};
  return r;
}

NeighbourConfig neighbours(Unresolved policy, std::vector<StaticNeighbour> entries = {}) {
  NeighbourConfig n;
  n.unresolved = policy;
  n.from_kernel = true;  // no port has a kernel interface here: nothing to learn from
  n.entries = std::move(entries);
  return n;
}

FrameSpec to(const std::string& dst) {
  FrameSpec s;
  s.version = dst.find(':') == std::string::npos ? 4 : 6;
  s.src = s.version == 4 ? "192.0.2.2" : "2001:db8:1::2";
  s.dst = dst;
  return s;
}

bool has_mac(rte_mbuf* m, const MacAddress& dst, const MacAddress& src) {
  auto* eth = pkt::eth(m);
  return std::memcmp(eth->dst_addr.addr_bytes, dst.bytes.data(), 6) == 0 &&
         std::memcmp(eth->src_addr.addr_bytes, src.bytes.data(), 6) == 0;
}

}  // namespace

TEST_F(Stages, NeighbourResolvesGatewaysFromStaticEntries) {
  Harness h;
  const MacAddress gw = mac("02:00:00:00:00:fe");
  ASSERT_TRUE(
      h.build({stage("route", lab_routes()),
               stage("neighbour",
                     neighbours(Unresolved::Drop, {{address("192.0.2.254"), gw, "wan"}}), true)}));
  rte_mbuf* m = h.run_one(make_frame(to("203.0.113.5")));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).verdict, Verdict::Transmit);
  EXPECT_EQ(meta(m).out_port, kWan);
  EXPECT_TRUE(has_mac(m, gw, kWanMac));
  auto* n = h.pipeline->find<NeighbourStage>("neighbour");
  EXPECT_EQ(n->counters().resolved, 1u);
  // A static entry does not change with what the kernel says.
  h.pipeline->neighbours().learn(PortId{kWan}, address("192.0.2.254"), std::nullopt);
  m = h.run_one(make_frame(to("203.0.113.5")));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(has_mac(m, gw, kWanMac));
}

// To a VLAN port the neighbour stage writes the port's tags with the MACs (and says so), one
// 802.1Q tag or a QinQ port's two; to a port on the link, none.
TEST_F(Stages, NeighbourWritesAVlanPortsTagsWithTheAddresses) {
  for (const VlanTags tags : {VlanTags{RTE_ETHER_TYPE_VLAN, 100, 0, 0},
                              VlanTags{RTE_ETHER_TYPE_QINQ, 300, RTE_ETHER_TYPE_VLAN, 10}}) {
    SCOPED_TRACE(tags.count());
    Harness h(1, {PortInfo{"wan", kWanMac, "", tags}, PortInfo{"lan", kLanMac, ""}});
    const MacAddress gw = mac("02:00:00:00:00:fe");
    ASSERT_TRUE(h.build(
        {stage("route", lab_routes()),
         stage("neighbour", neighbours(Unresolved::Drop, {{address("192.0.2.254"), gw, "wan"}}),
               true)}));
    rte_mbuf* in = make_frame(to("203.0.113.5"));
    const uint32_t len = in->pkt_len;
    rte_mbuf* m = h.run_one(in);
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(has_mac(m, gw, kWanMac));
    EXPECT_TRUE(meta(m).flags & kMetaFlagTagged);
    const uint8_t* b = rte_pktmbuf_mtod(m, const uint8_t*);
    EXPECT_EQ(b[12] << 8 | b[13], tags.outer_tpid);
    EXPECT_EQ(b[14] << 8 | b[15], tags.outer_tci);
    size_t at = 16;
    if (tags.count() == 2) {
      EXPECT_EQ(b[16] << 8 | b[17], tags.inner_tpid);
      EXPECT_EQ(b[18] << 8 | b[19], tags.inner_tci);
      at = 20;
    }
    EXPECT_EQ(b[at] << 8 | b[at + 1], RTE_ETHER_TYPE_IPV4);
    EXPECT_EQ(m->pkt_len, len + 4 * tags.count());
    EXPECT_EQ(m->l2_len, 14 + 4 * tags.count());
    EXPECT_EQ(pkt::ipv4(m)->version_ihl, RTE_IPV4_VHL_DEF) << "headers where l2_len says";
  }
}

TEST_F(Stages, UnresolvedNextHopsGoToTheKernelOrAreDropped) {
  for (auto policy : {Unresolved::Kernel, Unresolved::Drop}) {
    Harness h;
    ASSERT_TRUE(
        h.build({stage("route", lab_routes()), stage("neighbour", neighbours(policy), true)}));
    rte_mbuf* m = h.run_one(make_frame(to("203.0.113.5")));   // via an unknown gateway
    rte_mbuf* c = h.run_one(make_frame(to("198.51.100.9")));  // a connected host never seen
    auto s = h.accounting();
    if (policy == Unresolved::Kernel) {
      ASSERT_NE(m, nullptr);
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(meta(c).verdict, Verdict::Kernel);
      EXPECT_EQ(s.to_kernel, 2u);
    } else {
      EXPECT_EQ(m, nullptr);
      EXPECT_EQ(c, nullptr);
      EXPECT_EQ(s.drops[size_t(DropReason::NEIGH_UNRESOLVED)], 2u);
    }
    EXPECT_EQ(h.pipeline->find<NeighbourStage>("neighbour")->counters().unresolved, 2u);
    EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  }
}

TEST_F(Stages, LearnedAddressesTakeEffectForGatewaysAndConnectedHosts) {
  Harness h;
  ASSERT_TRUE(h.build(
      {stage("route", lab_routes()), stage("neighbour", neighbours(Unresolved::Drop), true)}));
  NeighbourTable& t = h.pipeline->neighbours();
  const MacAddress gw = mac("02:00:00:00:01:fe"), host = mac("02:00:00:00:02:09"),
                   host6 = mac("02:00:00:00:02:66");
  ASSERT_TRUE(t.learn(PortId{kWan}, address("192.0.2.254"), gw));
  ASSERT_TRUE(t.learn(PortId{kLan}, address("198.51.100.9"), host));
  ASSERT_TRUE(t.learn(PortId{kLan}, address("2001:db8:2::9"), host6));
  rte_mbuf* m = h.run_one(make_frame(to("203.0.113.5")));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(has_mac(m, gw, kWanMac));
  m = h.run_one(make_frame(to("198.51.100.9")));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(meta(m).out_port, kLan);
  EXPECT_TRUE(has_mac(m, host, kLanMac));
  m = h.run_one(make_frame(to("2001:db8:2::9")));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(has_mac(m, host6, kLanMac));
  // The kernel forgets the host: unresolved again; it learns a new address: that one is used.
  t.learn(PortId{kLan}, address("198.51.100.9"), std::nullopt);
  EXPECT_EQ(h.run_one(make_frame(to("198.51.100.9"))), nullptr);
  const MacAddress moved = mac("02:00:00:00:03:09");
  t.learn(PortId{kLan}, address("198.51.100.9"), moved);
  m = h.run_one(make_frame(to("198.51.100.9")));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(has_mac(m, moved, kLanMac));
  // What was forwarded through is flagged for re-confirmation with the kernel.
  auto used = t.take_used();
  EXPECT_EQ(used.size(), 3u);
  EXPECT_TRUE(t.take_used().empty());
}

// The stage remembers the last connected destination it resolved and rewrites the packets
// behind it to the same one without a lookup: each packet must still get its own destination's
// address when consecutive keys share words (IPv6 destinations equal but for their last four
// bytes, IPv4 ones of another version or address) or come back after another.
TEST_F(Stages, ConsecutiveConnectedDestinationsEachGetTheirOwnAddress) {
  Harness h;
  ASSERT_TRUE(h.build(
      {stage("route", lab_routes()), stage("neighbour", neighbours(Unresolved::Drop), true)}));
  NeighbourTable& t = h.pipeline->neighbours();
  const std::vector<std::pair<std::string, MacAddress>> hosts = {
      {"198.51.100.9", mac("02:00:00:00:04:09")},
      {"198.51.100.10", mac("02:00:00:00:04:0a")},
      {"2001:db8:2::9", mac("02:00:00:00:06:09")},
      {"2001:db8:2::a", mac("02:00:00:00:06:0a")},
      {"2001:db8:2:0:1::9", mac("02:00:00:00:06:19")}};
  for (const auto& [ip, m] : hosts)
    ASSERT_TRUE(t.learn(PortId{kLan}, address(ip), m));
  const std::vector<size_t> order = {0, 0, 2, 3, 3, 2, 4, 2, 1, 0, 1, 3};
  std::vector<rte_mbuf*> pkts;
  for (size_t i : order)
    pkts.push_back(make_frame(to(hosts[i].first)));
  h.run(pkts);
  ASSERT_EQ(h.sinks.tx.size(), order.size());
  for (size_t k = 0; k < order.size(); ++k)
    EXPECT_TRUE(has_mac(h.sinks.tx[k], hosts[order[k]].second, kLanMac))
        << "packet " << k << " to " << hosts[order[k]].first;
  EXPECT_EQ(h.pipeline->find<NeighbourStage>("neighbour")->counters().resolved, order.size());
  EXPECT_EQ(h.accounting().unaccounted(), 0);
}

namespace {

NeighbourConfig holding(uint16_t packets = 4, uint32_t timeout_ms = 3000) {
  NeighbourConfig n = neighbours(Unresolved::Hold);
  n.hold_packets = packets;
  n.hold_timeout_ms = timeout_ms;
  return n;
}

// A frame to `dst` whose UDP source port numbers it, to check the order packets leave in.
rte_mbuf* numbered(const std::string& dst, uint16_t seq) {
  FrameSpec s = to(dst);
  s.sport = seq;
  return make_frame(s);
}

// A worker's tick once its held queues are due for a look (at most every kHoldCheckUs).
bool tick_later(Harness& h) {
  std::this_thread::sleep_for(std::chrono::microseconds(2 * NeighbourStage::kHoldCheckUs));
  return h.workers[0]->tick(h.sinks);
}

uint16_t seq_of(rte_mbuf* m) {
  uint16_t src = 0, dst = 0;
  pkt::ports(m, src, dst);
  return rte_be_to_cpu_16(src);
}

}  // namespace

TEST_F(Stages, HeldPacketsLeaveInOrderThroughTheLaterStagesOnceResolved) {
  Harness h;
  L2Config l2;
  L2PortRewrite wan;
  wan.port = "wan";
  wan.vlan_push = 100;
  l2.ports = {wan};
  ASSERT_TRUE(h.build(
      {stage("route", lab_routes()), stage("neighbour", holding(), true), stage("l2", l2, true)}));
  auto* n = h.pipeline->find<NeighbourStage>("neighbour");
  EXPECT_TRUE(n->holds_packets());
  // Three packets via a gateway never seen and one to a connected host the table does not
  // know (no entry: found again by its key once the kernel's answer makes one).
  h.run({numbered("203.0.113.5", 1), numbered("203.0.113.6", 2)});
  h.run({numbered("2001:db8:2::9", 10), numbered("203.0.113.7", 3)});
  EXPECT_TRUE(h.sinks.tx.empty());
  AccountingSnapshot s = h.accounting();
  EXPECT_EQ(s.held, 4u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  EXPECT_FALSE(tick_later(h));  // nothing resolved, nothing due
  EXPECT_TRUE(h.sinks.tx.empty());

  // The gateway resolves. A packet to it that arrives before the worker's next tick waits
  // behind the held ones rather than overtaking them.
  NeighbourTable& t = h.pipeline->neighbours();
  const MacAddress gw = mac("02:00:00:00:01:fe"), host6 = mac("02:00:00:00:02:66");
  ASSERT_TRUE(t.learn(PortId{kWan}, address("192.0.2.254"), gw));
  h.run({numbered("203.0.113.8", 4)});
  EXPECT_TRUE(h.sinks.tx.empty());
  EXPECT_TRUE(tick_later(h));
  ASSERT_EQ(h.sinks.tx.size(), 4u);
  for (uint16_t i = 0; i < 4; ++i) {
    rte_mbuf* m = h.sinks.tx[i];
    EXPECT_EQ(seq_of(m), i + 1);
    EXPECT_EQ(meta(m).verdict, Verdict::Transmit);
    EXPECT_EQ(meta(m).out_port, kWan);
    EXPECT_TRUE(has_mac(m, gw, kWanMac));
    // The l2 stage after the neighbour stage ran on them too.
    EXPECT_EQ(pkt::eth(m)->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN));
  }
  // Later packets to the gateway go straight through.
  h.run({numbered("203.0.113.9", 5)});
  ASSERT_EQ(h.sinks.tx.size(), 5u);
  EXPECT_EQ(seq_of(h.sinks.tx[4]), 5);

  // The connected host resolves: its packet leaves at the next tick, with no traffic.
  ASSERT_TRUE(t.learn(PortId{kLan}, address("2001:db8:2::9"), host6));
  EXPECT_TRUE(tick_later(h));
  ASSERT_EQ(h.sinks.tx.size(), 6u);
  EXPECT_EQ(seq_of(h.sinks.tx[5]), 10);
  EXPECT_TRUE(has_mac(h.sinks.tx[5], host6, kLanMac));

  const NeighbourCounters c = n->counters();
  EXPECT_EQ(c.held, 5u);
  EXPECT_EQ(c.held_sent, 5u);
  EXPECT_EQ(c.held_dropped, 0u);
  EXPECT_EQ(c.holding(), 0u);
  EXPECT_EQ(c.unresolved, 5u);
  s = h.accounting();
  EXPECT_EQ(s.tx, 6u);
  EXPECT_EQ(s.held, 0u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

TEST_F(Stages, HeldPacketsAreDroppedWhenTheQueueIsFullOrResolutionTimesOut) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", lab_routes()), stage("neighbour", holding(2, 20), true)}));
  // Three packets for one gateway: two fit its queue. Then more connected hosts than a worker
  // has queues: one queue each, and the hosts beyond kHoldQueues find none.
  h.run({numbered("203.0.113.5", 1), numbered("203.0.113.5", 2), numbered("203.0.113.5", 3)});
  std::vector<rte_mbuf*> hosts;
  for (unsigned i = 0; i < NeighbourStage::kHoldQueues; ++i)
    hosts.push_back(make_frame(to(fmt::format("198.51.100.{}", i + 1))));
  h.run(hosts);
  const auto unresolved = size_t(DropReason::NEIGH_UNRESOLVED);
  AccountingSnapshot s = h.accounting();
  // One queue is the gateway's: of the hosts, kHoldQueues - 1 are held.
  EXPECT_EQ(s.held, 2u + NeighbourStage::kHoldQueues - 1);
  EXPECT_EQ(s.drops[unresolved], 2u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  // Not due yet; then the timeout passes and every queue is dropped, counted.
  EXPECT_FALSE(tick_later(h));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(h.workers[0]->tick(h.sinks));
  EXPECT_TRUE(h.sinks.tx.empty());
  s = h.accounting();
  EXPECT_EQ(s.held, 0u);
  EXPECT_EQ(s.drops[unresolved], 3u + NeighbourStage::kHoldQueues);
  EXPECT_EQ(s.rx, 3u + NeighbourStage::kHoldQueues);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  const NeighbourCounters c = h.pipeline->find<NeighbourStage>("neighbour")->counters();
  EXPECT_EQ(c.held, 1u + NeighbourStage::kHoldQueues);
  EXPECT_EQ(c.held_dropped, c.held);
  EXPECT_EQ(c.unresolved, 3u + NeighbourStage::kHoldQueues);
}

TEST_F(Stages, AStoppingWorkerSendsTheResolvedHeldPacketsAndDropsTheRest) {
  Harness h(2);
  ASSERT_TRUE(h.build({stage("route", lab_routes()), stage("neighbour", holding(), true)}));
  // Held on two workers: each holds its own, and gives back only its own.
  h.run({numbered("203.0.113.5", 1), numbered("198.51.100.9", 2)}, 0);
  h.run({numbered("203.0.113.5", 3)}, 1);
  ASSERT_TRUE(h.pipeline->neighbours().learn(PortId{kWan}, address("192.0.2.254"),
                                             mac("02:00:00:00:01:fe")));
  h.workers[0]->stop(h.sinks);
  ASSERT_EQ(h.sinks.tx.size(), 1u);
  EXPECT_EQ(seq_of(h.sinks.tx[0]), 1);
  AccountingSnapshot s = h.accounting();
  EXPECT_EQ(s.held, 1u);  // worker 1's
  EXPECT_EQ(s.drops[size_t(DropReason::NEIGH_UNRESOLVED)], 1u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  h.workers[1]->stop(h.sinks);
  s = h.accounting();
  EXPECT_EQ(s.held, 0u);
  EXPECT_EQ(s.tx, 2u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

TEST_F(Stages, AStageThatHoldsPacketsNeedsTheStagesAfterItFused) {
  Harness h;
  EXPECT_FALSE(h.build({stage("route", lab_routes()), stage("neighbour", holding(), true),
                        stage("count", CountConfig{})}));
  EXPECT_TRUE(
      h.build({stage("route", lab_routes()), stage("neighbour", neighbours(Unresolved::Drop), true),
               stage("count", CountConfig{})}));
}

TEST(NeighbourTableTest, ResolutionRequestsAreRateLimitedPerEntry) {
  VECFLOW_REQUIRE_EAL();
  auto t = NeighbourTable::create(64);
  ASSERT_TRUE(t);
  NeighbourKey key = NeighbourKey::of(PortId{1}, address("198.51.100.7"));
  auto id = (*t)->ensure(key);
  ASSERT_TRUE(id);
  EXPECT_EQ((*t)->ensure(key).value(), *id);  // the same key, the same id
  constexpr uint64_t kRetry = 1000;
  (*t)->request_resolution(*id, 5000, kRetry);
  (*t)->request_resolution(*id, 5500, kRetry);  // too soon: not queued again
  (*t)->request_resolution(*id, 6001, kRetry);
  NeighbourKey unknown = NeighbourKey::of(PortId{0}, address("2001:db8::5"));
  (*t)->request_resolution(unknown);
  auto keys = (*t)->take_requests(16);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0].address(), address("198.51.100.7"));
  EXPECT_EQ(keys[0].port, 1);
  EXPECT_EQ(keys[2].address(), address("2001:db8::5"));
  // Full: a new neighbour is refused, learning reports it.
  for (int i = 0; i < 200; ++i)
    (*t)->ensure(
        NeighbourKey::of(PortId{0}, address(fmt::format("10.0.{}.{}", i / 200, i % 200 + 1))));
  EXPECT_FALSE((*t)->learn(PortId{0}, address("10.9.9.9"), mac("02:00:00:00:00:01")));
}

TEST_F(Stages, L2RewritesAddressesAndVlans) {
  Harness h;
  L2Config l2;
  L2PortRewrite wan;
  wan.port = "wan";
  wan.src_mac = mac("02:00:00:00:00:01");
  wan.dst_mac = mac("02:00:00:00:00:02");
  wan.vlan_push = 100;
  L2PortRewrite lan;
  lan.port = "lan";
  lan.vlan_pop = true;
  l2.ports = {wan, lan};
  ASSERT_TRUE(h.build({stage("route", lab_routes()), stage("l2", l2, true)}));

  FrameSpec s = to("203.0.113.5");
  rte_mbuf* m = h.run_one(make_frame(s));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(has_mac(m, *wan.dst_mac, *wan.src_mac));
  auto* eth = pkt::eth(m);
  ASSERT_EQ(eth->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN));
  auto* vh = reinterpret_cast<rte_vlan_hdr*>(eth + 1);
  EXPECT_EQ(rte_be_to_cpu_16(vh->vlan_tci), 100);
  EXPECT_EQ(vh->eth_proto, rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4));
  EXPECT_EQ(m->l2_len, 18);
  EXPECT_EQ(pkt::ipv4(m)->version_ihl, RTE_IPV4_VHL_DEF);  // headers still where l2_len says

  // Tagged in, untagged out on lan; the source becomes lan's own address (the default).
  FrameSpec t = to("198.51.100.9");
  t.vlan = 7;
  uint16_t len = 0;
  rte_mbuf* in = make_frame(t);
  len = static_cast<uint16_t>(in->pkt_len);
  m = h.run_one(in);
  ASSERT_NE(m, nullptr);
  eth = pkt::eth(m);
  EXPECT_EQ(eth->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4));
  EXPECT_EQ(std::memcmp(eth->src_addr.addr_bytes, kLanMac.bytes.data(), 6), 0);
  EXPECT_EQ(std::memcmp(eth->dst_addr.addr_bytes, t.dst_mac.bytes.data(), 6), 0);
  EXPECT_EQ(m->l2_len, 14);
  EXPECT_EQ(m->pkt_len, len - 4u);
  EXPECT_EQ(pkt::ipv4(m)->version_ihl, RTE_IPV4_VHL_DEF);
}

TEST_F(Stages, MirrorWritesMatchingPacketsToAPcapngFile) {
  Harness h;
  std::filesystem::remove_all(h.ctx.capture_dir);
  MirrorConfig mi;
  mi.match.l4_proto = IPPROTO_UDP;
  mi.match.dst_port = config::PortRange{53, 53};
  mi.pcapng = "dns.pcapng";
  mi.snaplen = 64;
  ASSERT_TRUE(h.build({stage("mirror", mi)}));
  auto* stage = h.pipeline->find<MirrorStage>("mirror");
  auto services = h.pipeline->control_services();
  ASSERT_EQ(services.size(), 1u);  // the capture writer

  std::vector<rte_mbuf*> in;
  std::vector<std::vector<uint8_t>> expect;
  for (int i = 0; i < 10; ++i) {
    FrameSpec s = to("198.51.100.9");
    s.dport = i % 2 ? 53 : 80;
    s.payload = 100;
    s.port = static_cast<uint16_t>(i % 3 == 0 ? kLan : kWan);
    rte_mbuf* m = make_frame(s);
    if (s.dport == 53) {
      auto* d = rte_pktmbuf_mtod(m, uint8_t*);
      expect.emplace_back(d, d + 64);
    }
    in.push_back(m);
  }
  h.run(in);
  while (services[0]->poll()) {
  }
  EXPECT_EQ(stage->counters().matched, 5u);
  EXPECT_EQ(stage->counters().copies, 5u);
  // The packets themselves went on (and, unrouted, were dropped): mirroring changes nothing.
  EXPECT_EQ(h.accounting().drops[size_t(DropReason::NO_ROUTE)], 10u);

  // Every port is an interface of the file; each copy is on its ingress port's, of unknown
  // direction (mid-pipeline), stamped with the real time.
  auto f = read_capture(stage->file());
  ASSERT_EQ(f.error, "");
  EXPECT_EQ(f.datalink, 1);  // Ethernet
  EXPECT_EQ(f.interfaces, (std::vector<std::string>{"wan", "lan"}));
  ASSERT_EQ(f.packets.size(), 5u);
  const auto now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
  for (size_t n = 0; n < f.packets.size(); ++n) {
    const CapturedPacket& pkt = f.packets[n];
    EXPECT_EQ(pkt.caplen, 64u);
    EXPECT_EQ(pkt.len, 14u + 20 + 8 + 100);
    EXPECT_EQ(std::memcmp(pkt.data.data(), expect[n].data(), 64), 0) << "packet " << n;
    // Packets 1, 3, 5, 7, 9 matched; 3 and 9 came in on lan.
    EXPECT_EQ(pkt.interface, n == 1 || n == 4 ? 1u : 0u) << "packet " << n;
    EXPECT_EQ(pkt.flags, 0u);
    EXPECT_LT(pkt.ts_ns > now ? pkt.ts_ns - now : now - pkt.ts_ns, 60'000'000'000u);
  }
}

TEST_F(Stages, MirrorCopiesToAPortWithoutChargingIt) {
  Harness h;
  MirrorConfig mi;
  mi.match.dst = prefix("198.51.100.0/24");
  mi.port = "lan";
  ASSERT_TRUE(h.build({stage("route", lab_routes()), stage("mirror", mi, true)}));
  h.run({make_frame(to("198.51.100.9")), make_frame(to("203.0.113.1"))});
  ASSERT_EQ(h.sinks.copied.size(), 1u);
  rte_mbuf* c = h.sinks.copied[0];
  EXPECT_EQ(meta(c).verdict, Verdict::Transmit);
  EXPECT_EQ(meta(c).out_port, kLan);
  EXPECT_TRUE(meta(c).flags & kMetaFlagCopy);
  ASSERT_EQ(h.sinks.tx.size(), 2u);
  EXPECT_EQ(c->pkt_len, h.sinks.tx[0]->pkt_len);
  EXPECT_EQ(
      std::memcmp(rte_pktmbuf_mtod(c, void*), rte_pktmbuf_mtod(h.sinks.tx[0], void*), c->pkt_len),
      0);
  auto s = h.accounting();
  EXPECT_EQ(s.rx, 2u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

TEST_F(Stages, CountKeepsPerFlowCountersAndTheTopFlows) {
  Harness h(2);
  CountConfig c;
  c.by = CountBy::Flow;
  c.max_flows = 3;
  ASSERT_TRUE(h.build({stage("count", c)}));
  auto* count = h.pipeline->find<CountStage>("count");
  auto flow = [](uint16_t sport) {
    FrameSpec s = to("198.51.100.9");
    s.sport = sport;
    return make_frame(s);
  };
  std::vector<rte_mbuf*> a, b;
  for (int i = 0; i < 5; ++i)
    a.push_back(flow(1));
  for (int i = 0; i < 3; ++i)
    a.push_back(flow(2));
  for (int i = 0; i < 2; ++i)
    b.push_back(flow(1));  // the same flow seen on another lcore
  b.push_back(flow(3));
  h.run(a, 0);
  h.run(b, 1);
  auto top = count->top_flows(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(rte_be_to_cpu_16(top[0].key.src_port), 1);
  EXPECT_EQ(top[0].packets, 7u);
  EXPECT_EQ(rte_be_to_cpu_16(top[1].key.src_port), 2);
  EXPECT_EQ(top[1].packets, 3u);
  EXPECT_EQ(top[0].bytes, 7u * a[0]->pkt_len);
  EXPECT_EQ(count->top_flows(10).size(), 3u);
  EXPECT_EQ(count->untracked(), 0u);
  // Lcore 0's table holds 3 flows: a fourth and fifth are counted as untracked.
  h.run({flow(4), flow(5), flow(6)}, 0);
  EXPECT_EQ(count->untracked(), 2u);
}

TEST_F(Stages, CountByRuleCountsSteeringRules) {
  Harness h;
  h.ctx.steer_rules = 8;
  CountConfig c;
  c.by = CountBy::Rule;
  ASSERT_TRUE(h.build({stage("count", c)}));
  std::vector<rte_mbuf*> in;
  for (uint32_t r : {3u, 3u, 7u, kNoRule}) {
    rte_mbuf* m = make_frame(to("198.51.100.9"));
    meta(m).steer_rule = r;
    in.push_back(m);
  }
  h.run(in);
  auto rules = h.pipeline->find<CountStage>("count")->rules();
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].rule, 3);
  EXPECT_EQ(rules[0].packets, 2u);
  EXPECT_EQ(rules[1].rule, 7);
  EXPECT_EQ(rules[2].rule, kNoRule);
}

TEST_F(Stages, DscpMarksIpPacketsKeepingEcnAndTheChecksum) {
  Harness h;
  ASSERT_TRUE(h.build({stage("route", lab_routes()), stage("dscp", DscpConfig{46}, true)}));

  // IPv4 with ECN CE (0b11) in: DSCP 46 (EF) with the ECN bits kept, the checksum still right.
  rte_mbuf* in = make_frame(to("203.0.113.5"));
  rte_ipv4_hdr* ip = pkt::ipv4(in);
  ip->type_of_service = 0x03;
  ip->hdr_checksum = 0;
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  rte_mbuf* m = h.run_one(in);
  ASSERT_NE(m, nullptr);
  ip = pkt::ipv4(m);
  EXPECT_EQ(ip->type_of_service, 46 << 2 | 0x03);
  const uint16_t sent = ip->hdr_checksum;
  ip->hdr_checksum = 0;
  EXPECT_EQ(sent, rte_ipv4_cksum(ip));

  // IPv6: the traffic class's DSCP bits change, its ECN bits and the flow label do not.
  in = make_frame(to("2001:db8:2::9"));
  pkt::ipv6(in)->vtc_flow = rte_cpu_to_be_32(6u << 28 | 0x01u << 20 | 0x12345);
  m = h.run_one(in);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(rte_be_to_cpu_32(pkt::ipv6(m)->vtc_flow), 6u << 28 | (46u << 2 | 0x01) << 20 | 0x12345);
}

TEST(DscpTest, IncrementalChecksumMatchesAFullOneForEveryTosAndDscp) {
  alignas(4) uint8_t bytes[20] = {0x45, 0, 0,   60, 0x12, 0x34, 0x40, 0,  64,  17,
                                  0,    0, 192, 0,  2,    1,    198,  51, 100, 7};
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(bytes);
  for (unsigned tos = 0; tos < 256; ++tos) {
    for (uint8_t dscp = 0; dscp < 64; ++dscp) {
      ip->type_of_service = static_cast<uint8_t>(tos);
      ip->hdr_checksum = 0;
      ip->hdr_checksum = rte_ipv4_cksum(ip);
      ipv4_set_dscp(ip, dscp);
      ASSERT_EQ(ip->type_of_service, dscp << 2 | (tos & 3));
      const uint16_t incremental = ip->hdr_checksum;
      ip->hdr_checksum = 0;
      ASSERT_EQ(incremental, rte_ipv4_cksum(ip)) << "tos " << tos << " dscp " << int{dscp};
    }
  }
}
