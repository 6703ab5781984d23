// The builtin backend's flow migration: flows move from a loaded worker to an idle one while
// traffic runs, and no flow is ever on two workers at once or reordered while it moves. And its
// per-worker backlog limit: a worker that stops dequeuing cannot stop the others' flows. And
// its parts: credits (the in-flight limit shared by the ports in loans), a port's load figure,
// the choice of the flows a loaded port gives away, and the holds of the flows coming to one.
#include <gtest/gtest.h>

#include <set>

#include "pipeline_check.h"
#include "sched/builtin_backend.h"
#include "sched/builtin_credits.h"
#include "sched/builtin_flow_choice.h"
#include "sched/builtin_holds.h"
#include "sched/builtin_load.h"
#include "sched_support.h"
#include "support/eal_env.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

// Migrates as soon as one port is busier than another, as often as every 200 us: the
// protocol runs hundreds of times in a second of traffic.
sched::BuiltinTuning eager() {
  sched::BuiltinTuning t = sched::default_builtin_tuning();
  t.migration_interval_us = 200;
  t.load_interval_us = 50;
  t.min_source_load = 0;
  t.max_target_load = 1000;
  t.min_imbalance = 0;
  return t;
}

uint64_t emigrations(const sched::SchedulerStats& s) {
  uint64_t n = 0;
  for (const auto& p : s.ports)
    n += p.emigrations;
  return n;
}

uint64_t immigrations(const sched::SchedulerStats& s) {
  uint64_t n = 0;
  for (const auto& p : s.ports)
    n += p.immigrations;
  return n;
}

class BuiltinMigration : public ::testing::TestWithParam<SchedType> {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

// Worker 0 spends ten times longer per event than worker 1, so flows first placed on worker 0
// overload it while worker 1 idles: the scheduler must move flows, and keep moving them as the
// balance shifts.
void expect_flows_move_cleanly(SchedType first, uint16_t producers) {
  sched::BuiltinTuning t = eager();
  Scenario s;
  s.stages = {first, SchedType::Atomic};
  s.flows = 256;
  s.producers = producers;
  s.events = 60'000;
  s.rate = 150'000;
  s.cost_ns = {3000, 300};
  s.tuning = &t;
  Outcome o = run_scenario(BackendKind::Builtin, s);
  EXPECT_TRUE(o.completed) << "delivered " << o.delivered << " of " << s.events;
  EXPECT_EQ(o.delivered, s.events);
  EXPECT_EQ(o.atomic_violations, 0u);
  EXPECT_EQ(o.stage_order_errors, 0u);
  EXPECT_EQ(o.egress_order_errors, 0u);
  EXPECT_EQ(o.inflight_after, 0u);
  uint64_t out = emigrations(o.stats);
  ::testing::Test::RecordProperty("emigrations", std::to_string(out));
  std::printf("flows moved: %llu\n", static_cast<unsigned long long>(out));
  EXPECT_GT(out, 10u) << "the scenario did not make the scheduler migrate";
  // Every flow handed over was taken over (the last hand-over may still be in its target's
  // control ring when the lcores stop).
  EXPECT_LE(immigrations(o.stats), out);
  EXPECT_GE(immigrations(o.stats) + sched::kMaxFlowsPerMigration, out);
  EXPECT_EQ(o.stats.migrations, out);
}

TEST_P(BuiltinMigration, FlowsMoveWhileAtomicityAndOrderHold) {
  expect_flows_move_cleanly(GetParam(), 1);
}

// Each producer has a ring of its own to each worker, so a flow that moves has its events
// in several of the source's rings at once: the hand-over must wait for every one of them.
TEST_P(BuiltinMigration, FlowsOfThreeProducersMoveWhileAtomicityAndOrderHold) {
  expect_flows_move_cleanly(GetParam(), 3);
}

INSTANTIATE_TEST_SUITE_P(FirstStage, BuiltinMigration,
                         ::testing::Values(SchedType::Atomic, SchedType::Ordered),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// With the default tuning a port below 70% load keeps its flows: light traffic never migrates.
TEST(Builtin, LightLoadDoesNotMigrate) {
  VECFLOW_REQUIRE_EAL();
  Scenario s;
  s.stages = {SchedType::Atomic};
  s.flows = 256;
  s.events = 20'000;
  s.rate = 50'000;
  s.cost_ns = {200, 200};
  Outcome o = run_scenario(BackendKind::Builtin, s);
  EXPECT_TRUE(o.completed);
  EXPECT_EQ(o.delivered, s.events);
  EXPECT_EQ(emigrations(o.stats), 0u);
}

// A worker that never dequeued is not running: it must not be given flows, and a parked one
// neither. With worker 1 idle (never polled), the loaded worker 0 keeps everything.
TEST(Builtin, NeverMigratesToAWorkerThatDoesNotRun) {
  VECFLOW_REQUIRE_EAL();
  sched::BuiltinTuning t = eager();
  auto sched = make_scheduler(BackendKind::Builtin, {{"a", SchedType::Atomic}}, 1, 2, 4096, &t);
  ASSERT_TRUE(sched);
  sched::EventPort& prod = sched->producer(0);
  sched::EventPort& w0 = sched->worker(0);
  uint64_t sent = 0, got = 0;
  uint64_t end = rte_rdtsc() + rte_get_tsc_hz() / 5;  // 200 ms of a saturated worker 0
  uint32_t flow = 0;
  while (rte_rdtsc() < end) {
    rte_event ev[32];
    for (auto& e : ev) {
      e = rte_event{};
      e.op = RTE_EVENT_OP_NEW;
      e.event_type = RTE_EVENT_TYPE_CPU;
      // Only flows whose slot worker 0 owns at the start (even slots, see builtin.cc).
      do {
        flow = (flow + 1) & sched::kFlowIdMask;
      } while (((flow * 0x9E3779B1u) >> (32 - sched::kFlowSlotBits)) % 2 != 0);
      e.flow_id = flow;
    }
    sent += prod.enqueue_new_burst(ev, 32);
    rte_event out[32];
    got += w0.dequeue_burst(out, 32);
  }
  rte_event out[32];
  while (uint16_t k = w0.dequeue_burst(out, 32))
    got += k;
  EXPECT_EQ(got, sent);
  EXPECT_EQ(emigrations(sched->stats()), 0u);
}

// Events for flows whose slot worker `w` of two owns at the start (slot parity, see builtin.cc).
std::vector<rte_event> flows_of(unsigned w, unsigned n, uint32_t& flow) {
  std::vector<rte_event> out;
  while (out.size() < n) {
    flow = (flow + 1) & sched::kFlowIdMask;
    if (((flow * 0x9E3779B1u) >> (32 - sched::kFlowSlotBits)) % 2 != w) continue;
    rte_event e{};
    e.op = RTE_EVENT_OP_NEW;
    e.event_type = RTE_EVENT_TYPE_CPU;
    e.flow_id = flow;
    e.u64 = flow;
    out.push_back(e);
  }
  return out;
}

// A worker that stops dequeuing (stalled) may hold at most worker_backlog_packets: beyond it,
// new events of its flows are refused while the other worker's flows are still accepted, in
// the same bursts; once it dequeues, its flows are accepted again.
TEST(Builtin, AFullWorkerBacklogRefusesOnlyThatWorkersFlows) {
  VECFLOW_REQUIRE_EAL();
  sched::SchedulerConfig c;
  c.queues = {{"a", SchedType::Atomic}};
  c.producers = 1;
  c.workers = 2;
  c.worker_backlog_packets = 64;
  auto made = sched::create_builtin_scheduler(c);
  ASSERT_TRUE(made) << made.error().message;
  auto& sched = **made;
  sched::EventPort& prod = sched.producer(0);
  uint32_t flow = 0;

  auto to_w1 = flows_of(1, 64, flow);
  ASSERT_EQ(prod.enqueue_new_burst(to_w1.data(), 64), 64);
  EXPECT_EQ(sched.stats().ports[2].backlog_packets, 64);

  // Worker 1 is full: of a mixed burst only worker 0's events go in, moved to the front in
  // their order, worker 1's behind them (in any order).
  auto a = flows_of(0, 8, flow), b = flows_of(1, 8, flow);
  std::vector<rte_event> mixed;
  for (unsigned i = 0; i < 8; ++i) {
    mixed.push_back(b[i]);
    mixed.push_back(a[i]);
  }
  ASSERT_EQ(prod.enqueue_new_burst_any(mixed.data(), 16), 8);
  std::set<uint32_t> refused, expected;
  for (unsigned i = 0; i < 8; ++i) {
    EXPECT_EQ(mixed[i].flow_id, a[i].flow_id);
    refused.insert(mixed[8 + i].flow_id);
    expected.insert(b[i].flow_id);
  }
  EXPECT_EQ(refused, expected);
  // The prefix form stops at the first refused event.
  auto c0 = flows_of(0, 1, flow), c1 = flows_of(1, 1, flow);
  rte_event pair[2] = {c0[0], c1[0]};
  EXPECT_EQ(prod.enqueue_new_burst(pair, 2), 1);

  rte_event out[64];
  EXPECT_EQ(sched.worker(0).dequeue_burst(out, 64), 9);
  for (unsigned i = 0; i < 8; ++i)
    EXPECT_EQ(out[i].flow_id, a[i].flow_id);
  // Worker 1 resumes: half its backlog read, its flows are accepted again.
  EXPECT_EQ(sched.worker(1).dequeue_burst(out, 32), 32);
  EXPECT_EQ(sched.stats().ports[2].backlog_packets, 32);
  auto more = flows_of(1, 8, flow);
  EXPECT_EQ(prod.enqueue_new_burst_any(more.data(), 8), 8);
  EXPECT_EQ(sched.stats().ports[0].refused, 8u + 1u);

  while (sched.worker(1).dequeue_burst(out, 64) > 0) {
  }
  sched.worker(0).dequeue_burst(out, 64);
  EXPECT_EQ(sched.inflight(), 0u);
}

}  // namespace

TEST(BuiltinCredits, PortsTogetherNeverHoldMoreThanTheLimit) {
  sched::CreditPool pool;
  pool.configure(4096, 2);  // loans of 256, a limit of 4096
  ASSERT_EQ(pool.loan(), 256);
  ASSERT_EQ(pool.limit(), 4096);
  sched::Credits a(pool), b(pool);
  uint64_t taken = 0;
  for (int i = 0; i < 100; ++i)
    taken += a.take(32) + b.take(32);
  EXPECT_EQ(taken, 4096u) << "every credit of the pool, and not one more";
  EXPECT_EQ(a.take(1) + b.take(1), 0u);
  EXPECT_FALSE(a.could_take(1));
  // Given back by one port, they can be taken by the other.
  a.give_back(1000);
  EXPECT_TRUE(b.could_take(500));
  EXPECT_EQ(b.take(500), 500u);
}

TEST(BuiltinCredits, APortKeepsAtMostTwoLoansOfWhatItGivesBack) {
  sched::CreditPool pool;
  pool.configure(4096, 2);
  sched::Credits a(pool), b(pool);
  ASSERT_EQ(a.take(2000), 2000u);
  a.give_back(2000);  // keeps one loan, returns the rest to the pool
  EXPECT_EQ(pool.available(), pool.limit() - pool.loan());
  EXPECT_EQ(b.take(4096 - 256), uint16_t(4096 - 256)) << "the rest of the pool is b's to take";
  EXPECT_EQ(a.take(256), 256u) << "a's kept loan";
  EXPECT_EQ(a.take(1), 0u);
}

TEST(BuiltinCredits, ASmallLimitIsRaisedSoThatEveryPortCanHoldTwoLoans) {
  sched::CreditPool pool;
  pool.configure(64, 4);  // a loan cannot go below kMinCreditLoan
  EXPECT_EQ(pool.loan(), sched::kMinCreditLoan);
  EXPECT_EQ(pool.limit(), 4 * 2 * sched::kMinCreditLoan);
  EXPECT_EQ(pool.attainable(), sched::kMinCreditLoan);
}

// A window of samples: `heavy` flows (keys 1, 2, ...) with the given counts, the rest of the
// window one sample each of distinct light flows (keys from 1000).
sched::FlowSamples window(std::vector<uint16_t> heavy) {
  sched::FlowSamples w;
  uint16_t n = 0;
  for (size_t k = 0; k < heavy.size(); ++k) {
    for (uint16_t i = 0; i < heavy[k]; ++i, ++n)
      w.add(static_cast<uint32_t>(k + 1));
  }
  for (uint32_t light = 1000; n < sched::kFlowSamples; ++n, ++light)
    w.add(light);
  return w;
}

TEST(BuiltinFlowChoice, NothingIsChosenBeforeTheWindowIsFull) {
  sched::FlowSamples w;
  for (uint16_t i = 0; i + 1 < sched::kFlowSamples; ++i)
    w.add(7);
  EXPECT_FALSE(w.full());
  w.add(7);
  EXPECT_TRUE(w.full());
  w.clear();
  EXPECT_FALSE(w.full());
}

TEST(BuiltinFlowChoice, TheHeaviestFlowsGoFirstWhileEachMoveNarrowsTheGap) {
  // A quarter and an eighth of the samples; each move is estimated on what the source still
  // carries: 1000 * 32/128 = 250, then 750 * 16/128 = 93.
  const sched::FlowSamples w = window({32, 16});
  const sched::FlowChoice two = w.choose(1000, 0, 2);
  ASSERT_EQ(two.count, 2);
  EXPECT_EQ(two.keys[0], 1u);
  EXPECT_EQ(two.keys[1], 2u);
  EXPECT_EQ(two.moved, 250 + 93);
  // With room for eight, light flows follow the two, and the move never crosses the middle.
  const sched::FlowChoice eight = w.choose(1000, 0, 8);
  EXPECT_EQ(eight.count, 8);
  EXPECT_GT(eight.moved, two.moved);
  EXPECT_LE(eight.moved, 500);
}

TEST(BuiltinFlowChoice, AFlowHeavierThanTheGapStays) {
  // One flow is half the port's load; the target is only 300 below: moving it would make the
  // target the hotter port, so only lighter flows move.
  const sched::FlowSamples w = window({64});
  const sched::FlowChoice c = w.choose(900, 600, 8);
  for (uint8_t i = 0; i < c.count; ++i)
    EXPECT_NE(c.keys[i], 1u);
  EXPECT_GT(c.count, 0);
  EXPECT_LT(c.moved, 300);
}

TEST(BuiltinFlowChoice, AtMostTheAskedNumberOfFlows) {
  const sched::FlowSamples w = window({});
  EXPECT_EQ(w.choose(1000, 0, 3).count, 3);
  EXPECT_EQ(w.choose(1000, 0, 255).count, sched::kMaxFlowsPerMigration);
  EXPECT_EQ(w.choose(1000, 995, 8).count, 0) << "no flow is light enough for a gap of 5";
}

TEST(BuiltinLoad, TheFigureIsTheBusyShareSmoothedOverTwoPeriods) {
  sched::LoadMeter m;
  m.start(0);
  m.busy(100);
  m.idle(600);  // busy 500 of a period of 1000
  EXPECT_EQ(m.end_period(1000), 250) << "half busy, averaged with the initial 0";
  m.busy(1000);  // busy through the whole next period, still busy at its end
  EXPECT_EQ(m.end_period(2000), (250 + 1000) / 2);
  m.idle(2500);
  EXPECT_EQ(m.end_period(3000), (625 + 500) / 2) << "the busy time up to the idle turn";
  EXPECT_EQ(m.end_period(4000), 562 / 2) << "an idle period halves the figure";
  m.set_full();
  EXPECT_EQ(m.figure(), sched::LoadMeter::kMax);
}

rte_event flow_event(uint8_t queue, uint32_t flow, uint64_t seq) {
  rte_event e{};
  e.queue_id = queue;
  e.flow_id = flow;
  e.event_type = RTE_EVENT_TYPE_CPU;
  e.u64 = seq;
  return e;
}

std::vector<uint64_t> seqs_of(const rte_event* ev, uint16_t n) {
  std::vector<uint64_t> out;
  for (uint16_t i = 0; i < n; ++i)
    out.push_back(ev[i].u64);
  return out;
}

TEST(BuiltinHolds, AHeldFlowsEventsWaitForTheReleaseAndThenGoFirstInOrder) {
  std::array<SchedType, sched::kMaxQueues> types{};
  types.fill(SchedType::Atomic);
  types[1] = SchedType::Parallel;
  sched::FlowHolds h;
  h.init(64, 8);
  const uint32_t held = sched::flow_key(0, sched::flow_slot(7));
  h.hold(&held, 1);
  ASSERT_TRUE(h.holding());

  // Flow 7 of queue 0 is held; flow 8, and flow 7 of a parallel queue, are not.
  rte_event ev[8] = {flow_event(0, 7, 1), flow_event(0, 8, 2), flow_event(0, 7, 3),
                     flow_event(1, 7, 4)};
  uint16_t n = h.hold_back(ev, 4, types.data());
  EXPECT_EQ(seqs_of(ev, n), (std::vector<uint64_t>{2, 4}));
  rte_event more[8] = {flow_event(0, 7, 5)};
  EXPECT_EQ(h.hold_back(more, 1, types.data()), 0);
  EXPECT_FALSE(h.has_released());
  EXPECT_FALSE(h.empty());

  h.release(&held, 1);
  EXPECT_FALSE(h.holding());
  ASSERT_TRUE(h.has_released());
  // What is read after the release queues behind the released events.
  rte_event later = flow_event(0, 7, 6);
  h.append(&later, 1);
  rte_event out[8];
  n = h.take(out, 8);
  EXPECT_EQ(seqs_of(out, n), (std::vector<uint64_t>{1, 3, 5, 6}));
  EXPECT_TRUE(h.empty());
}

TEST(BuiltinHolds, DrainHandsOverEverythingHeldOrWaiting) {
  std::array<SchedType, sched::kMaxQueues> types{};
  sched::FlowHolds h;
  h.init(64, 8);
  const uint32_t keys[2] = {sched::flow_key(0, sched::flow_slot(1)),
                            sched::flow_key(0, sched::flow_slot(2))};
  h.hold(keys, 2);
  rte_event ev[3] = {flow_event(0, 1, 1), flow_event(0, 2, 2), flow_event(0, 1, 3)};
  EXPECT_EQ(h.hold_back(ev, 3, types.data()), 0);
  h.release(keys, 1);  // flow 1's events now wait to be taken, flow 2's are still held
  std::vector<uint64_t> dropped;
  h.drain([&](rte_event& e) { dropped.push_back(e.u64); });
  std::sort(dropped.begin(), dropped.end());
  EXPECT_EQ(dropped, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_FALSE(h.has_released());
}
