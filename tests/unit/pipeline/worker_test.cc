// The stage runner: fused groups, verdicts separated into sinks, drops freed and counted at
// the ingress port, the end-of-pipeline rule, copies, order and per-stage counters.
#include <gtest/gtest.h>

#include "core/packet.h"
#include "fixture.h"
#include "pipeline/count/count_stage.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// Decides by UDP destination port: 1 drop (acl_deny), 2 kernel, 3 transmit on lan,
// 4 place on wan and go on, 5 copy to lan and go on; anything else goes on untouched.
// Records the order in which it saw packets.
class Probe final : public PerPacketStage<Probe> {
 public:
  Probe(const config::StageConfig& cfg, StageContext& ctx)
      : PerPacketStage(cfg.type, cfg.name, ctx.lcore_slots) {}
  struct VectorState {};
  VectorState begin(StageEnv&) noexcept { return {}; }
  void process_packet(rte_mbuf* m, VectorState&, StageEnv& env) noexcept {
    seen.push_back(m);
    uint16_t sp, dp;
    pkt::ports(m, sp, dp);
    switch (rte_be_to_cpu_16(dp)) {
      case 1:
        set_drop(m, DropReason::ACL_DENY);
        break;
      case 2:
        set_kernel(m);
        break;
      case 3:
        set_transmit(m, PortId{kLan});
        break;
      case 4:
        meta(m).out_port = kWan;
        break;
      case 5: {
        rte_mbuf* c = rte_pktmbuf_copy(m, test_pool(), 0, UINT32_MAX);
        meta(c).verdict = Verdict::Transmit;
        meta(c).out_port = kLan;
        meta(c).flags |= kMetaFlagCopy;
        env.emit_copy(c);
        break;
      }
      default:
        break;
    }
  }
  std::vector<rte_mbuf*> seen;
};

Result<std::unique_ptr<Stage>> make_probe(const config::StageConfig& cfg, StageContext& ctx) {
  return std::unique_ptr<Stage>(new Probe(cfg, ctx));
}

StageRegistry probe_registry() {
  StageRegistry r = StageRegistry::builtin();
  r.add("probe", make_probe);
  return r;
}

rte_mbuf* udp(uint16_t dport, uint16_t port = kWan) {
  FrameSpec s;
  s.dport = dport;
  s.port = port;
  return make_frame(s);
}

class Runner : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

}  // namespace

TEST_F(Runner, GroupsFollowFuse) {
  Harness h;
  StageRegistry reg = probe_registry();
  ASSERT_TRUE(
      h.build({stage("probe", CountConfig{}, false, "a"), stage("probe", CountConfig{}, true, "b"),
               stage("probe", CountConfig{}, false, "c")},
              reg));
  auto groups = h.pipeline->groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].first, 0u);
  EXPECT_EQ(groups[0].count, 2u);
  EXPECT_EQ(groups[0].name, "a+b");
  EXPECT_EQ(groups[1].first, 2u);
  EXPECT_EQ(groups[1].name, "c");
}

TEST_F(Runner, SeparatesVerdictsAndCountsDropsAtTheIngressPort) {
  Harness h;
  StageRegistry reg = probe_registry();
  ASSERT_TRUE(h.build({stage("probe", CountConfig{}, false, "a")}, reg));
  std::vector<rte_mbuf*> in = {udp(1, kWan), udp(2),       udp(3),      udp(4),
                               udp(9),       udp(1, kLan), udp(1, kLan)};
  rte_mbuf* kernel = in[1];
  rte_mbuf* tx_lan = in[2];
  rte_mbuf* tx_wan = in[3];
  h.run(in);
  ASSERT_EQ(h.sinks.to_kernel.size(), 1u);
  EXPECT_EQ(h.sinks.to_kernel[0], kernel);
  // Transmit by the stage and placed-then-continued at the end both leave through tx, in order.
  ASSERT_EQ(h.sinks.tx.size(), 2u);
  EXPECT_EQ(h.sinks.tx[0], tx_lan);
  EXPECT_EQ(meta(tx_lan).out_port, kLan);
  EXPECT_EQ(h.sinks.tx[1], tx_wan);
  EXPECT_EQ(meta(tx_wan).verdict, Verdict::Transmit);
  EXPECT_EQ(meta(tx_wan).out_port, kWan);
  // Drops counted at the ingress port under their reason; the unplaced one as no_route.
  auto wan = h.outcomes.port_snapshot(PortId{kWan});
  auto lan = h.outcomes.port_snapshot(PortId{kLan});
  EXPECT_EQ(wan.drops[size_t(DropReason::ACL_DENY)], 1u);
  EXPECT_EQ(wan.drops[size_t(DropReason::NO_ROUTE)], 1u);
  EXPECT_EQ(lan.drops[size_t(DropReason::ACL_DENY)], 2u);
  EXPECT_EQ(h.accounting().unaccounted(), 0) << h.accounting().to_string();
}

TEST_F(Runner, LaterStagesOfAGroupSeeOnlyUndecidedPacketsInOrder) {
  Harness h;
  StageRegistry reg = probe_registry();
  ASSERT_TRUE(h.build(
      {stage("probe", CountConfig{}, false, "a"), stage("probe", CountConfig{}, true, "b")}, reg));
  std::vector<rte_mbuf*> in;
  for (uint16_t d : {9, 1, 8, 2, 7, 3, 6})
    in.push_back(udp(d));
  std::vector<rte_mbuf*> undecided = {in[0], in[2], in[4], in[6]};
  h.run(in);
  auto* b = dynamic_cast<Probe*>(&h.pipeline->stage(1));
  EXPECT_EQ(b->seen, undecided);
  auto stats_a = h.pipeline->stage(0).stats();
  auto stats_b = h.pipeline->stage(1).stats();
  EXPECT_EQ(stats_a.calls, 1u);
  EXPECT_EQ(stats_a.packets, 7u);
  EXPECT_EQ(stats_b.packets, 4u);
  EXPECT_GT(stats_a.cycles, 0u);
}

TEST_F(Runner, UndecidedPacketsGoToTheNextGroupWhole) {
  Harness h;
  StageRegistry reg = probe_registry();
  ASSERT_TRUE(h.build(
      {stage("probe", CountConfig{}, false, "a"), stage("probe", CountConfig{}, false, "b")}, reg));
  std::vector<rte_mbuf*> in = {udp(9), udp(1), udp(8)};
  std::vector<rte_mbuf*> expect = {in[0], in[2]};
  h.workers[0]->run_vector(0, in, h.sinks);
  EXPECT_EQ(h.sinks.later, expect);
  EXPECT_TRUE(h.sinks.tx.empty());
  h.run(h.sinks.later);  // and the last group drops what nobody placed
  EXPECT_EQ(h.outcomes.port_snapshot(PortId{kWan}).drops[size_t(DropReason::NO_ROUTE)], 2u);
}

TEST_F(Runner, CopiesLeaveThroughTheirOwnSink) {
  Harness h;
  StageRegistry reg = probe_registry();
  ASSERT_TRUE(h.build({stage("probe", CountConfig{}, false, "a")}, reg));
  rte_mbuf* orig = udp(5);
  h.run({orig});
  ASSERT_EQ(h.sinks.copied.size(), 1u);
  EXPECT_NE(h.sinks.copied[0], orig);
  EXPECT_TRUE(meta(h.sinks.copied[0]).flags & kMetaFlagCopy);
  // The original went on and, unplaced, was dropped: copies do not count as packets.
  auto s = h.accounting();
  EXPECT_EQ(s.rx, 1u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

TEST_F(Runner, VectorsLargerThanABurstAreHandledWhole) {
  Harness h;
  StageRegistry reg = probe_registry();
  ASSERT_TRUE(h.build({stage("probe", CountConfig{}, false, "a")}, reg));
  std::vector<rte_mbuf*> in;
  for (int i = 0; i < 1000; ++i)
    in.push_back(udp(static_cast<uint16_t>(1 + i % 4)));
  h.run(in);
  EXPECT_EQ(h.sinks.to_kernel.size(), 250u);
  EXPECT_EQ(h.sinks.tx.size(), 500u);
  auto s = h.accounting();
  EXPECT_EQ(s.drops[size_t(DropReason::ACL_DENY)], 250u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

TEST_F(Runner, UnknownStageTypeIsAnError) {
  Harness h;
  auto r = Pipeline::build({stage("nosuch", CountConfig{})}, h.ctx);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("nosuch"), std::string::npos);
}
