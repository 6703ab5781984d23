// The ports in the control plane: `ports` (per port and queue: received, transmitted and
// handed-to-kernel packets and bytes with their rates, drops by reason, who reads each queue
// and whether AF_XDP runs zero-copy or copy, link state and MTU, the driver's own counters), their
// counters in /metrics, their drops in `errors`, and their link state in `status`.
#pragma once

#include <functional>
#include <vector>

#include "api/counter_table.h"
#include "api/registry.h"
#include "core/port_mtu.h"
#include "io/port.h"

namespace vecflow::control {

// `ports` are owned by the app and outlive the registry's use of them (the control server is
// stopped before ports are destroyed). Port::status() is read on the control thread only.
// `mtus`: the MTUs the data path uses (core/port_mtu.h), as long-lived; nullptr: not shown.
// `ports` is asked at every read: a reload adds and removes VLAN ports.
using PortList = std::function<std::vector<Port*>()>;
void register_ports(Registry& registry, PortList ports, const PortMtuTable* mtus = nullptr);
// A fixed set of ports.
inline void register_ports(Registry& registry, std::vector<Port*> ports,
                           const PortMtuTable* mtus = nullptr) {
  register_ports(
      registry, [ports] { return ports; }, mtus);
}

// The part's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> ports_counter_tables();

}  // namespace vecflow::control
