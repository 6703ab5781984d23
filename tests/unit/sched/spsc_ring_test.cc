// The builtin scheduler's producer -> worker ring: what goes in comes out once, in order,
// across wrap-around and when full, with the producer and the consumer on two threads.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>

#include <thread>
#include <vector>

#include "sched/spsc_ring.h"
#include "support/eal_env.h"

using vecflow::sched::SpscEventRing;

namespace {

rte_event numbered(uint64_t i) {
  rte_event e{};
  e.flow_id = static_cast<uint32_t>(i) & 0xFFFFF;
  e.u64 = i;
  return e;
}

TEST(SpscEventRing, FullRingTakesWhatFitsAndWrapsInOrder) {
  VECFLOW_REQUIRE_EAL();
  SpscEventRing ring(16);
  ASSERT_TRUE(ring.ok());
  uint64_t next_in = 0, next_out = 0;
  rte_event buf[32];
  // Each round starts at another offset in the ring, fills it past full, then empties it.
  for (int round = 0; round < 40; ++round) {
    for (uint32_t i = 0; i < 20; ++i)
      buf[i] = numbered(next_in + i);
    const uint32_t in = ring.enqueue(buf, 20);
    ASSERT_EQ(in, 16u) << "an empty ring of 16 takes 16 of 20";
    next_in += in;
    EXPECT_EQ(ring.count(), 16u);
    EXPECT_EQ(ring.enqueue(buf, 1), 0u) << "a full ring takes nothing";
    // Read a varying part, so the next fill starts elsewhere in the ring.
    const uint32_t part = 1 + static_cast<uint32_t>(round % 15);
    EXPECT_EQ(ring.dequeue(buf, part), part);
    for (uint32_t i = 0; i < part; ++i)
      EXPECT_EQ(buf[i].u64, next_out++);
    const uint32_t rest = ring.dequeue(buf, 32);
    EXPECT_EQ(rest, 16u - part);
    for (uint32_t i = 0; i < rest; ++i)
      EXPECT_EQ(buf[i].u64, next_out++);
    EXPECT_EQ(ring.dequeue(buf, 1), 0u) << "an empty ring gives nothing";
    EXPECT_EQ(ring.read_position(), static_cast<uint32_t>(next_out));
    EXPECT_EQ(ring.written(), static_cast<uint32_t>(next_in));
  }
}

// Two threads, bursts of varying size, a small ring so that both sides meet its ends often:
// every event arrives once and in order. EAL pinned this thread to one CPU; the producer may
// run on any, and a side that finds the ring full or empty yields, in case both share a CPU.
TEST(SpscEventRing, TwoThreadsPassMillionsInOrder) {
  VECFLOW_REQUIRE_EAL();
  constexpr uint64_t kEvents = 2'000'000;
  SpscEventRing ring(64);
  ASSERT_TRUE(ring.ok());
  std::thread producer([&] {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      CPU_SET(c, &all);
    pthread_setaffinity_np(pthread_self(), sizeof(all), &all);
    rte_event buf[32];
    uint64_t next = 0;
    uint32_t size = 1;
    while (next < kEvents) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(size, kEvents - next));
      for (uint32_t i = 0; i < n; ++i)
        buf[i] = numbered(next + i);
      const uint32_t in = ring.enqueue(buf, n);
      if (in == 0) std::this_thread::yield();
      next += in;
      size = size % 32 + 1;
    }
  });
  uint64_t expected = 0, errors = 0;
  rte_event buf[32];
  uint32_t size = 7;
  while (expected < kEvents) {
    const uint32_t got = ring.dequeue(buf, size);
    if (got == 0) std::this_thread::yield();
    for (uint32_t i = 0; i < got; ++i)
      errors += buf[i].u64 != expected++;
    size = size % 32 + 1;
  }
  producer.join();
  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(ring.count(), 0u);
}

}  // namespace
