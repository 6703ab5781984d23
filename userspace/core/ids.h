// Strong ids: a port id cannot be passed where a queue or lcore is expected.
#pragma once

#include <cstdint>

namespace vecflow {

// vecflow's own port number, the index of the port in the appliance file. It is what
// mbuf->port holds inside vecflow (ports rewrite DPDK's port id on receive), so every stage
// knows the ingress port without a lookup.
enum class PortId : uint16_t {};
enum class QueueId : uint16_t {};

inline constexpr uint16_t kMaxPorts = 64;

constexpr uint16_t to_index(PortId p) noexcept {
  return static_cast<uint16_t>(p);
}
constexpr uint16_t to_index(QueueId q) noexcept {
  return static_cast<uint16_t>(q);
}

}  // namespace vecflow
