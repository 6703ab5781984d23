#include "config/validate.h"

#include "config/stage_type.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace vecflow::config::detail {
namespace {

PathStep k(std::string key) {
  return PathStep{std::move(key)};
}
PathStep i(size_t index) {
  return PathStep{index};
}

bool prefix_versions_agree(const std::optional<IpPrefix>& a, const std::optional<IpPrefix>& b) {
  return !a || !b || a->addr.version == b->addr.version;
}

// What the checks of each section share: the config, its document, and where errors go.
struct Checker {
  Ctx& ctx;
  const YAML::Node& root;
  const ApplianceConfig& cfg;

  void err(const YAML::Node& n, const std::string& path, std::string msg) const {
    ctx.error(n, path, std::move(msg));
  }
  bool port_exists(const std::string& name, const YAML::Node& at, const std::string& path) const {
    return config::port_exists(ctx, cfg, name, at, path);
  }
};

// Whether the scheduler is the eventdev backend on a device whose name starts with `prefix`.
bool eventdev_device(const SchedulerSection& sc, std::string_view prefix) {
  return sc.backend == SchedBackend::Eventdev && sc.device.starts_with(prefix);
}

// Whether both are vlan ports of the same VLAN of the same link (check_vlan_ports says so).
bool same_vlan(const PortConfig& a, const PortConfig& b) {
  const auto* va = std::get_if<VlanPort>(&a.kind);
  const auto* vb = std::get_if<VlanPort>(&b.kind);
  return va && vb && va->parent == vb->parent && va->vlan == vb->vlan && va->proto == vb->proto;
}

// ---- ports: names, interfaces, devices, queues, lcores ----
void check_ports(const Checker& c) {
  const ApplianceConfig& cfg = c.cfg;
  std::map<std::string, size_t> names;
  std::map<std::string, size_t> ifaces;
  std::map<std::string, size_t> devices;
  std::set<unsigned> lcores(cfg.cpu.workers.begin(), cfg.cpu.workers.end());
  lcores.insert(cfg.cpu.control);
  if (cfg.ports.empty()) c.err(locate(c.root, {k("ports")}), "ports", "declare at least one port");
  for (size_t pi = 0; pi < cfg.ports.size(); ++pi) {
    const auto& p = cfg.ports[pi];
    std::string path = fmt::format("ports[{}]", pi);
    if (auto [it, fresh] = names.emplace(p.name, pi); !fresh) {
      c.err(locate(c.root, {k("ports"), i(pi), k("name")}), path + ".name",
            fmt::format("duplicate port name '{}' (first declared at line {})", p.name,
                        cfg.ports[it->second].where.line));
    }
    if (const std::string* ifname = p.kernel_interface()) {
      if (auto [it, fresh] = ifaces.emplace(*ifname, pi);
          !fresh && !same_vlan(p, cfg.ports[it->second])) {
        c.err(locate(c.root, {k("ports"), i(pi)}), path,
              fmt::format("interface '{}' is already claimed by port '{}'", *ifname,
                          cfg.ports[it->second].name));
      }
    }
    if (auto* d = std::get_if<DpdkPort>(&p.kind)) {
      std::string dev = d->devargs.substr(0, d->devargs.find(','));
      if (auto [it, fresh] = devices.emplace(dev, pi); !fresh) {
        c.err(locate(c.root, {k("ports"), i(pi)}), path,
              fmt::format("device '{}' is already used by port '{}'", dev,
                          cfg.ports[it->second].name));
      }
    }
    if (auto* a = std::get_if<AfXdpPort>(&p.kind)) {
      std::vector<QueueRange> sorted = a->queues;
      std::sort(sorted.begin(), sorted.end(),
                [](const QueueRange& x, const QueueRange& y) { return x.first < y.first; });
      for (size_t q = 1; q < sorted.size(); ++q) {
        if (sorted[q].first < sorted[q - 1].first + sorted[q - 1].count) {
          c.err(locate(c.root, {k("ports"), i(pi), k("queues")}), path + ".queues",
                fmt::format("queue ranges overlap at queue {}", sorted[q].first));
        }
      }
    }
    if (p.lcore && !lcores.contains(*p.lcore)) {
      c.err(locate(c.root, {k("ports"), i(pi), k("lcore")}), path + ".lcore",
            fmt::format("lcore {} is neither cpu.control nor in cpu.workers", *p.lcore));
    }
  }
  for (size_t w = 0; w < cfg.scheduler.workers.size(); ++w) {
    if (!lcores.contains(cfg.scheduler.workers[w])) {
      c.err(locate(c.root, {k("scheduler"), k("workers"), i(w)}),
            fmt::format("scheduler.workers[{}]", w),
            fmt::format("lcore {} is not in cpu.workers", cfg.scheduler.workers[w]));
    }
  }
}

// ---- vlan ports: a parent that carries tags, one port per VLAN of a link, two tags at most ----
void check_vlan_ports(const Checker& c) {
  const ApplianceConfig& cfg = c.cfg;
  std::map<std::tuple<std::string, VlanProto, uint16_t>, size_t> vlans;
  for (size_t pi = 0; pi < cfg.ports.size(); ++pi) {
    const auto& p = cfg.ports[pi];
    const auto* v = std::get_if<VlanPort>(&p.kind);
    if (!v) continue;
    const std::string path = fmt::format("ports[{}]", pi);
    const YAML::Node at = locate(c.root, {k("ports"), i(pi), k("parent")});
    if (!c.port_exists(v->parent, at, path + ".parent")) continue;
    const PortConfig& parent = *cfg.find_port(v->parent);
    const auto* outer = std::get_if<VlanPort>(&parent.kind);
    const PortConfig* link = cfg.link_of(p);
    if (outer && cfg.find_port(outer->parent) && cfg.find_port(outer->parent)->is_vlan()) {
      c.err(at, path + ".parent",
            fmt::format("port '{}' is itself a QinQ port: a frame carries two VLAN tags at most",
                        v->parent));
      continue;
    }
    if (outer && v->proto != VlanProto::Dot1q) {
      // What the parser, the steering program and Linux's QinQ devices agree on.
      c.err(locate(c.root, {k("ports"), i(pi), k("proto")}), path + ".proto",
            fmt::format("the tag inside VLAN port '{}' (QinQ) is an 802.1Q tag: leave out "
                        "'proto' or give 802.1q",
                        v->parent));
    } else if (link && !link->is_afxdp() && !v->interface.empty()) {
      // vecflowd does not make VLAN devices on a DPDK port's interface: the PMD owns that
      // link, and the kernel would see the VLAN from the wrong side (net_tap) or not at all.
      c.err(locate(c.root, {k("ports"), i(pi), k("interface")}), path + ".interface",
            fmt::format("port '{}' is a dpdk port: its VLANs have no kernel device (their "
                        "kernel side is their exception path); leave out 'interface'",
                        link->name));
    } else if (p.mtu && parent.mtu && *p.mtu > *parent.mtu) {
      c.err(locate(c.root, {k("ports"), i(pi), k("mtu")}), path + ".mtu",
            fmt::format("mtu {} is above the mtu {} of parent '{}': a VLAN device's MTU is at "
                        "most its link's",
                        *p.mtu, *parent.mtu, v->parent));
    }
    if (auto [it, fresh] = vlans.emplace(std::tuple{v->parent, v->proto, v->vlan}, pi); !fresh) {
      c.err(locate(c.root, {k("ports"), i(pi), k("vlan")}), path + ".vlan",
            fmt::format("{} VLAN {} of port '{}' is already port '{}'",
                        v->proto == VlanProto::Dot1ad ? "802.1ad" : "802.1Q", v->vlan, v->parent,
                        cfg.ports[it->second].name));
    }
  }
}

// ---- vrfs: names, tables, a port in one VRF at most ----
void check_vrfs(const Checker& c) {
  const ApplianceConfig& cfg = c.cfg;
  if (cfg.vrfs.size() > kMaxVrfs - 1) {
    c.err(
        locate(c.root, {k("vrfs")}), "vrfs",
        fmt::format("{} VRFs: at most {} besides the default one", cfg.vrfs.size(), kMaxVrfs - 1));
  }
  std::map<std::string, size_t> names;
  std::map<uint32_t, size_t> tables;
  std::map<std::string, size_t> members;
  for (size_t vi = 0; vi < cfg.vrfs.size(); ++vi) {
    const VrfConfig& v = cfg.vrfs[vi];
    const std::string path = fmt::format("vrfs[{}]", vi);
    const YAML::Node name_at = locate(c.root, {k("vrfs"), i(vi), k("name")});
    if (v.name.empty() || v.name == kDefaultVrf) {
      c.err(name_at, path + ".name",
            fmt::format("'{}' is not a VRF's name: the ports no VRF names are VRF '{}'", v.name,
                        kDefaultVrf));
    } else if (auto [it, fresh] = names.emplace(v.name, vi); !fresh) {
      c.err(name_at, path + ".name", fmt::format("VRF '{}' is declared twice", v.name));
    }
    if (v.table != 0) {
      const YAML::Node at = locate(c.root, {k("vrfs"), i(vi), k("table")});
      // 253-255 are Linux's default, main and local tables: the default VRF's.
      if (v.table >= 253 && v.table <= 255) {
        c.err(at, path + ".table",
              fmt::format("table {} is one of the kernel's own (default 253, main 254, local "
                          "255), which the default VRF follows",
                          v.table));
      } else if (auto [it, fresh] = tables.emplace(v.table, vi); !fresh) {
        c.err(at, path + ".table",
              fmt::format("table {} is VRF {}'s already", v.table, cfg.vrfs[it->second].name));
      }
    }
    if (!v.conntrack_zone.empty() && v.conntrack_zone != kDefaultVrf) {
      const YAML::Node at = locate(c.root, {k("vrfs"), i(vi), k("conntrack_zone")});
      const auto zone = std::ranges::find_if(
          cfg.vrfs, [&](const VrfConfig& o) { return o.name == v.conntrack_zone; });
      if (zone == cfg.vrfs.end()) {
        c.err(at, path + ".conntrack_zone",
              fmt::format("no VRF '{}' (a VRF, or '{}')", v.conntrack_zone, kDefaultVrf));
      } else if (!zone->conntrack_zone.empty() && zone->conntrack_zone != zone->name) {
        c.err(at, path + ".conntrack_zone",
              fmt::format("VRF '{}' shares the zone of '{}': name '{}' instead", zone->name,
                          zone->conntrack_zone, zone->conntrack_zone));
      }
    }
    for (size_t pi = 0; pi < v.ports.size(); ++pi) {
      const YAML::Node at = locate(c.root, {k("vrfs"), i(vi), k("ports"), i(pi)});
      const std::string pp = fmt::format("{}.ports[{}]", path, pi);
      if (!c.port_exists(v.ports[pi], at, pp)) continue;
      if (auto [it, fresh] = members.emplace(v.ports[pi], vi); !fresh) {
        c.err(at, pp,
              fmt::format("port '{}' is in VRF '{}' already: an interface is in one VRF",
                          v.ports[pi], cfg.vrfs[it->second].name));
      }
    }
  }
}

void check_steer_action(const Checker& c, const SteerAction& a, const YAML::Node& at,
                        const std::string& path) {
  if (a.kind != SteerActionKind::Redirect) return;
  if (!c.port_exists(a.redirect_port, at, path)) return;
  if (c.cfg.find_port(a.redirect_port)->is_vlan()) {
    c.err(at, path,
          fmt::format("redirect target '{}' is a vlan port: XDP cannot redirect into a VLAN "
                      "device",
                      a.redirect_port));
  } else if (!c.cfg.find_port(a.redirect_port)->kernel_interface()) {
    c.err(at, path,
          fmt::format("redirect target '{}' has no kernel interface (XDP redirects between "
                      "kernel interfaces only)",
                      a.redirect_port));
  }
}

// `rule_names`: the names of the rules before this one, by index.
void check_steering_rule(const Checker& c, size_t ri, std::map<std::string, size_t>& rule_names) {
  const auto& r = c.cfg.steering.rules[ri];
  std::string path = fmt::format("steering.rules[{}]", ri);
  auto at = [&](std::initializer_list<std::string> keys) {
    YAML::Node n = locate(c.root, {k("steering"), k("rules"), i(ri)});
    for (const auto& key : keys)
      n.reset(locate(n, {k(key)}));
    return n;
  };
  if (auto [it, fresh] = rule_names.emplace(r.name, ri); !fresh) {
    c.err(at({"name"}), path + ".name", fmt::format("duplicate rule name '{}'", r.name));
  }
  check_steer_action(c, r.action, at({"action"}), path + ".action");
  const auto& m = r.match;
  if (m.port && c.port_exists(*m.port, at({"match", "port"}), path + ".match.port")) {
    const PortConfig& port = *c.cfg.find_port(*m.port);
    if (const auto* v = std::get_if<VlanPort>(&port.kind)) {
      const PortConfig* parent = c.cfg.find_port(v->parent);  // none: check_vlan_ports says so
      const auto* outer = parent ? std::get_if<VlanPort>(&parent->kind) : nullptr;
      c.err(at({"match", "port"}), path + ".match.port",
            outer ? fmt::format("port '{}' is a QinQ port; steering sees its frames on the link: "
                                "match `port: {}`, `vlan: {}` and `inner_vlan: {}`",
                                *m.port, outer->parent, outer->vlan, v->vlan)
                  : fmt::format("port '{}' is a vlan port; steering sees its frames on the "
                                "parent's link: match `port: {}` and `vlan: {}`",
                                *m.port, v->parent, v->vlan));
    } else if (!port.is_afxdp()) {
      c.err(at({"match", "port"}), path + ".match.port",
            fmt::format("port '{}' is not an afxdp port; steering runs on afxdp ports only",
                        *m.port));
    }
  }
  if (!prefix_versions_agree(m.src, m.dst)) {
    c.err(at({"match"}), path + ".match", "src and dst are of different IP versions");
  }
  if (m.l3) {
    uint8_t want = *m.l3 == L3Proto::Ipv4 ? 4 : *m.l3 == L3Proto::Ipv6 ? 6 : 0;
    for (const auto* pfx : {&m.src, &m.dst}) {
      if (*pfx && (*pfx)->addr.version != want) {
        c.err(at({"match", "l3"}), path + ".match.l3",
              want == 0
                  ? "an arp rule cannot match IP prefixes"
                  : fmt::format("l3 is ipv{} but a prefix is IPv{}", want, (*pfx)->addr.version));
        break;
      }
    }
    if (*m.l3 == L3Proto::Arp && m.l4_proto) {
      c.err(at({"match", "proto"}), path + ".match.proto", "an arp rule has no L4 protocol");
    }
  }
  if ((m.src_port || m.dst_port) && !(m.l4_proto && has_ports(*m.l4_proto))) {
    c.err(at({"match"}), path + ".match", "src_port/dst_port need proto tcp, udp or sctp");
  }
}

// ---- steering ----
void check_steering(const Checker& c) {
  const auto& st = c.cfg.steering;
  bool any_afxdp = std::any_of(c.cfg.ports.begin(), c.cfg.ports.end(),
                               [](const PortConfig& p) { return p.is_afxdp(); });
  check_steer_action(c, st.default_action, locate(c.root, {k("steering"), k("default")}),
                     "steering.default");
  for (auto [a, key] :
       {std::pair{&st.malformed, "malformed"}, std::pair{&st.no_socket, "no_socket"}}) {
    if (a->kind != SteerActionKind::Drop && a->kind != SteerActionKind::Pass) {
      c.err(locate(c.root, {k("steering"), k(key)}), fmt::format("steering.{}", key),
            "must be 'drop' or 'pass'");
    }
  }
  if (!st.rules.empty() && !any_afxdp) {
    c.err(locate(c.root, {k("steering"), k("rules")}), "steering.rules",
          "steering rules run in the XDP program of afxdp ports, and no afxdp port is declared");
  }
  std::map<std::string, size_t> rule_names;
  for (size_t ri = 0; ri < st.rules.size(); ++ri)
    check_steering_rule(c, ri, rule_names);
}

// ---- scheduler ----
void check_scheduler(const Checker& c) {
  const auto& sc = c.cfg.scheduler;
  if (sc.backend == SchedBackend::Eventdev && sc.device.empty()) {
    c.err(locate(c.root, {k("scheduler")}), "scheduler.device",
          "the eventdev backend needs a device (e.g. event_dsw0, event_sw0)");
  }
  if (sc.backend == SchedBackend::Builtin && (!sc.device.empty() || !sc.devargs.empty())) {
    c.err(locate(c.root, {k("scheduler"), k(sc.device.empty() ? "devargs" : "device")}),
          "scheduler.device", "device/devargs apply to the eventdev backend only");
  }
}

// ---- pipeline ----
void check_pipeline(const Checker& c) {
  const bool dsw = eventdev_device(c.cfg.scheduler, "event_dsw");
  std::map<std::string, size_t> stage_names;
  for (size_t si = 0; si < c.cfg.pipeline.size(); ++si) {
    const auto& s = c.cfg.pipeline[si];
    std::string path = fmt::format("pipeline[{}]", si);
    YAML::Node sn = locate(c.root, {k("pipeline"), i(si)});
    if (auto [it, fresh] = stage_names.emplace(s.name, si); !fresh) {
      c.err(locate(sn, {k("name")}), path + ".name",
            fmt::format("duplicate stage name '{}'", s.name));
    }
    if (si == 0 && s.fuse) {
      c.err(locate(sn, {k("fuse")}), path + ".fuse",
            "the first stage has no previous stage to fuse with");
    }
    if (dsw && s.sched == SchedType::Ordered && !s.fuse) {
      c.err(locate(sn, {k("sched")}), path + ".sched",
            "event_dsw has no ordered queues (DPDK 22.11); use atomic, parallel, or the builtin "
            "backend");
    }
    if (s.kind && s.kind->check) {
      StageCheck check(c.ctx, c.cfg, si, sn);
      s.kind->check(check, s.params);
    }
  }
}

// ---- what the scheduler backend can hold ----
// One scheduler queue per stage that is not fused, plus the egress queue that restores
// order after an ordered stage (sched/from_config.h). The limits are those of the builtin
// backend (sched/scheduler.h: kMaxQueues) and of DPDK 22.11's software devices
// (drivers/event/dsw/dsw_evdev.h, drivers/event/sw/sw_evdev.h); a hardware device's own
// limits are checked when vecflowd configures it.
void check_scheduler_capacity(const Checker& c) {
  const auto& sc = c.cfg.scheduler;
  struct Limits {
    const char* name;
    size_t queues;
    uint32_t inflight;
  };
  std::optional<Limits> limits;
  if (sc.backend == SchedBackend::Builtin) limits = Limits{"the builtin scheduler", 32, 1u << 20};
  if (eventdev_device(sc, "event_dsw")) limits = Limits{"event_dsw", 16, 16384};
  if (eventdev_device(sc, "event_sw")) limits = Limits{"event_sw", 255, 4096};
  if (!limits) return;
  size_t queues = 0;
  bool ordered = false;
  for (const auto& s : c.cfg.pipeline) {
    if (!s.fuse) ++queues;
    ordered |= s.sched == SchedType::Ordered && !s.fuse;
  }
  if (ordered) ++queues;
  if (queues > limits->queues) {
    c.err(locate(c.root, {k("pipeline")}), "pipeline",
          fmt::format("{} stages that are not fused{} need {} scheduler queues; {} offers {} (fuse "
                      "stages that can run to completion together)",
                      queues - (ordered ? 1 : 0),
                      ordered ? " and the egress queue of ordered stages" : "", queues,
                      limits->name, limits->queues));
  }
  if (sc.queue_depth > limits->inflight) {
    c.err(locate(c.root, {k("scheduler"), k("queue_depth")}), "scheduler.queue_depth",
          fmt::format("{} events in flight is above the {} of {}", sc.queue_depth, limits->inflight,
                      limits->name));
  }
}

}  // namespace

void validate(Ctx& ctx, const YAML::Node& root, const ApplianceConfig& cfg) {
  const Checker c{ctx, root, cfg};
  check_ports(c);
  check_vlan_ports(c);
  check_vrfs(c);
  check_steering(c);
  check_scheduler(c);
  check_pipeline(c);
  check_scheduler_capacity(c);
}

}  // namespace vecflow::config::detail
