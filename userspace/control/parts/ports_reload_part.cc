#include "control/parts/ports_reload_part.h"

#include <algorithm>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "control/config_json.h"
#include "core/log.h"
#include "io/port_factory.h"

namespace vecflow::control {
namespace {

// The ports as `vecflowctl config` shows them, by name: every default filled in.
std::map<std::string, Json> ports_by_name(const config::ApplianceConfig& c) {
  config::ApplianceConfig only;
  only.ports = c.ports;
  const Json all = config_to_json(only);  // kept: the loop below reads into it
  std::map<std::string, Json> out;
  for (const auto& p : all["ports"])
    out[p["name"].get<std::string>()] = p;
  return out;
}

std::string kind_of(const Json& port) {
  return port.value("type", std::string("afxdp"));
}

// Whether a VLAN port of `c` sits on `name` (a QinQ service VLAN's customers).
bool has_vlan_ports(const config::ApplianceConfig& c, const std::string& name) {
  return std::ranges::any_of(c.ports, [&](const config::PortConfig& p) {
    const auto* v = std::get_if<config::VlanPort>(&p.kind);
    return v != nullptr && v->parent == name;
  });
}

// The VLAN ports of both configurations that `next` declares otherwise, in next's order:
// a reload replaces them.
std::vector<std::string> changed_vlan_ports(const config::ApplianceConfig& running,
                                            const config::ApplianceConfig& next) {
  const auto a = ports_by_name(running);
  const auto b = ports_by_name(next);
  std::vector<std::string> out;
  for (const auto& p : next.ports) {
    const auto was = a.find(p.name);
    if (was != a.end() && was->second != b.at(p.name) && kind_of(was->second) == "vlan" &&
        kind_of(b.at(p.name)) == "vlan")
      out.push_back(p.name);
  }
  return out;
}

// 0 for a link, 1 for a VLAN port, 2 for a QinQ customer: parents before their VLAN ports.
size_t depth(const config::ApplianceConfig& c, const std::string& name) {
  const config::PortConfig* p = c.find_port(name);
  return p ? vlan_tags(c, *p).count() : 0;
}

// The state a reload leaves between its sections' apply and its end (Reloader::on_applied).
class PortsReload {
 public:
  PortsReload(PortEditor editor, const config::ApplianceConfig& running)
      : ed_(std::move(editor)), running_(running) {
    for (const auto& p : running.ports)
      applied_.push_back(p.name);
  }

  Result<void> apply(const config::ApplianceConfig& next) {
    const auto in = [](const std::vector<std::string>& v, const std::string& n) {
      return std::ranges::find(v, n) != v.end();
    };
    // A reload undone (`next` is the running configuration): the replaced ports as they ran.
    while (!replaced_.empty())
      restore_replaced();
    std::vector<std::string> next_names;
    for (const auto& p : next.ports)
      next_names.push_back(p.name);
    // A reload undone: the ports it added and not yet published go, those it removed come back.
    for (auto it = unpublished_.rbegin(); it != unpublished_.rend(); ++it) {
      if (in(next_names, *it)) continue;
      ed_.retire(*it);
      std::erase(applied_, *it);
    }
    std::erase_if(unpublished_, [&](const std::string& n) { return !in(next_names, n); });
    for (const auto& n : detached_) {
      if (!in(next_names, n)) continue;
      ed_.reattach(n);
      applied_.push_back(n);
    }
    std::erase_if(detached_, [&](const std::string& n) { return in(next_names, n); });

    std::vector<std::string> added;
    for (const auto& n : next_names) {
      if (!in(applied_, n)) added.push_back(n);
    }
    std::ranges::stable_sort(added, {}, [&](const std::string& n) { return depth(next, n); });
    std::vector<std::string> done;
    const auto undo_adds = [&] {
      for (auto it = done.rbegin(); it != done.rend(); ++it)
        ed_.retire(*it);
      std::erase_if(unpublished_, [&](const std::string& u) { return in(done, u); });
    };
    for (const auto& n : added) {
      if (auto r = ed_.add(next, *next.find_port(n)); !r) {
        undo_adds();
        return fail("port '{}': {}", n, r.error().message);
      }
      done.push_back(n);
      unpublished_.push_back(n);
    }
    // A changed VLAN port goes and comes back as declared now, under its id (its counters go
    // on); its tags are claimed again with the added ports'. No VLAN port sits on it (else the
    // change needs a restart), so nothing else refers to the port object it replaces.
    for (const auto& n : changed_vlan_ports(running_, next)) {
      ed_.detach(n);
      ed_.retire(n);
      replaced_.push_back(n);
      if (auto r = ed_.add(next, *next.find_port(n)); !r) {
        while (!replaced_.empty())
          restore_replaced();
        undo_adds();
        return fail("port '{}': {}", n, r.error().message);
      }
      unpublished_.push_back(n);
    }
    for (const auto& n : applied_) {
      if (in(next_names, n)) continue;
      ed_.detach(n);
      detached_.push_back(n);
      removed_from_[n] = depth_now_.contains(n) ? depth_now_[n] : 0;
    }
    applied_ = next_names;
    return {};
  }

  // The reload applied: the added ports receive, the removed ones go (QinQ customers before
  // their service VLAN).
  void finish() {
    for (const auto& n : unpublished_)
      ed_.publish(n);
    unpublished_.clear();
    replaced_.clear();
    std::ranges::stable_sort(detached_, std::greater<>{},
                             [&](const std::string& n) { return removed_from_[n]; });
    for (const auto& n : detached_)
      ed_.retire(n);
    detached_.clear();
    removed_from_.clear();
  }

  // Depths of the running ports, kept for the removed ones' order.
  void note_depths(const config::ApplianceConfig& c) {
    depth_now_.clear();
    for (const auto& p : c.ports)
      depth_now_[p.name] = depth(c, p.name);
  }

 private:
  // The last replaced port as it ran before this reload, its tags claimed again.
  void restore_replaced() {
    const std::string n = replaced_.back();
    replaced_.pop_back();
    ed_.retire(n);
    std::erase(unpublished_, n);
    const config::PortConfig* p = running_.find_port(n);
    if (p == nullptr) return;
    if (auto r = ed_.add(running_, *p); !r) {
      log::get("control")->error("reload: port '{}' could not be put back: {}", n,
                                 r.error().message);
      return;
    }
    ed_.publish(n);
  }

  PortEditor ed_;
  const config::ApplianceConfig& running_;  // the Reloader's: the ports as they run
  std::vector<std::string> applied_;        // the ports running, as the last apply left them
  std::vector<std::string> replaced_;       // changed by this reload; put back if it fails
  std::vector<std::string> unpublished_;    // added; tags claimed at finish()
  std::vector<std::string> detached_;       // removed; retired at finish()
  std::map<std::string, size_t> removed_from_;
  std::map<std::string, size_t> depth_now_;
};

}  // namespace

std::vector<std::string> ports_restart_reasons(const config::ApplianceConfig& running,
                                               const config::ApplianceConfig& next) {
  std::vector<std::string> why;
  const auto a = ports_by_name(running);
  const auto b = ports_by_name(next);
  for (const auto& [name, port] : b) {
    const auto was = a.find(name);
    if (was == a.end()) {
      if (kind_of(port) != "vlan")
        why.push_back(fmt::format("port {} ({}) added: links are opened at start; {}", name,
                                  kind_of(port), kRestartToApply));
      continue;
    }
    if (was->second == port) continue;
    const bool vlan = kind_of(was->second) == "vlan" && kind_of(port) == "vlan";
    if (vlan && !has_vlan_ports(running, name) && !has_vlan_ports(next, name)) continue;
    std::vector<std::string> keys;
    Json all = was->second;
    all.update(port);
    for (auto it = all.begin(); it != all.end(); ++it) {
      if (was->second.value(it.key(), Json()) != port.value(it.key(), Json()))
        keys.push_back(it.key());
    }
    if (vlan) {
      why.push_back(fmt::format(
          "port {}: {} changed: VLAN ports sit on it (or remove them in one reload and declare "
          "them again with it in the next); {}",
          name, fmt::join(keys, ", "), kRestartToApply));
    } else {
      why.push_back(fmt::format("port {}: {} changed: a link keeps what it started with; {}", name,
                                fmt::join(keys, ", "), kRestartToApply));
    }
  }
  for (const auto& [name, port] : a) {
    if (!b.contains(name) && kind_of(port) != "vlan")
      why.push_back(fmt::format("port {} ({}) removed: links are closed at stop; {}", name,
                                kind_of(port), kRestartToApply));
  }
  return why;
}

std::vector<std::string> ports_after_reload(const config::ApplianceConfig& running,
                                            const config::ApplianceConfig& next) {
  const auto& ports = ports_restart_reasons(running, next).empty() ? next.ports : running.ports;
  std::vector<std::string> out;
  for (const auto& p : ports)
    out.push_back(p.name);
  return out;
}

std::vector<std::string> ports_changes(const config::ApplianceConfig& running,
                                       const config::ApplianceConfig& next) {
  std::vector<std::string> out;
  for (const auto& p : next.ports) {
    const auto* v = std::get_if<config::VlanPort>(&p.kind);
    if (v != nullptr && running.find_port(p.name) == nullptr)
      out.push_back(fmt::format("port {}: added, VLAN {} of {}", p.name, v->vlan, v->parent));
  }
  for (const auto& n : changed_vlan_ports(running, next)) {
    const auto& was = std::get<config::VlanPort>(running.find_port(n)->kind);
    const auto& now = std::get<config::VlanPort>(next.find_port(n)->kind);
    out.push_back(fmt::format("port {}: replaced, VLAN {} of {} (was VLAN {} of {})", n, now.vlan,
                              now.parent, was.vlan, was.parent));
  }
  for (const auto& p : running.ports) {
    if (next.find_port(p.name) == nullptr) out.push_back(fmt::format("port {}: removed", p.name));
  }
  return out;
}

void register_ports_reload(Reloader& reloader, PortEditor editor,
                           const config::ApplianceConfig& running) {
  auto state = std::make_shared<PortsReload>(std::move(editor), running);
  state->note_depths(running);
  reloader.add_section(
      "ports",
      {ports_restart_reasons,
       [state](const config::ApplianceConfig& next) { return state->apply(next); }},
      ports_changes);
  reloader.on_applied([state, &running] {
    state->finish();
    state->note_depths(running);
  });
}

}  // namespace vecflow::control
