// Flow offload's control side (issue 40): takes the flows the workers offer
// (core/offload_feed.h), installs each in the offload table of its ingress interface's
// steering program (steer/offload_table.h), and takes flows back to user space when they must
// be decided again:
//   - a route, neighbour or rule changed (OffloadFeed::changes() moved), a reload applied, a
//     link changed (flush()): every entry the change concerns (a route or neighbour: its IP
//     version's; anything else: all) goes at the next sweep, and offers decided before the
//     change are refused as stale; the flows' next packets are decided by the new tables in
//     user space and offered again;
//   - a capture or trace runs (the `paused` predicate): no entry while it does, so that it sees
//     every packet;
//   - an entry no frame used for idle_timeout_ms: removed at a sweep.
// A sweep also keeps the conntrack session of each flow that XDP forwarded since the last one
// alive (OffloadFeed::keep_alive): its packets no longer reach it.
// A sweep runs every sweep_ms: that is the bound on how long an offloaded flow keeps a decision
// its tables no longer give. A full table refuses the flow, which stays on the normal path.
//
// Per-flow order across the switch: each entry is installed behind a gate (vecflow/
// offload_abi.h), so XDP forwards the flow's frames only once none of its earlier frames is
// still in user space; until then they are lifted as before. Gates are checked every
// kGateCheckNs and given back as they open. The worker that sends a flow's last lifted frame
// opens its gate, which needs a moment when none of the flow's frames is in user space: a gap
// in the flow longer than a frame's way through user space (tens of microseconds). A gate still
// closed kGateWaitNs after its entry came is opened here:
//   quiet   nothing was lifted under it for kGateWaitNs (the last lifted frame was lost on the
//           way, to a full AF_XDP ring or a stage's drop, or the flow paused): no frame of the
//           flow stays in user space that long, order holds;
//   forced  the flow never paused (a steady flow faster than a frame's way through user space,
//           or user space overloaded): the frames then in user space, about rate x that way's
//           time, may leave after the first ones XDP forwards. Counted, so that an operator
//           sees it; the alternative, a steady fast flow never offloaded, fails the flows
//           offload is for.
// A flow that finds every gate taken is refused (gates_busy) and offered again later.
//
// An offer is refused for a reason the `offload` view shows per flow (the last kRecentRefusals)
// and counts: the ingress port has no steering program, the egress port no kernel interface,
// the table is full, the offer is stale, offload is paused, or the kernel refused the entry.
//
// Threading: the control thread only (its service runs on the control lcore, where the
// commands and reloads that call the rest run too).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "core/log.h"
#include "core/offload_feed.h"
#include "runtime/service.h"
#include "steer/offload_table.h"

namespace vecflow::steer {

class XdpSteering;

// A port as offload sees it, by PortId.
struct OffloadPort {
  std::string name;
  uint32_t ifindex = 0;           // its kernel interface; 0: none (not an egress)
  OffloadTable* table = nullptr;  // its interface's steering program's; nullptr: no ingress
  // Installs into `table` wait until then (OffloadTable::now_ns) after the kernel had no
  // memory for one: a burst of inserts that outran the BPF allocator's refill would otherwise
  // fail one system call each.
  uint64_t retry_after_ns = 0;
};

enum class OffloadRefusal : uint8_t {
  NoSteering,   // the ingress port has no steering program (a DPDK port without XDP)
  NoInterface,  // the egress port has no kernel interface to redirect to
  TableFull,    // the ingress interface's table is full
  Stale,        // decided before a change of routes, neighbours or rules
  Paused,       // a capture or trace runs
  Failed,       // the kernel refused the entry (logged)
  NoMemory,     // the kernel had no memory for it now: installs into that table pause briefly
  NoGate,       // every order gate of the ingress interface's table is taken
};
inline constexpr size_t kOffloadRefusalCount = 8;
// "ingress_without_steering", "egress_without_interface", "table_full", "stale", "paused",
// "install_failed", "no_memory", "gates_busy".
std::string_view offload_refusal_name(OffloadRefusal r) noexcept;

struct OffloadSettings {
  bool enabled = false;
  uint32_t idle_timeout_ms = 30000;
  uint32_t sweep_ms = 200;
};
// The file's `offload` section as settings.
OffloadSettings offload_settings(const config::OffloadSection& s) noexcept;

struct OffloadedFlow {
  OffloadKey key{};
  uint16_t in_port = 0;
  uint16_t out_port = 0;
  OffloadAction action;
  OffloadStats stats;                    // at the last sweep
  uint64_t installed_ns = 0;             // OffloadTable::now_ns()
  uint32_t session = kNoOffloadSession;  // the conntrack session kept alive meanwhile
  uint16_t gate = 0;                     // its order gate while closed; 0 once open
  uint64_t gate_lifted = 0;              // frames lifted under it, at the last check
  uint64_t gate_moved_ns = 0;            // when gate_lifted last changed
};

struct OffloadRefused {
  vf_flow_key key{};
  uint16_t in_port = 0;
  uint16_t out_port = 0;
  OffloadRefusal reason{};
  uint64_t when_ns = 0;
};

struct FlowOffloaderStats {
  uint64_t offers = 0;
  uint64_t installed = 0;
  uint64_t idle_removed = 0;
  uint64_t flushed = 0;  // entries removed by flushes
  uint64_t flushes = 0;
  uint64_t gates_opened = 0;  // flows XDP forwards since: their earlier frames had all left
  uint64_t gates_quiet = 0;   // of them, opened here: nothing lifted for kGateWaitNs
  uint64_t gates_forced = 0;  // of them, opened here while the flow never paused
  std::array<uint64_t, kOffloadRefusalCount> refused{};
  // Frames and bytes of entries removed, read at their removal (the ports' totals in
  // SteerCounters include them, with the frames after the last read).
  uint64_t removed_packets = 0;
  uint64_t removed_bytes = 0;
};

class FlowOffloader final : public Service {
 public:
  static constexpr size_t kRecentRefusals = 32;
  // How long installs into a table pause after the kernel had no memory for an entry.
  static constexpr uint64_t kNoMemoryPauseNs = 10'000'000;
  // How often closed gates are looked at, and how long one stays closed at most: far above a
  // frame's way through user space when it is not overloaded (tens of microseconds).
  static constexpr uint64_t kGateCheckNs = 1'000'000;
  static constexpr uint64_t kGateWaitNs = 20'000'000;

  // `ports` by PortId. `blocker`: why the pipeline keeps every flow in user space (the first
  // stage that is not offloadable), empty when none does; offers are then never made.
  // `decrement_ttl`: the pipeline decrements the TTL of what it forwards.
  FlowOffloader(OffloadFeed& feed, std::vector<OffloadPort> ports, OffloadSettings settings,
                std::string blocker, bool decrement_ttl);
  ~FlowOffloader() override;

  // Control lcore: installs what the workers offered; sweeps when one is due.
  bool poll() noexcept override;

  // New settings (a reload). Turning offload off removes every entry.
  void configure(const OffloadSettings& settings);
  // Takes every offloaded flow back to user space now, for `why` (logged).
  void flush(std::string_view why);
  // While it returns true (a capture or trace runs), no flow is offloaded.
  void set_paused_while(std::function<bool()> paused) { paused_while_ = std::move(paused); }

  const OffloadSettings& settings() const noexcept { return settings_; }
  const std::string& blocker() const noexcept { return blocker_; }
  bool active() const noexcept { return settings_.enabled && blocker_.empty() && !paused_; }
  bool paused() const noexcept { return paused_; }
  const std::vector<OffloadPort>& ports() const noexcept { return ports_; }
  std::vector<OffloadedFlow> flows() const;
  const std::deque<OffloadRefused>& refusals() const noexcept { return refusals_; }
  const FlowOffloaderStats& stats() const noexcept { return stats_; }
  const OffloadFeed& feed() const noexcept { return feed_; }

 private:
  struct KeyHash {
    size_t operator()(const OffloadKey& k) const noexcept;
  };
  struct KeyEqual {
    bool operator()(const OffloadKey& a, const OffloadKey& b) const noexcept;
  };

  void consider(const OffloadOffer& o, uint64_t now);
  void refuse(const OffloadOffer& o, OffloadRefusal r, uint64_t now);
  void sweep(uint64_t now);
  // Takes the flows of `which`'s IP versions back to user space, for `why` (logged).
  void take_back(OffloadChange which, std::string_view why);
  void check_gates(uint64_t now);
  // Removes the entry of `it`, folding its final counters; returns the next iterator.
  using Flows = std::unordered_map<OffloadKey, OffloadedFlow, KeyHash, KeyEqual>;
  Flows::iterator remove(Flows::iterator it);
  void apply_enabled();

  OffloadFeed& feed_;
  std::vector<OffloadPort> ports_;
  OffloadSettings settings_;
  std::string blocker_;
  bool decrement_ttl_;
  std::function<bool()> paused_while_;
  bool paused_ = false;
  uint64_t changes_seen_ = 0;  // feed_.changes() at the last flush
  uint64_t next_sweep_ns_ = 0;
  uint64_t next_gate_check_ns_ = 0;
  Flows flows_;
  std::vector<OffloadKey> gated_;  // flows whose gates were closed at the last check
  std::deque<OffloadRefused> refusals_;
  FlowOffloaderStats stats_;
  log::Repeating install_failures_;
};

}  // namespace vecflow::steer
