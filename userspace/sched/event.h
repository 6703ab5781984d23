// The event every backend carries: DPDK's 16-byte struct rte_event, so a stage never knows
// whether the builtin scheduler or an eventdev moved it. What vecflow puts in it:
//
//   flow_id        the packet's flow id (m->hash.rss, low 20 bits): the unit of atomicity
//   queue_id       the scheduler queue = the pipeline stage the event is going to
//   sched_type     that queue's schedule type (the backends fill it from the queue)
//   op             NEW from producers; FORWARD / RELEASE from the worker that dequeued it
//   event_type     RTE_EVENT_TYPE_ETHDEV_VECTOR: event_ptr is an rte_event_vector of mbufs of
//                  one flow from one ingress port; RTE_EVENT_TYPE_ETHDEV: mbuf is one packet;
//                  RTE_EVENT_TYPE_CPU: u64 is opaque (tests, benchmarks, control events)
//
// Ownership: whoever holds an event owns its payload. A producer whose enqueue is refused
// still owns the refused events and must count and free them; a worker that finishes an event
// hands the payload to its EgressSink (the TxAdapter), which frees or transmits every packet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <rte_eventdev.h>
#include <rte_mbuf.h>

#include "core/sched_types.h"

namespace vecflow::sched {

// A queue's SchedType is stored into rte_event.sched_type as it is.
static_assert(static_cast<uint8_t>(SchedType::Atomic) == RTE_SCHED_TYPE_ATOMIC);
static_assert(static_cast<uint8_t>(SchedType::Ordered) == RTE_SCHED_TYPE_ORDERED);
static_assert(static_cast<uint8_t>(SchedType::Parallel) == RTE_SCHED_TYPE_PARALLEL);

// rte_event.flow_id is a 20-bit field.
inline constexpr uint32_t kFlowIdMask = (1u << 20) - 1;

inline bool is_vector(const rte_event& ev) noexcept {
  return ev.event_type == RTE_EVENT_TYPE_ETHDEV_VECTOR ||
         ev.event_type == RTE_EVENT_TYPE_CPU_VECTOR;
}

inline bool is_packet(const rte_event& ev) noexcept {
  return ev.event_type == RTE_EVENT_TYPE_ETHDEV;
}

// The mbuf array of a vector. rte_event_vector declares it as a zero-length array, which the
// compiler's bounds checks treat as empty; the pool element holds the mbuf pointers after
// the header.
inline rte_mbuf** vector_mbufs(rte_event_vector* v) noexcept {
  return reinterpret_cast<rte_mbuf**>(reinterpret_cast<char*>(v) + sizeof(rte_event_vector));
}
static_assert(offsetof(rte_event_vector, mbufs) == sizeof(rte_event_vector));

// The packets an event carries: the vector's mbufs, the one mbuf, or none (CPU events).
inline std::span<rte_mbuf*> packets(rte_event& ev) noexcept {
  if (is_vector(ev)) return {vector_mbufs(ev.vec) + ev.vec->elem_offset, ev.vec->nb_elem};
  if (is_packet(ev)) return {&ev.mbuf, 1};
  return {};
}

// The first 64 bits of an event (flow id, types, op, queue ...) with its sched_type replaced,
// computed in a register so the caller can store the event as two whole words.
inline uint64_t with_sched_type(uint64_t word, SchedType t) noexcept {
  rte_event e;
  e.event = word;
  e.sched_type = static_cast<uint8_t>(t);
  return e.event;
}

// The same with flow_id and event_type replaced: building events from a prototype.
inline uint64_t with_flow(uint64_t word, uint32_t flow_id, uint8_t event_type) noexcept {
  rte_event e;
  e.event = word;
  e.flow_id = flow_id & kFlowIdMask;
  e.event_type = event_type;
  return e.event;
}

// What a worker's handler writes into an event it processed (see worker.h).
// On to stage `queue`: the event keeps its flow id, the scheduler fills the schedule type.
inline void forward_to(rte_event& ev, uint8_t queue) noexcept {
  ev.queue_id = queue;
  ev.op = RTE_EVENT_OP_FORWARD;
}
// Done with the pipeline: every packet has its final verdict (core/packet.h).
inline void finish(rte_event& ev) noexcept {
  ev.op = RTE_EVENT_OP_RELEASE;
}

// Returns a vector (not its packets) to the mempool it came from.
inline void free_vector(rte_event_vector* v) noexcept {
  rte_mempool_put(rte_mempool_from_obj(v), v);
}

// Frees every packet of the event and its vector. CPU events carry nothing to free.
void free_payload(rte_event& ev) noexcept;

}  // namespace vecflow::sched
