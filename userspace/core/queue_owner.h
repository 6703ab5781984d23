// Who reads an rx queue of a port: named in the appliance file (a port's `queues`, `owner:`),
// acted on by the ports (io/) and the steering program's loader (steer/).
#pragma once

#include <cstdint>
#include <string_view>

namespace vecflow {

// vecflow's own code (an AF_XDP socket, or the ethdev of a DPDK port), or DPDK's net_af_xdp PMD
// on a queue of an AF_XDP port's interface (`owner: dpdk`).
enum class QueueOwner : uint8_t { Vecflow, Dpdk };

// "vecflow" | "dpdk": the file's and the control protocol's spelling.
std::string_view to_string(QueueOwner o) noexcept;

}  // namespace vecflow
