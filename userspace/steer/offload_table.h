// The flow offload table of one steering program instance (bpf/include/vecflow/offload_abi.h):
// the control plane installs an entry for a flow it has decided, and the XDP program forwards
// the flow's later frames itself (MACs, TTL, NAT, out through the devmap or XDP_TX) until the
// entry is removed. What the pipeline builds on it:
//   install()   after the deciding packet; a full table answers TableFull and the flow stays
//               on the normal path (never an eviction of another entry);
//   remove()    when a route, neighbour, rule or port changes, or the flow idles out; it
//               returns the entry's final counters to fold into the session;
//   read() / for_each()  the sweep: per-entry packets, bytes and last-seen time (compare with
//               now_ns() for idle timeouts);
//   the port's totals (SteerCounters: verdict[VF_VERDICT_OFFLOAD], offload_bytes) count every
//               offloaded frame, of entries removed since included;
//   gates       (vecflow/offload_abi.h) an entry is installed with a gate taken here
//               (take_gate()), and the program forwards the flow only once user space opened
//               it (gate_open()); the gate then goes back (release_gate()). A gate whose entry
//               went while it was closed may still have stamped frames in flight: it is reused
//               only after kGateQuarantineNs.
// Frames between the last read of an entry and its removal are in the port's totals only.
//
// Thread safety: like SteerProgram, one control thread; the data path is the kernel's. No
// allocation per read(): the per-CPU buffer is the table's.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "core/error.h"
#include "vecflow/offload_abi.h"
#include "vecflow/xdp_meta.h"

namespace vecflow::steer {

class SteerProgram;

using OffloadKey = vf_offload_key;

// The key of `flow` (as the parser reads it: core/parse.h) arriving on `ifindex`.
OffloadKey offload_key(const vf_flow_key& flow, uint32_t ifindex) noexcept;

// A NAT rewrite of one side of the flow: address (network order, IPv4 in word 0, as in
// vf_flow_key) and port (network order).
struct NatRewrite {
  std::array<uint32_t, 4> addr{};
  uint16_t port = 0;
};

struct OffloadAction {
  std::array<uint8_t, 6> dst_mac{};
  std::array<uint8_t, 6> src_mac{};
  uint32_t egress_ifindex = 0;  // the key's ifindex: back out with XDP_TX
  bool decrement_ttl = true;
  std::optional<NatRewrite> snat;  // TCP and UDP flows only
  std::optional<NatRewrite> dnat;
  uint16_t gate = 0;              // take_gate(); 0: forwarded from the first frame
  uint32_t rule_id = VF_NO_RULE;  // what the flow's frames lifted under the gate carry
};

struct OffloadStats {
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t last_seen_ns = 0;  // CLOCK_MONOTONIC ns (a jiffy's resolution); 0: no frame yet
};

struct OffloadEntry {
  OffloadKey key{};
  OffloadAction action;
  OffloadStats stats;
};

enum class InstallStatus : uint8_t {
  Installed,
  Replaced,   // the key had an entry: its counters restarted (remove() it first to keep them)
  TableFull,  // nothing installed: the flow goes the normal way
  // Nothing installed: the kernel had no memory for the entry now (the BPF allocator's
  // per-CPU caches run dry under a burst of inserts until they refill); later may succeed.
  NoMemory,
};

class OffloadTable {
 public:
  // A stamped frame is in user space for microseconds; one left after this long was lost there
  // uncounted (a stage dropped it), or sits where no flow is offloaded (a neighbour's queue).
  static constexpr uint64_t kGateQuarantineNs = 1'000'000'000;

  OffloadTable(SteerProgram& program, int map_fd, int ctl_fd, int gates_fd, uint32_t capacity);
  ~OffloadTable();
  OffloadTable(const OffloadTable&) = delete;
  OffloadTable& operator=(const OffloadTable&) = delete;

  // Installs or replaces the entry of `key`. A replaced entry is deleted, then inserted: a
  // frame sees the old action or none (the normal path), never half of each.
  Result<InstallStatus> install(const OffloadKey& key, const OffloadAction& action);
  // Removes the entry; its final counters, or nullopt if there was none.
  Result<std::optional<OffloadStats>> remove(const OffloadKey& key);
  // The entry's counters summed over CPUs (last_seen: the latest), or nullopt.
  Result<std::optional<OffloadStats>> read(const OffloadKey& key) const;
  // Calls `fn` for every entry. Entries installed or removed meanwhile may be seen or not.
  Result<void> for_each(const std::function<void(const OffloadEntry&)>& fn) const;
  // Removes every entry.
  Result<void> clear();

  // A closed gate for a new entry, or nullopt when every gate is taken (or the gates could not
  // be mapped).
  std::optional<uint16_t> take_gate(uint64_t now_ns) noexcept;
  // Whether gate `g` is open.
  bool gate_open(uint16_t g) const noexcept;
  // How many frames the program lifted under gate `g` (closed).
  uint64_t gate_lifted(uint16_t g) const noexcept;
  // Opens gate `g` if the program lifted nothing more than `lifted` frames under it; whether
  // it is open.
  bool open_gate(uint16_t g, uint64_t lifted) noexcept;
  // Gives `g` back: at once when it opened or its entry never existed, else after
  // kGateQuarantineNs.
  void release_gate(uint16_t g, bool open, uint64_t now_ns) noexcept;
  // The gates the workers settle (OffloadFeed::set_gates); nullptr when they could not be
  // mapped.
  vf_offload_gate* gates() noexcept { return gates_; }

  // Entries installed through this table (the map may also hold an adopted instance's).
  uint32_t size() const noexcept { return size_; }
  uint32_t capacity() const noexcept { return capacity_; }
  // The clock of last_seen_ns.
  static uint64_t now_ns() noexcept;

 private:
  Result<void> set_active(bool on);
  // Sums per_cpu_ after a lookup of `key`; false if the key has no entry.
  Result<bool> lookup(const OffloadKey& key) const;
  OffloadStats sum() const noexcept;

  SteerProgram& program_;
  int map_fd_;
  int ctl_fd_;
  uint32_t capacity_;
  uint32_t size_ = 0;
  bool active_ = false;
  mutable std::vector<vf_offload_value> per_cpu_;
  vf_offload_gate* gates_ = nullptr;  // VF_OFFLOAD_GATES, mmapped
  std::vector<uint16_t> free_gates_;
  struct Quarantined {
    uint16_t gate;
    uint64_t until_ns;
  };
  std::deque<Quarantined> quarantined_;
};

}  // namespace vecflow::steer
