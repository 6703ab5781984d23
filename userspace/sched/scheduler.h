// The event scheduler: queues (one per pipeline stage) and ports, over struct rte_event.
//
// Two kinds of port:
//   producer  enqueues NEW events only (rx adapters). Needs no maintenance call from any
//             backend vecflow builds itself; EventPort::needs_maintenance() says when a
//             DPDK backend does (event_dsw), and the rx adapter then calls maintain() on
//             every poll and never sleeps on a descriptor.
//   worker    dequeues from every queue, and enqueues FORWARD (on to the next stage),
//             RELEASE (done) or NEW. A worker port must dequeue regularly: its dequeue call is
//             where it releases the flows it held (implicit release of every event of the
//             previous burst it neither forwarded nor released) and takes part in the
//             scheduler's housekeeping. Worker (worker.h) is the Service that does this.
//
// Threading: each port is used by one thread at a time (the lcore running the service that
// owns it). stats() and inflight() may be called from any thread.
//
// Backpressure: an enqueue returns how many events it accepted, always the first ones (with
// enqueue_new_burst_any, moved to the front); the caller still owns the rest and must drop
// them under a named reason (sched_backpressure). Backends never drop an event they accepted.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/counter.h"
#include "core/error.h"
#include "core/sched_types.h"
#include "sched/event.h"

namespace vecflow {
class Service;
}

namespace vecflow::sched {

// Queues a scheduler offers: pipeline stages, plus the egress queue when a stage is ordered.
inline constexpr uint16_t kMaxQueues = 32;
// Largest burst a caller passes to enqueue/dequeue. Eventdev ports are configured with at
// least this depth; the builtin backend takes any size.
inline constexpr uint16_t kMaxEventBurst = 64;

struct QueueConfig {
  std::string name;
  SchedType type = SchedType::Atomic;
};

// Named trade-offs of the builtin backend. They are here, not in sched/builtin_backend.h,
// because SchedulerConfig carries them for whichever backend it creates; eventdev backends
// ignore them. default_builtin_tuning() (sched/builtin_backend.cc) returns the constants
// sched/builtin_backend.h explains (kMigrationIntervalUs ...). Tests and benchmarks pass
// others (for example, migrating eagerly to exercise the migration protocol).
struct BuiltinTuning {
  uint32_t migration_interval_us;  // least time between two emigrations from one port
  uint32_t load_interval_us;       // how often a port recomputes its load
  uint16_t min_source_load;        // per mille: a port below this never gives flows away
  uint16_t max_target_load;        // per mille: a port above this never receives flows
  uint16_t min_imbalance;          // per mille: source minus target load needed to move
  uint8_t max_flows_per_migration;
};
BuiltinTuning default_builtin_tuning() noexcept;

struct SchedulerConfig {
  SchedBackend backend = SchedBackend::Builtin;
  std::string device;   // eventdev: "event_dsw0", "event_sw0", or a probed device's name
  std::string devargs;  // eventdev vdev arguments
  std::vector<QueueConfig> queues;
  uint16_t producers = 1;
  uint16_t workers = 1;
  // Events admitted (NEW) and not yet released. NEW events beyond it are refused.
  uint32_t inflight_limit = 4096;
  // Packets sent to one worker and not yet dequeued by it beyond which NEW events of its flows
  // are refused (builtin only; 0: no limit). Without it a stalled worker keeps taking events
  // until it holds every credit and every packet buffer, and the other workers' flows stop.
  uint32_t worker_backlog_packets = 0;
  // Events may be event vectors (the rx adapter forms vectors): the backlog counts the packets
  // of each. Otherwise every event is one packet and is counted without being looked at.
  bool vector_events = false;
  BuiltinTuning builtin = default_builtin_tuning();
};

enum class PortRole : uint8_t { Producer, Worker };

// Counters of one port, written only by the thread using the port.
struct alignas(64) PortCounters {
  Counter enq_new;
  Counter enq_forward;
  Counter enq_release;  // explicit RELEASE ops and implicit releases at the next dequeue
  Counter refused;      // events an enqueue did not accept (the caller counted their drop)
  Counter dequeued;
  Counter dequeue_calls;
  Counter empty_dequeues;
  Counter emigrations;                        // builtin: flows this port handed to another
  Counter immigrations;                       // builtin: flows this port received
  std::array<Counter, kMaxQueues> queue_in;   // events enqueued to queue q through this port
  std::array<Counter, kMaxQueues> queue_out;  // events of queue q dequeued by this port
};

class EventPort {
 public:
  EventPort(PortRole role, uint16_t index) : role_(role), index_(index) {}
  virtual ~EventPort() = default;
  EventPort(const EventPort&) = delete;
  EventPort& operator=(const EventPort&) = delete;

  PortRole role() const noexcept { return role_; }
  // Index among the ports of its role (producer i, worker i).
  uint16_t index() const noexcept { return index_; }

  // Every event's op is NEW. Returns how many were accepted (a prefix).
  virtual uint16_t enqueue_new_burst(const rte_event* ev, uint16_t n) noexcept = 0;
  // The same, for a caller that takes refused events back from anywhere in the burst: the
  // accepted ones are moved, in order, to the front of `ev`, the refused ones behind them (in
  // any order).
  // A backend that refuses only the flows of a full worker (builtin, with
  // worker_backlog_packets) keeps accepting the others' events of the same burst. Returns
  // how many were accepted. By default the prefix of enqueue_new_burst.
  virtual uint16_t enqueue_new_burst_any(rte_event* ev, uint16_t n) noexcept {
    return enqueue_new_burst(ev, n);
  }
  // Whether `n` NEW events would find room now. A producer that can leave its input where it
  // is (an rx queue) asks before taking more, so that an overloaded scheduler drops in the
  // NIC's ring, where it costs nothing, instead of after the packets were read, classified
  // and grouped only to be refused. A hint: an enqueue may still refuse. By default true
  // (DPDK eventdevs have no such query; their enqueue is the test).
  virtual bool has_room(uint16_t n) noexcept {
    (void)n;
    return true;
  }
  // Every event's op is FORWARD and each was dequeued through this port. Returns a prefix.
  virtual uint16_t enqueue_forward_burst(const rte_event* ev, uint16_t n) noexcept = 0;
  // Any mix of NEW, FORWARD and RELEASE. Returns a prefix.
  virtual uint16_t enqueue_burst(const rte_event* ev, uint16_t n) noexcept = 0;
  // Worker ports only (a producer port returns 0).
  virtual uint16_t dequeue_burst(rte_event* ev, uint16_t n) noexcept = 0;

  // True if the backend needs maintain() on this port whenever it is not enqueuing or
  // dequeuing (DPDK event_dsw, which lacks RTE_EVENT_DEV_CAP_MAINTENANCE_FREE).
  bool needs_maintenance() const noexcept { return needs_maintenance_; }
  virtual void maintain() noexcept {}

  // Sleeping, for worker ports: the worker's lcore is idle and wants to sleep until something
  // arrives for this port. Does what the next dequeue would do first (releases the last
  // burst, sends what is buffered), arms the port's doorbell and returns it: a descriptor
  // that becomes readable (POLLIN) when an event or a backend message is written for the
  // port. Returns -1 when the backend has no doorbell (the lcore then naps) or when input is
  // already waiting. While armed the port takes no part in the backend's housekeeping, which
  // must not wait for it. Every successful arm is paired with one disarm_wakeup() before the
  // next dequeue, on the same thread.
  virtual int arm_wakeup() noexcept { return -1; }
  virtual void disarm_wakeup() noexcept {}

  // The thread using this worker port stops for good (shutdown, or its service is removed):
  // buffered events are sent and the events of its last burst released. The port must not
  // be used afterwards.
  virtual void park() noexcept {}

  const PortCounters& counters() const noexcept { return counters_; }

 protected:
  PortCounters counters_;
  bool needs_maintenance_ = false;

 private:
  PortRole role_;
  uint16_t index_;
};

struct QueueStats {
  std::string name;
  SchedType type = SchedType::Atomic;
  uint64_t enqueued = 0;
  uint64_t dequeued = 0;
};

struct PortStats {
  PortRole role = PortRole::Worker;
  uint16_t index = 0;
  uint64_t enq_new = 0;
  uint64_t enq_forward = 0;
  uint64_t enq_release = 0;
  uint64_t refused = 0;
  uint64_t dequeued = 0;
  uint64_t dequeue_calls = 0;
  uint64_t empty_dequeues = 0;
  uint64_t emigrations = 0;
  uint64_t immigrations = 0;
  uint32_t load_permille = 0;   // builtin: share of time the port's worker was busy
  uint32_t backlog = 0;         // builtin: events waiting in the port's input ring
  int64_t backlog_packets = 0;  // builtin with worker_backlog_packets: their packets
};

struct SchedulerStats {
  std::string backend;  // "builtin", or the eventdev driver ("event_dsw", "event_sw", ...)
  std::vector<QueueStats> queues;
  std::vector<PortStats> ports;  // producers, then workers
  uint64_t inflight = 0;
  uint64_t migrations = 0;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // "builtin", or the eventdev driver name.
  virtual std::string_view backend() const noexcept = 0;

  uint16_t queue_count() const noexcept { return static_cast<uint16_t>(queues_.size()); }
  const QueueConfig& queue(uint8_t q) const noexcept { return queues_[q]; }
  SchedType queue_type(uint8_t q) const noexcept { return types_[q]; }
  // The queue type table, for per-event lookups on the data path.
  const std::array<SchedType, kMaxQueues>& queue_types() const noexcept { return types_; }

  virtual uint16_t producer_count() const noexcept = 0;
  virtual uint16_t worker_count() const noexcept = 0;
  virtual EventPort& producer(uint16_t i) noexcept = 0;
  virtual EventPort& worker(uint16_t i) noexcept = 0;

  // A service the application must run on some lcore for the scheduler to move events
  // (event_sw's scheduling core), or nullptr when the backend needs none. It refers to the
  // scheduler: take it off its lcore before the scheduler is destroyed.
  virtual std::shared_ptr<Service> service() const noexcept { return nullptr; }

  // Events admitted and not yet released (approximate while ports run; exact when idle): what
  // the ports' counters say, NEW admitted minus released, for every backend.
  uint64_t inflight() const noexcept;
  virtual SchedulerStats stats() const = 0;

 protected:
  explicit Scheduler(std::vector<QueueConfig> queues);
  // Sums the per-port counters into queue and port statistics.
  void fill_common_stats(SchedulerStats& s) const;

 private:
  std::vector<QueueConfig> queues_;
  std::array<SchedType, kMaxQueues> types_{};
};

// Creates the configured backend. Errors name what to change in the appliance file.
Result<std::unique_ptr<Scheduler>> create_scheduler(const SchedulerConfig& config);

}  // namespace vecflow::sched
