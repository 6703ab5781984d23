// The rx adapter (vectors by flow bucket, closed by size, timeout, removal and drain;
// backpressure; exhausted vector pool) and the tx adapter (verdicts, retries, tx_full), with
// the packet accounting each must keep.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include <rte_cycles.h>
#include <rte_ether.h>
#include <rte_ip.h>

#include "core/ipv4_fragment.h"
#include "core/packet.h"
#include "core/port_mtu.h"
#include "runtime/cycles.h"
#include "sched/rx_adapter.h"
#include "sched/tx_adapter.h"
#include "sched_support.h"
#include "support/eal_env.h"

using namespace vecflow;
using namespace vecflow::test;

namespace {

constexpr PortId kIn{0};
constexpr PortId kOut{1};
constexpr PortId kKernel{2};

std::unique_ptr<sched::Scheduler> builtin(uint32_t inflight = 4096) {
  return make_scheduler(BackendKind::Builtin, {{"first", SchedType::Atomic}}, 1, 1, inflight);
}

sched::VectorPool vector_pool(uint32_t n, uint16_t size, uint32_t cache = 0) {
  static std::atomic<unsigned> seq{0};
  auto p = sched::VectorPool::create(fmt::format("vsc_vec{}", seq.fetch_add(1)), n, size, cache);
  EXPECT_TRUE(p) << p.error().message;
  return p ? std::move(*p) : sched::VectorPool();
}

// Everything the worker port can dequeue right now.
std::vector<rte_event> drain(sched::EventPort& w) {
  std::vector<rte_event> out;
  rte_event ev[32];
  while (uint16_t n = w.dequeue_burst(ev, 32))
    out.insert(out.end(), ev, ev + n);
  return out;
}

// The same for a backend with a scheduling service (event_sw): the service runs between
// dequeues until a few rounds bring nothing.
std::vector<rte_event> drain_scheduled(sched::Scheduler& sched, sched::EventPort& w) {
  std::vector<rte_event> out;
  auto service = sched.service();
  for (int quiet = 0; quiet < 8;) {
    if (service) service->poll();
    auto got = drain(w);
    quiet = got.empty() ? quiet + 1 : 0;
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

uint64_t packets_of(std::vector<rte_event>& events) {
  uint64_t n = 0;
  for (auto& e : events)
    n += sched::packets(e).size();
  return n;
}

void free_all(std::vector<rte_event>& events) {
  for (auto& e : events)
    sched::free_payload(e);
  events.clear();
}

void inject(RingPort& port, uint16_t q, uint32_t flow, uint32_t seq) {
  rte_mbuf* m = make_packet(port.id(), flow, seq);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(port.inject(q, &m, 1), 1u);
}

class RxAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
  OutcomeTable outcomes{4, 3};
};

TEST_F(RxAdapterTest, GroupsPacketsOfAFlowIntoVectorsInOrder) {
  auto sched = builtin();
  auto pool = vector_pool(64, 4);
  RingPort port("in", kIn);
  sched::RxAdapter rx("rx", sched->producer(0), {4, 1'000'000, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  for (uint32_t seq = 0; seq < 8; ++seq)
    for (uint32_t flow = 1; flow <= 3; ++flow)
      inject(port, 0, flow, seq);
  EXPECT_TRUE(rx.poll());
  EXPECT_FALSE(rx.has_pending());
  auto events = drain(sched->worker(0));
  ASSERT_EQ(events.size(), 6u);
  std::map<uint32_t, uint32_t> next;
  for (auto& e : events) {
    ASSERT_EQ(e.event_type, RTE_EVENT_TYPE_ETHDEV_VECTOR);
    auto pkts = sched::packets(e);
    ASSERT_EQ(pkts.size(), 4u);
    uint32_t flow = static_cast<uint32_t>(packet_words(pkts[0])[0]);
    EXPECT_EQ(e.flow_id, flow);
    EXPECT_EQ(e.vec->port, to_index(kIn));
    for (rte_mbuf* m : pkts) {
      EXPECT_EQ(packet_words(m)[0], flow);
      EXPECT_EQ(packet_words(m)[1], next[flow]++);
    }
  }
  const auto& st = rx.adapter_stats();
  EXPECT_EQ(st.vectors.load(), 6u);
  EXPECT_EQ(st.vector_packets.load(), 24u);
  EXPECT_EQ(st.closed_full.load(), 6u);
  EXPECT_EQ(outcomes.port_snapshot(kIn).rx, 24u);
  free_all(events);
}

// 1024 flows, each recurring only every 1024 packets (the worst case for vectors by flow), at
// saturation (every poll finds more packets than it takes): the buckets' vectors still leave
// full, each flow's packets in order, each flow always in the vector of the same bucket, whose
// number is the event's flow id.
TEST_F(RxAdapterTest, VectorsFillWhateverTheNumberOfFlows) {
  auto sched = builtin();
  constexpr uint16_t kBuckets = 16;
  constexpr uint32_t kFlows = 1024;
  constexpr uint32_t kRounds = 4;
  auto pool = vector_pool(256, 64);
  RingPort port("in", kIn);
  sched::RxAdapterConfig cfg{64, 1'000'000, 0, SchedType::Atomic, pool.get()};
  cfg.flow_buckets = kBuckets;
  sched::RxAdapter rx("rx", sched->producer(0), cfg, outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  std::vector<rte_event> events;
  for (uint32_t seq = 0; seq < kRounds; ++seq)
    for (uint32_t flow = 0; flow < kFlows; ++flow)
      inject(port, 0, flow, seq);
  // Each poll takes kRxBurstsPerPoll full bursts and leaves the rest: never a drained queue.
  while (outcomes.port_snapshot(kIn).rx < kFlows * kRounds) {
    rx.poll();
    auto got = drain(sched->worker(0));
    events.insert(events.end(), got.begin(), got.end());
  }
  EXPECT_FALSE(rx.has_pending());
  ASSERT_EQ(events.size(), kFlows * kRounds / 64);
  std::map<uint32_t, uint32_t> next;
  std::map<uint32_t, uint32_t> bucket_of;
  for (auto& e : events) {
    ASSERT_EQ(e.event_type, RTE_EVENT_TYPE_ETHDEV_VECTOR);
    auto pkts = sched::packets(e);
    EXPECT_EQ(pkts.size(), 64u);
    const uint32_t bucket = e.flow_id;
    EXPECT_LT(bucket, kBuckets);
    for (rte_mbuf* m : pkts) {
      auto flow = static_cast<uint32_t>(packet_words(m)[0]);
      EXPECT_EQ(m->hash.rss % kBuckets, bucket);
      auto [it, fresh] = bucket_of.emplace(flow, bucket);
      EXPECT_EQ(it->second, bucket) << "flow " << flow << " changed bucket";
      EXPECT_EQ(packet_words(m)[1], next[flow]++) << "flow " << flow << " out of order";
    }
  }
  EXPECT_EQ(bucket_of.size(), kFlows);
  EXPECT_EQ(rx.adapter_stats().closed_full.load(), events.size());
  EXPECT_EQ(outcomes.port_snapshot(kIn).rx, kFlows * kRounds);
  free_all(events);
}

// What a poll collects from a queue it drains goes on in that poll, whatever the timeout: a
// lone packet (a ping) waits for nothing.
TEST_F(RxAdapterTest, WhatAPollCollectsLeavesWhenItsQueueIsDrained) {
  auto sched = builtin();
  auto pool = vector_pool(64, 64);
  RingPort port("in", kIn);
  sched::RxAdapter rx("rx", sched->producer(0), {64, 1'000'000, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  for (uint32_t seq = 0; seq < 3; ++seq)
    inject(port, 0, 9, seq);
  inject(port, 0, 10, 0);
  EXPECT_TRUE(rx.poll());
  EXPECT_FALSE(rx.has_pending());
  auto events = drain(sched->worker(0));
  ASSERT_EQ(events.size(), 2u);  // flows 9 and 10: two buckets, two vectors
  EXPECT_EQ(sched::packets(events[0]).size() + sched::packets(events[1]).size(), 4u);
  const auto& st = rx.adapter_stats();
  EXPECT_EQ(st.closed_drained.load(), 2u);
  EXPECT_EQ(st.closed_timeout.load(), 0u);
  // Their wait was counted: four packets, each well under the timeout of a second.
  EXPECT_EQ(st.wait.count(), 4u);
  EXPECT_LT(st.wait.quantile_cycles(1.0), tsc_hz() / 10);
  EXPECT_FALSE(rx.poll());  // idle: nothing received, nothing enqueued
  free_all(events);
}

// At saturation a bucket that gets few of the queue's packets waits for its timeout, and not
// much longer: the queue is never drained (every burst comes back full), so only the timeout
// closes flow 9's vector, while the busy flow's vectors leave full.
TEST_F(RxAdapterTest, ASparseBucketOfABusyQueueLeavesAtItsTimeout) {
  auto sched = builtin();
  auto pool = vector_pool(256, 64);
  RingPort port("in", kIn);
  // Long enough that a slow build's polls (ASan) never let the busy flow's vectors time out.
  constexpr uint32_t kTimeoutUs = 20000;
  sched::RxAdapter rx("rx", sched->producer(0), {64, kTimeoutUs, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  for (uint32_t seq = 0; seq < 3; ++seq)
    inject(port, 0, 9, seq);
  port.filler = 1'000'000;
  uint64_t t0 = rte_rdtsc();
  EXPECT_TRUE(rx.poll());
  EXPECT_TRUE(rx.has_pending());
  uint64_t due = t0 + tsc_hz() / 1'000'000 * kTimeoutUs;
  std::vector<rte_event> sparse;
  uint64_t busy = 0;
  while (sparse.empty()) {
    rx.poll();
    // Read after the poll: the adapter reads its clock inside it, and a slow poll (a
    // sanitizer build, a preempted thread) may begin before the vector is due and end after.
    uint64_t after = rte_rdtsc();
    auto events = drain(sched->worker(0));
    for (auto& e : events) {
      if (e.flow_id == 9) {
        EXPECT_GE(after, due) << "closed before its timeout";
        sparse.push_back(e);
      } else {
        busy += sched::packets(e).size();
        sched::free_payload(e);
      }
    }
  }
  port.filler = 0;
  ASSERT_EQ(sparse.size(), 1u);
  EXPECT_EQ(sched::packets(sparse[0]).size(), 3u);
  EXPECT_EQ(rx.adapter_stats().closed_timeout.load(), 1u);
  EXPECT_EQ(rx.adapter_stats().closed_drained.load(), 0u) << "a busy queue is never drained";
  // The busy flow's vectors left full, each 64 packets.
  EXPECT_GT(busy, 0u);
  EXPECT_EQ(busy % 64, 0u);
  free_all(sparse);
  rx.flush();
  auto rest = drain(sched->worker(0));
  free_all(rest);
}

// Wraps a producer port and stamps each enqueued event's first packet with the enqueue time
// (payload word 3).
class StampingPort final : public sched::EventPort {
 public:
  explicit StampingPort(sched::EventPort& inner)
      : EventPort(sched::PortRole::Producer, 0), in_(inner) {}
  uint16_t enqueue_new_burst(const rte_event* ev, uint16_t n) noexcept override {
    uint64_t now = rte_rdtsc();
    for (uint16_t i = 0; i < n; ++i) {
      rte_event e = ev[i];
      packet_words(sched::packets(e)[0])[3] = now;
    }
    return in_.enqueue_new_burst(ev, n);
  }
  uint16_t enqueue_forward_burst(const rte_event* ev, uint16_t n) noexcept override {
    return in_.enqueue_forward_burst(ev, n);
  }
  uint16_t enqueue_burst(const rte_event* ev, uint16_t n) noexcept override {
    return in_.enqueue_burst(ev, n);
  }
  uint16_t dequeue_burst(rte_event*, uint16_t) noexcept override { return 0; }

 private:
  sched::EventPort& in_;
};

// Records when each poll of the adapter starts, and stretches rounds at random with a
// neighbour's work, so rounds are long and uneven.
class RoundRecorder final : public Service {
 public:
  RoundRecorder(sched::RxAdapter& rx, std::vector<uint64_t>& starts)
      : Service("recorder"), rx_(rx), starts_(starts) {}
  bool poll() noexcept override {
    uint64_t now = rte_rdtsc();
    if (starts_.size() < starts_.capacity()) starts_.push_back(now);
    bool worked = rx_.poll();
    uint64_t spin = rng_() % (tsc_hz() / 10'000);  // up to 100 us of other work
    while (rte_rdtsc() < now + spin) {
    }
    return worked;
  }
  bool has_pending() const noexcept override { return rx_.has_pending(); }

 private:
  sched::RxAdapter& rx_;
  std::vector<uint64_t>& starts_;
  std::mt19937 rng_{3};
};

// At saturation (the filler keeps every burst full), sparse flows' vectors close by timeout.
TEST_F(RxAdapterTest, AVectorIsNeverHeldLongerThanItsTimeoutPlusOneRound) {
  auto sched = builtin();
  auto pool = vector_pool(1024, 64, 0);
  RingPort port("in", kIn);
  constexpr uint32_t kTimeoutUs = 200;
  const uint64_t timeout = tsc_hz() / 1'000'000 * kTimeoutUs;
  StampingPort stamping(sched->producer(0));
  sched::RxAdapter rx("rx", stamping, {64, kTimeoutUs, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  std::vector<uint64_t> starts;
  starts.reserve(1 << 22);
  RoundRecorder recorder(rx, starts);
  std::vector<rte_event> events;
  uint64_t filler = 0;
  // Keeps the sparse flows' events and frees the filler's (counted), so the pool lasts.
  auto take = [&](std::vector<rte_event> got) {
    for (auto& e : got) {
      if (e.flow_id == 0) {
        filler += sched::packets(e).size();
        sched::free_payload(e);
      } else {
        events.push_back(e);
      }
    }
  };
  port.filler = UINT64_MAX;
  {
    LcoreThread lcore({borrow(recorder)});
    std::mt19937 rng(5);
    uint32_t seq[15] = {};
    for (int i = 0; i < 3000; ++i) {
      uint32_t flow = rng() % 15;
      inject(port, 0, flow + 1, seq[flow]++);
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
      take(drain(sched->worker(0)));
    }
    ASSERT_TRUE(wait_until([&] {
      take(drain(sched->worker(0)));
      return packets_of(events) == 3000;
    }));
    port.filler = 0;
    lcore.stop();
  }
  take(drain(sched->worker(0)));
  EXPECT_GT(filler, 0u);
  ASSERT_GT(rx.adapter_stats().closed_timeout.load(), 100u);
  uint64_t checked = 0;
  for (auto& e : events) {
    rte_mbuf* first = sched::packets(e)[0];
    uint64_t rx_at = packet_words(first)[2];
    uint64_t enq_at = packet_words(first)[3];
    // The poll that enqueued it, and the one before.
    auto k = std::upper_bound(starts.begin(), starts.end(), enq_at) - starts.begin() - 1;
    ASSERT_GE(k, 1);
    EXPECT_LT(starts[k - 1], rx_at + timeout)
        << "vector was already due at the round before the one that sent it";
    ++checked;
  }
  EXPECT_EQ(checked, events.size());
  free_all(events);
}

TEST_F(RxAdapterTest, RemovingAQueueAndDrainingFlushPartialVectors) {
  // A small in-flight limit: the busy queues' filler must not empty the packet pool while
  // nobody dequeues (a poll that cannot fill its bursts finds its queue drained).
  auto sched = builtin(128);
  auto pool = vector_pool(256, 64);
  RingPort port("in", kIn, 2);
  sched::RxAdapter rx("rx", sched->producer(0), {64, 1'000'000, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  ASSERT_TRUE(rx.add_queue(port, 1));
  EXPECT_FALSE(rx.add_queue(port, 1));
  for (uint32_t flow = 1; flow <= 5; ++flow)
    for (uint32_t seq = 0; seq < 3; ++seq) {
      inject(port, 0, flow, seq);
      inject(port, 1, flow + 100, seq);
    }
  // Busy queues (never drained): only a removal or the drain closes the partial vectors.
  port.filler = UINT64_MAX;
  std::vector<rte_event> events;
  uint64_t filler = 0;
  auto take = [&](std::vector<rte_event> got) {
    for (auto& e : got) {
      if (e.flow_id == 0) {
        filler += sched::packets(e).size();
        sched::free_payload(e);
      } else {
        events.push_back(e);
      }
    }
  };
  LcoreThread lcore({borrow(rx)});
  ASSERT_TRUE(wait_until([&] { return rx.adapter_stats().packets.load() > 30 + 256; }));
  // The timeout is far away and no vector of the test's flows is full: none has left yet.
  take(drain(sched->worker(0)));
  EXPECT_TRUE(events.empty());

  ASSERT_TRUE(rx.remove_queue(port, 1));
  EXPECT_EQ(rx.queue_count(), 1);
  take(drain(sched->worker(0)));
  uint64_t queue1 = 0;
  for (auto& e : events) {
    for (rte_mbuf* m : sched::packets(e))
      queue1 += packet_words(m)[0] > 100;
  }
  EXPECT_EQ(queue1, 15u) << "every packet of the removed queue is sent";
  EXPECT_GE(rx.adapter_stats().closed_flush.load(), 1u);
  EXPECT_TRUE(rx.has_pending()) << "queue 0's partial vectors stay";

  rx.request_drain();
  ASSERT_TRUE(wait_until([&] { return rx.drained(); }));
  port.filler = 0;
  take(drain(sched->worker(0)));
  EXPECT_EQ(packets_of(events), 30u);
  EXPECT_FALSE(rx.has_pending());
  EXPECT_EQ(outcomes.port_snapshot(kIn).rx, 30u + filler);
  EXPECT_EQ(outcomes.port_snapshot(kIn).dropped(), 0u);
  free_all(events);
}

TEST_F(RxAdapterTest, RemovingAPortFlushesEveryQueueOfIt) {
  auto sched = builtin(128);  // as above: the filler must not empty the packet pool
  auto pool = vector_pool(64, 64);
  RingPort a("a", kIn, 2);
  RingPort b("b", kOut);
  sched::RxAdapter rx("rx", sched->producer(0), {64, 1'000'000, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(a, 0));
  ASSERT_TRUE(rx.add_queue(a, 1));
  ASSERT_TRUE(rx.add_queue(b, 0));
  inject(a, 0, 1, 0);
  inject(a, 1, 2, 0);
  inject(b, 0, 3, 0);
  // Busy queues: partial vectors stay open until their queue goes.
  a.filler = UINT64_MAX;
  b.filler = UINT64_MAX;
  LcoreThread lcore({borrow(rx)});
  ASSERT_TRUE(wait_until([&] { return rx.adapter_stats().packets.load() > 3 + 256; }));
  std::vector<uint32_t> flows;
  auto take = [&](std::vector<rte_event> got) {
    for (auto& e : got)
      if (e.flow_id != 0) flows.push_back(e.flow_id);
    free_all(got);
  };
  take(drain(sched->worker(0)));
  ASSERT_TRUE(rx.remove_port(a));
  EXPECT_EQ(rx.queue_count(), 1);
  take(drain(sched->worker(0)));
  std::sort(flows.begin(), flows.end());
  EXPECT_EQ(flows, (std::vector<uint32_t>{1, 2})) << "port a's partial vectors, not b's";
  EXPECT_TRUE(rx.has_pending());  // port b's stays
  rx.request_drain();
  ASSERT_TRUE(wait_until([&] { return rx.drained(); }));
  a.filler = 0;
  b.filler = 0;
  take(drain(sched->worker(0)));
}

TEST_F(RxAdapterTest, RemovingAQueueFailsClearlyWhenTheAdapterIsNotPolled) {
  auto sched = builtin();
  RingPort port("in", kIn);
  sched::RxAdapter rx("rx", sched->producer(0), {1, 50, 0, SchedType::Atomic, nullptr},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  auto r = rx.remove_queue(port, 0, std::chrono::milliseconds(20));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not polled"), std::string::npos);
  rx.poll();  // the removal happens at the next poll
  EXPECT_EQ(rx.queue_count(), 0);
}

// A full builtin scheduler says so before the adapter reads more: the packets wait in the
// port (whose ring, when full, is where overload is dropped and counted), nothing is refused,
// and once the worker catches up every packet goes through.
TEST_F(RxAdapterTest, AFullSchedulerLeavesPacketsInThePort) {
  auto sched = builtin(256);
  RingPort port("in", kIn);
  sched::RxAdapter rx("rx", sched->producer(0), {1, 50, 0, SchedType::Atomic, nullptr},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  constexpr uint32_t kPackets = 1000;
  for (uint32_t i = 0; i < kPackets; ++i)
    inject(port, 0, i % 50, i / 50);
  while (rx.poll()) {
  }
  EXPECT_LT(outcomes.port_snapshot(kIn).rx, kPackets) << "the adapter stopped reading";
  EXPECT_GT(rx.adapter_stats().held.load(), 0u);
  uint64_t delivered = 0;
  for (int round = 0; round < 100 && delivered < kPackets; ++round) {
    auto events = drain(sched->worker(0));
    delivered += packets_of(events);
    free_all(events);
    while (rx.poll()) {
    }
  }
  auto events = drain(sched->worker(0));
  delivered += packets_of(events);
  free_all(events);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(delivered, kPackets);
  EXPECT_EQ(s.rx, kPackets);
  EXPECT_EQ(s.dropped(), 0u) << s.to_string();
  EXPECT_EQ(rx.adapter_stats().refused.load(), 0u);
}

// The smallest in-flight limit with more flows than it has credits, each holding an open
// vector: the adapter's room request (every open vector may close in one poll) exceeds what
// the scheduler can ever offer, and must be cut to it rather than wait forever.
TEST_F(RxAdapterTest, ManyOpenVectorsOnASmallSchedulerStillMove) {
  auto sched = builtin(64);
  auto pool = vector_pool(1024, 64);
  RingPort port("in", kIn);
  sched::RxAdapter rx("rx", sched->producer(0), {64, 1'000'000, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  constexpr uint32_t kPackets = 600;
  for (uint32_t i = 0; i < kPackets; ++i)
    inject(port, 0, i % 300, i / 300);  // 300 flows: every open-vector slot taken
  uint64_t delivered = 0;
  for (int round = 0; round < 200 && delivered < kPackets; ++round) {
    while (rx.poll()) {
    }
    auto events = drain(sched->worker(0));
    delivered += packets_of(events);
    free_all(events);
    if (outcomes.port_snapshot(kIn).rx == kPackets) rx.flush();
  }
  auto events = drain(sched->worker(0));
  delivered += packets_of(events);
  free_all(events);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.rx, kPackets) << "the adapter stopped reading for good";
  EXPECT_EQ(delivered + s.dropped(), kPackets) << s.to_string();
}

// A backend that cannot say whether it has room (a DPDK eventdev) refuses at enqueue: the
// refused events' packets are dropped and counted as backpressure, none lost.
TEST_F(RxAdapterTest, RefusedEventsAreDroppedAndCountedAsBackpressure) {
  auto sched = make_scheduler(BackendKind::Sw, {{"first", SchedType::Atomic}}, 1, 1, 256);
  ASSERT_NE(sched, nullptr);
  RingPort port("in", kIn);
  sched::RxAdapter rx("rx", sched->producer(0), {1, 50, 0, SchedType::Atomic, nullptr},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  for (uint32_t i = 0; i < 1000; ++i)
    inject(port, 0, i % 50, i / 50);
  while (rx.poll()) {
  }
  auto events = drain_scheduled(*sched, sched->worker(0));
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  uint64_t refused = rx.adapter_stats().refused.load();
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(s.rx, 1000u);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::SCHED_BACKPRESSURE)], refused);
  EXPECT_EQ(packets_of(events) + refused, 1000u);
  for (auto& e : events)
    EXPECT_EQ(e.event_type, RTE_EVENT_TYPE_ETHDEV);  // vector size 1: plain packet events
  free_all(events);
}

TEST_F(RxAdapterTest, WithTheVectorPoolEmptyPacketsTravelAlone) {
  auto sched = builtin();
  auto pool = vector_pool(2, 8);
  RingPort port("in", kIn);
  sched::RxAdapter rx("rx", sched->producer(0), {8, 1'000'000, 0, SchedType::Atomic, pool.get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(port, 0));
  // Flows 17, 34, 51, 68: flow buckets 1 to 4.
  for (uint32_t flow = 17; flow <= 68; flow += 17)
    for (uint32_t seq = 0; seq < 2; ++seq)
      inject(port, 0, flow, seq);
  rx.poll();
  rx.flush();
  auto events = drain(sched->worker(0));
  EXPECT_EQ(packets_of(events), 8u);
  EXPECT_EQ(rx.adapter_stats().no_vector.load(), 4u);
  EXPECT_EQ(rx.adapter_stats().vectors.load(), 2u);
  EXPECT_EQ(outcomes.port_snapshot(kIn).dropped(), 0u);
  // Alone, but in its flow bucket's atomic context: the flow id its vector would have had.
  for (const auto& e : events) {
    if (e.event_type == RTE_EVENT_TYPE_ETHDEV) {
      EXPECT_EQ(e.flow_id, e.mbuf->hash.rss & (sched::kDefaultFlowBuckets - 1));
    }
  }
  free_all(events);
}

// ---- TxAdapter ------------------------------------------------------------------------------

class TxAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_EAL();
    pool_ = vector_pool(16, 16);
    in_ = std::make_unique<RingPort>("in", kIn);
    out_ = std::make_unique<RingPort>("out", kOut);
    kernel_ = std::make_unique<RingPort>("kernel", kKernel);
  }
  rte_event vector_of(std::vector<rte_mbuf*> pkts) {
    void* v = nullptr;
    EXPECT_EQ(rte_mempool_get(pool_.get(), &v), 0);
    auto* vec = static_cast<rte_event_vector*>(v);
    vec->nb_elem = static_cast<uint16_t>(pkts.size());
    vec->elem_offset = 0;
    for (size_t i = 0; i < pkts.size(); ++i)
      sched::vector_mbufs(vec)[i] = pkts[i];
    rte_event e{};
    e.event_type = RTE_EVENT_TYPE_ETHDEV_VECTOR;
    e.vec = vec;
    return e;
  }
  OutcomeTable outcomes{2, 3};
  // Made in SetUp, once EAL is up.
  sched::VectorPool pool_;
  std::unique_ptr<RingPort> in_, out_, kernel_;
};

TEST_F(TxAdapterTest, ActsOnEveryVerdictAndCountsItAgainstTheIngressPort) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {{kernel_.get(), 0}}, outcomes.row(1));
  std::vector<rte_mbuf*> pkts;
  for (uint32_t i = 0; i < 6; ++i)
    pkts.push_back(make_packet(kIn, 1, i));
  set_transmit(pkts[0], kOut);
  meta(pkts[1]).verdict = Verdict::Kernel;
  set_drop(pkts[2], DropReason::ACL_DENY);
  // pkts[3] left at Continue: the pipeline forgot it
  set_transmit(pkts[4], PortId{7});  // no such port
  set_transmit(pkts[5], kOut);
  rte_event e = vector_of(pkts);
  tx.finish({&e, 1});
  EXPECT_EQ(out_->collect(0, pkts.data(), 6), 0u) << "nothing sent before flush";
  tx.flush();
  rte_mbuf* got[8];
  ASSERT_EQ(out_->collect(0, got, 8), 2u);
  EXPECT_EQ(packet_words(got[0])[1], 0u);
  EXPECT_EQ(packet_words(got[1])[1], 5u);
  rte_pktmbuf_free_bulk(got, 2);
  ASSERT_EQ(kernel_->collect(0, got, 8), 1u);
  rte_pktmbuf_free(got[0]);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.tx, 2u);
  EXPECT_EQ(s.to_kernel, 1u);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::ACL_DENY)], 1u);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::BAD_VERDICT)], 2u);
  EXPECT_EQ(s.tx + s.to_kernel + s.dropped(), 6u);
}

// A port a reload adds (attach) takes its packets from then on; one it removes (detach) is
// gone: what is still on its way to it is a link_down drop, charged to the ingress port.
TEST_F(TxAdapterTest, APortAttachedLaterSendsAndADetachedOneIsLinkDown) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1));
  const auto send = [&](uint32_t first) {
    std::vector<rte_mbuf*> pkts;
    for (uint32_t i = 0; i < 3; ++i) {
      pkts.push_back(make_packet(kIn, 1, first + i));
      set_transmit(pkts.back(), kKernel);
    }
    meta(pkts[2]).verdict = Verdict::Kernel;  // came in on kIn, which has no kernel path
    rte_event e = vector_of(pkts);
    tx.finish({&e, 1});
    tx.flush();
  };
  send(0);  // no port 2 yet
  tx.attach(kKernel, {kernel_.get(), 0}, {});
  send(10);
  rte_mbuf* got[8];
  ASSERT_EQ(kernel_->collect(0, got, 8), 2u);
  EXPECT_EQ(packet_words(got[0])[1], 10u);
  rte_pktmbuf_free_bulk(got, 2);
  tx.detach(kKernel);
  send(20);
  EXPECT_EQ(kernel_->collect(0, got, 8), 0u);
  const AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::BAD_VERDICT)], 2u) << "before the attach";
  EXPECT_EQ(s.tx, 2u);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::LINK_DOWN)], 2u) << "after the detach";
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::NO_KERNEL_PATH)], 3u);
  EXPECT_EQ(s.tx + s.to_kernel + s.dropped(), 9u);
}

TEST_F(TxAdapterTest, KernelVerdictWithoutAPathIsANamedDrop) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1));
  rte_mbuf* m = make_packet(kIn, 1, 0);
  meta(m).verdict = Verdict::Kernel;
  rte_event e{};
  e.event_type = RTE_EVENT_TYPE_ETHDEV;
  e.mbuf = m;
  tx.finish({&e, 1});
  tx.flush();
  EXPECT_EQ(outcomes.port_snapshot(kIn).drops[static_cast<size_t>(DropReason::NO_KERNEL_PATH)], 1u);
}

TEST_F(TxAdapterTest, RefusedPacketsAreRetriedWithinABoundThenCountedTxFull) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1));
  out_->tx_accept = 1;  // the port takes one packet per call
  std::vector<rte_mbuf*> pkts;
  for (uint32_t i = 0; i < 10; ++i) {
    pkts.push_back(make_packet(kIn, 1, i));
    set_transmit(pkts.back(), kOut);
  }
  rte_event e = vector_of(pkts);
  tx.finish({&e, 1});
  tx.flush();
  EXPECT_EQ(out_->tx_calls.load(), 1 + sched::kTxRetries);
  EXPECT_EQ(tx.stats().retries.load(), sched::kTxRetries);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.tx, 1 + sched::kTxRetries);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::TX_FULL)], 10 - (1 + sched::kTxRetries));
  EXPECT_EQ(tx.stats().tx_full.load(), 10 - (1 + sched::kTxRetries));
  rte_mbuf* got[16];
  unsigned n = out_->collect(0, got, 16);
  EXPECT_EQ(n, 1 + sched::kTxRetries);
  rte_pktmbuf_free_bulk(got, n);
}

// Bytes are charged to each packet's ingress port for what the egress port took: a burst from
// one ingress port is charged whole less what was refused; a burst mixing ingress ports per
// packet. Packets of different lengths, so that a miscount shows.
TEST_F(TxAdapterTest, TransmittedBytesAreChargedToEachIngressPortForWhatThePortTook) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1));
  auto burst = [&](std::vector<PortId> ingress) {
    std::vector<rte_mbuf*> pkts;
    for (size_t i = 0; i < ingress.size(); ++i) {
      rte_mbuf* m = make_packet(ingress[i], 1, uint32_t(i));
      rte_pktmbuf_append(m, uint16_t(10 * i));
      set_transmit(m, kOut);
      pkts.push_back(m);
    }
    return pkts;
  };
  // The packets and bytes of pkts[0, n) that entered on `in`, read before the port takes them.
  auto of = [](const std::vector<rte_mbuf*>& pkts, size_t n, PortId in) {
    std::pair<uint64_t, uint64_t> c{};
    for (size_t i = 0; i < n; ++i) {
      if (pkts[i]->port != to_index(in)) continue;
      c.first++;
      c.second += pkts[i]->pkt_len;
    }
    return c;
  };
  auto charged = [&](PortId in) {
    const PortOutcomes& o = outcomes.at(1, in);
    return std::pair{o.tx_packets.load(), o.tx_bytes.load()};
  };
  auto plus = [](std::pair<uint64_t, uint64_t> a, std::pair<uint64_t, uint64_t> b) {
    return std::pair{a.first + b.first, a.second + b.second};
  };
  // One ingress, all taken.
  std::vector<rte_mbuf*> pkts = burst({kIn, kIn, kIn, kIn});
  auto expected_in = of(pkts, pkts.size(), kIn);
  tx.take(pkts);
  tx.flush();
  EXPECT_EQ(charged(kIn), expected_in);
  // One ingress, the port takes one packet per call: the first 1 + kTxRetries leave.
  out_->tx_accept = 1;
  const size_t leave = 1 + sched::kTxRetries;
  pkts = burst({kIn, kIn, kIn, kIn, kIn, kIn, kIn, kIn});
  expected_in = plus(expected_in, of(pkts, leave, kIn));
  tx.take(pkts);
  tx.flush();
  EXPECT_EQ(charged(kIn), expected_in);
  // Two ingress ports in turns, partly refused: each is charged for its own packets taken.
  pkts = burst({kIn, kOut, kOut, kIn, kOut, kIn, kIn, kOut});
  expected_in = plus(expected_in, of(pkts, leave, kIn));
  const auto expected_out = of(pkts, leave, kOut);
  tx.take(pkts);
  tx.flush();
  EXPECT_EQ(charged(kIn), expected_in);
  EXPECT_EQ(charged(kOut), expected_out);
  rte_mbuf* got[32];
  const unsigned n = out_->collect(0, got, 32);
  EXPECT_EQ(n, 4 + 2 * leave);
  rte_pktmbuf_free_bulk(got, n);
}

TEST_F(TxAdapterTest, ABurstForAPortWhoseLinkIsDownIsCountedLinkDown) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1));
  auto send = [&](uint32_t first, uint32_t n) {
    std::vector<rte_mbuf*> pkts;
    for (uint32_t i = 0; i < n; ++i) {
      pkts.push_back(make_packet(kIn, 1, first + i));
      set_transmit(pkts.back(), kOut);
    }
    rte_event e = vector_of(pkts);
    tx.finish({&e, 1});
    tx.flush();
  };
  out_->link = LinkState::Down;
  send(0, 5);  // the cache has not been refreshed yet: the port is offered the burst
  ASSERT_EQ(out_->refresh_link(), std::optional<LinkState>(LinkState::Down));
  send(5, 7);
  out_->link = LinkState::Up;
  ASSERT_EQ(out_->refresh_link(), std::optional<LinkState>(LinkState::Up));
  EXPECT_EQ(out_->refresh_link(), std::nullopt) << "unchanged";
  send(12, 3);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.tx, 8u);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::LINK_DOWN)], 7u);
  EXPECT_EQ(out_->tx_calls.load(), 2u) << "no burst offered while the link was down";
  rte_mbuf* got[16];
  unsigned n = out_->collect(0, got, 16);
  EXPECT_EQ(n, 8u);
  rte_pktmbuf_free_bulk(got, n);
}

// The sequence numbers of what `port` sent on queue 0, in order; the packets are freed.
std::vector<uint32_t> sent(RingPort& port) {
  std::vector<uint32_t> seqs;
  rte_mbuf* got[64];
  while (unsigned n = port.collect(0, got, 64)) {
    for (unsigned i = 0; i < n; ++i)
      seqs.push_back(static_cast<uint32_t>(packet_words(got[i])[1]));
    rte_pktmbuf_free_bulk(got, n);
  }
  return seqs;
}

// take() keeps the fill of the buffer it is filling in a register while packets go to the
// same port: switching ports, a packet off the common path in between, a buffer sent full
// mid-call, and calls that end part-way must each leave every port's packets whole and in
// order.
TEST_F(TxAdapterTest, TakeKeepsEachPortsPacketsInOrderAcrossPortsVerdictsAndFullBursts) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {{kernel_.get(), 0}}, outcomes.row(1));
  const uint32_t total = 3 * sched::kTxBurst + 11;
  std::vector<rte_mbuf*> pkts;
  std::vector<uint32_t> want_in, want_out, want_kernel;
  for (uint32_t i = 0; i < total; ++i) {
    rte_mbuf* m = make_packet(kIn, 1, i);
    if (i % 7 == 3) {
      meta(m).verdict = Verdict::Kernel;
      want_kernel.push_back(i);
    } else if (i % 5 == 0 || (i / 16) % 2 == 1) {  // runs to one port, and single switches
      set_transmit(m, kOut);
      want_out.push_back(i);
    } else {
      set_transmit(m, kIn);
      want_in.push_back(i);
    }
    pkts.push_back(m);
  }
  for (size_t at = 0; at < pkts.size(); at += 13)
    tx.take(std::span(pkts).subspan(at, std::min<size_t>(13, pkts.size() - at)));
  tx.flush();
  EXPECT_EQ(sent(*out_), want_out);
  EXPECT_EQ(sent(*in_), want_in);
  EXPECT_EQ(sent(*kernel_), want_kernel);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.tx, want_in.size() + want_out.size());
  EXPECT_EQ(s.to_kernel, want_kernel.size());
  EXPECT_EQ(s.dropped(), 0u);
}

// Port ids past the first 64 (a trunk's VLANs) are ports like the others: attached by a
// reload, sent to in order, given kernel verdicts, and link_down once detached.
TEST_F(TxAdapterTest, PortsPastTheFirstSixtyFourSendAndDetachLikeTheOthers) {
  OutcomeTable many(2, kMaxPorts);
  const PortId ids[] = {PortId{64}, PortId{700}, PortId{kMaxPorts - 1}};
  std::vector<std::unique_ptr<RingPort>> ports;
  for (PortId id : ids)
    ports.push_back(std::make_unique<RingPort>(fmt::format("p{}", to_index(id)), id));
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, many.row(1));
  for (size_t i = 0; i < ports.size(); ++i)
    tx.attach(ids[i], {ports[i].get(), 0}, {kernel_.get(), 0});
  std::vector<rte_mbuf*> pkts;
  for (uint32_t i = 0; i < 40; ++i) {
    const PortId to = i % 4 == 3 ? kOut : ids[i % 4 % 3];
    rte_mbuf* m = make_packet(ids[(i + 1) % 3], 1, i);
    set_transmit(m, to);
    if (i == 39) meta(m).verdict = Verdict::Kernel;  // to ids[1]'s exception path
    pkts.push_back(m);
  }
  tx.take(pkts);
  tx.flush();
  std::vector<uint32_t> want[3], want_out;
  for (uint32_t i = 0; i < 39; ++i)
    (i % 4 == 3 ? want_out : want[i % 4 % 3]).push_back(i);
  for (size_t i = 0; i < ports.size(); ++i)
    EXPECT_EQ(sent(*ports[i]), want[i]) << "port " << to_index(ids[i]);
  EXPECT_EQ(sent(*out_), want_out);
  EXPECT_EQ(sent(*kernel_), std::vector<uint32_t>{39});
  AccountingSnapshot total;
  for (PortId id : ids)
    total.add(many.port_snapshot(id));
  EXPECT_EQ(total.tx, 39u);
  EXPECT_EQ(total.to_kernel, 1u);

  tx.detach(ids[1]);
  rte_mbuf* late = make_packet(ids[0], 1, 50);
  set_transmit(late, ids[1]);
  tx.take({&late, 1});
  tx.flush();
  EXPECT_TRUE(sent(*ports[1]).empty());
  EXPECT_EQ(many.port_snapshot(ids[0]).drops[static_cast<size_t>(DropReason::LINK_DOWN)], 1u);
}

// A packet a stage marked Transmit without placing it (out_port kNoPort) is a bad_verdict
// drop wherever it lies in a call, the first packet included.
TEST_F(TxAdapterTest, TransmitWithoutAnEgressPortIsABadVerdict) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1));
  std::vector<rte_mbuf*> pkts;
  for (uint32_t i = 0; i < 4; ++i) {
    pkts.push_back(make_packet(kIn, 1, i));
    set_transmit(pkts.back(), i % 2 == 0 ? PortId{kNoPort} : kOut);
  }
  tx.take(pkts);
  tx.flush();
  EXPECT_EQ(sent(*out_), (std::vector<uint32_t>{1, 3}));
  const AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::BAD_VERDICT)], 2u);
  EXPECT_EQ(s.tx, 2u);
}

// A pipeline run's packets for one port, from one ingress, are offered in one call as they
// lie, but never ahead of packets already waiting for that port; a run ends at the first
// packet that needs the buffers (another port, a packet over the MTU), which go on as before.
TEST_F(TxAdapterTest, ARunForOnePortIsOfferedInOneCallAndNeverAheadOfWhatWaits) {
  PortMtuTable mtus(3);
  mtus.set(to_index(kOut), 1500);
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1), nullptr, &mtus);
  uint32_t seq = 0;
  auto packets = [&](uint32_t n, PortId to) {
    std::vector<rte_mbuf*> pkts;
    for (uint32_t i = 0; i < n; ++i) {
      rte_mbuf* m = make_packet(kIn, 1, seq++);
      set_transmit(m, to);
      pkts.push_back(m);
    }
    return pkts;
  };
  std::vector<uint32_t> want(3 * sched::kTxBurst);
  std::iota(want.begin(), want.end(), 0u);

  // Three bursts' worth for one port with nothing waiting: one call.
  std::vector<rte_mbuf*> run = packets(3 * sched::kTxBurst, kOut);
  tx.take(run);
  EXPECT_EQ(out_->tx_calls.load(), 1u);
  EXPECT_EQ(sent(*out_), want) << "sent at once, in order";
  EXPECT_EQ(outcomes.at(1, kIn).tx_packets.load(), 3u * sched::kTxBurst);
  EXPECT_EQ(outcomes.at(1, kIn).tx_bytes.load(), 3u * sched::kTxBurst * 64);

  // A few packets wait for the port; a run after them goes behind them.
  std::vector<rte_mbuf*> waiting = packets(5, kOut);
  tx.take(waiting);
  run = packets(2 * sched::kTxBurst, kOut);
  tx.take(run);
  tx.flush();
  want.resize(5 + 2 * sched::kTxBurst);
  std::iota(want.begin(), want.end(), 3u * sched::kTxBurst);
  EXPECT_EQ(sent(*out_), want) << "the waiting packets first";

  // A run cut short by a packet over the MTU: the run leaves, the big one is dropped (DF-less
  // fragmentation needs an IPv4 header these test packets do not have), the rest follow.
  const uint32_t first = seq;
  run = packets(2 * sched::kTxBurst, kOut);
  rte_pktmbuf_append(run[sched::kTxBurst + 3], 1500);
  tx.take(run);
  tx.flush();
  want.clear();
  for (uint32_t i = first; i < seq; ++i)
    if (i != first + sched::kTxBurst + 3) want.push_back(i);
  EXPECT_EQ(sent(*out_), want);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::PACKET_TOO_BIG)], 1u);

  // A run for a port whose link is down is counted as link_down, as a buffer is.
  out_->link = LinkState::Down;
  ASSERT_EQ(out_->refresh_link(), std::optional<LinkState>(LinkState::Down));
  run = packets(sched::kTxBurst, kOut);
  tx.take(run);
  s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::LINK_DOWN)], sched::kTxBurst);
  EXPECT_EQ(s.tx + s.dropped(), uint64_t{seq});
}

TEST_F(TxAdapterTest, AFullBufferIsSentWithoutWaitingForFlush) {
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1));
  for (uint32_t i = 0; i < sched::kTxBurst; ++i) {
    rte_mbuf* m = make_packet(kIn, 1, i);
    set_transmit(m, kOut);
    rte_event e{};
    e.event_type = RTE_EVENT_TYPE_ETHDEV;
    e.mbuf = m;
    tx.finish({&e, 1});
  }
  rte_mbuf* got[64];
  unsigned n = out_->collect(0, got, 64);
  EXPECT_EQ(n, sched::kTxBurst);
  rte_pktmbuf_free_bulk(got, n);
}

// An IPv4 UDP packet of `l3_bytes` (its payload a counting pattern) as a port's rx path
// leaves it, DF as asked, on its way out of kOut.
rte_mbuf* ipv4_packet(uint32_t l3_bytes, bool df) {
  rte_mbuf* m = rte_pktmbuf_alloc(packet_pool());
  if (!m) return nullptr;
  auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(14 + l3_bytes)));
  if (!d) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  auto* eth = reinterpret_cast<rte_ether_hdr*>(d);
  eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(d + 14);
  *ip = rte_ipv4_hdr{};
  ip->version_ihl = RTE_IPV4_VHL_DEF;
  ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(l3_bytes));
  ip->packet_id = rte_cpu_to_be_16(77);
  ip->fragment_offset = rte_cpu_to_be_16(df ? RTE_IPV4_HDR_DF_FLAG : 0);
  ip->time_to_live = 63;
  ip->next_proto_id = IPPROTO_UDP;
  ip->src_addr = rte_cpu_to_be_32(0xc0000202);
  ip->dst_addr = rte_cpu_to_be_32(0xc6336402);
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  for (uint32_t i = 20; i < l3_bytes; ++i)
    d[14 + i] = static_cast<uint8_t>(i);
  m->port = to_index(kIn);
  m->l2_len = 14;
  m->l3_len = 20;
  m->packet_type = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP;
  reset_meta(m);
  set_transmit(m, kOut);
  return m;
}

TEST_F(TxAdapterTest, IpV4OverTheMtuLeavesInFragmentsThatFitAndCountsOnce) {
  PortMtuTable mtus(3);
  mtus.set(to_index(kOut), 576);
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1), nullptr, &mtus);
  rte_mbuf* m = ipv4_packet(1900, false);
  ASSERT_NE(m, nullptr);
  std::vector<uint8_t> payload(rte_pktmbuf_mtod_offset(m, uint8_t*, 34),
                               rte_pktmbuf_mtod_offset(m, uint8_t*, 14 + 1900));
  tx.take({&m, 1});
  tx.flush();
  rte_mbuf* got[8];
  const unsigned n = out_->collect(0, got, 8);
  ASSERT_EQ(n, 4u);  // 552 + 552 + 552 + 224 bytes of payload
  std::vector<uint8_t> joined;
  for (unsigned i = 0; i < n; ++i) {
    auto* ip = rte_pktmbuf_mtod_offset(got[i], rte_ipv4_hdr*, 14);
    const uint16_t total = rte_be_to_cpu_16(ip->total_length);
    const uint16_t off = rte_be_to_cpu_16(ip->fragment_offset);
    EXPECT_LE(total, 576);
    EXPECT_EQ(got[i]->pkt_len, 14u + total);
    EXPECT_EQ(rte_ipv4_cksum(ip), 0) << "fragment " << i;  // a valid header sums to zero
    EXPECT_EQ(ip->packet_id, rte_cpu_to_be_16(77));
    EXPECT_EQ((off & RTE_IPV4_HDR_OFFSET_MASK) * 8u, joined.size());
    EXPECT_EQ(bool(off & RTE_IPV4_HDR_MF_FLAG), i + 1 < n);
    EXPECT_EQ(
        std::memcmp(rte_pktmbuf_mtod(got[i], uint8_t*), rte_pktmbuf_mtod(got[0], uint8_t*), 14),
        0);  // each with the L2 header
    const uint8_t* data = reinterpret_cast<const uint8_t*>(ip) + 20;
    joined.insert(joined.end(), data, data + total - 20);
  }
  EXPECT_EQ(joined, payload);
  rte_pktmbuf_free_bulk(got, n);
  // The packet counts once, as transmitted; its fragments as fragments.
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.tx, 1u);
  EXPECT_EQ(s.dropped(), 0u);
  EXPECT_EQ(tx.stats().fragmented.load(), 1u);
  EXPECT_EQ(tx.stats().fragments.load(), 4u);
}

// A jumbo packet arrives as a chain (AF_XDP multi-buffer, a DPDK port's scatter): an 8000-byte
// IPv4 packet in 1000-byte segments, out of a 1500-byte link, leaves in six fragments whose
// payloads join to the original's.
TEST_F(TxAdapterTest, AChainedJumboPacketIsFragmentedWhole) {
  PortMtuTable mtus(3);
  mtus.set(to_index(kOut), 1500);
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1), nullptr, &mtus);
  rte_mbuf* one = ipv4_packet(8000, false);
  ASSERT_EQ(one, nullptr) << "8000 bytes outgrow one buffer of the test pool";
  // The first segment as ipv4_packet makes it, 1000 bytes of it; the rest appended in segments.
  rte_mbuf* m = ipv4_packet(986, false);
  ASSERT_NE(m, nullptr);
  auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, 14);
  ip->total_length = rte_cpu_to_be_16(8000);
  ip->hdr_checksum = 0;
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  std::vector<uint8_t> payload(rte_pktmbuf_mtod_offset(m, uint8_t*, 34),
                               rte_pktmbuf_mtod_offset(m, uint8_t*, 1000));
  for (uint32_t done = 1000 - 14; done < 8000; done += 1000) {
    rte_mbuf* seg = rte_pktmbuf_alloc(packet_pool());
    ASSERT_NE(seg, nullptr);
    const uint32_t len = std::min<uint32_t>(1000, 8000 - done);
    auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(seg, static_cast<uint16_t>(len)));
    for (uint32_t i = 0; i < len; ++i)
      d[i] = static_cast<uint8_t>(done + i * 7);
    payload.insert(payload.end(), d, d + len);
    ASSERT_EQ(rte_pktmbuf_chain(m, seg), 0);
  }
  ASSERT_EQ(m->pkt_len, 14u + 8000);
  tx.take({&m, 1});
  tx.flush();
  rte_mbuf* got[8];
  const unsigned n = out_->collect(0, got, 8);
  ASSERT_EQ(n, 6u);  // 5 x 1480 + 580 bytes of payload
  std::vector<uint8_t> joined;
  for (unsigned i = 0; i < n; ++i) {
    auto* fip = rte_pktmbuf_mtod_offset(got[i], rte_ipv4_hdr*, 14);
    const uint16_t total = rte_be_to_cpu_16(fip->total_length);
    EXPECT_LE(total, 1500);
    EXPECT_EQ(got[i]->nb_segs, 1u);
    EXPECT_EQ(rte_ipv4_cksum(fip), 0) << "fragment " << i;
    EXPECT_EQ((rte_be_to_cpu_16(fip->fragment_offset) & RTE_IPV4_HDR_OFFSET_MASK) * 8u,
              joined.size());
    const uint8_t* data = reinterpret_cast<const uint8_t*>(fip) + 20;
    joined.insert(joined.end(), data, data + total - 20);
  }
  EXPECT_EQ(joined, payload);
  rte_pktmbuf_free_bulk(got, n);
  EXPECT_EQ(tx.stats().fragments.load(), 6u);
  EXPECT_EQ(outcomes.port_snapshot(kIn).tx, 1u);
}

// A later fragment whose offset and length reach past 65535 bytes of datagram (a "ping of
// death", found by the pipeline fuzzer) has pieces the 13-bit offset cannot address: not cut,
// dropped as too big.
TEST_F(TxAdapterTest, AFragmentPastTheLargestDatagramIsNotCut) {
  PortMtuTable mtus(3);
  mtus.set(to_index(kOut), 576);
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1), nullptr, &mtus);
  rte_mbuf* m = ipv4_packet(1900, false);
  ASSERT_NE(m, nullptr);
  auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, 14);
  ip->fragment_offset = rte_cpu_to_be_16(8100);  // 64 800 bytes in
  ip->hdr_checksum = 0;
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  rte_mbuf* frags[kMaxFragments];
  EXPECT_EQ(ipv4_fragment(m, 576, frags), 0u);
  tx.take({&m, 1});
  tx.flush();
  rte_mbuf* got[8];
  EXPECT_EQ(out_->collect(0, got, 8), 0u);
  EXPECT_EQ(outcomes.port_snapshot(kIn).drops[static_cast<size_t>(DropReason::PACKET_TOO_BIG)], 1u);
}

TEST_F(TxAdapterTest, OverTheMtuWithDfIsDroppedAsPacketTooBig) {
  PortMtuTable mtus(3);
  mtus.set(to_index(kOut), 1280);
  sched::TxAdapter tx({{in_.get(), 0}, {out_.get(), 0}}, {}, outcomes.row(1), nullptr, &mtus);
  rte_mbuf* pkts[3] = {ipv4_packet(1281, true), ipv4_packet(1280, true), make_packet(kIn, 1, 0)};
  set_transmit(pkts[2], kOut);
  // A frame that is not IP is measured the same way: 1400 bytes after its Ethernet header.
  rte_pktmbuf_append(pkts[2], 1400 + 14 - 64);
  pkts[2]->l2_len = 14;
  tx.take({pkts, 3});
  tx.flush();
  rte_mbuf* got[8];
  const unsigned n = out_->collect(0, got, 8);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(got[0]->pkt_len, 14u + 1280);
  rte_pktmbuf_free_bulk(got, n);
  AccountingSnapshot s = outcomes.port_snapshot(kIn);
  EXPECT_EQ(s.tx, 1u);
  EXPECT_EQ(s.drops[static_cast<size_t>(DropReason::PACKET_TOO_BIG)], 2u);
}

}  // namespace
