#include "sched/rx_adapter.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <bit>
#include <thread>

#include <rte_cycles.h>
#include <rte_errno.h>

#include "core/packet.h"
#include "core/tracer.h"
#include "hooks/hook_table.h"
#include "io/port.h"
#include "runtime/cycles.h"
#include "sched/rx_wakeup.h"

namespace vecflow::sched {

// ---- VectorPool ---------------------------------------------------------------------------

Result<VectorPool> VectorPool::create(const std::string& name, uint32_t vectors,
                                      uint16_t vector_size, uint32_t cache) {
  VectorPool p;
  p.pool_ = rte_event_vector_pool_create(name.c_str(), vectors, cache, vector_size, SOCKET_ID_ANY);
  if (!p.pool_) {
    return fail("cannot create vector pool {} ({} vectors of {}): {}", name, vectors, vector_size,
                rte_strerror(rte_errno));
  }
  return p;
}

VectorPool::~VectorPool() {
  rte_mempool_free(pool_);
}

// ---- RxAdapter ----------------------------------------------------------------------------

RxAdapter::RxAdapter(std::string name, EventPort& producer, const RxAdapterConfig& config,
                     PortOutcomes* outcomes)
    : Service(std::move(name)),
      producer_(producer),
      cfg_(config),
      outcomes_(outcomes),
      timeout_tsc_(tsc_hz() / 1'000'000 * config.vector_timeout_us) {
  if (cfg_.vector_size == 0) cfg_.vector_size = 1;
  if (cfg_.vector_pool == nullptr) cfg_.vector_size = 1;
  if (cfg_.flow_buckets == 0 || cfg_.flow_buckets > kMaxFlowBuckets ||
      (cfg_.flow_buckets & (cfg_.flow_buckets - 1)) != 0)
    cfg_.flow_buckets = kDefaultFlowBuckets;  // the configuration loader has refused these
  bucket_mask_ = static_cast<uint16_t>(cfg_.flow_buckets - 1);
  proto_.op = RTE_EVENT_OP_NEW;
  proto_.queue_id = cfg_.queue;
  proto_.sched_type = static_cast<uint8_t>(cfg_.sched_type);
  proto_.priority = RTE_EVENT_DEV_PRIORITY_NORMAL;
  const uint32_t nslots = uint32_t{kMaxRxQueues} * cfg_.flow_buckets;
  slots_ = std::make_unique<Slot[]>(nslots + 1);
  head_ = static_cast<uint16_t>(nslots);
  slots_[head_].next = slots_[head_].prev = head_;
  // Without it (no descriptors left) the adapter only keeps its lcore from sleeping.
  request_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

RxAdapter::~RxAdapter() {
  if (request_fd_ >= 0) ::close(request_fd_);
}

namespace {
void notify(int fd) noexcept {
  if (fd < 0) return;
  const uint64_t one = 1;
  ssize_t n = write(fd, &one, sizeof(one));
  (void)n;  // EAGAIN only when the counter is saturated: readable anyway
}
}  // namespace

Result<void> RxAdapter::add_queue(Port& port, uint16_t queue) {
  if (nqueues_ == kMaxRxQueues)
    return fail("rx adapter {}: more than {} rx queues", name(), kMaxRxQueues);
  for (uint16_t i = 0; i < nqueues_; ++i) {
    if (queues_[i].port == &port && queues_[i].queue == queue)
      return fail("rx adapter {}: {} queue {} added twice", name(), port.name(), queue);
  }
  // A free block of slots: nqueues_ < kMaxRxQueues, so there is one.
  const uint32_t block = static_cast<uint32_t>(std::countr_one(used_blocks_));
  used_blocks_ |= 1u << block;
  queues_[nqueues_++] = RxQueue{&port, queue, to_index(port.id()), block * cfg_.flow_buckets};
  return {};
}

Result<void> RxAdapter::remove_queue(Port& port, uint16_t queue,
                                     std::chrono::milliseconds timeout) {
  std::lock_guard lock(control_mutex_);
  auto applied = [&](std::chrono::steady_clock::time_point deadline) {
    while (applied_seq_.load(std::memory_order_acquire) !=
           request_seq_.load(std::memory_order_relaxed)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // An earlier request that timed out is still pending: it must be taken first.
  if (!applied(deadline))
    return fail("rx adapter {}: not polled (no lcore runs it?); an earlier removal is pending",
                name());
  request_ = Request{&port, queue};
  request_seq_.store(request_seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  notify(request_fd_);
  if (!applied(deadline)) {
    return fail(
        "rx adapter {}: not polled (no lcore runs it?); removal of {} queue {} happens "
        "at its next poll",
        name(), port.name(), queue);
  }
  return {};
}

void RxAdapter::request_drain() noexcept {
  drain_requested_.store(true, std::memory_order_release);
  notify(request_fd_);
}

void RxAdapter::apply_requests() noexcept {
  uint32_t seq = request_seq_.load(std::memory_order_acquire);
  if (seq != applied_seq_.load(std::memory_order_relaxed)) {
    const Request r = request_;
    close_all(
        [](const Slot& s, const Request& q) {
          return s.port == to_index(q.port->id()) && (q.queue == kAllQueues || s.queue == q.queue);
        },
        r);
    uint16_t w = 0;
    for (uint16_t i = 0; i < nqueues_; ++i) {
      bool removed =
          queues_[i].port == r.port && (r.queue == kAllQueues || queues_[i].queue == r.queue);
      if (removed) {
        used_blocks_ &= ~(1u << (queues_[i].first_slot / cfg_.flow_buckets));
      } else {
        queues_[w++] = queues_[i];
      }
    }
    nqueues_ = w;
    enqueue_out(DropReason::SHUTDOWN_FLUSH);
    applied_seq_.store(seq, std::memory_order_release);
  }
  if (drain_requested_.load(std::memory_order_acquire) && !draining_) {
    close_all([](const Slot&, const Request&) { return true; }, Request{});
    enqueue_out(DropReason::SHUTDOWN_FLUSH);
    nqueues_ = 0;
    draining_ = true;
    drained_.store(true, std::memory_order_release);
  }
}

void RxAdapter::flush() noexcept {
  close_all([](const Slot&, const Request&) { return true; }, Request{});
  enqueue_out(DropReason::SHUTDOWN_FLUSH);
}

bool RxAdapter::arm_wakeup(WakeFds& fds) noexcept {
  // A partial vector is due by time; a backend that needs maintenance calls gets none asleep.
  if (open_ > 0 || producer_.needs_maintenance() || request_fd_ < 0) return false;
  if (!fds.add(request_fd_)) return false;
  armed_ = static_cast<uint16_t>(
      arm_rx_wakeups(std::span<const RxQueue>(queues_.data(), nqueues_), fds));
  if (armed_ == nqueues_) return true;
  disarm_wakeup();  // a request that came meanwhile is read: polling will see it
  return false;
}

void RxAdapter::disarm_wakeup() noexcept {
  disarm_rx_wakeups(std::span<const RxQueue>(queues_.data(), armed_));
  armed_ = 0;
  uint64_t v;
  ssize_t n = read(request_fd_, &v, sizeof(v));
  (void)n;  // EAGAIN: no request came
}

bool RxAdapter::poll() noexcept {
  if (unlikely(request_seq_.load(std::memory_order_relaxed) !=
                   applied_seq_.load(std::memory_order_relaxed) ||
               (drain_requested_.load(std::memory_order_relaxed) && !draining_))) {
    apply_requests();
  }
  const uint64_t now = rte_rdtsc();
  bool worked = open_ > 0 && close_expired(now);
  // A full scheduler: leave the packets in the rx rings. When those fill, the NIC (or the
  // kernel, for AF_XDP) drops and counts what arrives; taking them only to be refused would
  // spend the cycles the workers need to catch up. Room is asked for every event a poll may
  // send: each open vector may close, and each received packet may make one.
  if (producer_.has_room(static_cast<uint16_t>(open_ + kRxBurst * nqueues_))) [[likely]] {
    for (uint16_t i = 0; i < nqueues_; ++i) {
      for (uint16_t b = 0; b < kRxBurstsPerPoll; ++b) {
        const uint16_t got = receive(queues_[i], now);
        worked |= got > 0;
        if (got < kRxBurst) {
          // Drained: nothing more to wait for.
          if (open_ > 0) close_queue(queues_[i], now);
          break;
        }
        // A further burst only while it would find room too (events waiting in out_ count).
        if (!producer_.has_room(static_cast<uint16_t>(open_ + nout_ + kRxBurst * nqueues_))) break;
      }
    }
  } else {
    stats_.held.add();
  }
  if (nout_ > 0) {
    enqueue_out(DropReason::SCHED_BACKPRESSURE);
    worked = true;
  }
  // A backend that buffers enqueued events per port (event_dsw: up to 32 events, 2048 packets
  // at vectors of 64) is flushed every poll, not only when idle: buffered, those packets' mbufs
  // outgrow the pool's per-lcore cache and come back from the rx path cold.
  if (producer_.needs_maintenance()) producer_.maintain();
  return worked;
}

uint16_t RxAdapter::receive(const RxQueue& q, uint64_t now) noexcept {
  rte_mbuf* pkts[kRxBurst];
  const uint16_t n = q.port->rx_burst(q.queue, pkts, kRxBurst);
  if (n == 0) return 0;
  stats_.packets.add(n);
  const bool hooked =
      cfg_.hooks && cfg_.hooks->run_rx(PortId{q.port_id}, QueueId{q.queue}, {pkts, n});
  // The bytes are summed in the pass that places the packets: one pass over the burst.
  uint64_t bytes = 0;
  if (cfg_.vector_size == 1) {
    for (uint16_t i = 0; i < n; ++i) {
      bytes += pkts[i]->pkt_len;
      emit_packet(pkts[i], pkts[i]->hash.rss,
                  hooked && trace::marked(pkts[i]) ? trace::kEventTraced : 0);
    }
  } else {
    bytes = hooked ? add_packets<true>(q, pkts, n, now) : add_packets<false>(q, pkts, n, now);
  }
  if (q.port->vlans() != nullptr) [[unlikely]] {
    charge_rx_each(outcomes_, pkts, n);
    return n;
  }
  PortOutcomes& o = outcomes_[q.port_id];
  o.rx_packets.add(n);
  o.rx_bytes.add(bytes);
  return n;
}

void RxAdapter::emit_packet(rte_mbuf* m, uint32_t flow, uint8_t traced) noexcept {
  rte_event& e = out_[nout_++];
  e.event = with_flow(proto_.event, flow, RTE_EVENT_TYPE_ETHDEV);
  e.sub_event_type = traced;
  e.mbuf = m;
  stats_.events.add();
  if (nout_ == out_.size()) enqueue_out(DropReason::SCHED_BACKPRESSURE);
}

bool RxAdapter::open(uint16_t s, const RxQueue& q, uint64_t now) noexcept {
  void* v;
  if (rte_mempool_get(cfg_.vector_pool, &v) != 0) return false;
  Slot& slot = slots_[s];
  slot.vec = static_cast<rte_event_vector*>(v);
  slot.vec->nb_elem = 0;
  slot.vec->elem_offset = 0;
  slot.vec->attr_valid = 1;
  slot.vec->port = q.port_id;
  slot.vec->queue = q.queue;
  slot.opened = now;
  slot.arrivals = 0;
  slot.port = q.port_id;
  slot.queue = q.queue;
  slot.bucket = static_cast<uint16_t>(s - q.first_slot);
  slot.traced = 0;
  list_append(s);
  ++open_;
  return true;
}

template <bool kTraced>
uint64_t RxAdapter::add_packets(const RxQueue& q, rte_mbuf** pkts, uint16_t n,
                                uint64_t now) noexcept {
  Slot* const slots = &slots_[q.first_slot];
  const uint16_t size = cfg_.vector_size;
  // The vector a run of packets of one bucket goes to, and its fill, kept in registers and
  // written back when the bucket changes: through memory, each packet of a run (every packet
  // of a flow that has the queue to itself) waited for the previous one's store of nb_elem.
  // With it, the run's arrival time (this poll's) is added once per packet of the run.
  constexpr uint16_t kNoBucket = 0xffff;
  rte_event_vector* v = nullptr;
  uint16_t bucket = kNoBucket;
  uint16_t fill = 0;
  uint16_t fill0 = 0;  // the vector's fill when the run began
  uint64_t bytes = 0;
  auto write_back = [&] {
    v->nb_elem = fill;
    slots[bucket].arrivals += uint64_t{static_cast<uint16_t>(fill - fill0)} * now;
  };
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    bytes += m->pkt_len;
    const uint16_t b = static_cast<uint16_t>(m->hash.rss & bucket_mask_);
    const uint8_t traced = kTraced && trace::marked(m) ? trace::kEventTraced : 0;
    if (b != bucket) {
      if (v != nullptr) write_back();
      if (!slots[b].vec && !open(static_cast<uint16_t>(q.first_slot + b), q, now)) [[unlikely]] {
        v = nullptr;
        bucket = kNoBucket;
        stats_.no_vector.add();
        emit_packet(m, b, traced);
        continue;
      }
      v = slots[b].vec;
      bucket = b;
      fill = v->nb_elem;
      fill0 = fill;
    }
    if (kTraced && traced) {
      slots[b].traced = traced;
      trace::Record r;
      r.step = trace::Step::Vector;
      r.port = q.port_id;
      r.queue = q.queue;
      r.index = b;
      r.value = fill;
      trace::tracer().add(m, r);
    }
    vector_mbufs(v)[fill++] = m;
    if (fill == size) {
      write_back();
      close(static_cast<uint16_t>(q.first_slot + b), Closed::Full, now);
      v = nullptr;
      bucket = kNoBucket;
    }
  }
  if (v != nullptr) write_back();
  return bytes;
}

void RxAdapter::close(uint16_t s, Closed why, uint64_t now) noexcept {
  Slot& slot = slots_[s];
  const uint16_t nb = slot.vec->nb_elem;
  // Their waits sum to nb x now - their arrivals; each is counted at the vector's mean.
  if (nb > 0) stats_.wait.add((nb * now - slot.arrivals) / nb, nb);
  rte_event& e = out_[nout_++];
  e.event = with_flow(proto_.event, slot.bucket, RTE_EVENT_TYPE_ETHDEV_VECTOR);
  e.sub_event_type = slot.traced;
  e.vec = slot.vec;
  stats_.events.add();
  stats_.vectors.add();
  stats_.vector_packets.add(nb);
  switch (why) {
    case Closed::Full:
      stats_.closed_full.add();
      break;
    case Closed::Drained:
      stats_.closed_drained.add();
      break;
    case Closed::Timeout:
      stats_.closed_timeout.add();
      break;
    case Closed::Flush:
      stats_.closed_flush.add();
      break;
  }
  slot.vec = nullptr;
  list_remove(s);
  --open_;
  if (nout_ == out_.size())
    enqueue_out(why == Closed::Flush ? DropReason::SHUTDOWN_FLUSH : DropReason::SCHED_BACKPRESSURE);
}

bool RxAdapter::close_expired(uint64_t now) noexcept {
  bool any = false;
  while (open_ > 0) {
    uint16_t oldest = slots_[head_].next;
    if (now - slots_[oldest].opened < timeout_tsc_) break;
    close(oldest, Closed::Timeout, now);
    any = true;
  }
  return any;
}

void RxAdapter::close_queue(const RxQueue& q, uint64_t now) noexcept {
  for (uint16_t s = slots_[head_].next; s != head_;) {
    const uint16_t next = slots_[s].next;
    if (slots_[s].port == q.port_id && slots_[s].queue == q.queue) close(s, Closed::Drained, now);
    s = next;
  }
}

void RxAdapter::close_all(bool (*match)(const Slot&, const Request&), const Request& r) noexcept {
  const uint64_t now = rte_rdtsc();
  // Oldest first, so that a flow's vectors leave in the order they were opened.
  for (uint16_t s = slots_[head_].next; s != head_;) {
    const uint16_t next = slots_[s].next;
    if (match(slots_[s], r)) close(s, Closed::Flush, now);
    s = next;
  }
}

void RxAdapter::enqueue_out(DropReason if_refused) noexcept {
  if (nout_ == 0) return;
  // Refusals may come from anywhere in the burst (a full worker's flows); they end up behind.
  uint16_t ok = producer_.enqueue_new_burst_any(out_.data(), nout_);
  if (ok < nout_) {
    stats_.refused.add(nout_ - ok);
    for (uint16_t i = ok; i < nout_; ++i)
      drop_event(out_[i], if_refused);
  }
  nout_ = 0;
}

void RxAdapter::drop_event(rte_event& ev, DropReason reason) noexcept {
  std::span<rte_mbuf*> pkts = packets(ev);
  for (rte_mbuf* m : pkts)
    outcomes_[m->port].drops.add(reason);
  rte_pktmbuf_free_bulk(pkts.data(), static_cast<unsigned>(pkts.size()));
  if (is_vector(ev)) free_vector(ev.vec);
}

void RxAdapter::list_remove(uint16_t s) noexcept {
  slots_[slots_[s].prev].next = slots_[s].next;
  slots_[slots_[s].next].prev = slots_[s].prev;
}

void RxAdapter::list_append(uint16_t s) noexcept {
  uint16_t last = slots_[head_].prev;
  slots_[s].prev = last;
  slots_[s].next = head_;
  slots_[last].next = s;
  slots_[head_].prev = s;
}

}  // namespace vecflow::sched
