// Test support for the scheduler: lcores on registered threads, a Port over rte_rings, test
// packets, and schedulers of every backend with unique device names.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include "core/ids.h"
#include "io/port.h"
#include "runtime/lcore.h"
#include "sched/scheduler.h"

namespace vecflow::test {

enum class BackendKind { Builtin, Dsw, Sw };

const char* backend_name(BackendKind k);
// Whether the backend offers ordered queues (event_dsw does not).
bool has_ordered(BackendKind k);

// A scheduler of the given backend; eventdev devices get unique vdev names ("vsc").
std::unique_ptr<sched::Scheduler> make_scheduler(BackendKind kind,
                                                 std::vector<sched::QueueConfig> queues,
                                                 uint16_t producers, uint16_t workers,
                                                 uint32_t inflight = 4096,
                                                 const sched::BuiltinTuning* tuning = nullptr);

// A vecflow Lcore running on a thread registered with EAL (DPDK services and mempool caches
// need an lcore id). When idle, sleeps on descriptors where every service can (a builtin worker's
// doorbell), else naps at most `nap_max_us`.
class LcoreThread {
 public:
  explicit LcoreThread(std::vector<std::shared_ptr<Service>> services, uint32_t nap_max_us = 20);
  ~LcoreThread();
  LcoreThread(const LcoreThread&) = delete;
  LcoreThread& operator=(const LcoreThread&) = delete;
  void stop();
  Lcore& lcore() noexcept { return lcore_; }

 private:
  Lcore lcore_;
  std::thread thread_;
};

// Wraps a non-owned service so a test-owned object can be put on an lcore.
template <typename T>
std::shared_ptr<Service> borrow(T& service) {
  return std::shared_ptr<Service>(&service, [](Service*) {});
}

// Polls `pred` until true or `timeout` passes.
template <typename Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// The shared test mbuf pool (created on first use, after EAL).
rte_mempool* packet_pool();

// A packet of `flow` with `seq`, entered on `port`: 64 bytes, flow id in hash.rss, PacketMeta
// reset, payload words: [0] flow, [1] seq, [2..3] free for stamps (TSC values). nullptr when the
// pool is empty.
rte_mbuf* make_packet(PortId port, uint32_t flow, uint32_t seq);
inline uint64_t* packet_words(rte_mbuf* m) {
  return rte_pktmbuf_mtod(m, uint64_t*);
}

// A Port over rte_rings: the test injects into the rx ring of a queue and collects from its tx
// ring. tx_burst takes at most `tx_accept` packets per call (to make a port refuse).
class RingPort final : public Port {
 public:
  RingPort(std::string name, PortId id, uint16_t queues = 1, uint32_t ring_size = 8192);
  ~RingPort() override;

  std::string_view kind() const noexcept override { return "test"; }
  uint16_t rx_queue_count() const noexcept override { return queues_; }
  uint16_t tx_queue_count() const noexcept override { return queues_; }
  uint16_t rx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override;
  uint16_t tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override;
  // A ring port used as a kernel target stands for the kernel: what it takes is collected.
  uint16_t to_kernel(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept override {
    return tx_burst(q, pkts, n);
  }
  LinkState link_state() const noexcept override { return link.load(); }
  Result<void> start() override { return {}; }
  void stop() noexcept override {}
  // Each rx queue's wake-up is an eventfd inject() writes; arming fails while the queue holds
  // packets (they would raise no wake-up).
  int arm_wakeup(uint16_t q) noexcept override;
  void disarm_wakeup(uint16_t q) noexcept override;

  // Test side. `link` is what link_state() reports (refresh_link() caches it).
  std::atomic<LinkState> link{LinkState::Up};
  // inject() stamps each packet's rx time (TSC) into payload word 2 at rx_burst.
  unsigned inject(uint16_t q, rte_mbuf** pkts, unsigned n);
  unsigned collect(uint16_t q, rte_mbuf** pkts, unsigned n);
  std::atomic<uint32_t> tx_accept{UINT32_MAX};
  std::atomic<uint64_t> tx_calls{0};
  // A saturated queue: while `filler` is above 0, every rx burst that finds fewer packets in the
  // ring than it asks for is topped up with new packets of kFillerFlow (taken from `filler`), as
  // a queue at line rate returns full bursts. Its packets' sequence numbers count per queue.
  static constexpr uint32_t kFillerFlow = 0x10000;  // bucket 0 of any power-of-two count
  std::atomic<uint64_t> filler{0};

 private:
  uint16_t queues_;
  std::vector<rte_ring*> rx_;
  std::vector<rte_ring*> tx_;
  std::vector<int> wake_fds_;
  std::vector<uint32_t> filler_seq_;
};

}  // namespace vecflow::test
