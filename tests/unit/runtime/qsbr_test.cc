// Grace periods: synchronize() waits for online readers that have not passed a quiescent
// point, and not for offline ones; an lcore attached to a Qsbr reports for itself.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/lcore.h"
#include "runtime/qsbr.h"

using namespace vecflow;
using namespace std::chrono_literals;

TEST(Qsbr, SynchronizeWaitsForOnlineReadersOnly) {
  auto q = Qsbr::create(2);
  ASSERT_TRUE(q);
  (*q)->synchronize();  // nobody online: returns at once

  std::atomic<int> phase{0};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    (*q)->online(0);
    phase.store(1);
    while (phase.load() != 2)
      std::this_thread::yield();
    std::this_thread::sleep_for(50ms);
    done.store(true);  // the writer must not have returned before this
    (*q)->quiescent(0);
    while (phase.load() != 3)
      std::this_thread::yield();
    (*q)->offline(0);
  });
  while (phase.load() != 1)
    std::this_thread::yield();
  phase.store(2);
  (*q)->synchronize();
  EXPECT_TRUE(done.load());
  phase.store(3);
  reader.join();
  (*q)->synchronize();  // reader offline: returns at once
}

TEST(Qsbr, SynchronizeFromAnOnlineReaderDoesNotWaitForItself) {
  auto q = Qsbr::create(1);
  (*q)->online(0);
  (*q)->synchronize();
  (*q)->offline(0);
  SUCCEED();
}

TEST(Qsbr, AnAttachedLcoreReportsQuiescenceAndGoesOfflineWhenIdle) {
  auto q = Qsbr::create(1);
  Lcore lcore(0, BackoffConfig{.idle_sleep_max_us = 50});
  lcore.attach_qsbr(q->get(), 0);
  std::thread t([&] { lcore.run(); });
  // Busy or napping, the lcore lets every grace period end.
  for (int i = 0; i < 100; ++i)
    (*q)->synchronize();
  std::this_thread::sleep_for(20ms);  // idle: napping, offline
  (*q)->synchronize();
  lcore.request_stop();
  t.join();
  (*q)->synchronize();  // stopped: offline
}
