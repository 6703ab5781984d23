// What vecflowd holds: every DPDK buffer pool (packets, event vectors, capture and mirror copies,
// a PMD's own), what the AF_XDP sockets lend to the kernel, EAL's heaps and the process itself.
// `vecflowctl buffers` shows it; the same numbers are gauges in /metrics, with Prometheus'
// standard process_* families.
#pragma once

#include "api/registry.h"

namespace vecflow::control {

void register_resources(Registry& registry);

}  // namespace vecflow::control
