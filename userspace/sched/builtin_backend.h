// vecflow's own scheduler: distributed, no scheduling core.
//
// Placement. Every atomic or ordered queue has a table mapping each of kFlowSlots flow slots
// (a hash of the event's flow id) to the worker port that owns it. An enqueue looks the slot
// up and appends the event to a per-destination out-buffer, flushed into the destination's
// input ring when it holds kOutBurst events (and at the end of every producer call and at
// every worker dequeue). Parallel queues spread events round-robin.
//
// Input rings. A worker reads one ring per producer port (single producer, single consumer:
// the common case of a producer's send touches no line the worker writes, see spsc_ring.h)
// and one ring all workers write into. Events one port sends keep their order, as they go
// through one ring. What workers forward shares one ring so that an event caused by another
// (forwarded after it was dequeued) is always behind it: when a flow moves between workers,
// what the old owner forwarded is ahead of what the new owner forwards, in the ring of
// whichever worker owns the flow at the next stage. Producers cause no events, so their
// rings need no such order between them. Every ring holds the whole in-flight limit, so a
// producer never waits for a worker (which may be polled by the same thread): the rings take
// (producers + 1) x workers x 2 x queue_depth x 16 bytes.
//
// Atomic and ordered. A flow's events of a queue are all delivered to its owner, which
// processes them one burst at a time; a worker port releases the flows of a burst at its
// next dequeue. So a flow is on one worker at a time and keeps its order, which is also what
// an ordered queue promises (order restored at the next enqueue): ordered queues are
// scheduled like atomic ones. What that gives up is running the events of one flow on two
// workers at once; doing that would need a reorder point per queue written by every worker,
// the shared hot spot this design exists to avoid. A heavy flow whose order does not matter
// belongs on a parallel queue.
//
// Load balancing by flow migration. Each worker port measures its load (share of time its
// dequeues found work) and, while loaded, samples the flow slots it dequeues. Every
// migration interval a loaded port picks flows and a less loaded target, and moves them:
//
//   Idle ──choose──► Grace ──all ports quiescent──► Drain ──own rings past marks──► Idle
//
//   choose  post HOLD(flows) to the target's control ring, then point the slots at the
//           target. From here new events of those flows go to the target, which holds
//           them (it reads its control ring after reading its input rings, so it learns of
//           the hold before it can see an event sent under the new owner).
//   Grace   some port may have read the old owner just before the change and still be about
//           to send. A membarrier() makes the change visible everywhere at once; then the
//           source waits until every port has passed a quiescent point: a producer between
//           enqueue calls (it flushes before returning), a worker at its next dequeue (it
//           flushes first). After that every event sent under the old owner is in one of
//           the source's input rings, before that ring's `mark` (its producer index read
//           then).
//   Drain   the source keeps working normally until its read position in every input ring
//           passes that ring's mark and the burst holding the last such event is released
//           (its next dequeue). It then
//           sends RELEASE(flows) to the target, which delivers the held events, in order,
//           before anything else it has for them.
//
// The flows never stop: the target queues them while the source finishes what it has.
// Producers take part through a counter they bump around each call, so they need no
// maintenance call and may sleep for as long as they like.
//
// Sleeping workers. A worker port has a doorbell, an eventfd its lcore sleeps on
// (EventPort::arm_wakeup). Arming releases the last burst, flushes the out-buffers and makes
// the port quiescent (the migration grace does not wait for it; it remains a possible
// target, the first one, with no load), then sets `asleep` and looks at its rings one last
// time. Whoever writes to a worker's input or control ring looks at its `asleep` after the
// write and, if set, clears it and writes the eventfd. A full fence on each side between the
// write and the read (Dekker's pattern) means one of the two sees the other: the sleeper
// finds the event, or the writer finds the sleeper. What that costs the busy path is one
// fence and one load of a line nobody writes per ring write (a burst of events), not per
// event. A port in a migration never sleeps: its lcore naps, so the protocol keeps moving.
#pragma once

#include <cstdint>
#include <memory>

#include "core/error.h"
#include "sched/scheduler.h"

namespace vecflow::sched {

// Flow slots per queue: the granularity of placement and migration. Each slot is one byte
// of the queue's owner table, read on every enqueue. 4096 slots keep a queue's table in 4 KiB
// (L1-resident with a few queues) and still split 1k flows nearly one per slot; more slots
// would move load in finer steps but cost cache; fewer would glue unrelated heavy flows
// together so they can only move as one.
inline constexpr uint32_t kFlowSlotBits = 12;
inline constexpr uint32_t kFlowSlots = 1u << kFlowSlotBits;

// Events buffered per destination before they are written to its input ring. A ring write
// costs an atomic compare-and-swap plus a cache-line handover to the consumer; 32 events
// amortise that to well under a cycle per event, while the buffers of one port (32 x 16 B
// per worker) still fit in L1. Larger buffers add latency at low rates (a worker flushes at
// its next dequeue anyway; producers at the end of each call).
inline constexpr uint16_t kOutBurst = 32;

// Credits (the in-flight limit) are taken from the shared pool in loans, so the shared
// counter is touched once per loan instead of on every call. A port keeps at most two loans;
// what it holds beyond is returned. A loan is an eighth of the limit's share per port, within
// these bounds: so at most a quarter of the limit sits parked in ports, and the counter's
// line, which moves between cores on every touch, moves once per 64 to 512 events (at 64,
// a producer and a worker on two cores spent a seventh of the producer's time on it). With
// more ports than the limit allows loans of kMinCreditLoan for, the limit is raised.
inline constexpr int32_t kMinCreditLoan = 64;
inline constexpr int32_t kMaxCreditLoan = 512;

// A loaded port considers giving flows away this often (randomised between half and one and
// a half times, so ports do not all pick the same target at once). Shorter reacts faster to
// shifting load but migrates on noise and spends more time in the protocol; each migration
// costs one membarrier() (a few microseconds, on the source's lcore only).
inline constexpr uint32_t kMigrationIntervalUs = 1000;
// Load is recomputed four times per migration interval, so the load moved by one migration
// shows in the target's figure before the next decision (moving flows on stale load figures
// makes ports trade the same flows back and forth).
inline constexpr uint32_t kLoadIntervalUs = kMigrationIntervalUs / 4;
// Only a port busy at least 70% of the time gives flows away: below that, latency is fine
// and moving flows costs more than it buys. A port above 95% takes none. The source must be
// at least 5 points busier than the target, and the move must not leave the target busier
// than the source was (which would only move the hot spot).
inline constexpr uint16_t kMinSourceLoad = 700;
inline constexpr uint16_t kMaxTargetLoad = 950;
inline constexpr uint16_t kMinImbalance = 50;
// Flows (slots) moved together to one target. More moves load faster per protocol round;
// fewer keeps each round's held events (at the target) small.
inline constexpr uint8_t kMaxFlowsPerMigration = 8;
// Dequeued events whose flow slot a loaded port remembers, to estimate each flow's share of
// its load when choosing what to move.
inline constexpr uint16_t kFlowSamples = 128;
// A busy worker port runs its housekeeping (load, migration choice) every this many
// dequeue calls; an idle one on every call that finds nothing.
inline constexpr uint32_t kHousekeepingCalls = 64;

Result<std::unique_ptr<Scheduler>> create_builtin_scheduler(const SchedulerConfig& config);

}  // namespace vecflow::sched
