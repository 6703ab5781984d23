#include "io/port_factory.h"

#include <algorithm>

#include <linux/bpf.h>
#include <rte_eal.h>

#include "core/log.h"
#include "io/afxdp/afxdp_port.h"
#include "io/dpdk/dpdk_port.h"
#include "io/hardware.h"
#include "io/packet_pool.h"
#include "io/vlan/vlan_port.h"

namespace vecflow {

// The room the configuration checks an AF_XDP port's MTU against is what the pool and XDP leave.
static_assert(config::afxdp_frame_room(4096) ==
              4096 - PacketPool::kBufferOffset - XDP_PACKET_HEADROOM);
static_assert(config::kAfxdpBuffersPerFrame == AfXdpPort::kMaxBuffersPerFrame);

PortEnvironment port_environment(const config::ApplianceConfig& cfg) {
  PortEnvironment env;
  env.symmetric_hash = cfg.steering.symmetric_hash;
  env.drop_malformed = cfg.steering.malformed.kind == config::SteerActionKind::Drop;
  env.flow_id = cfg.scheduler.flow_id;
  return env;
}

PacketPoolOptions pool_options(const config::ApplianceConfig& cfg) {
  PacketPoolOptions o;
  o.mbufs = cfg.dpdk.mbufs;
  o.cache = cfg.dpdk.mbuf_cache;
  o.frame_size = 2048;
  bool zero_copy_possible = false;
  for (const auto& p : cfg.ports) {
    if (auto* a = std::get_if<config::AfXdpPort>(&p.kind)) {
      zero_copy_possible |= a->mode != config::XskMode::Copy;
      o.frame_size = std::max(o.frame_size, a->frame_size);
      // DPDK's net_af_xdp keeps 320 bytes of each buffer for the mempool header, the mbuf and
      // its headroom, and the kernel 256 more: a 2048-byte buffer leaves 1472 bytes, and a
      // full-sized 1514-byte frame would be dropped on receive. DPDK-owned queues therefore
      // get 4096-byte buffers, whatever the file says.
      for (const auto& r : a->queues) {
        if (r.owner == QueueOwner::Dpdk) {
          o.frame_size = std::max(o.frame_size, 4096u);
          zero_copy_possible = true;
        }
      }
    }
  }
  // The Spread layout (io/packet_pool.h: mbufs over every cache set) where it is safe and
  // cheap: with hugepages (on 4 KiB pages its stride would leave half of each page empty),
  // and where no AF_XDP socket may bind zero-copy (a zero-copy driver needs each chunk
  // within contiguous pages, which Aligned chunks never leave) and no queue is DPDK's
  // net_af_xdp (which registers the pool as if no page left a gap).
  o.layout =
      rte_eal_has_hugepages() && !zero_copy_possible ? PoolLayout::Spread : PoolLayout::Aligned;
  return o;
}

Result<void> apply_port_mtus(const config::ApplianceConfig& cfg) {
  for (const auto& p : cfg.ports) {
    // A DPDK port's device sets its own (DpdkPort::create): net_tap's interface exists only
    // once the device is probed.
    const auto* a = std::get_if<config::AfXdpPort>(&p.kind);
    const std::string* ifname = a ? &a->interface : nullptr;
    if (!p.mtu || ifname == nullptr) continue;
    if (auto r = set_interface_mtu(*ifname, *p.mtu); !r)
      return fail("port '{}': {}", p.name, r.error().message);
    log::get("io")->info("port {}: MTU {} on {}", p.name, *p.mtu, *ifname);
  }
  return {};
}

uint16_t vlan_tpid(const config::VlanPort& v) {
  return v.proto == config::VlanProto::Dot1ad ? RTE_ETHER_TYPE_QINQ : RTE_ETHER_TYPE_VLAN;
}

VlanTags vlan_tags(const config::ApplianceConfig& cfg, const config::PortConfig& port) {
  const auto* v = std::get_if<config::VlanPort>(&port.kind);
  if (v == nullptr) return {};
  const config::PortConfig* parent = cfg.find_port(v->parent);
  const auto* service = parent ? std::get_if<config::VlanPort>(&parent->kind) : nullptr;
  if (service == nullptr) return VlanTags{vlan_tpid(*v), v->vlan, 0, 0};
  return VlanTags{vlan_tpid(*service), service->vlan, vlan_tpid(*v), v->vlan};
}

Result<std::unique_ptr<Port>> create_port(const config::PortConfig& p, PortId id,
                                          const PortEnvironment& env, Port* parent,
                                          const config::PortConfig* parent_config) {
  if (const auto* v = std::get_if<config::VlanPort>(&p.kind)) {
    if (parent == nullptr || parent_config == nullptr)
      return fail("VLAN port: its parent '{}' was not made first", v->parent);
    VlanOptions o;
    o.vlan = v->vlan;
    o.tpid = vlan_tpid(*v);
    o.interface = v->interface;  // empty on a DPDK parent: no kernel device
    if (const std::string* itf = parent_config->kernel_interface()) o.parent_interface = *itf;
    o.mtu = p.mtu;
    return std::unique_ptr<Port>(std::make_unique<VlanPort>(p.name, id, *parent, std::move(o)));
  }
  RxClassify classify;
  classify.port = id;
  classify.symmetric = env.symmetric_hash;
  classify.drop_malformed = env.drop_malformed;
  classify.flow_id = env.flow_id;
  if (const auto* a = std::get_if<config::AfXdpPort>(&p.kind)) {
    AfXdpOptions o;
    o.interface = a->interface;
    o.queues.clear();
    for (const auto& r : a->queues) {
      o.queues.push_back(XskQueueRange{r.first, r.count, r.owner});
    }
    o.bind = a->mode == config::XskMode::Copy       ? XskBind::Copy
             : a->mode == config::XskMode::ZeroCopy ? XskBind::ZeroCopy
                                                    : XskBind::Auto;
    o.busy_poll = a->busy_poll.enabled;
    o.busy_poll_budget = a->busy_poll.budget;
    o.busy_poll_timeout_us = a->busy_poll.timeout_us;
    o.ring_size = a->ring_size;
    o.classify = classify;
    o.dpdk_xdp_prog = env.steering_object;
    auto port = AfXdpPort::create(p.name, id, o, *env.pool);
    if (!port) return std::unexpected(port.error());
    return std::unique_ptr<Port>(std::move(*port));
  }
  const auto& d = std::get<config::DpdkPort>(p.kind);
  DpdkOptions o;
  o.devargs = d.devargs;
  o.queues = d.queues;
  o.rx_descriptors = d.rx_descriptors;
  o.tx_descriptors = d.tx_descriptors;
  o.classify = classify;
  o.interface = d.interface;
  if (p.mtu) o.mtu = *p.mtu;
  auto port = DpdkPort::create(p.name, id, o, *env.pool);
  if (!port) return std::unexpected(port.error());
  return std::unique_ptr<Port>(std::move(*port));
}

}  // namespace vecflow
