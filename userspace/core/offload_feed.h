// The worker side of flow offload to XDP (issue 40): the packets the pipeline transmitted
// whose flows the XDP steering program could forward from now on, handed to the control
// thread, which installs the entries (steer/flow_offloader.h).
//
// A worker cannot install an entry itself: that is a bpf() system call, and the per-packet path
// makes none. So each worker lcore offers what it decided into a ring of its own (single
// producer, single consumer: no lock), and the control thread takes the offers. An offer is
// made for a packet that
//   - was transmitted, is not a copy vecflowd made (a mirror copy, an ICMP error), and is not
//     followed by a trace;
//   - no stage kept in user space (kMetaFlagKeep: a stage must see its flow's later packets);
//   - if a stage tracked its connection (kMetaFlagTracked), that stage noted what it arrived
//     as and its session (note()): a NAT may have changed its tuple since;
//   - entered on a port with a steering program and leaves on a port with a kernel interface
//     (set_ports());
//   - has a shape the XDP fast path forwards: untagged IPv4 without options or IPv6 without
//     extension headers, not a fragment, not a TCP FIN or RST (user space must see those).
// A flow offered once is not offered again by the same lcore for kRepeatMs, so that the
// packets that still reach user space between the offer and the entry's installation (and a
// flow the control thread refused) cost a parse and a table read, not an offer each.
//
// The feed also counts changes to what the stages decide (changed(): routes, neighbours,
// rules): an entry installed before a change is stale, and the control thread takes the
// offloaded flows back to user space when the count moves. A route or a neighbour concerns
// the flows of its IP version only (a next hop is of its route's version), so each version
// has its own count: a fresh link's IPv6 routes do not take IPv4 flows back.
//
// The feed also carries the other direction: the offload gates of each ingress port's steering
// program (vecflow/offload_abi.h). A packet the program lifted under a gate is settled here by
// the worker that sent or dropped it (settle()), which opens the gate when it was the last of
// its flow still in user space.
//
// Threading: offer() and settle() on worker lcores (offer() on the lcore of its slot);
// everything else on the control thread. They never allocate, block or log.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include "core/counter.h"
#include "core/error.h"
#include "vecflow/flow.h"
#include "vecflow/offload_abi.h"

namespace vecflow {

// Which flows a change to what stages decide concerns: one IP version's (a route, a
// neighbour), or all (a rule). The counts of both versions live in one word, IPv4's in its low
// half, IPv6's in its high half, so that a worker reads them in one load.
enum class OffloadChange : uint64_t { Ipv4 = 1, Ipv6 = uint64_t(1) << 32, Any = Ipv4 | Ipv6 };

inline OffloadChange offload_change_of(uint8_t ip_version) noexcept {
  return ip_version == 6 ? OffloadChange::Ipv6 : OffloadChange::Ipv4;
}
// The count of `ip_version`'s changes in a word of changes().
inline uint32_t offload_changes_of(uint64_t changes, uint8_t ip_version) noexcept {
  return ip_version == 6 ? uint32_t(changes >> 32) : uint32_t(changes);
}

// No connection-tracking session (a stateless pipeline).
inline constexpr uint32_t kNoOffloadSession = 0xffffffff;

// One decided flow: its key as the XDP program parses it (the packet as it arrived), and what
// its packet left with: MACs, and its tuple (after NAT, where a stage translated it).
struct OffloadOffer {
  vf_flow_key key{};
  vf_flow_key leaves{};
  std::array<uint8_t, 6> dst_mac{};
  std::array<uint8_t, 6> src_mac{};
  uint16_t in_port = 0;                  // PortId
  uint16_t out_port = 0;                 // PortId
  uint32_t session = kNoOffloadSession;  // the conntrack session that vouched for it
  uint32_t steer_rule = 0;               // PacketMeta::steer_rule: the steering rule that lifted it
  uint64_t changes = 0;                  // changes() when the run that decided it began
};
static_assert(sizeof(OffloadOffer) % 4 == 0, "rte_ring elements are multiples of 4 bytes");

// One worker lcore's counts (single writer).
struct alignas(64) OffloadFeedLcoreStats {
  Counter offered;    // offers put in the ring
  Counter ring_full;  // offers lost to a full ring (the flow is offered again later)
};

struct OffloadFeedStats {
  uint64_t offered = 0;
  uint64_t ring_full = 0;
};

// The conntrack stage's side of flow offload: the sessions of offloaded flows, whose packets
// no longer reach it, stay alive while XDP forwards them.
class OffloadSessions {
 public:
  virtual ~OffloadSessions() = default;
  // Any thread: a frame of `session`'s flow (protocol `l4_proto`) was forwarded in XDP lately.
  virtual void keep_alive(uint32_t session, uint8_t l4_proto) noexcept = 0;
};

class OffloadFeed {
 public:
  // Offers waiting in one lcore's ring at most: a burst of new flows offers them faster than
  // the control lcore installs them (a system call each), and an offer lost to a full ring
  // comes again only with a later packet of its flow, kRepeatMs apart at the soonest. At 512,
  // 40k of the 104k offers of 65536 primed flows were lost (bench log 2026-12-06-offload-rows);
  // 4096 offers of 112 bytes are 448 KiB a worker.
  static constexpr unsigned kRingSize = 4096;
  // A flow is offered again by the same lcore after this long at the soonest.
  static constexpr unsigned kRepeatMs = 100;

  // `slots`: worker lcores (StageContext::lcore_slots); `ports`: PortIds in use.
  static Result<std::unique_ptr<OffloadFeed>> create(unsigned slots, size_t ports);
  ~OffloadFeed();
  OffloadFeed(const OffloadFeed&) = delete;
  OffloadFeed& operator=(const OffloadFeed&) = delete;

  // Control thread. Whether workers make offers at all (offload.enabled).
  void set_enabled(bool on) noexcept { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  // Which ports a flow may enter by (a steering program is on their interface) and leave by
  // (they have a kernel interface the program can redirect to).
  void set_port(uint16_t port, bool ingress, bool egress) noexcept;

  // Worker lcore of `slot`: offers the flows of the packets in pkts[0, n) that qualify (see
  // the header). `now_tsc`: the run's clock; `changes`: changes() read before the run's
  // stages read their tables, so that an offer decided by tables since replaced is known
  // stale.
  void offer(unsigned slot, rte_mbuf* const* pkts, size_t n, uint64_t now_tsc,
             uint64_t changes) noexcept;

  // Worker lcore of `slot`, from a stage that tracks connections (kMetaFlagTracked): `m`
  // arrived as `arrived` and its session is `session`, in the run that began at `run_tsc`
  // (StageEnv::now()). offer() takes the flow's key from here for a packet so flagged (a NAT
  // changed its tuple since), and makes no offer when the note is not this run's (another
  // packet's took its place, or the stage ran in another group's run: its groups must be
  // fused for its flows to be offloaded).
  void note(unsigned slot, const rte_mbuf* m, const vf_flow_key& arrived, uint32_t session,
            uint64_t run_tsc) noexcept {
    Origin& o = lanes_[slot]->origins[origin_slot(m)];
    o.m = m;
    o.run = run_tsc;
    o.key = arrived;
    o.session = session;
  }
  // The sessions of offloaded flows (the conntrack stage; nullptr: none).
  void set_sessions(OffloadSessions* s) noexcept { sessions_.store(s, std::memory_order_release); }
  void keep_alive(uint32_t session, uint8_t l4_proto) noexcept {
    if (OffloadSessions* s = sessions_.load(std::memory_order_acquire))
      s->keep_alive(session, l4_proto);
  }

  // Control thread: the gates of `port`'s steering program (VF_OFFLOAD_GATES of them, shared
  // with it through mmap), or nullptr. They must stay mapped while workers run.
  void set_gates(uint16_t port, vf_offload_gate* gates) noexcept {
    if (port < nports_) gates_[port].store(gates, std::memory_order_release);
  }
  // Any worker: packet `seq` of `gate`, which entered on `port`, was sent, handed to the kernel
  // or dropped. If it is the last one the program lifted, the gate opens.
  void settle(uint16_t port, uint16_t gate, uint32_t seq) noexcept {
    vf_offload_gate* g = port < nports_ ? gates_[port].load(std::memory_order_acquire) : nullptr;
    if (g == nullptr || gate >= VF_OFFLOAD_GATES) return;
    std::atomic_ref<__u64> lifted(g[gate].lifted);
    __u64 now = lifted.load(std::memory_order_acquire);
    // Open already, or another frame was lifted after this one (the program's numbers are
    // 64-bit; the stamp carries the low 32).
    if ((now & VF_GATE_OPEN) || uint32_t(now - 1) != seq) return;
    lifted.compare_exchange_strong(now, now | VF_GATE_OPEN, std::memory_order_acq_rel,
                                   std::memory_order_relaxed);
  }

  // Control thread: moves up to out.size() offers into `out`; returns how many.
  size_t take(std::span<OffloadOffer> out) noexcept;

  // Any thread: what stages decide for the flows of `which` has changed (a route, a neighbour,
  // a rule). Called after the new table is in force: a run that reads the new count reads the
  // new table.
  void changed(OffloadChange which = OffloadChange::Any) noexcept {
    changes_.fetch_add(uint64_t(which), std::memory_order_acq_rel);
  }
  uint64_t changes() const noexcept { return changes_.load(std::memory_order_acquire); }

  OffloadFeedStats stats() const noexcept;

 private:
  // What one lcore last offered, by flow hash: the hash and when (TSC).
  struct Recent {
    uint32_t hash;
    uint64_t tsc;
  };
  static constexpr unsigned kRecentSlots = 1024;
  // The notes of one lcore's run, by packet (a run holds at most 128 packets).
  struct Origin {
    const rte_mbuf* m = nullptr;
    uint64_t run = 0;
    vf_flow_key key{};
    uint32_t session = kNoOffloadSession;
  };
  static constexpr unsigned kOrigins = 256;
  static unsigned origin_slot(const rte_mbuf* m) noexcept {
    return unsigned((reinterpret_cast<uintptr_t>(m) >> 6) * 0x9e3779b97f4a7c15ull >> 56);
  }
  struct FreeMemory {
    void operator()(void* p) const noexcept;
  };
  struct Lane {
    rte_ring* ring = nullptr;  // in `memory`
    std::unique_ptr<void, FreeMemory> memory;
    std::array<Recent, kRecentSlots> recent{};
    std::array<Origin, kOrigins> origins{};
    OffloadFeedLcoreStats stats;
  };

  OffloadFeed() = default;
  bool qualifies(const Lane& lane, rte_mbuf* m, uint64_t run_tsc, OffloadOffer& out) const noexcept;

  static constexpr uint8_t kIngress = 1;
  static constexpr uint8_t kEgress = 2;

  std::atomic<bool> enabled_{false};
  std::atomic<uint64_t> changes_{0};
  std::atomic<OffloadSessions*> sessions_{nullptr};
  uint64_t repeat_tsc_ = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> ports_;
  std::unique_ptr<std::atomic<vf_offload_gate*>[]> gates_;
  size_t nports_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  size_t next_lane_ = 0;  // take() starts where it stopped, so no lane waits behind another
};

}  // namespace vecflow
