// A pipeline built from an appliance file, as vecflowd builds it: every stage from its parsed
// configuration, fused stages grouped, and packets through all of it.
#include <gtest/gtest.h>
#include <rte_ether.h>

#include "config/config.h"
#include "core/packet.h"
#include "fixture.h"
#include "pipeline/acl/acl_stage.h"
#include "pipeline/count/count_stage.h"
#include "pipeline/packet_view.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/stage_registry.h"
#include "support/appliances.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

const std::string kAppliance = router_appliance(R"(  - stage: l2
    fuse: true
    ports:
      - {port: wan, vlan_push: 100}
  - stage: count
    sched: atomic
    by: flow
)");

}  // namespace

TEST(ConfigPipeline, BuildsAndRunsTheStagesOfAnApplianceFile) {
  VECFLOW_REQUIRE_EAL();
  auto cfg = config::load_config_text(kAppliance, "test.yaml", builtin_stage_types());
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  Harness h;
  ASSERT_TRUE(h.build(cfg->pipeline));
  auto groups = h.pipeline->groups();
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].name, "acl");
  EXPECT_EQ(groups[0].sched, SchedType::Parallel);
  EXPECT_EQ(groups[1].name, "route+neighbour+l2");
  EXPECT_EQ(groups[1].sched, SchedType::Atomic);
  EXPECT_EQ(groups[2].name, "count");

  auto frame = [](const std::string& dst, uint8_t proto, uint16_t dport, uint16_t sport) {
    FrameSpec s;
    s.src = "192.0.2.2";
    s.dst = dst;
    s.proto = proto;
    s.dport = dport;
    s.sport = sport;
    s.port = kWan;
    return make_frame(s);
  };
  h.run({frame("198.51.100.9", IPPROTO_UDP, 53, 1),     // to the lan host
         frame("203.0.113.7", IPPROTO_UDP, 53, 2),      // default route, VLAN 100 on wan
         frame("198.51.100.9", IPPROTO_TCP, 23, 3),     // telnet: denied
         frame("192.0.2.1", IPPROTO_TCP, 22, 4),        // the box itself: kernel
         frame("198.51.100.77", IPPROTO_UDP, 53, 5)});  // connected, unknown host: dropped
  ASSERT_EQ(h.sinks.tx.size(), 2u);
  rte_mbuf* lan = h.sinks.tx[0];
  EXPECT_EQ(meta(lan).out_port, kLan);
  EXPECT_EQ(
      std::memcmp(pkt::eth(lan)->dst_addr.addr_bytes, mac("02:00:00:00:01:09").bytes.data(), 6), 0);
  EXPECT_EQ(std::memcmp(pkt::eth(lan)->src_addr.addr_bytes, kLanMac.bytes.data(), 6), 0);
  rte_mbuf* wan = h.sinks.tx[1];
  EXPECT_EQ(meta(wan).out_port, kWan);
  EXPECT_EQ(pkt::eth(wan)->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN));
  EXPECT_EQ(
      std::memcmp(pkt::eth(wan)->dst_addr.addr_bytes, mac("02:00:00:00:00:fe").bytes.data(), 6), 0);
  EXPECT_EQ(pkt::ipv4(wan)->time_to_live, 63);
  ASSERT_EQ(h.sinks.to_kernel.size(), 1u);

  auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::ACL_DENY)], 1u);
  EXPECT_EQ(s.drops[size_t(DropReason::NEIGH_UNRESOLVED)], 1u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  // The counting stage saw the two forwarded packets.
  auto* count = h.pipeline->find<CountStage>("count");
  ASSERT_NE(count, nullptr);
  EXPECT_EQ(count->top_flows(10).size(), 2u);
  // Every stage reports its runtime counters.
  auto report = h.pipeline->report();
  ASSERT_EQ(report.size(), 5u);
  EXPECT_EQ(report[0].name, "acl");
  EXPECT_EQ(report[0].stats.packets, 5u);
  EXPECT_EQ(report[1].stats.packets, 4u);  // the denied packet stopped at the ACL
  EXPECT_EQ(report[4].group, 2u);
  EXPECT_EQ(report[4].stats.packets, 2u);
}
