// The entry of the scheduler: receives bursts from a set of port queues, packs their packets
// into event vectors and enqueues them as NEW events to the first stage's queue.
//
// Vectors by flow bucket. A packet's flow hash (m->hash.rss) picks one of `flow_buckets`
// buckets (its low bits); each rx queue keeps one open rte_event_vector per bucket, and the
// event's flow id is the bucket. A flow always falls in the same bucket, so a scheduler that
// keeps a flow id atomic (one worker at a time, in order) keeps each of the bucket's flows
// atomic and in order, and with the symmetric hash both directions of a connection share a
// bucket whichever port or queue they arrive on. Vectors fill whatever the number of active
// flows: with B buckets a vector of V packets needs B x V packets of the queue, where one
// vector per flow (DPDK's event_eth_rx_adapter forms one per queue instead, which makes the
// whole queue one atomic flow) would need V packets of the same flow while it is open, which
// at 1k interleaved flows never happens. The buckets are what the scheduler balances over
// workers: more buckets spread load in finer steps but fill more slowly (at rate R each bucket
// fills in B x V / R). Packets of one flow keep their order inside a vector; packets of
// different flows keep their arrival order too.
//
// A vector is enqueued when it holds vector_size packets; when its queue is drained (a poll
// asked it for a burst and got less: whatever it collected goes on at once, since no packet it
// could wait for is there); when its oldest packet has waited vector_timeout_us (checked at the
// start of every poll, so a vector waits at most its timeout plus one service round); and when
// its queue is removed or the adapter drains. So a packet after which nothing comes leaves in
// the poll that received it, while at saturation, where every poll brings full bursts, vectors
// fill: the timeout is the bound only for a bucket that gets few of a busy queue's packets
// (many flows at a high rate). DPDK's event_eth_rx_adapter waits for the timeout instead: it
// forms vectors per queue from whatever its rx bursts bring and has no notion of a queue
// being empty, so a lone packet pays the whole timeout. An empty queue is the signal that the
// lcore keeps up: larger vectors would buy efficiency it does not need, at the price of
// latency; once it falls behind, its polls find full bursts and vectors fill. vector_size 1
// sends plain per-packet events (flow id: the flow hash) and keeps no vectors. If the vector
// pool runs dry, a packet that would open a vector goes as a single-packet event of its
// bucket's flow id instead (nothing is dropped for it, and it stays in its flow's order and
// atomic context).
//
// Accounting, in this adapter's lcore row of the OutcomeTable, per ingress port: user-space
// rx (packets, bytes) as bursts are received; the packets of events the scheduler refuses as
// sched_backpressure drops, and of events refused while flushing for removal or shutdown as
// shutdown_flush. While the scheduler has no room (EventPort::has_room) the adapter leaves
// its rx queues alone (a held poll), so overload is dropped by the port, counted there.
//
// Threading: poll() runs on one lcore. add_queue() before the service is placed on an lcore;
// remove_queue() and request_drain() from the control thread while it runs; flush() only
// when no lcore runs it.
//
// Rx hooks (hooks/hook_table.h) run in RxAdapter::receive(), on each received burst between
// Port::rx_burst and the grouping into vectors, after the burst was counted. After a burst a
// hook ran on, the grouping looks for packets a trace marked (core/tracer.h): it records the
// bucket each joins and marks the event that carries it (sub_event_type).
//
// Waiting in vectors is measured (vecflowctl sched, /metrics: mean and p99 per rx adapter): a
// vector sums its packets' arrival times (the TSC of the poll that received each, added once per
// run of a bucket's packets: a multiply-add where the run's fill is written back anyway), and
// when it closes adds its packets to a WaitHistogram at their mean wait. The sum, and so the
// mean, is exact; the histogram is exact per packet for a vector filled by one poll (below
// saturation, every vector) and blurs the spread inside a vector filled over several polls. A
// log of each poll's share per vector cost 3 % of the engine's rate at 1024 flows and more.
//
// Sleeping: the adapter arms the wake-up of every rx queue it polls (Port::arm_wakeup: the
// AF_XDP socket, the DPDK rx interrupt) and its own eventfd, which the control thread writes
// after a removal or drain request. It never sleeps while it holds a partial vector
// (has_pending) or when its scheduler port needs maintenance calls.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <rte_mempool.h>

#include "core/accounting.h"
#include "core/error.h"
#include "core/wait_histogram.h"
#include "runtime/service.h"
#include "sched/scheduler.h"

namespace vecflow {
class HookTable;
class Port;
}  // namespace vecflow

namespace vecflow::sched {

// Flow buckets per rx queue when nothing says otherwise (vecflowd derives its default from the
// number of workers, sched/from_config.h). 16 fill vectors of 64 within a 50 us timeout from
// 20 Mpps on a queue and give a scheduler 16 units to spread over workers.
inline constexpr uint16_t kDefaultFlowBuckets = 16;
inline constexpr uint16_t kMaxFlowBuckets = 1024;
// Rx queues one adapter polls. An adapter per lcore usually polls a handful; this bounds
// the per-poll loop and keeps the queue list a fixed array.
inline constexpr uint16_t kMaxRxQueues = 16;
// Packets asked of a port per rx burst (DPDK's usual; see core/burst.h for the limit).
inline constexpr uint16_t kRxBurst = 32;
// Bursts one poll takes from a queue while they come back full: a busy queue gives up to 128
// packets per poll, which spreads the per-poll costs (the lcore's round, the room check, the
// enqueue) over more packets, as DPDK's own rx adapter does; a queue that returns less than a
// full burst is empty for now.
inline constexpr uint16_t kRxBurstsPerPoll = 4;

struct RxAdapterConfig {
  uint16_t vector_size = 64;        // 1: per-packet events
  uint32_t vector_timeout_us = 50;  // longest a partial vector waits for more packets
  uint8_t queue = 0;                // scheduler queue of the first stage
  SchedType sched_type = SchedType::Atomic;
  // Elements hold >= vector_size mbufs (VectorPool). Without a pool the adapter sends
  // per-packet events, as with vector_size 1.
  rte_mempool* vector_pool = nullptr;
  // Rx hooks (captures ...) run on every received burst; nullptr: none, not even the check.
  HookTable* hooks = nullptr;
  // Open vectors per rx queue, and flow ids (a power of two, 1..kMaxFlowBuckets).
  uint16_t flow_buckets = kDefaultFlowBuckets;
};

struct RxAdapterStats {
  Counter packets;         // received
  Counter events;          // enqueued (vectors and single packets)
  Counter vectors;         // vectors enqueued
  Counter vector_packets;  // packets in those vectors (mean size = vector_packets / vectors)
  Counter closed_full;     // vectors enqueued because they reached vector_size
  Counter closed_drained;  // ... because a poll found their rx queue empty
  Counter closed_timeout;  // ... because their oldest packet reached the timeout
  Counter closed_flush;    // ... because their queue was removed or the adapter drained
  Counter no_vector;       // packets sent alone because the vector pool was empty
  Counter refused;         // events the scheduler refused (their packets counted as drops)
  Counter held;            // polls that left the rx queues alone: the scheduler had no room
  WaitHistogram wait;      // TSC cycles packets spent in vectors, from rx to enqueue
};

// A mempool of rte_event_vectors (rte_event_vector_pool_create), freed with the object.
class VectorPool {
 public:
  // `vectors` should cover every vector that can exist at once: flow_buckets per rx queue,
  // plus the scheduler's in-flight limit, plus one mempool cache per lcore.
  static Result<VectorPool> create(const std::string& name, uint32_t vectors, uint16_t vector_size,
                                   uint32_t cache = 64);
  VectorPool() = default;
  VectorPool(VectorPool&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)) {}
  VectorPool& operator=(VectorPool&& o) noexcept {
    std::swap(pool_, o.pool_);
    return *this;
  }
  ~VectorPool();
  rte_mempool* get() const noexcept { return pool_; }

 private:
  rte_mempool* pool_ = nullptr;
};

class RxAdapter final : public Service {
 public:
  // `producer`: a producer port of the scheduler, used only by this adapter. `outcomes`: the
  // OutcomeTable row of the lcore that will poll the adapter (indexed by PortId).
  RxAdapter(std::string name, EventPort& producer, const RxAdapterConfig& config,
            PortOutcomes* outcomes);
  ~RxAdapter() override;

  // Before the service runs. Fails past kMaxRxQueues or for a queue already polled.
  Result<void> add_queue(Port& port, uint16_t queue);
  // While the service runs: returns once the adapter stopped polling the queue and enqueued
  // its partial vectors. Fails after `timeout` if the adapter is not being polled; the
  // removal then happens at its next poll.
  Result<void> remove_queue(Port& port, uint16_t queue,
                            std::chrono::milliseconds timeout = std::chrono::seconds(1));
  // The same for every queue of `port` this adapter polls (the port is being removed).
  Result<void> remove_port(Port& port,
                           std::chrono::milliseconds timeout = std::chrono::seconds(1)) {
    return remove_queue(port, kAllQueues, timeout);
  }
  // Asks the adapter to stop receiving and enqueue every partial vector; drained() becomes
  // true when done. Shutdown: drain the rx adapters first, then let the workers finish.
  void request_drain() noexcept;
  bool drained() const noexcept { return drained_.load(std::memory_order_acquire); }
  // Enqueues every partial vector now. Only while no lcore polls the adapter.
  void flush() noexcept;

  bool poll() noexcept override;
  bool has_pending() const noexcept override { return open_ > 0; }
  bool arm_wakeup(WakeFds& fds) noexcept override;
  void disarm_wakeup() noexcept override;

  const RxAdapterStats& adapter_stats() const noexcept { return stats_; }
  uint16_t queue_count() const noexcept { return nqueues_; }
  // The scheduler producer port this adapter enqueues through (its index among producers).
  uint16_t producer_index() const noexcept { return producer_.index(); }
  const RxAdapterConfig& config() const noexcept { return cfg_; }

 private:
  struct RxQueue {
    Port* port;
    uint16_t queue;
    uint16_t port_id;
    uint32_t first_slot;  // its buckets' slots: [first_slot, first_slot + flow_buckets)
  };
  // The open vector of one (rx queue, bucket).
  struct Slot {
    rte_event_vector* vec;  // nullptr: none open
    uint64_t opened;        // TSC of the poll that received the first packet
    uint64_t arrivals;      // sum of its packets' arrival times (TSC of their polls)
    uint8_t traced;         // holds a packet a trace follows (core/tracer.h)
    uint16_t port;          // PortId and queue of the rx queue, for removals
    uint16_t queue;
    uint16_t bucket;
    uint16_t prev;  // age list, oldest first; head_ is the list head
    uint16_t next;
  };
  enum class Closed : uint8_t { Full, Drained, Timeout, Flush };
  static constexpr uint16_t kAllQueues = 0xffff;
  struct Request {
    Port* port = nullptr;
    uint16_t queue = 0;  // kAllQueues: every queue of the port
  };

  uint16_t receive(const RxQueue& q, uint64_t now) noexcept;
  // Places a burst in its buckets' vectors; returns the burst's bytes.
  // kTraced: a hook ran on the burst, which may hold packets a trace marked.
  template <bool kTraced>
  uint64_t add_packets(const RxQueue& q, rte_mbuf** pkts, uint16_t n, uint64_t now) noexcept;
  bool open(uint16_t s, const RxQueue& q, uint64_t now) noexcept;
  // A single-packet event of flow id `flow`.
  void emit_packet(rte_mbuf* m, uint32_t flow, uint8_t traced) noexcept;
  void close(uint16_t slot, Closed why, uint64_t now) noexcept;
  bool close_expired(uint64_t now) noexcept;
  void close_queue(const RxQueue& q, uint64_t now) noexcept;
  void close_all(bool (*match)(const Slot&, const Request&), const Request& r) noexcept;
  void enqueue_out(DropReason if_refused) noexcept;
  void drop_event(rte_event& ev, DropReason reason) noexcept;
  void apply_requests() noexcept;
  void list_remove(uint16_t s) noexcept;
  void list_append(uint16_t s) noexcept;

  EventPort& producer_;
  RxAdapterConfig cfg_;
  PortOutcomes* outcomes_;
  uint64_t timeout_tsc_;
  rte_event proto_{};  // the NEW event every emitted event starts from

  std::array<RxQueue, kMaxRxQueues> queues_{};
  uint16_t nqueues_ = 0;
  uint16_t bucket_mask_;
  // kMaxRxQueues blocks of flow_buckets slots, a block per rx queue slot of queues_ (a removed
  // queue's block is free again: used_blocks_), then the age list's head.
  std::unique_ptr<Slot[]> slots_;
  uint16_t head_;
  uint32_t used_blocks_ = 0;
  uint16_t open_ = 0;
  std::array<rte_event, kMaxEventBurst> out_{};
  uint16_t nout_ = 0;
  bool draining_ = false;
  RxAdapterStats stats_;

  // Control thread -> lcore: one removal at a time (control_mutex_), applied at the next poll
  // (request_ is written before request_seq_ is bumped and not touched until it is applied).
  std::mutex control_mutex_;
  Request request_;
  std::atomic<uint32_t> request_seq_{0};
  std::atomic<uint32_t> applied_seq_{0};
  std::atomic<bool> drain_requested_{false};
  std::atomic<bool> drained_{false};
  // Written by the control thread after a request, so that a sleeping adapter takes it.
  int request_fd_ = -1;
  uint16_t armed_ = 0;  // rx queues armed by the last arm_wakeup()
};

}  // namespace vecflow::sched
