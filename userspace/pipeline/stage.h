// A pipeline stage: one step of forwarding (acl, route, neighbour, l2 ...) that runs on whole
// vectors of packets and records its decision in each packet's PacketMeta (core/packet.h):
//
//   Continue   on to the next stage (the packet may carry out_port/nexthop for later stages)
//   Transmit   final: send on out_port now, skipping the remaining stages
//   Kernel     final: hand to the kernel stack of the ingress interface
//   Drop       final: drop, counted under drop_reason
//   Held       kept by the stage for later (StageEnv::hold), given back through tick()
//
// The stage is virtual per vector; the per-packet step is inlined through PerPacketStage
// (a CRTP helper, after FastClick's ClassifyElement), so there is no virtual call per packet.
//
// Threading: process() runs on worker lcores, possibly on several at once for the same stage
// (parallel and ordered queues, or a fused group on every worker), so anything it writes is
// per lcore (indexed by StageEnv::slot()) or atomic. It never allocates, blocks, throws or
// logs per packet. Tables it reads are replaced by the control thread under RCU (Qsbr): a
// stage loads a table pointer once per vector and holds it only until process() returns.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include "config/config.h"
#include "core/accounting.h"
#include "core/burst.h"
#include "core/counter.h"
#include "core/error.h"
#include "core/net.h"
#include "core/packet.h"
#include "core/vlan.h"
#include "runtime/service.h"

namespace vecflow {

class FlowHashRewrite;

class Qsbr;
class CopySink;
class PipelineWorker;
class NeighbourTable;
class KernelSync;
class PortMtuTable;
class OffloadFeed;

// What a stage knows about a port.
struct PortInfo {
  std::string name;
  MacAddress mac;         // the port's own address: the source MAC of frames it sends
  std::string interface;  // kernel interface behind the port, "" if none (pure DPDK port)
  VlanTags vlan{};        // a VLAN port's (io/vlan/vlan_port.h) tags on its link; none for others
};

// The addresses of a port's kernel interface (the source of the ICMP errors it sends, the
// address a masquerading NAT leaves from).
struct PortAddresses {
  std::optional<IpAddress> v4;
  std::optional<IpAddress> v6;
};

// A stage that follows the ports' kernel addresses (KernelSync::follow_addresses): given the
// whole set, by PortId, at registration and after every change (control thread).
class PortAddressFollower {
 public:
  virtual void set_port_addresses(std::vector<PortAddresses> addresses) = 0;

 protected:
  ~PortAddressFollower() = default;
};

// Everything a stage factory may use while it builds a stage (control thread).
struct StageContext {
  std::vector<PortInfo> ports;  // indexed by PortId
  // The ports' MTUs as the data path follows them; nullptr: unknown (no limit). Outlives the
  // stages.
  const PortMtuTable* mtus = nullptr;
  unsigned lcore_slots = 1;  // per-lcore counters are sized for this many lcores
  Qsbr* qsbr = nullptr;      // grace periods for replacing tables; required
  std::string capture_dir;   // mirror files are written only below this directory
  config::IcmpSection icmp;  // the limits of the ICMP errors stages send (icmp_responder.h)
  uint32_t steer_rules = 0;  // steering rules in the file (PacketMeta::steer_rule < this)
  std::vector<config::VrfConfig> vrfs;  // the file's VRFs (the route stage's tables)
  // A stage built so far may set PacketMeta::vrf (a conntrack stage: a session's VRF); the
  // route stages after it read that field, the others need not.
  bool session_vrfs = false;
  // Shared by the stages of one pipeline; set by Pipeline::build.
  NeighbourTable* neighbours = nullptr;
  KernelSync* kernel = nullptr;  // nullptr when no port has a kernel interface
  // Flow offload's feed (core/offload_feed.h), nullptr in a pipeline without one: stages
  // that say offloadable() tell it when their tables change.
  OffloadFeed* offload = nullptr;

  // The PortId of a port name; kNoPortIndex if there is none (the configuration loader has
  // checked every name a stage's configuration gives).
  static constexpr uint16_t kNoPortIndex = 0xffff;
  uint16_t port_index(const std::string& name) const noexcept;
};

// Counters of one stage on one lcore, as VPP's `show runtime` shows them.
struct alignas(64) StageLcoreStats {
  Counter calls;    // vectors processed
  Counter packets;  // packets in those vectors
  Counter cycles;   // TSC cycles spent in process()
};

struct StageStats {
  uint64_t calls = 0;
  uint64_t packets = 0;
  uint64_t cycles = 0;
};

// The worker lcore a stage runs on, for the duration of one process() or tick() call.
class StageEnv {
 public:
  // `outcomes`: the lcore's row of the OutcomeTable (one PortOutcomes per port), where held
  // packets are counted.
  StageEnv(unsigned slot, CopySink& sink, PipelineWorker& runner, PortOutcomes* outcomes) noexcept
      : slot_(slot), sink_(&sink), runner_(&runner), outcomes_(outcomes) {
    copies_.clear();
    released_.clear();
  }

  // Index of per-lcore state (0 .. StageContext::lcore_slots-1).
  unsigned slot() const noexcept { return slot_; }
  // TSC when the run started: one clock read per run, shared by its stages (0 in tick()).
  uint64_t now() const noexcept { return now_; }

  // Hands over a packet the stage made (a mirror copy: verdict Transmit, out_port set,
  // kMetaFlagCopy). The runner passes it to CopySink::copies.
  void emit_copy(rte_mbuf* m) noexcept {
    copies_.push(m);
    if (copies_.full()) flush_copies();
  }

  // Turns a packet of the vector into one vecflow made, an error message built in its buffer
  // (pipeline/icmp_error.h) with verdict Transmit: the packet that entered is counted as
  // dropped under `reason` at its ingress port now, and the answer is charged to no port
  // (kMetaFlagCopy), so that rx = tx + kernel + drops still counts what entered.
  void answered(rte_mbuf* m, DropReason reason) noexcept {
    outcomes_[m->port].drops.add(reason);
    PacketMeta& pm = meta(m);
    pm.flags |= kMetaFlagCopy;
    pm.drop_reason = static_cast<uint16_t>(reason);  // what a trace shows (kTraceAnswered)
  }

  // Keeps a packet of the vector for later (process() only): its verdict becomes Held, the
  // run forgets it, and the stage owns it until it gives it back through release(). Counted
  // as held at its ingress port meanwhile, so the accounting adds up while it waits.
  void hold(rte_mbuf* m) noexcept {
    meta(m).verdict = Verdict::Held;
    outcomes_[m->port].held.add();
  }
  // Gives back a held packet (tick() only), decided: Continue (on through the stages after
  // this one, then sent, charged as tx to its ingress port like any packet) or Drop (freed
  // and counted at its ingress port under its drop reason). Packets given back keep their
  // order.
  void release(rte_mbuf* m) noexcept {
    outcomes_[m->port].unheld.add();
    released_.push(m);
    if (released_.full()) flush_released();
  }

  // Says that process() left every packet it was given with verdict Continue (a route stage
  // that routed them all): the runner then has nothing to sort out before the next stage and
  // skips the pass over the vector that would find so. Optional: without it the runner looks.
  void kept_all() noexcept { kept_all_ = true; }

  // The runner's side: the run's clock, the stage running, and what the stages handed over
  // passed on (given-back packets to the runner, which runs the stages after `stage` on them).
  void set_now(uint64_t tsc) noexcept { now_ = tsc; }
  void set_stage(size_t stage) noexcept {
    stage_ = stage;
    kept_all_ = false;
  }
  bool stage_kept_all() const noexcept { return kept_all_; }
  void flush_copies() noexcept;
  void flush_released() noexcept;

 private:
  unsigned slot_;
  CopySink* sink_;
  PipelineWorker* runner_;
  PortOutcomes* outcomes_;
  size_t stage_ = 0;
  bool kept_all_ = false;
  uint64_t now_ = 0;
  // Plain arrays, set empty by the constructor rather than zeroed: a StageEnv is made for
  // every run and every tick.
  Burst copies_;
  Burst released_;
};

class Stage {
 public:
  Stage(std::string type, std::string name, unsigned lcore_slots);
  virtual ~Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  const std::string& type() const noexcept { return type_; }
  const std::string& name() const noexcept { return name_; }

  // Decides, or leaves for later stages, every packet of a vector. Every packet handed in has
  // verdict Continue (the runner takes decided packets out between stages). A stage sets a
  // final verdict only when later stages must not touch the packet.
  virtual void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept = 0;

  // For a packet a trace follows (core/tracer.h), what this stage did with it in a few words
  // (the route it matched, the ACL rule, the MAC address it wrote), written into `out`;
  // returns the length. Runs on the worker lcore right after process(), for marked packets
  // only, under process()'s rules. The runner records the verdict, drop reason, egress port
  // and next hop itself; a stage with nothing to add keeps this default.
  virtual size_t describe(rte_mbuf* /*m*/, std::span<char> /*out*/) const noexcept { return 0; }

  // A service the control lcore must run for this stage (a capture writer), or nullptr.
  virtual std::shared_ptr<Service> control_service() const { return nullptr; }

  // Whether the stage may hold packets (StageEnv::hold); the stages after such a stage must
  // be fused to it (Pipeline::build checks). It gets tick() calls: on
  // every round of each worker's service loop, also when no vector comes, to give back the
  // held packets that are due (StageEnv::release); and once with `stop` when the worker
  // stops, to give back every packet it holds on that worker (decided: sent or dropped).
  // tick() runs on the worker lcore of env.slot(), under the same rules as process(), and
  // returns whether it gave back any packet.
  virtual bool holds_packets() const noexcept { return false; }
  // Whether the stage reads m->hash.rss, the flow hash (core/packet.h): ports compute it in
  // software only when something does. The safe default; a stage that never reads it says so.
  virtual bool reads_flow_hash() const noexcept { return true; }
  // What every port must run over its received bursts so that the packets this stage must see
  // together reach it with one flow hash (conntrack: a NAT's replies, later fragments), or
  // nullptr. The stage owns it and outlives the ports' use of it.
  virtual const FlowHashRewrite* flow_hash_rewrite() const noexcept { return nullptr; }
  // Flow offload to XDP (core/offload_feed.h): whether the steering program may forward a
  // flow's later packets once one went through this stage, because the stage decides every
  // packet of a flow alike while its tables stay as they are (route, neighbour, an ACL), or
  // marks the packets whose flows it must keep seeing (kMetaFlagKeep). A stage that changes
  // packets in ways the fast path does not repeat, or counts or copies each one, keeps the
  // default: the pipeline's flows stay in user space. A stage that says yes calls
  // OffloadFeed::changed() (StageContext::offload) whenever its tables change.
  virtual bool offloadable() const noexcept { return false; }
  // Whether the stage decrements the TTL / hop limit of what it forwards (route): the fast
  // path then does the same.
  virtual bool decrements_ttl() const noexcept { return false; }
  virtual bool tick(StageEnv& /*env*/, bool /*stop*/) noexcept { return false; }
  // Port `id` is now `info` (a port a reload added), or no port (info.name empty: removed),
  // for a stage that keeps something per port (Pipeline::set_port; control thread). No packet
  // of an added port has come yet and none for a removed one comes any more: the entry may be
  // written in place. Per-port tables are StageContext::ports long (kMaxPorts) from the start.
  virtual void set_port(PortId /*id*/, const PortInfo& /*info*/) {}
  // Whether it holds packets on the worker lcore of `slot` now (that lcore only): a worker
  // that sleeps then wakes in time for tick() to give them back.
  virtual bool holding(unsigned /*slot*/) const noexcept { return false; }

  StageLcoreStats& lcore_stats(unsigned slot) noexcept { return stats_[slot]; }
  // Summed over lcores; read by the control plane while workers run.
  StageStats stats() const noexcept;
  // One lcore's share (slot as StageEnv::slot()), for per-lcore runtime views.
  StageStats stats(unsigned slot) const noexcept;
  unsigned slots() const noexcept { return slots_; }

 private:
  std::string type_;
  std::string name_;
  unsigned slots_;
  std::unique_ptr<StageLcoreStats[]> stats_;
};

// CRTP helper for stages that decide packet by packet. Derived provides
//
//   struct VectorState { ... };                       // what one vector needs (a table pointer)
//   VectorState begin(StageEnv&) noexcept;            // once per vector
//   void process_packet(rte_mbuf*, VectorState&, StageEnv&) noexcept;   // inlined
template <typename Derived>
class PerPacketStage : public Stage {
 public:
  using Stage::Stage;

  // Packets ahead whose first data line is prefetched: far enough to cover a memory access
  // (a few hundred cycles) at tens of cycles per packet, near enough that the lines are still
  // in L1 when used.
  static constexpr size_t kPrefetchAhead = 4;

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept final {
    Derived& self = static_cast<Derived&>(*this);
    auto state = self.begin(env);
    const size_t n = pkts.size();
    for (size_t i = 0; i < n && i < kPrefetchAhead; ++i)
      rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
    for (size_t i = 0; i < n; ++i) {
      if (i + kPrefetchAhead < n) rte_prefetch0(rte_pktmbuf_mtod(pkts[i + kPrefetchAhead], void*));
      self.process_packet(pkts[i], state, env);
    }
  }
};

}  // namespace vecflow
