// The neighbour, l2, mirror and count stages.
#include <pcap/pcap.h>

#include <filesystem>

#include <gtest/gtest.h>
#include <rte_ether.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/count_stage.h"
#include "pipeline/l2_stage.h"
#include "pipeline/mirror_stage.h"
#include "pipeline/neighbour_stage.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/packet_view.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

class Stages : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

config::RouteStage lab_routes() {
  config::RouteStage r;
  r.routes = {route("198.51.100.0/24", "lan"), route("0.0.0.0/0", "wan", "192.0.2.254"),
              route("2001:db8:2::/64", "lan")};
  return r;
}

config::NeighbourStage neighbours(config::Unresolved policy,
                                  std::vector<config::StaticNeighbour> entries = {}) {
  config::NeighbourStage n;
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
  ASSERT_TRUE(h.build(
      {stage("route", lab_routes()),
       stage("neighbour",
             neighbours(config::Unresolved::Drop, {{address("192.0.2.254"), gw, "wan"}}), true)}));
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

TEST_F(Stages, UnresolvedNextHopsGoToTheKernelOrAreDropped) {
  for (auto policy : {config::Unresolved::Kernel, config::Unresolved::Drop}) {
    Harness h;
    ASSERT_TRUE(
        h.build({stage("route", lab_routes()), stage("neighbour", neighbours(policy), true)}));
    rte_mbuf* m = h.run_one(make_frame(to("203.0.113.5")));   // via an unknown gateway
    rte_mbuf* c = h.run_one(make_frame(to("198.51.100.9")));  // a connected host never seen
    auto s = h.accounting();
    if (policy == config::Unresolved::Kernel) {
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
  ASSERT_TRUE(h.build({stage("route", lab_routes()),
                       stage("neighbour", neighbours(config::Unresolved::Drop), true)}));
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
  config::L2Stage l2;
  config::L2PortRewrite wan;
  wan.port = "wan";
  wan.src_mac = mac("02:00:00:00:00:01");
  wan.dst_mac = mac("02:00:00:00:00:02");
  wan.vlan_push = 100;
  config::L2PortRewrite lan;
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
  config::MirrorStage mi;
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

  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(stage->file().c_str(), err);
  ASSERT_NE(p, nullptr) << err;
  EXPECT_EQ(pcap_datalink(p), DLT_EN10MB);
  pcap_pkthdr* hdr;
  const u_char* data;
  size_t n = 0;
  while (pcap_next_ex(p, &hdr, &data) == 1) {
    ASSERT_LT(n, expect.size());
    EXPECT_EQ(hdr->caplen, 64u);
    EXPECT_EQ(hdr->len, 14u + 20 + 8 + 100);
    EXPECT_EQ(std::memcmp(data, expect[n].data(), 64), 0) << "packet " << n;
    ++n;
  }
  pcap_close(p);
  EXPECT_EQ(n, 5u);
}

TEST_F(Stages, MirrorCopiesToAPortWithoutChargingIt) {
  Harness h;
  config::MirrorStage mi;
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
  config::CountStage c;
  c.by = config::CountBy::Flow;
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
  config::CountStage c;
  c.by = config::CountBy::Rule;
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
