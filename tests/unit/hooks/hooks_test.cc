// Runtime hooks: installed and removed on the rx and tx paths while an lcore runs traffic;
// removal waits until no lcore can be inside the hook, so the hook can be destroyed at once
// (the sanitizer build turns a violation into a use-after-free report).
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include "core/accounting.h"
#include "core/packet.h"
#include "hooks/capture_hook.h"
#include "hooks/hook_table.h"
#include "runtime/lcore.h"
#include "runtime/qsbr.h"
#include "support/eal_env.h"
#include "support/pcapng_file.h"

using namespace vecflow;
using namespace std::chrono_literals;

namespace {

constexpr uint16_t kPorts = 2;
constexpr uint16_t kQueues = 2;

rte_mempool* pool() {
  static rte_mempool* p = rte_pktmbuf_pool_create("vpi_hook_pool", 8191, 256, 0,
                                                  RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return p;
}

// Receives bursts of 60-byte frames on every (port, queue), runs the rx hooks, "transmits"
// them on the other port (tx hooks, then freed), and counts both ends in an OutcomeTable row,
// as rx and tx adapters do.
class Traffic final : public Service {
 public:
  Traffic(HookTable& hooks, OutcomeTable& outcomes)
      : Service("traffic"), hooks_(hooks), outcomes_(outcomes) {}

  bool poll() noexcept override {
    rte_mbuf* burst[32];
    for (uint16_t p = 0; p < kPorts; ++p) {
      for (uint16_t q = 0; q < kQueues; ++q) {
        if (rte_pktmbuf_alloc_bulk(pool(), burst, 32) != 0) return false;
        for (rte_mbuf* m : burst) {
          rte_pktmbuf_append(m, 60);
          std::memset(rte_pktmbuf_mtod(m, void*), static_cast<int>(seq_++), 60);
          m->port = p;
          reset_meta(m);
        }
        outcomes_.at(0, PortId{p}).rx_packets.add(32);
        hooks_.run_rx(PortId{p}, QueueId{q}, burst);
        const uint16_t out = static_cast<uint16_t>(1 - p);
        hooks_.run_tx(PortId{out}, QueueId{q}, burst);
        outcomes_.at(0, PortId{p}).tx_packets.add(32);
        rte_pktmbuf_free_bulk(burst, 32);
      }
    }
    rounds.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  std::atomic<uint64_t> rounds{0};

 private:
  HookTable& hooks_;
  OutcomeTable& outcomes_;
  uint8_t seq_ = 0;
};

struct TrafficLcore {
  TrafficLcore(HookTable& hooks, OutcomeTable& outcomes, Qsbr& qsbr)
      : lcore(1, BackoffConfig{.busy_poll = true}),
        traffic(std::make_shared<Traffic>(hooks, outcomes)) {
    lcore.attach_qsbr(&qsbr, 0);
    lcore.add_service(traffic);
    thread = std::thread([this] { lcore.run(); });
  }
  ~TrafficLcore() { stop(); }
  void stop() {
    lcore.request_stop();
    if (thread.joinable()) thread.join();
  }
  bool wait_rounds(uint64_t n) {
    auto end = std::chrono::steady_clock::now() + 10s;
    uint64_t start = traffic->rounds.load();
    while (traffic->rounds.load() < start + n) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(100us);
    }
    return true;
  }
  Lcore lcore;
  std::shared_ptr<Traffic> traffic;
  std::thread thread;
};

// Counts what it sees in memory of its own, so that a call after its removal touches freed
// memory.
class CountingHook final : public Hook {
 public:
  CountingHook() : seen_(std::make_unique<std::atomic<uint64_t>>(0)) {}
  void on_burst(const HookPoint&, std::span<rte_mbuf* const> pkts) noexcept override {
    seen_->fetch_add(pkts.size(), std::memory_order_relaxed);
  }
  uint64_t seen() const { return seen_->load(); }

 private:
  std::unique_ptr<std::atomic<uint64_t>> seen_;
};

class Hooks : public ::testing::Test {
 protected:
  void SetUp() override { VECFLOW_REQUIRE_EAL(); }
};

}  // namespace

TEST_F(Hooks, RunOnTheirQueueAndDirectionOnly) {
  auto qsbr = Qsbr::create(1);
  ASSERT_TRUE(qsbr);
  HookTable table(**qsbr, kPorts, kQueues);
  CountingHook rx0, tx1_all;
  auto a = table.add(HookDirection::Rx, PortId{0}, QueueId{1}, rx0);
  auto b = table.add(HookDirection::Tx, PortId{1}, std::nullopt, tx1_all);
  ASSERT_TRUE(a && b);
  rte_mbuf* burst[4] = {};
  table.run_rx(PortId{0}, QueueId{1}, burst);
  table.run_rx(PortId{0}, QueueId{0}, burst);
  table.run_rx(PortId{1}, QueueId{1}, burst);
  table.run_tx(PortId{1}, QueueId{0}, burst);
  table.run_tx(PortId{1}, QueueId{1}, std::span(burst, 2));
  EXPECT_EQ(rx0.seen(), 4u);
  EXPECT_EQ(tx1_all.seen(), 6u);
  EXPECT_EQ(table.installed(), 2u);
  ASSERT_TRUE(table.remove(*b));
  table.run_tx(PortId{1}, QueueId{0}, burst);
  EXPECT_EQ(tx1_all.seen(), 6u);
  EXPECT_FALSE(table.remove(*b));  // already gone
  EXPECT_FALSE(table.add(HookDirection::Rx, PortId{2}, std::nullopt, rx0));
  EXPECT_FALSE(table.add(HookDirection::Rx, PortId{0}, QueueId{kQueues}, rx0));
  ASSERT_TRUE(table.remove(*a));
  EXPECT_EQ(table.installed(), 0u);
}

TEST_F(Hooks, SeveralHooksOnOneQueueRunInOrderOfInstallation) {
  auto qsbr = Qsbr::create(1);
  HookTable table(**qsbr, kPorts, kQueues);
  std::vector<int> order;
  struct Tagged final : Hook {
    Tagged(std::vector<int>& o, int t) : order(o), tag(t) {}
    void on_burst(const HookPoint&, std::span<rte_mbuf* const>) noexcept override {
      order.push_back(tag);
    }
    std::vector<int>& order;
    int tag;
  };
  Tagged one(order, 1), two(order, 2), three(order, 3);
  auto i1 = table.add(HookDirection::Rx, PortId{0}, QueueId{0}, one);
  auto i2 = table.add(HookDirection::Rx, PortId{0}, QueueId{0}, two);
  auto i3 = table.add(HookDirection::Rx, PortId{0}, QueueId{0}, three);
  ASSERT_TRUE(i1 && i2 && i3);
  rte_mbuf* burst[1] = {};
  table.run_rx(PortId{0}, QueueId{0}, burst);
  ASSERT_TRUE(table.remove(*i2));
  table.run_rx(PortId{0}, QueueId{0}, burst);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 1, 3}));
}

// A set of hooks goes in one call (a trace's, on every port): all of them, or, when one of
// them is not installed, none.
TEST_F(Hooks, ASetOfHooksIsRemovedWholeOrNotAtAll) {
  auto qsbr = Qsbr::create(1);
  ASSERT_TRUE(qsbr);
  HookTable table(**qsbr, kPorts, kQueues);
  CountingHook rx0, tx0, tx1;
  auto a = table.add(HookDirection::Rx, PortId{0}, std::nullopt, rx0);
  auto b = table.add(HookDirection::Tx, PortId{0}, QueueId{1}, tx0);
  auto c = table.add(HookDirection::Tx, PortId{1}, std::nullopt, tx1);
  ASSERT_TRUE(a && b && c);
  const HookTable::HookId unknown = *c + 100;
  const std::vector<HookTable::HookId> with_unknown{*a, unknown};
  EXPECT_FALSE(table.remove(with_unknown));
  EXPECT_EQ(table.installed(), 3u) << "nothing removed";
  const std::vector<HookTable::HookId> two{*a, *c};
  ASSERT_TRUE(table.remove(two));
  EXPECT_EQ(table.installed(), 1u);
  rte_mbuf* burst[2] = {};
  table.run_rx(PortId{0}, QueueId{0}, burst);
  table.run_tx(PortId{1}, QueueId{1}, burst);
  table.run_tx(PortId{0}, QueueId{1}, burst);
  EXPECT_EQ(rx0.seen(), 0u);
  EXPECT_EQ(tx1.seen(), 0u);
  EXPECT_EQ(tx0.seen(), 2u) << "the hook not in the set stays";
  EXPECT_TRUE(table.remove(std::vector<HookTable::HookId>{}));
}

TEST_F(Hooks, CaptureHookAddedAndRemovedAThousandTimesUnderTraffic) {
  auto qsbr = Qsbr::create(2);
  ASSERT_TRUE(qsbr);
  HookTable table(**qsbr, kPorts, kQueues);
  OutcomeTable outcomes(1, kPorts);
  const std::string file = ::testing::TempDir() + "vpi-hooks.pcapng";
  CaptureOptions o;
  o.path = file;
  o.interfaces = {{PortId{0}, "p0"}, {PortId{1}, "p1"}};
  o.snaplen = 128;
  o.ring_name = "vpi_hook_capring";
  o.pool_name = "vpi_hook_cappool";
  o.ring_size = 16384;
  o.pool_size = 32767;
  o.pool_cache = 64;
  const auto before = std::chrono::system_clock::now();
  auto capture = PcapngCapture::open(std::move(o));
  ASSERT_TRUE(capture) << capture.error().message;
  // The test thread is reader 1 too: it writes the capture between changes, like the
  // control lcore does.
  (*qsbr)->online(1);

  TrafficLcore lcore(table, outcomes, **qsbr);
  ASSERT_TRUE(lcore.wait_rounds(10));
  uint64_t seen_by_counters = 0;
  // A thousand changes; 300 in the sanitizer build, where each costs ten times more.
#ifdef VECFLOW_SANITIZE
  constexpr int kChanges = 300;
#else
  constexpr int kChanges = 1000;
#endif
  for (int i = 0; i < kChanges; ++i) {
    // Fresh hooks on the heap each time, destroyed as soon as remove() returns.
    auto cap = std::make_unique<CaptureHook>(*capture);
    auto count = std::make_unique<CountingHook>();
    auto dir = i % 2 ? HookDirection::Rx : HookDirection::Tx;
    auto c = table.add(dir, PortId{static_cast<uint16_t>(i % kPorts)}, std::nullopt, *cap);
    auto n = table.add(HookDirection::Rx, PortId{0}, QueueId{static_cast<uint16_t>(i % kQueues)},
                       *count);
    ASSERT_TRUE(c && n);
    if (i % 100 == 0) {
      ASSERT_TRUE(lcore.wait_rounds(2));  // let traffic meet the hooks
    }
    ASSERT_TRUE(table.remove(*n));
    seen_by_counters += count->seen();
    count.reset();
    ASSERT_TRUE(table.remove(*c));
    cap.reset();
    (*capture)->poll();
    (*qsbr)->quiescent(1);
  }
  ASSERT_TRUE(lcore.wait_rounds(10));
  lcore.stop();
  (*qsbr)->offline(1);
  (*capture)->flush();

  EXPECT_EQ(table.installed(), 0u);
  auto s = outcomes.total_snapshot();
  EXPECT_GT(s.rx, 0u);
  EXPECT_EQ(s.unaccounted(), 0) << s.to_string();
  EXPECT_GT(seen_by_counters, 0u);
  auto st = (*capture)->stats();
  EXPECT_GT(st.captured, 0u);
  EXPECT_EQ(st.written, st.captured);  // every copy made reached the file
  EXPECT_EQ(st.write_errors, 0u);

  // And the file is a capture a standard reader accepts, with every written packet, each on the
  // interface of the hook point's port, inbound or outbound, stamped with the real time.
  auto f = test::read_capture(file);
  ASSERT_EQ(f.error, "");
  EXPECT_EQ(f.interfaces, (std::vector<std::string>{"p0", "p1"}));
  EXPECT_EQ(f.packets.size(), st.written);
  const auto after = std::chrono::system_clock::now();
  auto ns = [](auto t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  };
  bool rx = false, tx = false;
  for (const auto& pkt : f.packets) {
    EXPECT_EQ(pkt.len, 60u);
    EXPECT_TRUE(pkt.flags == 1 || pkt.flags == 2) << pkt.flags;
    rx |= pkt.flags == 1;
    tx |= pkt.flags == 2;
    EXPECT_GE(pkt.ts_ns + 1'000'000'000u, ns(before));
    EXPECT_LE(pkt.ts_ns, ns(after) + 1'000'000'000u);
  }
  EXPECT_TRUE(rx && tx);
  std::filesystem::remove(file);
}

// A reload adds a port while a mirror's file is open: the port's copies are filed under an
// interface of its own, described before the first of them (libpcap reads blocks in order), not
// under whichever interface the file began with.
TEST_F(Hooks, ACaptureDescribesAPortAddedWhileItIsOpen) {
  const std::string file = ::testing::TempDir() + "vpi-hooks-added.pcapng";
  CaptureOptions o;
  o.path = file;
  o.interfaces = {{PortId{0}, "trunk"}};
  o.snaplen = 128;
  o.ring_name = "vpi_add_capring";
  o.pool_name = "vpi_add_cappool";
  auto capture = PcapngCapture::open(std::move(o));
  ASSERT_TRUE(capture) << capture.error().message;
  auto offer = [&](uint16_t port, int fill) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool());
    ASSERT_NE(m, nullptr);
    std::memset(rte_pktmbuf_append(m, 60), fill, 60);
    m->port = port;
    EXPECT_EQ((*capture)->capture({&m, 1}, kCaptureRx), 1u);
    rte_pktmbuf_free(m);
  };
  offer(0, 1);
  (*capture)->poll();
  (*capture)->add_interface(PortId{5}, "v300");
  (*capture)->add_interface(PortId{0}, "renamed");  // described already: stays "trunk"
  offer(5, 2);
  offer(0, 3);
  (*capture)->flush();

  auto f = test::read_capture(file);
  ASSERT_EQ(f.error, "");
  EXPECT_EQ(f.interfaces, (std::vector<std::string>{"trunk", "v300"}));
  ASSERT_EQ(f.packets.size(), 3u);
  EXPECT_EQ(f.packets[0].interface, 0u);
  EXPECT_EQ(f.packets[1].interface, 1u);
  EXPECT_EQ(f.packets[1].data.at(0), 2);
  EXPECT_EQ(f.packets[2].interface, 0u);
  std::filesystem::remove(file);
}

TEST_F(Hooks, RemovalWaitsForALcoreThatIsInsideTheHook) {
  auto qsbr = Qsbr::create(2);
  HookTable table(**qsbr, kPorts, kQueues);
  OutcomeTable outcomes(1, kPorts);
  // A hook that blocks inside on_burst until released: remove() must not return meanwhile.
  struct Gate final : Hook {
    void on_burst(const HookPoint&, std::span<rte_mbuf* const>) noexcept override {
      inside.store(true);
      while (!release.load())
        std::this_thread::yield();
      inside.store(false);
    }
    std::atomic<bool> inside{false}, release{false};
  };
  Gate gate;
  auto id = table.add(HookDirection::Rx, PortId{1}, QueueId{0}, gate);
  ASSERT_TRUE(id);
  TrafficLcore lcore(table, outcomes, **qsbr);
  while (!gate.inside.load())
    std::this_thread::yield();
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    ASSERT_TRUE(table.remove(*id));
    removed.store(true);
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(removed.load());  // the lcore is still inside
  gate.release.store(true);
  remover.join();
  EXPECT_TRUE(removed.load());
  EXPECT_FALSE(gate.inside.load());
}
