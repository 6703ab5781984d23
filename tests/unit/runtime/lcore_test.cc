// The service runner: busy/idle accounting per service, idle back-off, sleeping on wake-up
// descriptors, and replacing services while the lcore runs. Lcores run on plain threads here;
// EAL is not needed for the loop.
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <rte_cycles.h>

#include "runtime/cycles.h"
#include "runtime/lcore.h"

using namespace vecflow;
using namespace std::chrono_literals;

namespace {

// Busy on every `period`-th poll, spinning `work_cycles` TSC cycles; idle (instant) otherwise.
class SyntheticService : public Service {
 public:
  SyntheticService(std::string name, uint32_t period, uint64_t work_cycles)
      : Service(std::move(name)), period_(period), work_cycles_(work_cycles) {}
  bool poll() noexcept override {
    calls.fetch_add(1, std::memory_order_relaxed);
    if (period_ == 0 || ++n_ % period_ != 0) return false;
    uint64_t end = rte_rdtsc() + work_cycles_;
    while (rte_rdtsc() < end) {
    }
    worked.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> worked{0};

 private:
  uint32_t period_;
  uint64_t work_cycles_;
  uint64_t n_ = 0;
};

struct RunningLcore {
  explicit RunningLcore(BackoffConfig b) : lcore(0, b) {}
  void start() {
    thread = std::thread([this] { lcore.run(); });
  }
  ~RunningLcore() {
    lcore.request_stop();
    if (thread.joinable()) thread.join();
  }
  Lcore lcore;
  std::thread thread;
};

template <typename Pred>
bool wait_for(Pred pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

TEST(Lcore, CountsBusyAndIdleCyclesPerService) {
  RunningLcore rl(BackoffConfig{.busy_poll = true});  // pure polling: no naps distort the split
  auto busy = std::make_shared<SyntheticService>("busy", 2, 20000);
  auto idle = std::make_shared<SyntheticService>("idle", 0, 0);
  rl.lcore.set_services({busy, idle});
  rl.start();
  ASSERT_TRUE(wait_for([&] { return busy->worked.load() >= 2000; }, 10s));
  rl.lcore.request_stop();
  rl.thread.join();

  const auto& bs = busy->stats();
  const auto& is = idle->stats();
  // Every poll is counted, and exactly the polls that did work are counted busy.
  EXPECT_EQ(bs.polls.load(), busy->calls.load());
  EXPECT_EQ(bs.busy_polls.load(), busy->worked.load());
  EXPECT_EQ(is.polls.load(), idle->calls.load());
  EXPECT_EQ(is.busy_polls.load(), 0u);
  EXPECT_EQ(is.busy_cycles.load(), 0u);
  EXPECT_GT(is.idle_cycles.load(), 0u);
  // Half the busy service's polls spin 20k cycles, the other half return at once: nearly all
  // of its time is busy time, and busy cycles cover at least the spinning.
  double b = static_cast<double>(bs.busy_cycles.load());
  double i = static_cast<double>(bs.idle_cycles.load());
  EXPECT_GT(b / (b + i), 0.9);
  EXPECT_GE(bs.busy_cycles.load(), bs.busy_polls.load() * 20000);
  // The lcore's own split agrees with its services'.
  const auto& ls = rl.lcore.stats();
  EXPECT_EQ(ls.busy_cycles.load(), bs.busy_cycles.load() + is.busy_cycles.load());
  EXPECT_GE(ls.idle_cycles.load(), bs.idle_cycles.load() + is.idle_cycles.load());
}

TEST(Lcore, IdleLcoreNapsInsteadOfSpinning) {
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 1000});
  auto idle = std::make_shared<SyntheticService>("idle", 0, 0);
  rl.lcore.set_services({idle});
  rl.start();
  std::this_thread::sleep_for(300ms);
  const auto& ls = rl.lcore.stats();
  EXPECT_GT(ls.naps.load(), 0u);
  // Spinning flat out would run millions of rounds in 300 ms; napping up to 1 ms runs a few
  // hundred (plus the spin rounds before each first nap).
  EXPECT_LT(ls.rounds.load(), 20000u);
  EXPECT_GT(ls.sleep_cycles.load(), ls.idle_cycles.load());
}

TEST(Lcore, PendingWorkKeepsTheLcoreAwake) {
  class Pending : public SyntheticService {
   public:
    Pending() : SyntheticService("pending", 0, 0) {}
    bool has_pending() const noexcept override { return true; }
  };
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 1000});
  auto svc = std::make_shared<Pending>();
  rl.lcore.set_services({svc});
  rl.start();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(rl.lcore.stats().naps.load(), 0u);
  EXPECT_EQ(rl.lcore.stats().sleep_cycles.load(), 0u);
  // It kept polling: napping up to 1 ms would run about a hundred rounds in 100 ms; spinning
  // runs tens of thousands (18 000 under ASan on a loaded machine, where a bound of 20 000
  // once failed).
  EXPECT_GT(rl.lcore.stats().rounds.load(), 2000u);
}

// A service woken by an eventfd, like an AF_XDP socket with need_wakeup.
class FdService : public Service {
 public:
  FdService() : Service("fd"), fd_(eventfd(0, EFD_NONBLOCK)) {}
  ~FdService() override { close(fd_); }
  bool poll() noexcept override {
    uint64_t v;
    if (read(fd_, &v, sizeof(v)) == sizeof(v)) {
      received.fetch_add(v);
      return true;
    }
    return false;
  }
  bool arm_wakeup(WakeFds& fds) noexcept override {
    armed.fetch_add(1);
    return fds.add(fd_);
  }
  void disarm_wakeup() noexcept override { disarmed.fetch_add(1); }
  void kick() {
    uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof(one)), 8);
  }
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> armed{0};
  std::atomic<uint64_t> disarmed{0};

 private:
  int fd_;
};

TEST(Lcore, SleepsOnDescriptorsAndWakesOnTraffic) {
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 100});
  auto svc = std::make_shared<FdService>();
  rl.lcore.set_services({svc});
  rl.start();
  ASSERT_TRUE(wait_for([&] { return svc->stats().sleeping.load(); }, 5s));
  uint64_t rounds = rl.lcore.stats().rounds.load();
  std::this_thread::sleep_for(100ms);
  // Asleep: no rounds at all while nothing arrives.
  EXPECT_EQ(rl.lcore.stats().rounds.load(), rounds);
  svc->kick();
  ASSERT_TRUE(wait_for([&] { return svc->received.load() == 1; }, 1s));
  EXPECT_GE(rl.lcore.stats().interrupt_sleeps.load(), 1u);
  EXPECT_GE(svc->armed.load(), 1u);
  ASSERT_TRUE(wait_for([&] { return svc->disarmed.load() >= 1; }, 1s));
}

TEST(Lcore, OneServiceWithoutDescriptorKeepsTheLcoreNapping) {
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 100});
  auto fd = std::make_shared<FdService>();
  auto plain = std::make_shared<SyntheticService>("plain", 0, 0);
  rl.lcore.set_services({fd, plain});
  rl.start();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(rl.lcore.stats().interrupt_sleeps.load(), 0u);
  EXPECT_GT(rl.lcore.stats().naps.load(), 0u);
  // Every arm was undone.
  EXPECT_EQ(fd->armed.load(), fd->disarmed.load());
}

TEST(Lcore, StopEndsAnInterruptSleepPromptly) {
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 100});
  auto svc = std::make_shared<FdService>();
  rl.lcore.set_services({svc});
  rl.start();
  ASSERT_TRUE(wait_for([&] { return svc->stats().sleeping.load(); }, 5s));
  auto t0 = std::chrono::steady_clock::now();
  rl.lcore.request_stop();
  rl.thread.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
}

// After remove_service returns, the removed service is never polled again, so its owner may
// destroy it at once.
TEST(Lcore, RemovedServiceIsNeverPolledAfterRemoveReturns) {
  class Guarded : public Service {
   public:
    explicit Guarded(std::atomic<int>* violations) : Service("guarded"), violations_(violations) {}
    bool poll() noexcept override {
      if (dead.load(std::memory_order_acquire)) violations_->fetch_add(1);
      return true;
    }
    std::atomic<bool> dead{false};

   private:
    std::atomic<int>* violations_;
  };
  std::atomic<int> violations{0};
  RunningLcore rl(BackoffConfig{.busy_poll = true});
  auto keep = std::make_shared<SyntheticService>("keep", 1, 0);
  rl.lcore.set_services({keep});
  rl.start();
  for (int i = 0; i < 2000; ++i) {
    auto g = std::make_shared<Guarded>(&violations);
    rl.lcore.add_service(g);
    ASSERT_TRUE(rl.lcore.remove_service(g.get()));
    g->dead.store(true, std::memory_order_release);
  }
  EXPECT_EQ(violations.load(), 0);
  EXPECT_FALSE(rl.lcore.remove_service(keep.get() + 1));
}

TEST(Lcore, ServiceMayReplaceServicesFromInsideItsOwnPoll) {
  RunningLcore rl(BackoffConfig{.busy_poll = true});
  auto other = std::make_shared<SyntheticService>("other", 1, 0);
  class SelfRemoving : public Service {
   public:
    SelfRemoving(Lcore& l, std::shared_ptr<Service> keep) : Service("self"), l_(l), keep_(keep) {}
    bool poll() noexcept override {
      ++polls;
      l_.set_services({keep_});
      return true;
    }
    std::atomic<int> polls{0};

   private:
    Lcore& l_;
    std::shared_ptr<Service> keep_;
  };
  auto self = std::make_shared<SelfRemoving>(rl.lcore, other);
  rl.lcore.set_services({self});
  std::weak_ptr<SelfRemoving> weak = self;
  self.reset();
  rl.start();
  ASSERT_TRUE(wait_for([&] { return other->calls.load() > 100; }, 5s));
  // The self-removing service ran once, and its list was freed after the round ended.
  EXPECT_TRUE(weak.expired());
}

// A service that blocks in its poll while `block` is set: a stuck worker.
class BlockingService : public Service {
 public:
  BlockingService() : Service("blocking") {}
  bool poll() noexcept override {
    while (block.load())
      std::this_thread::sleep_for(1ms);
    return false;
  }
  std::atomic<bool> block{false};
};

TEST(Lcore, ARoundLongerThanStallAfterIsShownWhileItLastsAndCountedWhenItEnds) {
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 100, .stall_after_ms = 50});
  auto svc = std::make_shared<BlockingService>();
  rl.lcore.set_services({svc});
  rl.start();
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(rl.lcore.stalled());
  EXPECT_EQ(rl.lcore.stats().stalls.load(), 0u);

  svc->block = true;
  ASSERT_TRUE(wait_for([&] { return rl.lcore.stalled(); }, 2s));
  EXPECT_GE(rl.lcore.round_age_ns(), 50'000'000u);
  std::this_thread::sleep_for(250ms);
  EXPECT_TRUE(rl.lcore.stalled());
  EXPECT_GE(rl.lcore.round_age_ns(), 300'000'000u);
  svc->block = false;
  ASSERT_TRUE(wait_for([&] { return !rl.lcore.stalled(); }, 2s));
  ASSERT_TRUE(wait_for([&] { return rl.lcore.stats().stalls.load() == 1; }, 1s));
  EXPECT_GE(tsc_to_ns(rl.lcore.stats().stalled_cycles.load()), 300'000'000u);
}

TEST(Lcore, AddingAServiceToAStalledLcoreDoesNotWaitForIt) {
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 100});
  auto stuck = std::make_shared<BlockingService>();
  rl.lcore.set_services({stuck});
  rl.start();
  stuck->block = true;
  ASSERT_TRUE(wait_for([&] { return rl.lcore.round_age_ns() > 20'000'000; }, 2s));
  auto added = std::make_shared<SyntheticService>("added", 0, 0);
  auto t0 = std::chrono::steady_clock::now();
  rl.lcore.add_service(added);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_EQ(added->calls.load(), 0u);
  stuck->block = false;
  ASSERT_TRUE(wait_for([&] { return added->calls.load() > 0; }, 2s));
  // The list replaced without waiting is freed by the next change, the lcore having moved on.
  EXPECT_TRUE(rl.lcore.remove_service(added.get()));
}

TEST(Lcore, NappingOrSleepingOnDescriptorsIsNotAStall) {
  RunningLcore rl(BackoffConfig{.idle_sleep_max_us = 1000, .stall_after_ms = 20});
  auto fd = std::make_shared<FdService>();
  rl.lcore.set_services({fd});
  rl.start();
  ASSERT_TRUE(wait_for([&] { return fd->stats().sleeping.load(); }, 5s));
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(rl.lcore.stalled());
  EXPECT_EQ(rl.lcore.round_age_ns(), 0u);
  EXPECT_EQ(rl.lcore.stats().stalls.load(), 0u);
}

TEST(Cycles, TscHzIsPlausible) {
  uint64_t hz = tsc_hz();
  EXPECT_GT(hz, 100'000'000u);
  EXPECT_LT(hz, 10'000'000'000u);
}

}  // namespace
