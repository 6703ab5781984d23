// The direct path (datapath/direct_path.h): one worker runs the pipeline on the bursts it
// receives, with no scheduler. Every group runs in turn over the packets the one before left
// undecided, decided packets leave in arrival order, drops and the kernel's share are counted,
// and every received packet is accounted at its ingress port; a lone packet leaves in the
// poll that received it, and the lcore sleeps on the queues and wakes for a packet.
#include <gtest/gtest.h>

#include <thread>

#include "core/packet.h"
#include "datapath/direct_path.h"
#include "pipeline/count/count_stage.h"
#include "pipeline/stage_registry.h"
#include "unit/datapath/decide_stages.h"
#include "unit/pipeline/fixture.h"
#include "unit/sched/sched_support.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

config::StageConfig test_stage(std::string type) {
  return stage(type, CountConfig{});
}

class DirectPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_EAL();
    wan_ = std::make_unique<RingPort>("wan", PortId{kWan});
    lan_ = std::make_unique<RingPort>("lan", PortId{kLan});
    kernel_ = std::make_unique<RingPort>("kernel", PortId{2});
    tx_ = std::make_unique<sched::TxAdapter>(
        std::vector<sched::TxTarget>{{wan_.get(), 0}, {lan_.get(), 0}},
        std::vector<sched::TxTarget>{{kernel_.get(), 0}, {kernel_.get(), 0}}, h_.outcomes.row(0));
  }
  void TearDown() override {
    for (RingPort* p : {wan_.get(), lan_.get(), kernel_.get()}) {
      if (p) collected(*p);
    }
  }

  void build(std::vector<config::StageConfig> stages) {
    ASSERT_TRUE(h_.build(stages, registry_));
    direct_ = std::make_shared<DirectPath>("direct", *h_.pipeline, h_.outcomes, 0, *tx_, nullptr);
    direct_->add_queue(*wan_, 0);
  }
  void arrive(uint32_t first, uint32_t n) {
    for (uint32_t s = first; s < first + n; ++s) {
      rte_mbuf* m = make_packet(PortId{kWan}, 7, s);
      ASSERT_NE(m, nullptr);
      ASSERT_EQ(wan_->inject(0, &m, 1), 1u);
    }
  }
  std::vector<uint64_t> collected(RingPort& p) {
    rte_mbuf* got[512];
    const unsigned n = p.collect(0, got, 512);
    std::vector<uint64_t> out;
    for (unsigned i = 0; i < n; ++i)
      out.push_back(packet_words(got[i])[1]);
    rte_pktmbuf_free_bulk(got, n);
    return out;
  }

  StageRegistry registry_ = decide_registry();
  Harness h_;
  std::unique_ptr<RingPort> wan_, lan_, kernel_;
  std::unique_ptr<sched::TxAdapter> tx_;
  std::shared_ptr<DirectPath> direct_;
};

TEST_F(DirectPathTest, GroupsRunInTurnAndEveryPacketEndsInOnePlaceInOrder) {
  build({test_stage("decide"), test_stage("place")});
  ASSERT_EQ(h_.pipeline->groups().size(), 2u);
  arrive(0, 100);
  EXPECT_TRUE(direct_->poll());
  // The queue gave its 100 packets in four bursts (32, 32, 32, 4): one run.
  EXPECT_EQ(direct_->path_stats().packets.load(), 100u);
  EXPECT_EQ(direct_->path_stats().runs.load(), 1u);
  std::vector<uint64_t> lan, kernel, wan;
  for (uint64_t s = 0; s < 100; ++s) {
    if (s % 4 == 1) lan.push_back(s);
    if (s % 4 == 3) kernel.push_back(s);
    if (s % 4 == 0) wan.push_back(s);  // group 0 left it undecided; group 1 placed it
  }
  EXPECT_EQ(collected(*lan_), lan);
  EXPECT_EQ(collected(*kernel_), kernel);
  EXPECT_EQ(collected(*wan_), wan);
  const AccountingSnapshot s = h_.outcomes.port_snapshot(PortId{kWan});
  EXPECT_EQ(s.rx, 100u);
  EXPECT_EQ(s.tx, 50u);
  EXPECT_EQ(s.to_kernel, 25u);
  EXPECT_EQ(s.drops[size_t(DropReason::ACL_DENY)], 25u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  EXPECT_FALSE(direct_->poll()) << "nothing left to receive";
}

TEST_F(DirectPathTest, ABusyQueueGivesRunsOfFourBurstsAndALonePacketLeavesAtOnce) {
  build({test_stage("place")});
  arrive(0, 300);
  EXPECT_TRUE(direct_->poll());
  // A queue that keeps giving full bursts: four of them per poll, one run.
  EXPECT_EQ(direct_->path_stats().packets.load(), 128u);
  EXPECT_EQ(direct_->path_stats().runs.load(), 1u);
  EXPECT_EQ(collected(*wan_).size(), 128u);
  while (direct_->poll()) {
  }
  EXPECT_EQ(collected(*wan_).size(), 172u);
  // One packet: received, run and sent in the same poll.
  arrive(1000, 1);
  EXPECT_TRUE(direct_->poll());
  EXPECT_EQ(collected(*wan_), std::vector<uint64_t>{1000});
  EXPECT_EQ(h_.outcomes.port_snapshot(PortId{kWan}).unaccounted(), 0);
}

TEST_F(DirectPathTest, AnIdleLcoreSleepsOnTheQueueAndWakesForAPacket) {
  build({test_stage("place")});
  LcoreThread lcore({direct_});
  ASSERT_TRUE(wait_until([&] { return direct_->stats().sleeping.load(); }))
      << "the lcore never slept on the queue";
  arrive(5, 1);
  std::vector<uint64_t> got;
  ASSERT_TRUE(wait_until(
      [&] {
        auto c = collected(*wan_);
        got.insert(got.end(), c.begin(), c.end());
        return !got.empty();
      },
      std::chrono::seconds(5)))
      << "a sleeping lcore was not woken by the packet";
  EXPECT_EQ(got, std::vector<uint64_t>{5});
  EXPECT_GE(lcore.lcore().stats().interrupt_sleeps.load(), 1u);
  lcore.stop();
  direct_->park();
}

}  // namespace
