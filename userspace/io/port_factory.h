// Ports from the appliance file: the app hands each `ports[]` entry (config::PortConfig) and
// the settings ports share to create_port(), and sizes the packet pool with pool_options().
//
// Start-up order (io/afxdp/afxdp_port.h says why):
//   pool = PacketPool::create(pool_options(cfg))
//   for each port: create_port(...)           DPDK-owned AF_XDP queues are set up here
//   for each VLAN port, parents first: create_port(..., parent), then the links'
//   Port::set_vlans()
//   steering attaches to the afxdp ports' interfaces
//   AfXdpPort::set_xsks_map(steering's xsks_map fd of that interface)
//   Port::start() for every port; then the rx/tx adapters start polling
// and the reverse on the way down (stop polling, Port::stop(), destroy ports, detach steering,
// destroy the pool).
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "core/error.h"
#include "core/ids.h"
#include "core/vlan.h"
#include "io/packet_pool.h"
#include "io/port.h"
#include "io/rx_classify.h"

namespace vecflow {

struct PortEnvironment {
  PacketPool* pool = nullptr;
  bool symmetric_hash = true;                 // steering.symmetric_hash
  bool drop_malformed = true;                 // steering.malformed == drop
  FlowIdSource flow_id = FlowIdSource::Auto;  // scheduler.flow_id
  // The steering BPF object, handed to net_af_xdp (`xdp_prog`) for DPDK-owned queues.
  std::string steering_object;
};

// The environment the appliance file describes (everything but the pool and the object path).
PortEnvironment port_environment(const config::ApplianceConfig& cfg);

// Pool size and cache from `dpdk`, buffer size from the largest afxdp frame_size (2048 when
// there is no afxdp port).
PacketPoolOptions pool_options(const config::ApplianceConfig& cfg);

// Sets the `mtu` of every port that has a kernel interface on that interface. Before steering
// attaches: a veth with an XDP program refuses an MTU larger than its program's buffers take.
// DPDK ports without a kernel interface get theirs on the ethdev in create_port().
Result<void> apply_port_mtus(const config::ApplianceConfig& cfg);

// An AfXdpPort, DpdkPort or VlanPort for one `ports[]` entry; `id` is its index in the file.
// A VLAN port needs its parent made first (`parent`, with the parent's entry); the others
// take nullptr.
Result<std::unique_ptr<Port>> create_port(const config::PortConfig& p, PortId id,
                                          const PortEnvironment& env, Port* parent = nullptr,
                                          const config::PortConfig* parent_config = nullptr);

// The TPID of a VLAN port's tag.
uint16_t vlan_tpid(const config::VlanPort& v);

// The tags `port`'s frames carry on its link, outermost first: none for a port that is not a
// VLAN port, two for a QinQ port (its parent's, then its own).
VlanTags vlan_tags(const config::ApplianceConfig& cfg, const config::PortConfig& port);

}  // namespace vecflow
