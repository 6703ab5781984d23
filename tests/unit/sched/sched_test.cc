// The scheduler contract, run on every backend for the schedule types it offers: atomicity,
// per-flow order through atomic and ordered stages, every event delivered or counted under
// overload, the NEW/FORWARD/RELEASE accounting, and variable burst sizes.
#include <gtest/gtest.h>

#include <rte_pause.h>

#include "pipeline_check.h"
#include "sched_support.h"
#include "support/eal_env.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

class SchedulerBackend : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
  BackendKind kind() const { return GetParam(); }
};

void expect_clean(const Outcome& o, uint64_t events) {
  EXPECT_TRUE(o.completed) << "delivered " << o.delivered << " of " << events;
  EXPECT_EQ(o.delivered, events);
  EXPECT_EQ(o.atomic_violations, 0u);
  EXPECT_EQ(o.stage_order_errors, 0u);
  EXPECT_EQ(o.egress_order_errors, 0u);
  EXPECT_EQ(o.inflight_after, 0u);
}

TEST_P(SchedulerBackend, AtomicStagesRunAFlowOnOneWorkerAtATimeInOrder) {
  Scenario s;
  s.stages = {SchedType::Atomic, SchedType::Atomic};
  s.events = 60'000;
  s.cost_ns = {300, 100};
  Outcome o = run_scenario(kind(), s);
  expect_clean(o, s.events);
  ASSERT_EQ(o.per_worker_events.size(), 2u);
  EXPECT_GT(o.per_worker_events[0], 0u);
  EXPECT_GT(o.per_worker_events[1], 0u);
}

TEST_P(SchedulerBackend, OrderedStageOrderIsRestoredAtTheNextStage) {
  if (!has_ordered(kind())) GTEST_SKIP() << backend_name(kind()) << " has no ordered queues";
  Scenario s;
  s.stages = {SchedType::Ordered, SchedType::Atomic};
  s.events = 40'000;
  s.cost_ns = {200, 200};
  expect_clean(run_scenario(kind(), s), s.events);
}

TEST_P(SchedulerBackend, LastStageOrderedLeavesThroughTheEgressQueueInOrder) {
  if (!has_ordered(kind())) GTEST_SKIP() << backend_name(kind()) << " has no ordered queues";
  Scenario s;
  s.stages = {SchedType::Atomic, SchedType::Ordered};
  s.events = 40'000;
  s.cost_ns = {200, 200};
  Outcome o = run_scenario(kind(), s);
  expect_clean(o, s.events);
  // Every event passed the egress queue (the last one).
  EXPECT_EQ(o.stats.queues.back().name, "egress");
  EXPECT_EQ(o.stats.queues.back().dequeued, s.events);
}

TEST_P(SchedulerBackend, ParallelStageSpreadsOverWorkers) {
  Scenario s;
  s.stages = {SchedType::Parallel};
  s.flows = 4;
  s.events = 20'000;
  s.cost_ns = {200, 200};
  Outcome o = run_scenario(kind(), s);
  EXPECT_TRUE(o.completed);
  EXPECT_EQ(o.delivered, s.events);
  // Four flows on a parallel queue still reach both workers.
  EXPECT_GT(o.per_worker_events[0], 0u);
  EXPECT_GT(o.per_worker_events[1], 0u);
}

TEST_P(SchedulerBackend, UnderOverloadEveryEventIsDeliveredOrCountedDropped) {
  Scenario s;
  s.stages = {SchedType::Atomic, SchedType::Atomic};
  s.events = 100'000;
  s.inflight = 512;
  s.retry = false;
  s.cost_ns = {2000, 2000};
  Outcome o = run_scenario(kind(), s);
  EXPECT_TRUE(o.completed) << "delivered " << o.delivered << " refused " << o.refused_at_producer;
  EXPECT_EQ(o.delivered + o.refused_at_producer + o.dropped_at_workers, s.events);
  EXPECT_GT(o.refused_at_producer, 0u) << "the scenario did not overload the scheduler";
  EXPECT_EQ(o.stats.ports[0].refused, o.refused_at_producer);
  EXPECT_EQ(o.atomic_violations, 0u);
  EXPECT_EQ(o.egress_order_errors, 0u);
  EXPECT_EQ(o.inflight_after, 0u);
}

TEST_P(SchedulerBackend, VariableBurstSizesKeepEveryEventAndOrder) {
  for (auto [lo, hi] : {std::pair{1, 1}, {2, 2}, {32, 32}, {1, 16}}) {
    Scenario s;
    s.stages = {SchedType::Atomic};
    s.flows = 64;
    s.events = 20'000;
    s.workers = 1;
    s.burst_min = static_cast<uint16_t>(lo);
    s.burst_max = static_cast<uint16_t>(hi);
    SCOPED_TRACE(testing::Message() << "bursts " << lo << ".." << hi);
    expect_clean(run_scenario(kind(), s), s.events);
  }
}

// Drives ports by hand on one thread: NEW, then FORWARD and RELEASE through enqueue_burst, and
// the implicit release at the next dequeue, as the counters and inflight() see them.
TEST_P(SchedulerBackend, NewForwardReleaseAndImplicitRelease) {
  auto sched = make_scheduler(kind(), {{"a", SchedType::Atomic}, {"b", SchedType::Atomic}}, 1, 1);
  ASSERT_TRUE(sched);
  auto svc = sched->service();
  sched::EventPort& prod = sched->producer(0);
  sched::EventPort& work = sched->worker(0);
  auto pump = [&](rte_event* out, uint16_t want) {
    uint16_t got = 0;
    for (int i = 0; i < 100000 && got < want; ++i) {
      if (svc) svc->poll();
      if (prod.needs_maintenance()) prod.maintain();
      got += work.dequeue_burst(out + got, static_cast<uint16_t>(want - got));
    }
    return got;
  };
  rte_event ev[8];
  for (uint32_t i = 0; i < 8; ++i) {
    ev[i] = rte_event{};
    ev[i].op = RTE_EVENT_OP_NEW;
    ev[i].queue_id = 0;
    ev[i].event_type = RTE_EVENT_TYPE_CPU;
    ev[i].flow_id = i;
    ev[i].u64 = i;
  }
  ASSERT_EQ(prod.enqueue_new_burst(ev, 8), 8);
  EXPECT_EQ(sched->inflight(), 8u);
  rte_event got[8];
  ASSERT_EQ(pump(got, 8), 8);
  for (uint32_t i = 0; i < 8; ++i) {
    if (i % 2 == 0) {
      sched::forward_to(got[i], 1);
      got[i].sched_type = RTE_SCHED_TYPE_ATOMIC;
    } else {
      sched::finish(got[i]);
    }
  }
  ASSERT_EQ(work.enqueue_burst(got, 8), 8);
  EXPECT_EQ(sched->inflight(), 4u);
  rte_event second[4];
  ASSERT_EQ(pump(second, 4), 4);
  for (const rte_event& e : second) {
    EXPECT_EQ(e.queue_id, 1);
    EXPECT_EQ(e.u64 % 2, 0u);
  }
  // The next dequeue releases the four just dequeued (implicit release).
  rte_event none[4];
  EXPECT_EQ(pump(none, 1), 0);
  EXPECT_EQ(sched->inflight(), 0u);
  auto st = sched->stats();
  EXPECT_EQ(st.ports[0].enq_new, 8u);
  EXPECT_EQ(st.ports[1].enq_forward, 4u);
  EXPECT_EQ(st.ports[1].enq_release, 8u);  // 4 explicit + 4 implicit
  EXPECT_EQ(st.queues[0].enqueued, 8u);
  EXPECT_EQ(st.queues[0].dequeued, 8u);
  EXPECT_EQ(st.queues[1].enqueued, 4u);
  EXPECT_EQ(st.queues[1].dequeued, 4u);
}

INSTANTIATE_TEST_SUITE_P(Backends, SchedulerBackend,
                         ::testing::Values(BackendKind::Builtin, BackendKind::Dsw, BackendKind::Sw),
                         [](const auto& info) {
                           return std::string(info.param == BackendKind::Builtin ? "builtin"
                                              : info.param == BackendKind::Dsw   ? "event_dsw"
                                                                                 : "event_sw");
                         });

}  // namespace
