#include "config/validate.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

namespace vecflow::config::detail {
namespace {

// Finds the node at a path like {"steering", "rules", 2, "action"} for an error location;
// falls back to the deepest node that exists.
struct PathStep {
  std::string key;
  long index = -1;
};

YAML::Node locate(const YAML::Node& root, std::initializer_list<PathStep> steps) {
  YAML::Node cur = root;
  for (const auto& s : steps) {
    // YAML::Node's operator= assigns through to the referenced node (it edits the tree);
    // reset() is the rebinding assignment.
    if (s.index >= 0) {
      if (!cur.IsSequence() || static_cast<size_t>(s.index) >= cur.size()) return cur;
      cur.reset(cur[static_cast<size_t>(s.index)]);
    } else {
      if (!cur.IsMap()) return cur;
      bool found = false;
      for (auto it = cur.begin(); it != cur.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == s.key) {
          cur.reset(it->second);
          found = true;
          break;
        }
      }
      if (!found) return cur;
    }
  }
  return cur;
}

PathStep k(std::string key) {
  return PathStep{std::move(key), -1};
}
PathStep i(size_t index) {
  return PathStep{{}, static_cast<long>(index)};
}

std::string known_ports(const ApplianceConfig& cfg) {
  std::string s;
  for (const auto& p : cfg.ports)
    s += (s.empty() ? "" : ", ") + p.name;
  return s.empty() ? "none" : s;
}

bool prefix_versions_agree(const std::optional<IpPrefix>& a, const std::optional<IpPrefix>& b) {
  return !a || !b || a->addr.version == b->addr.version;
}

bool has_ports(uint8_t proto) {
  return proto == 6 || proto == 17 || proto == 132;
}

}  // namespace

void validate(Ctx& ctx, const YAML::Node& root, const ApplianceConfig& cfg) {
  auto err = [&](const YAML::Node& n, const std::string& path, std::string msg) {
    ctx.error(n, path, std::move(msg));
  };

  // ---- ports: names, interfaces, devices, queues, lcores ----
  std::map<std::string, size_t> names;
  std::map<std::string, size_t> ifaces;
  std::map<std::string, size_t> devices;
  std::set<unsigned> lcores(cfg.cpu.workers.begin(), cfg.cpu.workers.end());
  lcores.insert(cfg.cpu.control);
  if (cfg.ports.empty()) err(locate(root, {k("ports")}), "ports", "declare at least one port");
  for (size_t pi = 0; pi < cfg.ports.size(); ++pi) {
    const auto& p = cfg.ports[pi];
    std::string path = fmt::format("ports[{}]", pi);
    if (auto [it, fresh] = names.emplace(p.name, pi); !fresh) {
      err(locate(root, {k("ports"), i(pi), k("name")}), path + ".name",
          fmt::format("duplicate port name '{}' (first declared at line {})", p.name,
                      cfg.ports[it->second].where.line));
    }
    if (const std::string* ifname = p.kernel_interface()) {
      if (auto [it, fresh] = ifaces.emplace(*ifname, pi); !fresh) {
        err(locate(root, {k("ports"), i(pi)}), path,
            fmt::format("interface '{}' is already claimed by port '{}'", *ifname,
                        cfg.ports[it->second].name));
      }
    }
    if (auto* d = std::get_if<DpdkPort>(&p.kind)) {
      std::string dev = d->devargs.substr(0, d->devargs.find(','));
      if (auto [it, fresh] = devices.emplace(dev, pi); !fresh) {
        err(locate(root, {k("ports"), i(pi)}), path,
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
          err(locate(root, {k("ports"), i(pi), k("queues")}), path + ".queues",
              fmt::format("queue ranges overlap at queue {}", sorted[q].first));
        }
      }
    }
    if (p.lcore && !lcores.contains(*p.lcore)) {
      err(locate(root, {k("ports"), i(pi), k("lcore")}), path + ".lcore",
          fmt::format("lcore {} is neither cpu.control nor in cpu.workers", *p.lcore));
    }
  }
  for (size_t w = 0; w < cfg.scheduler.workers.size(); ++w) {
    if (!lcores.contains(cfg.scheduler.workers[w])) {
      err(locate(root, {k("scheduler"), k("workers"), i(w)}),
          fmt::format("scheduler.workers[{}]", w),
          fmt::format("lcore {} is not in cpu.workers", cfg.scheduler.workers[w]));
    }
  }

  auto port_exists = [&](const std::string& name, const YAML::Node& at, const std::string& path) {
    if (cfg.find_port(name)) return true;
    err(at, path, fmt::format("no port named '{}' (ports: {})", name, known_ports(cfg)));
    return false;
  };

  // ---- steering ----
  bool any_afxdp = std::any_of(cfg.ports.begin(), cfg.ports.end(),
                               [](const PortConfig& p) { return p.is_afxdp(); });
  const auto& st = cfg.steering;
  auto check_action = [&](const SteerAction& a, const YAML::Node& at, const std::string& path) {
    if (a.kind != SteerActionKind::Redirect) return;
    if (!port_exists(a.redirect_port, at, path)) return;
    if (!cfg.find_port(a.redirect_port)->kernel_interface()) {
      err(at, path,
          fmt::format("redirect target '{}' has no kernel interface (XDP redirects between "
                      "kernel interfaces only)",
                      a.redirect_port));
    }
  };
  check_action(st.default_action, locate(root, {k("steering"), k("default")}), "steering.default");
  for (auto [a, key] :
       {std::pair{&st.malformed, "malformed"}, std::pair{&st.no_socket, "no_socket"}}) {
    if (a->kind != SteerActionKind::Drop && a->kind != SteerActionKind::Pass) {
      err(locate(root, {k("steering"), k(key)}), fmt::format("steering.{}", key),
          "must be 'drop' or 'pass'");
    }
  }
  if (!st.rules.empty() && !any_afxdp) {
    err(locate(root, {k("steering"), k("rules")}), "steering.rules",
        "steering rules run in the XDP program of afxdp ports, and no afxdp port is declared");
  }
  std::map<std::string, size_t> rule_names;
  for (size_t ri = 0; ri < st.rules.size(); ++ri) {
    const auto& r = st.rules[ri];
    std::string path = fmt::format("steering.rules[{}]", ri);
    auto at = [&](std::initializer_list<std::string> keys) {
      YAML::Node n = locate(root, {k("steering"), k("rules"), i(ri)});
      for (const auto& key : keys)
        n.reset(locate(n, {k(key)}));
      return n;
    };
    if (auto [it, fresh] = rule_names.emplace(r.name, ri); !fresh) {
      err(at({"name"}), path + ".name", fmt::format("duplicate rule name '{}'", r.name));
    }
    check_action(r.action, at({"action"}), path + ".action");
    const auto& m = r.match;
    if (m.port && port_exists(*m.port, at({"match", "port"}), path + ".match.port") &&
        !cfg.find_port(*m.port)->is_afxdp()) {
      err(at({"match", "port"}), path + ".match.port",
          fmt::format("port '{}' is not an afxdp port; steering runs on afxdp ports only",
                      *m.port));
    }
    if (!prefix_versions_agree(m.src, m.dst)) {
      err(at({"match"}), path + ".match", "src and dst are of different IP versions");
    }
    if (m.l3) {
      uint8_t want = *m.l3 == L3Proto::Ipv4 ? 4 : *m.l3 == L3Proto::Ipv6 ? 6 : 0;
      for (const auto* pfx : {&m.src, &m.dst}) {
        if (*pfx && (*pfx)->addr.version != want) {
          err(at({"match", "l3"}), path + ".match.l3",
              want == 0
                  ? "an arp rule cannot match IP prefixes"
                  : fmt::format("l3 is ipv{} but a prefix is IPv{}", want, (*pfx)->addr.version));
          break;
        }
      }
      if (*m.l3 == L3Proto::Arp && m.l4_proto) {
        err(at({"match", "proto"}), path + ".match.proto", "an arp rule has no L4 protocol");
      }
    }
    if ((m.src_port || m.dst_port) && !(m.l4_proto && has_ports(*m.l4_proto))) {
      err(at({"match"}), path + ".match", "src_port/dst_port need proto tcp, udp or sctp");
    }
  }

  // ---- scheduler ----
  const auto& sc = cfg.scheduler;
  if (sc.backend == SchedBackend::Eventdev && sc.device.empty()) {
    err(locate(root, {k("scheduler")}), "scheduler.device",
        "the eventdev backend needs a device (e.g. event_dsw0, event_sw0)");
  }
  if (sc.backend == SchedBackend::Builtin && (!sc.device.empty() || !sc.devargs.empty())) {
    err(locate(root, {k("scheduler"), k(sc.device.empty() ? "devargs" : "device")}),
        "scheduler.device", "device/devargs apply to the eventdev backend only");
  }
  bool dsw = sc.backend == SchedBackend::Eventdev && sc.device.rfind("event_dsw", 0) == 0;
  bool sw = sc.backend == SchedBackend::Eventdev && sc.device.rfind("event_sw", 0) == 0;

  // ---- pipeline ----
  std::map<std::string, size_t> stage_names;
  for (size_t si = 0; si < cfg.pipeline.size(); ++si) {
    const auto& s = cfg.pipeline[si];
    std::string path = fmt::format("pipeline[{}]", si);
    YAML::Node sn = locate(root, {k("pipeline"), i(si)});
    if (auto [it, fresh] = stage_names.emplace(s.name, si); !fresh) {
      err(locate(sn, {k("name")}), path + ".name",
          fmt::format("duplicate stage name '{}'", s.name));
    }
    if (si == 0 && s.fuse) {
      err(locate(sn, {k("fuse")}), path + ".fuse",
          "the first stage has no previous stage to fuse with");
    }
    if (dsw && s.sched == SchedType::Ordered && !s.fuse) {
      err(locate(sn, {k("sched")}), path + ".sched",
          "event_dsw has no ordered queues (DPDK 22.11); use atomic, parallel, or the builtin "
          "backend");
    }
    if (auto* r = std::get_if<RouteStage>(&s.params)) {
      std::set<std::pair<std::string, int>> seen;
      for (size_t ri = 0; ri < r->routes.size(); ++ri) {
        const auto& route = r->routes[ri];
        YAML::Node rn = locate(sn, {k("routes"), i(ri)});
        std::string rp = fmt::format("{}.routes[{}]", path, ri);
        if (!seen.emplace(route.prefix.addr.to_string(), route.prefix.length).second) {
          err(locate(rn, {k("prefix")}), rp + ".prefix",
              fmt::format("duplicate route {} (list next hops under 'nexthops' for ECMP)",
                          route.prefix.to_string()));
        }
        for (size_t ni = 0; ni < route.nexthops.size(); ++ni) {
          YAML::Node at = route.nexthops.size() == 1 && !locate(rn, {k("nexthops")}).IsSequence()
                              ? locate(rn, {k("port")})
                              : locate(rn, {k("nexthops"), i(ni), k("port")});
          port_exists(route.nexthops[ni].port, at, rp + ".port");
        }
      }
    } else if (auto* n = std::get_if<NeighbourStage>(&s.params)) {
      for (size_t ni = 0; ni < n->entries.size(); ++ni) {
        port_exists(n->entries[ni].port, locate(sn, {k("static"), i(ni), k("port")}),
                    fmt::format("{}.static[{}].port", path, ni));
      }
      // Held packets are given back on the worker that holds them, which runs the stages of
      // the neighbour stage's group after it, and nothing beyond.
      for (size_t sj = si + 1; sj < cfg.pipeline.size(); ++sj) {
        if (n->unresolved != Unresolved::Hold || cfg.pipeline[sj].fuse) continue;
        err(locate(sn, {k("unresolved")}), path + ".unresolved",
            fmt::format("unresolved: hold (the default) sends held packets from the worker that "
                        "holds them, so the stages after it must run there: fuse stage '{}' to "
                        "it (fuse: true), or choose unresolved: kernel or drop",
                        cfg.pipeline[sj].name));
        break;
      }
    } else if (auto* a = std::get_if<AclStage>(&s.params)) {
      for (size_t ai = 0; ai < a->rules.size(); ++ai) {
        const auto& m = a->rules[ai].match;
        YAML::Node an = locate(sn, {k("rules"), i(ai)});
        std::string ap = fmt::format("{}.rules[{}]", path, ai);
        if (!prefix_versions_agree(m.src, m.dst)) {
          err(an, ap, "src and dst are of different IP versions");
        }
        if ((m.src_port || m.dst_port) && !(m.l4_proto && has_ports(*m.l4_proto))) {
          err(an, ap, "src_port/dst_port need proto tcp, udp or sctp");
        }
      }
    } else if (auto* l2 = std::get_if<L2Stage>(&s.params)) {
      std::set<std::string> seen;
      for (size_t li = 0; li < l2->ports.size(); ++li) {
        YAML::Node ln = locate(sn, {k("ports"), i(li), k("port")});
        std::string lp = fmt::format("{}.ports[{}].port", path, li);
        if (port_exists(l2->ports[li].port, ln, lp) && !seen.insert(l2->ports[li].port).second) {
          err(ln, lp, fmt::format("port '{}' listed twice", l2->ports[li].port));
        }
      }
    } else if (auto* mi = std::get_if<MirrorStage>(&s.params)) {
      if (!mi->port.empty()) {
        port_exists(mi->port, locate(sn, {k("to"), k("port")}), path + ".to.port");
      }
      if (!mi->pcapng.empty()) {
        // Captures are written only below control.capture_dir: an appliance file must not be
        // able to make vecflowd write anywhere else as root.
        const std::string& f = mi->pcapng;
        bool escapes = f.find("..") != std::string::npos ||
                       (f[0] == '/' && f.rfind(cfg.control.capture_dir + "/", 0) != 0);
        if (escapes) {
          err(locate(sn, {k("to"), k("pcapng")}), path + ".to.pcapng",
              fmt::format("'{}' is outside control.capture_dir ({}); give a file name relative "
                          "to it",
                          f, cfg.control.capture_dir));
        }
      }
    }
  }

  // ---- what the scheduler backend can hold ----
  // One scheduler queue per stage that is not fused, plus the egress queue that restores
  // order after an ordered stage (sched/from_config.h). The limits are those of the builtin
  // backend (sched/scheduler.h: kMaxQueues) and of DPDK 22.11's software devices
  // (drivers/event/dsw/dsw_evdev.h, drivers/event/sw/sw_evdev.h); a hardware device's own
  // limits are checked when vecflowd configures it.
  struct Limits {
    const char* name;
    size_t queues;
    uint32_t inflight;
  };
  std::optional<Limits> limits;
  if (sc.backend == SchedBackend::Builtin) limits = Limits{"the builtin scheduler", 32, 1u << 20};
  if (dsw) limits = Limits{"event_dsw", 16, 16384};
  if (sw) limits = Limits{"event_sw", 255, 4096};
  if (limits) {
    size_t queues = 0;
    bool ordered = false;
    for (const auto& s : cfg.pipeline) {
      if (!s.fuse) ++queues;
      ordered |= s.sched == SchedType::Ordered && !s.fuse;
    }
    if (ordered) ++queues;
    if (queues > limits->queues) {
      err(locate(root, {k("pipeline")}), "pipeline",
          fmt::format("{} stages that are not fused{} need {} scheduler queues; {} offers {} (fuse "
                      "stages that can run to completion together)",
                      queues - (ordered ? 1 : 0),
                      ordered ? " and the egress queue of ordered stages" : "", queues,
                      limits->name, limits->queues));
    }
    if (sc.queue_depth > limits->inflight) {
      err(locate(root, {k("scheduler"), k("queue_depth")}), "scheduler.queue_depth",
          fmt::format("{} events in flight is above the {} of {}", sc.queue_depth, limits->inflight,
                      limits->name));
    }
  }
}

}  // namespace vecflow::config::detail
