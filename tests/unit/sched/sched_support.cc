#include "sched_support.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/packet.h"

namespace vecflow::test {

const char* backend_name(BackendKind k) {
  switch (k) {
    case BackendKind::Builtin:
      return "builtin";
    case BackendKind::Dsw:
      return "event_dsw";
    case BackendKind::Sw:
      return "event_sw";
  }
  return "?";
}

bool has_ordered(BackendKind k) {
  return k != BackendKind::Dsw;
}

std::unique_ptr<sched::Scheduler> make_scheduler(BackendKind kind,
                                                 std::vector<sched::QueueConfig> queues,
                                                 uint16_t producers, uint16_t workers,
                                                 uint32_t inflight,
                                                 const sched::BuiltinTuning* tuning) {
  static std::atomic<unsigned> seq{0};
  sched::SchedulerConfig c;
  c.queues = std::move(queues);
  c.producers = producers;
  c.workers = workers;
  c.inflight_limit = inflight;
  if (tuning) c.builtin = *tuning;
  if (kind == BackendKind::Builtin) {
    c.backend = SchedBackend::Builtin;
  } else {
    c.backend = SchedBackend::Eventdev;
    c.device = fmt::format("{}_vsc{}", kind == BackendKind::Dsw ? "event_dsw" : "event_sw",
                           seq.fetch_add(1));
  }
  auto s = sched::create_scheduler(c);
  if (!s) {
    ADD_FAILURE() << backend_name(kind) << ": " << s.error().message;
    return nullptr;
  }
  return std::move(*s);
}

LcoreThread::LcoreThread(std::vector<std::shared_ptr<Service>> services, uint32_t nap_max_us)
    : lcore_(0, BackoffConfig{.idle_sleep_max_us = nap_max_us}) {
  lcore_.set_services(std::move(services));
  thread_ = std::thread([this] {
    bool registered = rte_thread_register() == 0;
    lcore_.run();
    if (registered) rte_thread_unregister();
  });
}

LcoreThread::~LcoreThread() {
  stop();
}

void LcoreThread::stop() {
  lcore_.request_stop();
  if (thread_.joinable()) thread_.join();
}

rte_mempool* packet_pool() {
  static rte_mempool* pool = rte_pktmbuf_pool_create("vsc_test_pkts", 16383, 256, 0,
                                                     RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return pool;
}

rte_mbuf* make_packet(PortId port, uint32_t flow, uint32_t seq) {
  rte_mempool* pool = packet_pool();
  if (!pool) {
    ADD_FAILURE() << "no test mbuf pool: " << rte_strerror(rte_errno);
    return nullptr;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (!m) return nullptr;  // the pool is empty for now
  auto* w = reinterpret_cast<uint64_t*>(rte_pktmbuf_append(m, 64));
  w[0] = flow;
  w[1] = seq;
  w[2] = w[3] = 0;
  m->port = to_index(port);
  m->hash.rss = flow;
  m->ol_flags |= RTE_MBUF_F_RX_RSS_HASH;
  reset_meta(m);
  return m;
}

RingPort::RingPort(std::string name, PortId id, uint16_t queues, uint32_t ring_size)
    : Port(std::move(name), id), queues_(queues) {
  static std::atomic<unsigned> seq{0};
  for (uint16_t q = 0; q < queues; ++q) {
    unsigned n = seq.fetch_add(1);
    rx_.push_back(rte_ring_create(fmt::format("vsc_rx{}", n).c_str(), ring_size, SOCKET_ID_ANY,
                                  RING_F_SC_DEQ));
    tx_.push_back(rte_ring_create(fmt::format("vsc_tx{}", n).c_str(), ring_size, SOCKET_ID_ANY,
                                  RING_F_SC_DEQ));
    wake_fds_.push_back(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    filler_seq_.push_back(0);
  }
}

RingPort::~RingPort() {
  for (auto* rings : {&rx_, &tx_}) {
    for (rte_ring* r : *rings) {
      rte_mbuf* m;
      while (rte_ring_dequeue(r, reinterpret_cast<void**>(&m)) == 0)
        rte_pktmbuf_free(m);
      rte_ring_free(r);
    }
  }
  for (int fd : wake_fds_)
    close(fd);
}

uint16_t RingPort::rx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept {
  uint16_t got = static_cast<uint16_t>(
      rte_ring_sc_dequeue_burst(rx_[q], reinterpret_cast<void**>(pkts), n, nullptr));
  while (got < n && filler.load(std::memory_order_relaxed) > 0) {
    rte_mbuf* m = make_packet(id(), kFillerFlow, filler_seq_[q]);
    if (m == nullptr) break;
    ++filler_seq_[q];
    filler.fetch_sub(1, std::memory_order_relaxed);
    pkts[got++] = m;
  }
  uint64_t now = rte_rdtsc();
  for (uint16_t i = 0; i < got; ++i)
    packet_words(pkts[i])[2] = now;
  return got;
}

uint16_t RingPort::tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept {
  tx_calls.fetch_add(1, std::memory_order_relaxed);
  uint32_t limit = tx_accept.load(std::memory_order_relaxed);
  if (n > limit) n = static_cast<uint16_t>(limit);
  return static_cast<uint16_t>(
      rte_ring_mp_enqueue_burst(tx_[q], reinterpret_cast<void**>(pkts), n, nullptr));
}

unsigned RingPort::inject(uint16_t q, rte_mbuf** pkts, unsigned n) {
  unsigned done = rte_ring_mp_enqueue_burst(rx_[q], reinterpret_cast<void**>(pkts), n, nullptr);
  const uint64_t one = 1;
  EXPECT_EQ(write(wake_fds_[q], &one, sizeof(one)), 8);
  return done;
}

int RingPort::arm_wakeup(uint16_t q) noexcept {
  return rte_ring_empty(rx_[q]) ? wake_fds_[q] : -1;
}

void RingPort::disarm_wakeup(uint16_t q) noexcept {
  uint64_t v;
  ssize_t r = read(wake_fds_[q], &v, sizeof(v));
  (void)r;  // EAGAIN: nothing was injected
}

unsigned RingPort::collect(uint16_t q, rte_mbuf** pkts, unsigned n) {
  return rte_ring_sc_dequeue_burst(tx_[q], reinterpret_cast<void**>(pkts), n, nullptr);
}

}  // namespace vecflow::test
