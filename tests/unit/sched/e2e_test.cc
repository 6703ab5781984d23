// Packets end to end, on every backend: a port, the rx adapter forming vectors, the scheduler,
// two workers running a two-stage pipeline (the second ordered where the backend has ordered
// queues), the tx adapter, an egress port. Per-flow order must hold at the egress port and
// every packet must be accounted for: rx == tx + drops, per ingress port.
#include <gtest/gtest.h>

#include <map>

#include <rte_cycles.h>

#include "core/packet.h"
#include "sched/rx_adapter.h"
#include "sched/tx_adapter.h"
#include "sched/worker.h"
#include "sched_support.h"
#include "support/eal_env.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr PortId kIn{0};
constexpr PortId kOut{1};

// Stage 0 denies every 97th packet; the last stage sends the rest to kOut.
class TwoStages final : public sched::EventHandler {
 public:
  void process(std::span<rte_event> events) noexcept override {
    for (rte_event& ev : events) {
      for (rte_mbuf* m : sched::packets(ev)) {
        if (meta(m).verdict != Verdict::Continue) continue;
        if (ev.queue_id == 0 && packet_words(m)[1] % 97 == 0) set_drop(m, DropReason::ACL_DENY);
        if (ev.queue_id == 1) set_transmit(m, kOut);
      }
      if (ev.queue_id == 0) sched::forward_to(ev, 1);
    }
  }
};

class EndToEnd : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

TEST_P(EndToEnd, VectorsCrossThePipelineInOrderAndEveryPacketIsAccounted) {
  const BackendKind kind = GetParam();
  const SchedType second = has_ordered(kind) ? SchedType::Ordered : SchedType::Atomic;
  std::vector<sched::QueueConfig> queues{{"acl", SchedType::Atomic}, {"route", second}};
  std::optional<uint8_t> egress;
  if (second == SchedType::Ordered) {
    egress = 2;
    queues.push_back({"egress", SchedType::Atomic});
  }
  auto sched = make_scheduler(kind, queues, 1, 2);
  ASSERT_TRUE(sched);
  static std::atomic<unsigned> seq{0};
  auto pool = sched::VectorPool::create(fmt::format("vsc_e2e{}", seq.fetch_add(1)), 8192, 16, 0);
  ASSERT_TRUE(pool) << pool.error().message;

  OutcomeTable outcomes(3, 2);
  RingPort in("in", kIn, 1, 1024);
  RingPort out("out", kOut, 1, 16384);
  sched::RxAdapter rx("rx", sched->producer(0), {16, 50, 0, SchedType::Atomic, pool->get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(in, 0));
  TwoStages stages;
  std::vector<std::unique_ptr<sched::TxAdapter>> tx;
  std::vector<std::shared_ptr<sched::Worker>> workers;
  for (uint16_t w = 0; w < 2; ++w) {
    // Both workers share the egress port's queue 0 (the ring port is multi-producer), so the
    // ring's order is the order packets left the pipeline.
    tx.push_back(
        std::make_unique<sched::TxAdapter>(std::vector<sched::TxTarget>{{&in, 0}, {&out, 0}},
                                           std::vector<sched::TxTarget>{}, outcomes.row(1 + w)));
    workers.push_back(std::make_shared<sched::Worker>(
        fmt::format("w{}", w), *sched, sched->worker(w), stages, *tx.back(), egress));
  }

  constexpr uint32_t kFlows = 64;
  constexpr uint32_t kPackets = 30'000;
  std::map<uint32_t, uint64_t> next;
  uint64_t collected = 0, order_errors = 0;
  auto collect = [&] {
    rte_mbuf* got[64];
    while (unsigned n = out.collect(0, got, 64)) {
      for (unsigned i = 0; i < n; ++i) {
        uint32_t flow = static_cast<uint32_t>(packet_words(got[i])[0]);
        uint64_t s = packet_words(got[i])[1];
        if (s < next[flow]) ++order_errors;
        next[flow] = s + 1;
      }
      collected += n;
      rte_pktmbuf_free_bulk(got, n);
    }
  };
  {
    std::vector<std::shared_ptr<Service>> first{borrow(rx)};
    if (auto svc = sched->service()) first.push_back(svc);
    LcoreThread rx_lcore(first);
    LcoreThread w0({workers[0]});
    LcoreThread w1({workers[1]});
    uint32_t seqs[kFlows] = {};
    for (uint32_t i = 0; i < kPackets;) {
      rte_mbuf* burst[32];
      uint32_t n = std::min<uint32_t>(32, kPackets - i);
      for (uint32_t k = 0; k < n; ++k) {
        // Trains of 4 packets per flow, as bursts of one flow arrive on a real link.
        uint32_t flow = ((i + k) / 4 * 2654435761u) % kFlows;
        // The pool is smaller than what the pipeline may hold: wait for packets to come back.
        while (!(burst[k] = make_packet(kIn, flow, seqs[flow]))) {
          collect();
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        ++seqs[flow];
      }
      uint32_t sent = 0;
      while (sent < n) {
        sent += in.inject(0, burst + sent, n - sent);
        collect();
      }
      i += n;
    }
    ASSERT_TRUE(wait_until([&] {
      collect();
      AccountingSnapshot s = outcomes.port_snapshot(kIn);
      return s.rx == kPackets && s.tx + s.dropped() == kPackets;
    })) << outcomes.port_snapshot(kIn).to_string();
    rx_lcore.stop();
    w0.stop();
    w1.stop();
  }
  collect();
  for (auto& w : workers)
    w->park();
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  EXPECT_EQ(s.tx, collected);
  EXPECT_EQ(order_errors, 0u);
  EXPECT_GT(s.drops[static_cast<size_t>(DropReason::ACL_DENY)], 0u);
  EXPECT_EQ(s.dropped(), s.drops[static_cast<size_t>(DropReason::ACL_DENY)] +
                             s.drops[static_cast<size_t>(DropReason::SCHED_BACKPRESSURE)])
      << s.to_string();
  const auto& st = rx.adapter_stats();
  EXPECT_GT(st.vectors.load(), 0u);
  EXPECT_GT(st.vector_packets.load(), st.vectors.load()) << "vectors hold more than one packet";
  // The injector pauses between bursts: vectors also left early, on a drained queue, and the
  // order held across them.
  EXPECT_GT(st.closed_drained.load(), 0u);
  EXPECT_EQ(sched->inflight(), 0u);
}

// The same two stages, spending `cost_ns` on every event: a slow worker.
class SlowStages final : public sched::EventHandler {
 public:
  explicit SlowStages(uint64_t cost_ns) : cost_tsc_(rte_get_tsc_hz() / 1'000'000'000.0 * cost_ns) {}
  void process(std::span<rte_event> events) noexcept override {
    const uint64_t until = rte_rdtsc() + cost_tsc_ * events.size();
    stages_.process(events);
    while (rte_rdtsc() < until) {
    }
  }

 private:
  uint64_t cost_tsc_;
  TwoStages stages_;
};

// A million flows, each flow seen only once every million packets, through vectors formed by
// flow bucket and two workers of which one is ten times slower, with the builtin scheduler
// migrating buckets between them as eagerly as it can: every flow's packets leave in order and
// every packet is accounted for.
TEST(EndToEndAtScale, AMillionFlowsKeepTheirOrderWhileBucketsMigrate) {
  VECFLOW_REQUIRE_EAL();
  sched::BuiltinTuning eager = sched::default_builtin_tuning();
  eager.migration_interval_us = 200;
  eager.load_interval_us = 50;
  eager.min_source_load = 0;
  eager.max_target_load = 1000;
  eager.min_imbalance = 0;
  auto sched = make_scheduler(BackendKind::Builtin,
                              {{"acl", SchedType::Atomic}, {"route", SchedType::Atomic}}, 1, 2,
                              4096, &eager);
  ASSERT_TRUE(sched);
  static std::atomic<unsigned> seq{0};
  auto pool = sched::VectorPool::create(fmt::format("vsc_mill{}", seq.fetch_add(1)), 8192, 64, 0);
  ASSERT_TRUE(pool) << pool.error().message;

  OutcomeTable outcomes(3, 2);
  RingPort in("in", kIn, 1, 4096);
  RingPort out("out", kOut, 1, 16384);
  // A 10 ms timeout: the vectors close full at any injection speed (the sanitizer build injects
  // a few times slower), so their size shows what the buckets do, not how fast this thread is.
  sched::RxAdapterConfig cfg{64, 10'000, 0, SchedType::Atomic, pool->get()};
  cfg.flow_buckets = 16;
  sched::RxAdapter rx("rx", sched->producer(0), cfg, outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(in, 0));
  SlowStages slow(2000), fast(200);
  std::vector<std::unique_ptr<sched::TxAdapter>> tx;
  std::vector<std::shared_ptr<sched::Worker>> workers;
  for (uint16_t w = 0; w < 2; ++w) {
    tx.push_back(
        std::make_unique<sched::TxAdapter>(std::vector<sched::TxTarget>{{&in, 0}, {&out, 0}},
                                           std::vector<sched::TxTarget>{}, outcomes.row(1 + w)));
    workers.push_back(std::make_shared<sched::Worker>(fmt::format("w{}", w), *sched,
                                                      sched->worker(w), w == 0 ? slow : fast,
                                                      *tx.back(), std::nullopt));
  }

  // 2^18 in the sanitizer build: still 16k flows per bucket, in the time CI has.
#ifdef VECFLOW_SANITIZE
  constexpr uint32_t kFlows = 1u << 18;
#else
  constexpr uint32_t kFlows = 1u << 20;
#endif
  constexpr uint32_t kRounds = 2;
  // Sequence numbers start at 1: TwoStages denies multiples of 97, and this test wants every
  // packet through.
  std::vector<uint32_t> next(kFlows, 1);
  uint64_t collected = 0, order_errors = 0;
  auto collect = [&] {
    rte_mbuf* got[64];
    while (unsigned n = out.collect(0, got, 64)) {
      for (unsigned i = 0; i < n; ++i) {
        auto flow = static_cast<uint32_t>(packet_words(got[i])[0]);
        auto s = static_cast<uint32_t>(packet_words(got[i])[1]);
        if (s != next[flow]) ++order_errors;
        next[flow] = s + 1;
      }
      collected += n;
      rte_pktmbuf_free_bulk(got, n);
    }
  };
  {
    LcoreThread rx_lcore({borrow(rx)});
    LcoreThread w0({workers[0]});
    LcoreThread w1({workers[1]});
    for (uint32_t round = 0; round < kRounds; ++round) {
      for (uint32_t flow = 0; flow < kFlows; flow += 32) {
        rte_mbuf* burst[32];
        for (uint32_t k = 0; k < 32; ++k) {
          while (!(burst[k] = make_packet(kIn, flow + k, round + 1))) {
            collect();
            std::this_thread::yield();
          }
        }
        uint32_t sent = 0;
        while (sent < 32) {
          sent += in.inject(0, burst + sent, 32 - sent);
          if (sent < 32) collect();
        }
        if (flow % 4096 == 0) collect();
      }
    }
    ASSERT_TRUE(wait_until([&] {
      collect();
      return outcomes.port_snapshot(kIn).tx == uint64_t{kFlows} * kRounds;
    })) << outcomes.port_snapshot(kIn).to_string();
    rx_lcore.stop();
    w0.stop();
    w1.stop();
  }
  collect();
  for (auto& w : workers)
    w->park();
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  EXPECT_EQ(s.dropped(), 0u) << s.to_string();
  EXPECT_EQ(collected, uint64_t{kFlows} * kRounds);
  EXPECT_EQ(order_errors, 0u);
  uint64_t moved = 0;
  for (const auto& p : sched->stats().ports)
    moved += p.emigrations;
  EXPECT_GT(moved, 10u) << "the scenario did not make the scheduler migrate";
  const auto& st = rx.adapter_stats();
  EXPECT_GT(st.vector_packets.load(), 8 * st.vectors.load())
      << "vectors should hold many packets although every flow recurs once per million";
  EXPECT_EQ(sched->inflight(), 0u);
}

// The last stage alone: every packet to kOut.
class Transmit final : public sched::EventHandler {
 public:
  void process(std::span<rte_event> events) noexcept override {
    for (rte_event& ev : events)
      for (rte_mbuf* m : sched::packets(ev))
        set_transmit(m, kOut);
  }
};

// One lane of the data path: the rx adapter on one lcore, a worker on another, as vecflowd
// places them on a box with two data lcores.
struct Lane {
  explicit Lane(BackendKind kind, uint32_t timeout_us)
      : sched(make_scheduler(kind, {{"only", SchedType::Atomic}}, 1, 1)),
        pool(sched::VectorPool::create(fmt::format("vsc_lane{}", seq.fetch_add(1)), 256, 64, 0)),
        rx("rx", sched->producer(0), {64, timeout_us, 0, SchedType::Atomic, pool->get()},
           outcomes.row(0)),
        tx({{&in, 0}, {&out, 0}}, {}, outcomes.row(1)),
        worker(std::make_shared<sched::Worker>("w", *sched, sched->worker(0), handler, tx,
                                               std::nullopt)) {}
  ~Lane() {
    rx_lcore.reset();
    worker_lcore.reset();
    worker->park();
    rte_mbuf* got[64];
    while (unsigned n = out.collect(0, got, 64))
      rte_pktmbuf_free_bulk(got, n);
  }
  void start() {
    ASSERT_TRUE(rx.add_queue(in, 0));
    std::vector<std::shared_ptr<Service>> first{borrow(rx)};
    if (auto svc = sched->service()) first.push_back(svc);
    rx_lcore = std::make_unique<LcoreThread>(first);
    worker_lcore = std::make_unique<LcoreThread>(std::vector<std::shared_ptr<Service>>{worker});
  }
  // Sends one packet and returns how long it took to reach the egress port.
  std::chrono::microseconds cross(uint32_t flow, uint32_t seq) {
    rte_mbuf* m = make_packet(kIn, flow, seq);
    EXPECT_NE(m, nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(in.inject(0, &m, 1), 1u);
    rte_mbuf* got = nullptr;
    while (out.collect(0, &got, 1) == 0) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) break;
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_NE(got, nullptr) << "the packet never left";
    if (got) {
      EXPECT_EQ(packet_words(got)[0], flow);
      rte_pktmbuf_free(got);
    }
    return std::chrono::duration_cast<std::chrono::microseconds>(took);
  }

  static inline std::atomic<unsigned> seq{0};
  OutcomeTable outcomes{2, 2};
  RingPort in{"in", kIn, 1, 1024};
  RingPort out{"out", kOut, 1, 1024};
  std::unique_ptr<sched::Scheduler> sched;
  Result<sched::VectorPool> pool;
  sched::RxAdapter rx;
  Transmit handler;
  sched::TxAdapter tx;
  std::shared_ptr<sched::Worker> worker;
  std::unique_ptr<LcoreThread> rx_lcore;
  std::unique_ptr<LcoreThread> worker_lcore;
};

// A packet after which nothing comes leaves in the poll that received it: with a vector timeout
// of a second, each of these crosses in far less, on every backend.
TEST_P(EndToEnd, ALonePacketDoesNotWaitForItsVectorToFill) {
  Lane lane(GetParam(), 1'000'000);
  ASSERT_TRUE(lane.sched && lane.pool);
  lane.start();
  for (uint32_t i = 0; i < 20; ++i) {
    EXPECT_LT(lane.cross(7, i), std::chrono::milliseconds(500));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto& st = lane.rx.adapter_stats();
  EXPECT_EQ(st.closed_drained.load(), 20u);
  EXPECT_EQ(st.closed_timeout.load(), 0u);
  EXPECT_EQ(lane.outcomes.port_snapshot(kIn).tx, 20u);
}

// Idle lcores sleep on descriptors (the port's wake-up for the rx adapter, the scheduler port's
// doorbell for the worker) and a frame's arrival wakes both: the adapter's lcore by the port,
// the worker's by the adapter's enqueue.
TEST(EndToEndSleep, AFrameWakesTheSleepingAdapterAndWorker) {
  VECFLOW_REQUIRE_EAL();
  Lane lane(BackendKind::Builtin, 50);
  ASSERT_TRUE(lane.sched && lane.pool);
  lane.start();
  for (uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(wait_until([&] {
      return lane.rx.stats().sleeping.load() && lane.worker->stats().sleeping.load();
    })) << "the lcores never slept";
    const uint64_t rx_sleeps = lane.rx_lcore->lcore().stats().interrupt_sleeps.load();
    const uint64_t w_sleeps = lane.worker_lcore->lcore().stats().interrupt_sleeps.load();
    // Generous: a wake-up is microseconds, but the machine may be busy.
    EXPECT_LT(lane.cross(3, i), std::chrono::milliseconds(200));
    // Each lcore left a sleep for it (and may have slept again since).
    EXPECT_GE(lane.rx_lcore->lcore().stats().interrupt_sleeps.load(), rx_sleeps);
    EXPECT_GE(lane.worker_lcore->lcore().stats().interrupt_sleeps.load(), w_sleeps);
  }
  EXPECT_GE(lane.worker->stats().sleeps.load(), 10u);
  EXPECT_GE(lane.rx.stats().sleeps.load(), 10u);
  AccountingSnapshot s = lane.outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.rx, 10u);
  EXPECT_EQ(s.tx, 10u);
}

INSTANTIATE_TEST_SUITE_P(Backends, EndToEnd,
                         ::testing::Values(BackendKind::Builtin, BackendKind::Dsw, BackendKind::Sw),
                         [](const auto& info) { return std::string(backend_name(info.param)); });

}  // namespace
