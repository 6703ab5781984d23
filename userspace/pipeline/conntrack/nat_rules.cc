// The conntrack stage's NAT rules: built from the file, swapped in by a reload, and the
// masquerade rules' addresses followed from the kernel; the ports' VRF zones. The per-packet
// translation is in conntrack_stage.cc, inlined into the tracking it is part of.
#include "pipeline/conntrack/conntrack_stage.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <unistd.h>

#include <fmt/format.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <nlohmann/json.hpp>

#include "core/flow.h"
#include "core/log.h"
#include "core/packet.h"
#include "pipeline/ip_util.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

std::vector<uint32_t> nat_pool_addresses(const std::vector<IpPrefix>& to) {
  std::vector<uint32_t> out;
  for (const IpPrefix& p : to) {
    uint32_t first;
    std::memcpy(&first, p.addr.bytes.data(), 4);
    const uint64_t n = uint64_t{1} << (32 - p.length);
    for (uint64_t i = 0; i < n && out.size() <= NatMap::kMaxPools; ++i) {
      const uint32_t a = rte_cpu_to_be_32(rte_be_to_cpu_32(first) + static_cast<uint32_t>(i));
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
  }
  return out;
}

Result<std::vector<ConntrackStage::SnatRule>> ConntrackStage::snat_rules(
    const std::vector<SnatRuleConfig>& rules) {
  std::vector<SnatRule> out;
  for (const SnatRuleConfig& r : rules) {
    SnatRule b{};
    b.in_port = kNoPort;
    for (size_t i = 0; i < ports_.size(); ++i)
      if (!r.in_port.empty() && ports_[i].name == r.in_port) b.in_port = static_cast<uint16_t>(i);
    if (r.src) {
      std::memcpy(&b.src, r.src->addr.bytes.data(), 4);
      b.mask = r.src->length == 0 ? 0 : rte_cpu_to_be_32(~uint32_t{0} << (32 - r.src->length));
    }
    std::vector<uint32_t> addrs = nat_pool_addresses(r.to);
    if (!r.masquerade.empty()) {
      for (size_t i = 0; i < ports_.size(); ++i)
        if (ports_[i].name == r.masquerade && port_v4_[i] != 0) addrs.push_back(port_v4_[i]);
    }
    for (uint32_t a : addrs) {
      const int pool = nat_->add_pool(a);
      if (pool < 0)
        return fail(
            "conntrack: nat: more than {} pool addresses since vecflowd started (an address a "
            "reload or a masquerade port drops stays while its sessions live): restart to "
            "reuse them",
            NatMap::kMaxPools);
      b.pools.push_back(static_cast<uint8_t>(pool));
    }
    b.lo = r.ports.low;
    b.hi = r.ports.high;
    out.push_back(std::move(b));
  }
  return out;
}

Result<void> ConntrackStage::replace_nat(const ConntrackConfig& next, const StageContext&) {
  if (!nat_ && next.nat())
    return fail(
        "conntrack: adding nat to a stage started without it needs a restart (the ports' "
        "flow hash rewrite is installed at start)");
  if (!nat_) return {};
  if (auto r = masquerade_ports(next); !r) return r;
  std::lock_guard lock(nat_mutex_);
  auto rules = snat_rules(next.snat);
  if (!rules) return std::unexpected(rules.error());
  if (next.dnat != cfg_.dnat && !nat_->set_dnat(dnat_rules(next.dnat)))
    return fail(
        "conntrack: nat.dnat: more than {} distinct destination NAT rules since vecflowd "
        "started (a rule a reload drops keeps its place while its sessions may live): "
        "restart to load these",
        NatMap::kMaxDnatRules);
  snat_->replace(std::make_unique<std::vector<SnatRule>>(std::move(*rules)), *qsbr_);
  cfg_.snat = next.snat;
  cfg_.dnat = next.dnat;
  return {};
}

std::vector<DnatRule> ConntrackStage::dnat_rules(const std::vector<DnatRuleConfig>& rules) const {
  std::vector<DnatRule> out;
  for (const DnatRuleConfig& r : rules) {
    DnatRule d;
    for (size_t i = 0; i < ports_.size(); ++i)
      if (!r.in_port.empty() && ports_[i].name == r.in_port) d.in = static_cast<uint16_t>(i);
    d.proto = *nat_proto(r.proto);
    std::memcpy(&d.pub.addr, r.dst.bytes.data(), 4);
    d.pub.port = rte_cpu_to_be_16(r.dst_port);
    std::memcpy(&d.target.addr, r.to.bytes.data(), 4);
    d.target.port = rte_cpu_to_be_16(r.to_port);
    out.push_back(d);
  }
  return out;
}

Result<void> ConntrackStage::masquerade_ports(const ConntrackConfig& cfg) {
  const std::vector<SnatRuleConfig>& rules = cfg.snat;
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string& name = rules[i].masquerade;
    if (name.empty()) continue;
    const auto port = std::find_if(ports_.begin(), ports_.end(),
                                   [&](const PortInfo& p) { return p.name == name; });
    if (port == ports_.end() || port->interface.empty())
      return fail(
          "conntrack: nat.snat[{}].masquerade: port '{}' has no kernel interface to take an "
          "address from (masquerade needs an af_xdp port or a DPDK port with one, e.g. "
          "net_tap)",
          i, name);
  }
  if (follows_addresses_ || !cfg.masquerades()) return {};
  if (kernel_ == nullptr)
    return fail("conntrack: masquerade on a pipeline started without it needs a restart");
  // Outside nat_mutex_: KernelSync calls set_port_addresses() with its own lock held.
  if (auto r = kernel_->follow_addresses(this); !r) return r;
  follows_addresses_ = true;
  return {};
}

void ConntrackStage::set_port(PortId id, const PortInfo& info) {
  if (to_index(id) < ports_.size()) ports_[to_index(id)] = info;
}

void ConntrackStage::set_port_addresses(std::vector<PortAddresses> addresses) {
  if (!nat_) return;
  std::lock_guard lock(nat_mutex_);
  std::vector<uint32_t> v4(port_v4_.size(), 0);
  for (size_t i = 0; i < v4.size() && i < addresses.size(); ++i)
    if (addresses[i].v4) std::memcpy(&v4[i], addresses[i].v4->bytes.data(), 4);
  if (v4 == port_v4_) return;
  port_v4_ = std::move(v4);
  auto rules = snat_rules(cfg_.snat);
  if (!rules) {
    log::get("pipeline")
        ->warn("stage {}: masquerade keeps its previous addresses: {}", name(),
               rules.error().message);
    return;
  }
  snat_->replace(std::make_unique<std::vector<SnatRule>>(std::move(*rules)), *qsbr_);
}

Result<void> ConntrackStage::replace_vrfs(const std::vector<config::VrfConfig>& vrfs) {
  auto zones = port_zones(vrfs, ports_);
  if (!zones) return std::unexpected(zones.error());
  std::lock_guard lock(nat_mutex_);
  bool zoned = false;
  for (size_t p = 0; p < zones->size(); ++p) {
    zones_[p].store((*zones)[p], std::memory_order_relaxed);
    zoned |= (*zones)[p] != kDefaultVrfId;
  }
  zoned_.store(zoned, std::memory_order_relaxed);
  vrfs_ = vrfs;
  return {};
}

std::vector<config::VrfConfig> ConntrackStage::vrfs() const {
  std::lock_guard lock(nat_mutex_);
  return vrfs_;
}

std::vector<std::string> ConntrackStage::zone_names() const {
  std::lock_guard lock(nat_mutex_);
  return vrf_names(vrfs_);
}

ConnEntry* ConntrackStage::find_forwarded(ConnKey& k, uint32_t hash, uint32_t now, bool& reply,
                                          uint64_t& expired) noexcept {
  const std::optional<NatProto> p = nat_proto(k.proto);
  if (!p) return nullptr;
  NatEndpoint src;
  std::memcpy(&src.addr, k.src.data(), 4);
  src.port = k.src_port;
  const int r = nat_->dnat_target(*p, src);
  if (r < 0) return nullptr;
  const uint16_t in = nat_->dnat_rule(unsigned(r)).in;
  const uint8_t own = k.zone;
  if (in == kNoPort || zone_of(in) == own) return nullptr;
  k.set_tail(k.src_port, k.dst_port, zone_of(in));
  ConnEntry* e = table_->find(hash, k, now, reply, expired);
  if (e != nullptr && reply && (e->flags & kConnDnat)) return e;
  k.set_tail(k.src_port, k.dst_port, own);
  return nullptr;
}

}  // namespace vecflow
