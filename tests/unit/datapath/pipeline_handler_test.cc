// The glue between a scheduler worker and the pipeline (datapath/pipeline_handler.h): a burst of
// events runs each stage group once over the gathered packets; what goes on stays in its event
// (order kept) and is forwarded to the next group's queue; what is decided leaves through the
// tx adapter at once, or, for an ordered group, goes back into its finished event; drops are
// freed and counted; events without packets keep their place.
#include <gtest/gtest.h>

#include "core/packet.h"
#include "datapath/pipeline_handler.h"
#include "pipeline/count/count_stage.h"
#include "pipeline/stage_registry.h"
#include "sched/event.h"
#include "sched/rx_adapter.h"
#include "unit/datapath/decide_stages.h"
#include "unit/pipeline/fixture.h"
#include "unit/sched/sched_support.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr uint8_t kFirstQueue = 3;   // the scheduler queue of group 0
constexpr uint8_t kSecondQueue = 5;  // ... of group 1

config::StageConfig test_stage(std::string type, SchedType sched = SchedType::Atomic) {
  config::StageConfig s = stage(type, CountConfig{});
  s.sched = sched;
  return s;
}

std::vector<uint64_t> seqs(std::span<rte_mbuf* const> pkts) {
  std::vector<uint64_t> out;
  for (rte_mbuf* m : pkts)
    out.push_back(packet_words(m)[1]);
  return out;
}

class PipelineHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_EAL();
    static unsigned seq = 0;
    auto p = sched::VectorPool::create("vph_vec" + std::to_string(seq++), 64, 256, 0);
    ASSERT_TRUE(p) << p.error().message;
    vectors_ = std::move(*p);
    wan_ = std::make_unique<RingPort>("wan", PortId{kWan});
    lan_ = std::make_unique<RingPort>("lan", PortId{kLan});
    kernel_ = std::make_unique<RingPort>("kernel", PortId{2});
    tx_ = std::make_unique<sched::TxAdapter>(
        std::vector<sched::TxTarget>{{wan_.get(), 0}, {lan_.get(), 0}},
        std::vector<sched::TxTarget>{{kernel_.get(), 0}, {kernel_.get(), 0}}, h_.outcomes.row(0));
  }
  void TearDown() override {
    for (RingPort* p : {wan_.get(), lan_.get(), kernel_.get()}) {
      if (p) collected(*p);  // frees whatever a failed test left in the rings
    }
    for (rte_event& e : events_)
      sched::free_payload(e);
  }

  void build(std::vector<config::StageConfig> stages) {
    ASSERT_TRUE(h_.build(stages, registry_));
    std::vector<uint8_t> group_queue = {kFirstQueue, kSecondQueue};
    group_queue.resize(h_.pipeline->groups().size());
    handler_ = std::make_unique<PipelineHandler>(*h_.pipeline, h_.outcomes, 0, group_queue, *tx_);
  }

  // A vector event for `queue` carrying packets seq [first, first + n) of flow `flow`.
  rte_event vector_event(uint8_t queue, uint32_t flow, uint32_t first, uint32_t n) {
    void* v = nullptr;
    EXPECT_EQ(rte_mempool_get(vectors_.get(), &v), 0);
    auto* vec = static_cast<rte_event_vector*>(v);
    vec->nb_elem = static_cast<uint16_t>(n);
    vec->elem_offset = 0;
    for (uint32_t i = 0; i < n; ++i)
      sched::vector_mbufs(vec)[i] = arrive(flow, first + i);
    rte_event e{};
    e.event_type = RTE_EVENT_TYPE_ETHDEV_VECTOR;
    e.queue_id = queue;
    e.flow_id = flow;
    e.vec = vec;
    return e;
  }
  rte_event packet_event(uint8_t queue, uint32_t flow, uint32_t seq) {
    rte_event e{};
    e.event_type = RTE_EVENT_TYPE_ETHDEV;
    e.queue_id = queue;
    e.flow_id = flow;
    e.mbuf = arrive(flow, seq);
    return e;
  }
  rte_mbuf* arrive(uint32_t flow, uint32_t seq) {
    rte_mbuf* m = make_packet(PortId{kWan}, flow, seq);
    h_.outcomes.at(0, PortId{kWan}).rx_packets.add();
    return m;
  }

  // The packets a port's ring took (sent or handed to the kernel), freed after reading.
  std::vector<uint64_t> collected(RingPort& p) {
    rte_mbuf* got[256];
    const unsigned n = p.collect(0, got, 256);
    std::vector<uint64_t> out = seqs({got, n});
    rte_pktmbuf_free_bulk(got, n);
    return out;
  }

  const Stage& stage_named(const std::string& name) {
    for (size_t i = 0; i < h_.pipeline->size(); ++i) {
      if (h_.pipeline->stage(i).name() == name) return h_.pipeline->stage(i);
    }
    ADD_FAILURE() << "no stage " << name;
    return h_.pipeline->stage(0);
  }

  StageRegistry registry_ = decide_registry();
  Harness h_;
  sched::VectorPool vectors_;
  std::unique_ptr<RingPort> wan_, lan_, kernel_;
  std::unique_ptr<sched::TxAdapter> tx_;
  std::unique_ptr<PipelineHandler> handler_;
  std::vector<rte_event> events_;  // what the test processes; freed at the end
};

TEST_F(PipelineHandlerTest, AGroupRunsOnceOverTheBurstAndEventsGoOnInOrder) {
  build({test_stage("decide"), test_stage("place")});
  ASSERT_EQ(h_.pipeline->groups().size(), 2u);
  // Three vectors of three flows for group 0: sequence numbers 0-11, four per event.
  for (uint32_t f = 0; f < 3; ++f)
    events_.push_back(vector_event(kFirstQueue, f, 4 * f, 4));
  handler_->process(events_);

  const StageStats decide = stage_named("decide").stats();
  EXPECT_EQ(decide.calls, 1u) << "one call over the gathered burst, not one per event";
  EXPECT_EQ(decide.packets, 12u);
  // What goes on stays in its own event, which is forwarded to group 1's queue.
  for (uint32_t f = 0; f < 3; ++f) {
    rte_event& e = events_[f];
    EXPECT_EQ(e.op, RTE_EVENT_OP_FORWARD);
    EXPECT_EQ(e.queue_id, kSecondQueue);
    EXPECT_EQ(e.flow_id, f);
    EXPECT_EQ(seqs(sched::packets(e)), std::vector<uint64_t>{4u * f});
  }
  // The decided packets left at once through the tx adapter, in event order.
  tx_->flush();
  EXPECT_EQ(collected(*lan_), (std::vector<uint64_t>{1, 5, 9}));
  EXPECT_EQ(collected(*kernel_), (std::vector<uint64_t>{3, 7, 11}));
  EXPECT_TRUE(collected(*wan_).empty());

  // Group 1 over the forwarded events: everything is placed on wan and leaves; the events are
  // finished empty.
  handler_->process(events_);
  EXPECT_EQ(stage_named("place").stats().calls, 1u);
  tx_->flush();
  EXPECT_EQ(collected(*wan_), (std::vector<uint64_t>{0, 4, 8}));
  for (rte_event& e : events_)
    EXPECT_TRUE(sched::packets(e).empty());

  const AccountingSnapshot s = h_.outcomes.port_snapshot(PortId{kWan});
  EXPECT_EQ(s.tx, 6u);
  EXPECT_EQ(s.to_kernel, 3u);
  EXPECT_EQ(s.drops[size_t(DropReason::ACL_DENY)], 3u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
}

TEST_F(PipelineHandlerTest, AnOrderedGroupPutsWhatItDecidedBackIntoItsFinishedEvents) {
  build({test_stage("decide", SchedType::Ordered)});
  for (uint32_t f = 0; f < 2; ++f)
    events_.push_back(vector_event(kFirstQueue, f, 8 * f, 8));
  handler_->process(events_);
  // Nothing leaves yet: the worker sends a finished ordered event through the egress queue,
  // which restores the order the events had.
  tx_->flush();
  EXPECT_TRUE(collected(*lan_).empty());
  EXPECT_TRUE(collected(*kernel_).empty());
  EXPECT_TRUE(collected(*wan_).empty());
  // Each event holds its own decided packets in order: the transmitted and the kernel-bound
  // ones (seq 1, 3 mod 4) and those the end of the pipeline decided (0 mod 4: no port was
  // placed, a no_route drop, so not among them); drops are gone.
  EXPECT_EQ(seqs(sched::packets(events_[0])), (std::vector<uint64_t>{1, 3, 5, 7}));
  EXPECT_EQ(seqs(sched::packets(events_[1])), (std::vector<uint64_t>{9, 11, 13, 15}));
  const AccountingSnapshot s = h_.outcomes.port_snapshot(PortId{kWan});
  EXPECT_EQ(s.drops[size_t(DropReason::ACL_DENY)], 4u);
  EXPECT_EQ(s.drops[size_t(DropReason::NO_ROUTE)], 4u);
}

TEST_F(PipelineHandlerTest, AnOrderedGroupSendsWhatItDecidedAtOnceWhenTheEventGoesOn) {
  build({test_stage("decide", SchedType::Ordered), test_stage("place")});
  for (uint32_t f = 0; f < 2; ++f)
    events_.push_back(vector_event(kFirstQueue, f, 8 * f, 8));
  handler_->process(events_);
  // The events carry their undecided packets on to group 1, so they cannot carry the decided
  // ones to the egress queue too: those leave now, each event's in its order.
  EXPECT_EQ(seqs(sched::packets(events_[0])), (std::vector<uint64_t>{0, 4}));
  EXPECT_EQ(seqs(sched::packets(events_[1])), (std::vector<uint64_t>{8, 12}));
  tx_->flush();
  EXPECT_EQ(collected(*lan_), (std::vector<uint64_t>{1, 5, 9, 13}));
  EXPECT_EQ(collected(*kernel_), (std::vector<uint64_t>{3, 7, 11, 15}));
}

TEST_F(PipelineHandlerTest, EventsOfOtherGroupsAndEventsWithoutPacketsKeepTheirPlace) {
  build({test_stage("decide"), test_stage("place")});
  rte_event cpu{};
  cpu.event_type = RTE_EVENT_TYPE_CPU;
  cpu.queue_id = kFirstQueue;
  cpu.u64 = 42;
  events_.push_back(vector_event(kFirstQueue, 0, 0, 4));     // group 0
  events_.push_back(cpu);                                    // nothing to run
  events_.push_back(vector_event(kSecondQueue, 1, 100, 2));  // group 1
  events_.push_back(packet_event(kFirstQueue, 2, 202));      // group 0, a single packet: dropped
  events_.push_back(packet_event(kFirstQueue, 3, 300));      // group 0, goes on
  handler_->process(events_);

  // Three runs: group 0, group 1, group 0 again (a run never reorders events across groups).
  EXPECT_EQ(stage_named("decide").stats().calls, 2u);
  EXPECT_EQ(stage_named("decide").stats().packets, 6u);
  EXPECT_EQ(stage_named("place").stats().calls, 1u);

  EXPECT_EQ(events_[0].queue_id, kSecondQueue);
  EXPECT_EQ(seqs(sched::packets(events_[0])), std::vector<uint64_t>{0});
  EXPECT_EQ(events_[1].event_type, RTE_EVENT_TYPE_CPU);
  EXPECT_EQ(events_[1].u64, 42u) << "an event without packets is left as it is";
  EXPECT_TRUE(sched::packets(events_[2]).empty()) << "group 1 finished it";
  EXPECT_EQ(events_[3].event_type, RTE_EVENT_TYPE_CPU) << "its only packet was dropped";
  EXPECT_EQ(events_[3].u64, 0u);
  EXPECT_EQ(events_[4].queue_id, kSecondQueue);
  EXPECT_EQ(seqs(sched::packets(events_[4])), std::vector<uint64_t>{300});

  tx_->flush();
  EXPECT_EQ(collected(*wan_), (std::vector<uint64_t>{100, 101}));
  EXPECT_EQ(collected(*lan_), std::vector<uint64_t>{1});
  EXPECT_EQ(collected(*kernel_), std::vector<uint64_t>{3});
}

TEST_F(PipelineHandlerTest, AGatheringStopsAtItsLimitAndTheNextRunTakesTheRest) {
  build({test_stage("decide"), test_stage("place")});
  // Three vectors of 64 packets: 192 > kGatherPackets, so two runs (128 + 64).
  static_assert(kGatherPackets == 128);
  for (uint32_t f = 0; f < 3; ++f)
    events_.push_back(vector_event(kFirstQueue, f, 64 * f, 64));
  handler_->process(events_);
  const StageStats decide = stage_named("decide").stats();
  EXPECT_EQ(decide.calls, 2u);
  EXPECT_EQ(decide.packets, 192u);
  for (uint32_t f = 0; f < 3; ++f)
    EXPECT_EQ(sched::packets(events_[f]).size(), 16u) << "a quarter of each event goes on";
  tx_->flush();
  EXPECT_EQ(collected(*lan_).size(), 48u);
  EXPECT_EQ(collected(*kernel_).size(), 48u);
}

}  // namespace
