// One loaded instance of the XDP steering program (bpf/steer.bpf.c) and its maps: installs
// compiled rule sets atomically and reads the counters. XdpSteering attaches instances to
// interfaces; tests and the benchmark run an instance through BPF_PROG_TEST_RUN directly.
//
// Thread safety: one control thread calls install() and counters(); the data path is the
// kernel's.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/drop_reason.h"
#include "core/error.h"
#include "steer/rules.h"
#include "vecflow/steer_abi.h"

struct steer_bpf;
struct bpf_object;

namespace vecflow::steer {

class OffloadTable;

// Counters of one program instance, summed over CPUs.
struct SteerCounters {
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  std::array<uint64_t, VF_VERDICT_COUNT> verdict{};
  std::array<uint64_t, VF_ACT_COUNT> action{};
  uint64_t default_hits = 0;
  uint64_t no_socket_fallback = 0;
  uint64_t queue_not_read = 0;  // for user space on an rx queue the port does not read
  uint64_t mtu_lifted = 0;      // tx/redirect frames over the target's MTU, lifted instead
  uint64_t meta_unavailable = 0;
  uint64_t unconfigured = 0;
  std::array<uint64_t, kDropReasonCount> malformed{};  // parse errors by reason
  std::array<uint64_t, kDropReasonCount> drop{};       // XDP_DROP verdicts by reason
  // The port's offloaded totals: packets are verdict[VF_VERDICT_OFFLOAD]. They include frames
  // of entries removed since, so they are the exact sum to reconcile per-entry counters with.
  uint64_t offload_bytes = 0;
  // Frames of an offloaded flow that went the normal way, by vf_offload_decline.
  std::array<uint64_t, VF_OFFLOAD_DECLINE_COUNT> offload_declined{};
  // Frames XDP redirected to this port's interface (offloaded or by a rule, from any port) that
  // the kernel lost afterwards (steer/xmit_drops.h). Filled by XdpSteering.
  uint64_t xmit_drops = 0;
  std::vector<vf_rule_counter> rules;  // by rule id, for the rule set installed last

  SteerCounters& operator+=(const SteerCounters& o);
};

struct SteerDeleter {
  void operator()(steer_bpf* s) const noexcept;
};
using SteerSkeleton = std::unique_ptr<steer_bpf, SteerDeleter>;

// Whether this kernel lets an XDP program write metadata in front of a frame
// (bpf_xdp_adjust_meta; probed once). Where it does not (the 6.18.44 of some of our machines
// refuses the helper to every XDP program), the program is loaded without the call: frames it
// lifts carry no vf_xdp_meta (counted as meta_unavailable) and user space parses and hashes
// them itself; they name no steering rule (a count stage's `by: rule` sees none), and offload
// gates open by time (FlowOffloader: quiet or forced) instead of by the flow's last lifted
// frame.
bool kernel_allows_xdp_metadata();

class SteerProgram {
 public:
  // Map sizes, fixed when the program is loaded. A rule set that outgrows them needs a new
  // instance (XdpSteering sizes them from the rules it starts with, with headroom).
  struct Limits {
    uint32_t rules = 1024;         // rule ids per set (per-rule counters)
    uint32_t rule_entries = 4096;  // classifier entries per set
    // Offloaded flows (vf_offload: 88 bytes per installed entry per possible CPU).
    uint32_t offload_entries = 16384;
  };
  // Limits that fit `rules` with room to grow by `headroom` times before a restart.
  static Limits limits_for(const CompiledRules& rules, uint32_t headroom);

  static Result<std::unique_ptr<SteerProgram>> load(const Limits& limits);
  // Takes over an instance someone else loaded from the same object (DPDK's net_af_xdp with
  // `xdp_prog=`): finds its maps by name through the kernel. Its map sizes are the object's
  // defaults. The first install() clears whatever rule set the instance held.
  static Result<std::unique_ptr<SteerProgram>> adopt(uint32_t prog_id);
  ~SteerProgram();
  SteerProgram(const SteerProgram&) = delete;
  SteerProgram& operator=(const SteerProgram&) = delete;

  // Writes `rules` into the idle set, then makes it the live one with a single store: a frame
  // is classified by the previous set or by this one, never by a mix. The previous set's
  // entries are removed at the next install (after kSetReuseGrace).
  Result<void> install(const CompiledRules& rules);

  Result<SteerCounters> counters() const;

  int prog_fd() const noexcept;
  int xsks_map_fd() const noexcept;
  int devmap_fd() const noexcept { return fds_.devmap; }
  // The offloaded flows of this instance's interface (steer/offload_table.h).
  OffloadTable& offload() noexcept { return *offload_; }
  const Limits& limits() const noexcept { return limits_; }
  // Opens a second instance of the object, not yet loaded, whose maps are this instance's:
  // libxdp loads it when attaching (as a dispatcher component or alone), and the rules and
  // counters stay where install() and counters() look.
  Result<SteerSkeleton> open_sharing_maps() const;

  // An XDP program runs to completion inside one NAPI poll (microseconds). A set that stopped
  // being live is rewritten only after this much time, so no frame still running with the old
  // set index can see a half-cleared set. Orders of magnitude above the real bound, and far
  // below how often an operator replaces rules.
  static constexpr std::chrono::milliseconds kSetReuseGrace{50};

 private:
  // The program's and maps' descriptors, from the skeleton or from adoption.
  struct Fds {
    int prog = -1, config = -1, sets = -1, rules = -1, rule_stats = -1, stats = -1, devmap = -1,
        xsks = -1, port_class = -1, offload = -1, offload_ctl = -1, offload_gates = -1;
  };
  SteerProgram(SteerSkeleton skel, Fds fds, Limits limits);

  // The devmap holds the rules' redirect targets and the offload table's egress interfaces.
  // OffloadTable counts its entries per egress; a target neither uses any more is removed at
  // the next install() (after kSetReuseGrace), never while a frame may still be sent to it.
  friend class OffloadTable;
  Result<void> hold_target(uint32_t ifindex);
  void release_target(uint32_t ifindex) noexcept;

  SteerSkeleton skel_;  // empty for an adopted instance
  Fds fds_;
  std::vector<int> owned_fds_;  // adopted descriptors, closed with this object
  bool contents_known_ = true;  // false until install() cleared an adopted instance
  Limits limits_;
  std::array<std::vector<vf_rule_key>, VF_STEER_SETS> installed_;
  std::vector<uint32_t> redirect_targets_;
  std::map<uint32_t, uint32_t> offload_targets_;  // egress ifindex -> entries; 0: to remove
  std::unique_ptr<OffloadTable> offload_;
  uint32_t live_rule_count_ = 0;
  std::chrono::steady_clock::time_point last_flip_{};
};

}  // namespace vecflow::steer
