// The worker side of the scheduler: a Service that dequeues a burst for one worker port, hands
// it to an EventHandler, sends the events the handler forwarded back to the scheduler, and
// gives the finished ones to an EgressSink (the TxAdapter). vecflowd's handler is the
// pipeline's (datapath/pipeline_handler.h).
//
// Contract of process(): every event arrives finished (op RELEASE); the handler forwards the
// ones that go on to another queue (sched::forward_to: op FORWARD, same flow). How it treats
// the packets is its own: vecflowd's runs each stage group once over the packets of many
// events and hands the packets a stage decided (Transmit, Kernel) to the TxAdapter itself, so
// that a forwarded event carries on only its undecided packets. Whatever packets a finished
// event still carries go to the EgressSink, which acts on each one's verdict in PacketMeta
// (core/packet.h); a packet left at Continue is dropped as bad_verdict.
//
// Ordered stages: an event finished straight out of an ordered queue would leave in the
// order its worker happened to finish it. When the queue list has an egress queue (atomic,
// added by stage_queues() whenever a stage is ordered), the Worker forwards such events
// there, where the scheduler has restored their order, and finishes them when they come back.
// The handler never sees the egress queue.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/counter.h"
#include "core/drop_reason.h"
#include "runtime/service.h"
#include "sched/scheduler.h"

namespace vecflow::sched {

class EventHandler {
 public:
  virtual ~EventHandler() = default;
  // Runs on the worker's lcore: no allocation, no lock, no exception.
  virtual void process(std::span<rte_event> events) noexcept = 0;
  // Every poll, before the dequeue: work the handler has that no event brings (packets held
  // for later that are due now), given to the EgressSink. Returns whether there was any.
  virtual bool tick() noexcept { return false; }
  // Whether the handler holds packets that tick() will give back: a worker that sleeps then
  // wakes every kHeldWakeUs to call it.
  virtual bool holding() const noexcept { return false; }
  // The Worker parks: everything the handler still holds goes to the EgressSink.
  virtual void stop() noexcept {}
};

// Where finished events go. The TxAdapter is the one vecflowd uses; tests use checkers.
class EgressSink {
 public:
  virtual ~EgressSink() = default;
  // Takes ownership of the events' payloads.
  virtual void finish(std::span<rte_event> events) noexcept = 0;
  // Takes ownership of payloads the scheduler refused; drops them, counted under `reason`.
  virtual void drop(std::span<rte_event> events, DropReason reason) noexcept = 0;
  // End of a worker poll: send whatever is buffered.
  virtual void flush() noexcept = 0;
};

// Forwards the scheduler refused are retried this many times before their packets are
// dropped as sched_backpressure. The builtin backend never refuses a forward; a DPDK device
// does when a port's ring is full, which a few immediate retries rarely fix (the device's
// scheduler has to run first) but which drops no packet for a momentary fill.
inline constexpr uint32_t kForwardRetries = 4;

// How long a worker with held packets (EventHandler::holding) may sleep: they wait for a next
// hop to resolve, an ARP or ND round trip of tens of microseconds to seconds. Shorter sends
// them sooner after the answer; longer wakes an idle lcore less often while something is
// unresolved.
inline constexpr uint64_t kHeldWakeUs = 100;

// The burst a worker dequeues. 32 is DPDK's usual: enough to amortise the per-call cost,
// small enough that one burst of vectors stays in L2 while a stage runs over it.
inline constexpr uint16_t kWorkerBurst = 32;

struct WorkerStats {
  Counter events;      // dequeued
  Counter forwarded;   // on to another stage
  Counter finished;    // handed to the sink
  Counter via_egress;  // ordered stages' finished events sent through the egress queue
  Counter refused;     // forwards dropped after kForwardRetries
};

class Worker final : public Service {
 public:
  // `port` must be a worker port of `sched`; the Worker is the only user of it, and of the
  // handler and sink, while it is on an lcore. `egress_queue`: see above.
  Worker(std::string name, Scheduler& sched, EventPort& port, EventHandler& handler,
         EgressSink& sink, std::optional<uint8_t> egress_queue, uint16_t burst = kWorkerBurst);

  bool poll() noexcept override;
  // Sleeps on the scheduler port's doorbell (EventPort::arm_wakeup).
  bool arm_wakeup(WakeFds& fds) noexcept override;
  void disarm_wakeup() noexcept override;
  // Called after the service was removed from its lcore, before the scheduler stops: sends
  // buffered work (the handler's held packets too) and releases the port's last burst.
  void park() noexcept;

  const WorkerStats& worker_stats() const noexcept { return stats_; }
  // The scheduler worker port this Worker dequeues from (its index among worker ports).
  uint16_t port_index() const noexcept { return port_.index(); }

 private:
  void send(rte_event* ev, uint16_t n, bool only_forwards) noexcept;

  EventPort& port_;
  EventHandler& handler_;
  EgressSink& sink_;
  const std::array<SchedType, kMaxQueues>& types_;
  int egress_;  // -1: none
  uint16_t burst_;
  WorkerStats stats_;
};

}  // namespace vecflow::sched
