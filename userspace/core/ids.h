// Strong ids: a port id cannot be passed where a queue or lcore is expected.
#pragma once

#include <cstdint>

namespace vecflow {

// vecflow's own port number, the index of the port in the appliance file. It is what
// mbuf->port holds inside vecflow (ports rewrite DPDK's port id on receive), so every stage
// knows the ingress port without a lookup.
enum class PortId : uint16_t {};
enum class QueueId : uint16_t {};

// The most ports an appliance has, VLAN ports included (and ids given since start: a reload
// gives a new port name a new id). Per-port tables are this long from the start, so that a
// port a reload adds moves nothing a worker reads: ~1.8 KiB a port on a one-worker appliance
// (the tx adapters' buffers, the accounting rows; VmRSS 37.4 -> 39.1 MiB from 64 to 1024 in
// the engine benchmark). A trunk carries a few hundred VLANs, which 64 did not hold.
inline constexpr uint16_t kMaxPorts = 1024;

constexpr uint16_t to_index(PortId p) noexcept {
  return static_cast<uint16_t>(p);
}
constexpr uint16_t to_index(QueueId q) noexcept {
  return static_cast<uint16_t>(q);
}

}  // namespace vecflow
