// Packet trace (`vecflowctl trace`): the path of a few chosen packets through every step of the
// data path, written by the lcores that handle them and read by the control thread.
//
// How a packet is chosen and followed:
//   rx       a trace hook on the ingress port's rx queues (hooks/) offers each burst to
//            Tracer::mark(), which takes the next packets that pass the filter until `count`
//            are taken: it sets kMetaFlagTrace and PacketMeta::trace_id and records the frame's
//            first bytes with its port, queue, flow hash and steering rule
//   vector   the rx adapter, told by the hook that the burst holds marked packets, records the
//            flow bucket each one joins and marks the event that carries it
//            (rte_event::sub_event_type = kEventTraced, the field DPDK leaves to applications)
//   dequeue  the worker, seeing a marked event, records queue, flow id and vector size
//   stage    after each stage the worker records the packet's verdict, drop reason, egress
//            port and next hop, and the stage's own words (Stage::describe)
//   tx       the trace's tx hook records the port and queue a marked packet is handed to;
//            the tx adapter records a drop at transmit (tx_full, link_down ...)
//
// Cost when no trace is armed: no hook is installed (the hook tables' pointer load and branch,
// already paid), one byte of every vector event written (sub_event_type, in the word written
// anyway), and one predictable branch per stage call and per gathered burst. A marked packet
// costs its records; other packets of a marked event a flag test each.
//
// Records live in a fixed ring claimed with one atomic add each, written by any lcore, and
// published by a release store of their trace id; the control thread reads them whenever asked.
// No allocation, lock or system call on the data path. A new trace (arm) starts a new
// generation: packets of an earlier trace still in flight carry the old generation in their
// trace id, and their records are ignored.
//
// One tracer per process (vecflowd runs one appliance): the data-path parts reach it through
// tracer() rather than through every constructor between the control plane and them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <rte_bpf.h>
#include <rte_cycles.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include "core/packet.h"

namespace vecflow::trace {

// rte_event::sub_event_type of an event that carries marked packets.
inline constexpr uint8_t kEventTraced = 1;

// Packets one trace follows at most: trace ids hold the number in their low 10 bits, the
// generation in the upper 6.
inline constexpr uint32_t kMaxPackets = 1000;
inline constexpr uint32_t kMaxRecords = 16384;
// Frame bytes kept from the rx step: Ethernet with two VLAN tags, IPv6 and a TCP header.
inline constexpr uint32_t kFrameBytes = 96;
inline constexpr uint32_t kTextBytes = 96;

enum class Step : uint8_t { Rx, Vector, Dequeue, Stage, Tx, TxDrop };

// Record::extra of a Stage step whose packet the stage dropped under `reason` and answered
// with an ICMP error built in its buffer (StageEnv::answered): the error leaves on `port`.
inline constexpr uint32_t kTraceAnswered = 1;

struct Record {
  uint64_t tsc = 0;
  uint16_t lcore = 0;
  Step step = Step::Rx;
  uint8_t verdict = 0;  // Stage: Verdict after the stage
  uint16_t port = 0;    // Rx, Vector: ingress port; Stage, Tx, TxDrop: egress (or kNoPort)
  uint16_t queue = 0;   // Rx, Vector, Tx: port queue; Dequeue: scheduler queue
  uint16_t index = 0;   // Vector: bucket; Dequeue: flow id; Stage: stage index
  uint16_t reason = 0;  // Stage, TxDrop: DropReason
  uint32_t value = 0;   // Rx: flow hash; Vector: position; Dequeue: packets; Stage: next hop
  uint32_t extra = 0;   // Rx: steering rule; Vector: kEventTraced; Dequeue: sched type;
                        // Stage: kTraceAnswered
  uint32_t length = 0;  // Rx: frame length
  uint16_t bytes = 0;   // Rx: bytes in `data`; Stage: bytes of text in `data`
  std::array<uint8_t, kFrameBytes> data{};
};

struct PacketTrace {
  uint32_t number = 0;  // 1..count, in the order the packets were taken
  std::vector<Record> steps;
};

class Tracer {
 public:
  Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // ---- control thread ----
  // Starts a trace of the next `count` (1..kMaxPackets) packets the rx hooks offer that pass
  // `filter` (a compiled pcap expression; nullptr: every packet), and a new generation: the
  // previous trace's records are no longer read. The caller installs the hooks after this and
  // keeps `filter` alive until its rx hooks are removed.
  void arm(uint32_t count, const rte_bpf* filter) noexcept;
  // Takes no more packets. The caller removes its rx hook after this; records still come in
  // for packets in flight.
  void stop_marking() noexcept;
  // Packets taken so far and asked for.
  uint32_t taken() const noexcept;
  uint32_t asked() const noexcept { return asked_.load(std::memory_order_relaxed); }
  // Records of the current trace overwritten by later ones (more than kMaxRecords).
  uint64_t lost() const noexcept;
  uint64_t armed_tsc() const noexcept { return armed_tsc_; }
  // The current trace's records, grouped by packet, each packet's in time order.
  std::vector<PacketTrace> read() const;

  // ---- data path ----
  // Rx hook: marks the packets of a burst the trace takes; returns whether it marked any.
  bool mark(std::span<rte_mbuf* const> pkts, uint16_t port, uint16_t queue) noexcept;
  // A step of a marked packet (flag tested by the caller).
  void add(rte_mbuf* m, Record r) noexcept {
    r.tsc = rte_rdtsc();
    r.lcore = static_cast<uint16_t>(rte_lcore_id());
    append(meta(m).trace_id, r);
  }

 private:
  void append(uint16_t id, const Record& r) noexcept;

  // A ring: records of earlier traces are overwritten once kMaxRecords newer ones came. The
  // writer clears `id`, writes the record and publishes its trace id; the reader takes a
  // record only if it read the same nonzero id before and after copying it.
  struct Slot {
    std::atomic<uint32_t> id{0};  // 0: empty or being written; else kWritten | trace id
    Record rec;
  };
  static constexpr uint32_t kWritten = 1u << 16;

  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint32_t> next_slot_{0};
  std::atomic<uint32_t> taken_{0};
  std::atomic<uint32_t> asked_{0};
  std::atomic<uint32_t> first_slot_{0};  // next_slot_ when the current trace was armed
  std::atomic<uint32_t> generation_{0};
  std::atomic<const rte_bpf*> filter_{nullptr};
  uint64_t armed_tsc_ = 0;
};

Tracer& tracer() noexcept;

inline bool marked(const rte_mbuf* m) noexcept {
  return (meta(const_cast<rte_mbuf*>(m)).flags & kMetaFlagTrace) != 0;
}

// The generation and packet number of a trace id.
inline constexpr uint16_t kNumberBits = 10;
inline uint16_t trace_id(uint32_t generation, uint32_t number) noexcept {
  return static_cast<uint16_t>((generation & 0x3f) << kNumberBits | number);
}

}  // namespace vecflow::trace
