// Exact packet accounting. Every packet that enters through a port ends in exactly one place:
// transmitted (through any port), handed to the kernel, or dropped under one reason. The
// outcome is charged to the packet's *ingress* port (mbuf->port), so per port
//
//     rx == tx + to_kernel + sum(drops[reason]) + held
//
// holds on drained state, and the same sum holds for the whole box. `held` is what a stage
// keeps for later right now (packets waiting for their next hop to resolve,
// pipeline/neighbour/neighbour_stage.h): taken minus given back, zero once stopped (a stop drops
// them, counted).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/counter.h"
#include "core/drop_reason.h"
#include "core/ids.h"

namespace vecflow {

// Outcome counters of one ingress port, written by one lcore. Cache-line aligned so two
// lcores never write the same line.
struct alignas(64) PortOutcomes {
  Counter rx_packets;
  Counter rx_bytes;
  Counter tx_packets;
  Counter tx_bytes;
  Counter kernel_packets;
  Counter held;    // kept by a stage for later (StageEnv::hold) ...
  Counter unheld;  // ... and given back decided (StageEnv::release)
  DropCounters drops;
};

// Charges received packets to their ingress ports, one at a time: for a burst of a port with
// VLAN sub-interfaces (io/vlan/vlan_demux.h), whose frames may belong to any of them (the
// others charge a burst to its port in one step). `row`: the lcore's row of the OutcomeTable.
// Charged per run of one port's frames (a VLAN's frames come in runs).
template <typename Mbuf>
inline void charge_rx_each(PortOutcomes* row, Mbuf* const* pkts, uint16_t n) noexcept {
  for (uint16_t i = 0; i < n;) {
    const uint16_t port = pkts[i]->port;
    uint64_t bytes = 0;
    uint16_t end = i;
    for (; end < n && pkts[end]->port == port; ++end)
      bytes += pkts[end]->pkt_len;
    row[port].rx_packets.add(end - i);
    row[port].rx_bytes.add(bytes);
    i = end;
  }
}

// Plain numbers summed from PortOutcomes (and from the XDP program's counters for ports that
// have one), for the control plane and the tests.
struct AccountingSnapshot {
  uint64_t rx = 0;
  uint64_t tx = 0;
  uint64_t to_kernel = 0;
  uint64_t held = 0;  // kept by a stage now, not decided yet
  std::array<uint64_t, kDropReasonCount> drops{};

  void add(const PortOutcomes& o) noexcept;
  void add(const AccountingSnapshot& o) noexcept;
  uint64_t dropped() const noexcept;
  // rx - (tx + to_kernel + dropped + held): zero when every packet is accounted for.
  int64_t unaccounted() const noexcept {
    return static_cast<int64_t>(rx) - static_cast<int64_t>(tx + to_kernel + dropped() + held);
  }
  // "rx=10 tx=7 to_kernel=1 drops={no_route:2}" for test failures and logs (" held=N" after
  // to_kernel while packets are held).
  std::string to_string() const;
};

// PortOutcomes for every (lcore slot, port) pair. Each lcore writes only its own row; the
// control plane sums the column of a port. Sized once at start-up; never reallocated while
// lcores run, so rows may be handed out as plain pointers.
class OutcomeTable {
 public:
  OutcomeTable(size_t lcore_slots, size_t ports);

  PortOutcomes* row(size_t lcore_slot) noexcept { return &cells_[lcore_slot * ports_]; }
  PortOutcomes& at(size_t lcore_slot, PortId port) noexcept {
    return cells_[lcore_slot * ports_ + static_cast<size_t>(port)];
  }
  // For readers (the control plane): loads of single-writer counters.
  const PortOutcomes& at(size_t lcore_slot, PortId port) const noexcept {
    return cells_[lcore_slot * ports_ + static_cast<size_t>(port)];
  }
  AccountingSnapshot port_snapshot(PortId port) const noexcept;
  AccountingSnapshot total_snapshot() const noexcept;
  size_t lcore_slots() const noexcept { return slots_; }
  size_t ports() const noexcept { return ports_; }

 private:
  size_t slots_;
  size_t ports_;
  std::unique_ptr<PortOutcomes[]> cells_;
};

}  // namespace vecflow
