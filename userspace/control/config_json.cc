#include "control/config_json.h"

#include "config/stage_type.h"

#include <fmt/format.h>

#include <set>

namespace vecflow::control {
namespace {

using namespace config;

template <typename T>
Json opt(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

Json action(const SteerAction& a) {
  if (a.kind == SteerActionKind::Redirect) return Json{{"redirect", a.redirect_port}};
  return to_string(a.kind);
}

std::string_view l3_name(L3Proto p) {
  switch (p) {
    case L3Proto::Ipv4:
      return "ipv4";
    case L3Proto::Ipv6:
      return "ipv6";
    case L3Proto::Arp:
      return "arp";
  }
  return "?";
}

std::string_view xdp_mode_name(XdpAttachMode m) {
  switch (m) {
    case XdpAttachMode::Auto:
      return "auto";
    case XdpAttachMode::Native:
      return "native";
    case XdpAttachMode::Generic:
      return "generic";
  }
  return "?";
}

std::string_view hugepages_name(HugePages h) {
  switch (h) {
    case HugePages::Auto:
      return "auto";
    case HugePages::On:
      return "on";
    case HugePages::Off:
      return "off";
  }
  return "?";
}

std::string_view log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Trace:
      return "trace";
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warn";
    case LogLevel::Error:
      return "error";
  }
  return "?";
}

Json port_json(const PortConfig& p) {
  Json j = {{"name", p.name}, {"lcore", opt(p.lcore)}};
  if (const auto* a = std::get_if<AfXdpPort>(&p.kind)) {
    // As the file says it: `all` stays `all` once start-up filled in the interface's queues
    // (`status` shows those), so reloading the same file changes nothing.
    Json queues = Json::array();
    for (const auto& q : a->queues) {
      const std::string span = q.count == 1 ? std::to_string(q.first)
                                            : fmt::format("{}-{}", q.first, q.first + q.count - 1);
      queues.push_back({{"queues", span}, {"owner", to_string(q.owner)}});
    }
    j["type"] = "afxdp";
    j["interface"] = a->interface;
    j["queues"] = a->all_queues ? Json("all") : std::move(queues);
    j["other_queues"] = a->other_queues ? Json(to_string(*a->other_queues)) : Json(nullptr);
    j["mode"] = to_string(a->mode);
    j["xdp_mode"] = xdp_mode_name(a->xdp_mode);
    j["busy_poll"] = {{"enabled", a->busy_poll.enabled},
                      {"budget", a->busy_poll.budget},
                      {"timeout_us", a->busy_poll.timeout_us}};
    j["ring_size"] = a->ring_size;
    j["frame_size"] = a->frame_size;
  } else if (const auto* v = std::get_if<VlanPort>(&p.kind)) {
    j["type"] = "vlan";
    j["parent"] = v->parent;
    j["vlan"] = v->vlan;
    j["proto"] = v->proto == VlanProto::Dot1ad ? "802.1ad" : "802.1q";
    j["interface"] = v->interface;  // the default filled in: what vecflowd creates or follows
  } else {
    const auto& d = std::get<DpdkPort>(p.kind);
    j["type"] = "dpdk";
    j[d.is_pci ? "pci" : "devargs"] = d.devargs;
    j["queues"] = d.queues;
    j["rx_descriptors"] = d.rx_descriptors;
    j["tx_descriptors"] = d.tx_descriptors;
  }
  return j;
}

Json rule_json(const SteerRule& r) {
  const SteerMatch& m = r.match;
  Json match = {{"port", opt(m.port)},
                {"vlan", opt(m.vlan)},
                {"inner_vlan", opt(m.inner_vlan)},
                {"l3", m.l3 ? Json(l3_name(*m.l3)) : Json(nullptr)},
                {"src", prefix_json(m.src)},
                {"dst", prefix_json(m.dst)},
                {"proto", l4_proto_json(m.l4_proto)},
                {"src_port", port_range_json(m.src_port)},
                {"dst_port", port_range_json(m.dst_port)}};
  return {
      {"name", r.name}, {"priority", r.priority}, {"match", match}, {"action", action(r.action)}};
}

// ---- diff -------------------------------------------------------------------------------------

std::string key_of(const Json& items) {
  if (!items.is_array() || items.empty()) return {};
  for (const char* key : {"name", "prefix", "ip", "port"}) {
    std::set<std::string> seen;
    bool ok = true;
    for (const auto& item : items) {
      if (!item.is_object() || !item.contains(key) || !item[key].is_string() ||
          !seen.insert(item[key].get<std::string>()).second) {
        ok = false;
        break;
      }
    }
    if (ok) return key;
  }
  return {};
}

void diff_values(const std::string& section, const std::string& path, const Json& a, const Json& b,
                 std::vector<ConfigChange>& out);

void diff_arrays(const std::string& section, const std::string& path, const Json& a, const Json& b,
                 std::vector<ConfigChange>& out) {
  std::string ka = key_of(a);
  std::string kb = key_of(b);
  std::string key = ka == kb ? ka : std::string();
  if ((a.empty() || b.empty()) && !(ka.empty() && kb.empty())) key = ka.empty() ? kb : ka;
  if (key.empty()) {
    size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      std::string p = fmt::format("{}[{}]", path, i);
      if (i >= a.size()) {
        out.push_back({section, p, "added", nullptr, b[i]});
      } else if (i >= b.size()) {
        out.push_back({section, p, "removed", a[i], nullptr});
      } else {
        diff_values(section, p, a[i], b[i], out);
      }
    }
    return;
  }
  auto find = [&key](const Json& list, const std::string& name) -> const Json* {
    for (const auto& item : list) {
      if (item[key] == name) return &item;
    }
    return nullptr;
  };
  std::vector<std::string> common_a;
  for (const auto& item : a) {
    std::string name = item[key].get<std::string>();
    std::string p = fmt::format("{}[{}]", path, name);
    if (const Json* other = find(b, name)) {
      common_a.push_back(name);
      diff_values(section, p, item, *other, out);
    } else {
      out.push_back({section, p, "removed", item, nullptr});
    }
  }
  std::vector<std::string> common_b;
  for (const auto& item : b) {
    std::string name = item[key].get<std::string>();
    if (find(a, name)) {
      common_b.push_back(name);
    } else {
      out.push_back({section, fmt::format("{}[{}]", path, name), "added", nullptr, item});
    }
  }
  if (common_a != common_b) {
    out.push_back({section, path, "reordered", Json(common_a), Json(common_b)});
  }
}

void diff_values(const std::string& section, const std::string& path, const Json& a, const Json& b,
                 std::vector<ConfigChange>& out) {
  if (a == b) return;
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items()) {
      std::string p = path.empty() ? k : path + "." + k;
      if (b.contains(k)) {
        diff_values(section, p, v, b[k], out);
      } else {
        out.push_back({section, p, "removed", v, nullptr});
      }
    }
    for (const auto& [k, v] : b.items()) {
      if (!a.contains(k))
        out.push_back({section, path.empty() ? k : path + "." + k, "added", nullptr, v});
    }
    return;
  }
  if (a.is_array() && b.is_array()) {
    diff_arrays(section, path, a, b, out);
    return;
  }
  out.push_back({section, path, "changed", a, b});
}

}  // namespace

const std::vector<std::string>& config_sections() {
  static const std::vector<std::string> kSections = {
      "appliance", "cpu",  "dpdk",     "logging", "ports",   "steering",
      "scheduler", "vrfs", "pipeline", "icmp",    "offload", "control"};
  return kSections;
}

Json config_to_json(const ApplianceConfig& c) {
  Json j;
  j["appliance"] = {{"name", c.appliance.name}};
  j["cpu"] = {{"control", c.cpu.control},
              {"workers", c.cpu.workers},
              {"profile", c.cpu.profile == CpuProfile::Latency ? "latency" : "power"},
              {"spin_us", c.cpu.spin_us},
              {"idle_sleep_max_us", c.cpu.idle_sleep_max_us},
              {"stall_after_ms", c.cpu.stall_after_ms}};
  j["dpdk"] = {{"memory_mb", c.dpdk.memory_mb},
               {"hugepages", hugepages_name(c.dpdk.hugepages)},
               {"file_prefix", c.dpdk.file_prefix},
               {"eal_args", c.dpdk.eal_args},
               {"mbufs", c.dpdk.mbufs},
               {"mbuf_cache", c.dpdk.mbuf_cache},
               {"multiprocess", c.dpdk.multiprocess}};
  j["logging"] = {{"level", log_level_name(c.logging.level)}};
  Json ports = Json::array();
  for (const auto& p : c.ports)
    ports.push_back(port_json(p));
  j["ports"] = std::move(ports);
  Json rules = Json::array();
  for (const auto& r : c.steering.rules)
    rules.push_back(rule_json(r));
  j["steering"] = {
      {"default", action(c.steering.default_action)},
      {"malformed", action(c.steering.malformed)},
      {"no_socket", action(c.steering.no_socket)},
      {"symmetric_hash", c.steering.symmetric_hash},
      {"on_detach", c.steering.on_detach == config::OnDetach::Exit ? "exit" : "reattach"},
      {"rules", std::move(rules)}};
  const auto& s = c.scheduler;
  j["scheduler"] = {{"backend", to_string(s.backend)},
                    {"device", s.device},
                    {"devargs", s.devargs},
                    {"workers", s.workers},
                    {"path", s.path == config::SchedPath::Auto ? "auto" : "scheduled"},
                    {"vector",
                     {{"size", s.vector_size},
                      {"timeout_us", s.vector_timeout_us},
                      {"buckets", s.vector_buckets ? Json(s.vector_buckets) : Json("auto")}}},
                    {"queue_depth", s.queue_depth},
                    {"worker_backlog", s.worker_backlog},
                    {"flow_id", to_string(s.flow_id)}};
  Json stages = Json::array();
  for (const auto& st : c.pipeline) {
    Json stage = {
        {"name", st.name}, {"stage", st.type}, {"sched", to_string(st.sched)}, {"fuse", st.fuse}};
    if (st.kind) stage.update(st.kind->to_json(st.params));
    stages.push_back(std::move(stage));
  }
  j["pipeline"] = std::move(stages);
  Json vrfs = Json::array();
  for (const auto& v : c.vrfs)
    vrfs.push_back(
        {{"name", v.name},
         {"table", v.table ? Json(v.table) : Json()},
         {"ports", v.ports},
         {"conntrack_zone", v.conntrack_zone.empty() ? Json() : Json(v.conntrack_zone)}});
  j["vrfs"] = std::move(vrfs);
  j["icmp"] = {{"ratelimit_ms", c.icmp.ratelimit_ms},
               {"burst", c.icmp.burst},
               {"per_second", c.icmp.per_second}};
  j["offload"] = {{"enabled", c.offload.enabled},
                  {"table_size", c.offload.table_size},
                  {"idle_timeout_ms", c.offload.idle_timeout_ms},
                  {"sweep_ms", c.offload.sweep_ms}};
  j["control"] = {{"socket", c.control.socket},
                  {"mode", fmt::format("{:04o}", c.control.socket_mode)},
                  {"group", c.control.group},
                  {"metrics", c.control.metrics},
                  {"capture_dir", c.control.capture_dir},
                  {"max_request_bytes", c.control.max_request_bytes},
                  {"read_timeout_ms", c.control.read_timeout_ms},
                  {"fault_injection", c.control.fault_injection}};
  return j;
}

std::vector<ConfigChange> diff_configs(const ApplianceConfig& before,
                                       const ApplianceConfig& after) {
  Json a = config_to_json(before);
  Json b = config_to_json(after);
  std::vector<ConfigChange> out;
  for (const auto& section : config_sections())
    diff_values(section, section, a[section], b[section], out);
  return out;
}

Json to_json(const ConfigChange& c) {
  Json j = {{"section", c.section}, {"path", c.path}, {"op", c.op}};
  if (c.op != "added") j["from"] = c.from;
  if (c.op != "removed") j["to"] = c.to;
  return j;
}

void copy_section(ApplianceConfig& to, const ApplianceConfig& from, std::string_view section) {
  if (section == "appliance") to.appliance = from.appliance;
  if (section == "cpu") to.cpu = from.cpu;
  if (section == "dpdk") to.dpdk = from.dpdk;
  if (section == "logging") to.logging = from.logging;
  if (section == "ports") to.ports = from.ports;
  if (section == "steering") to.steering = from.steering;
  if (section == "scheduler") to.scheduler = from.scheduler;
  if (section == "pipeline") to.pipeline = from.pipeline;
  if (section == "vrfs") to.vrfs = from.vrfs;
  if (section == "icmp") to.icmp = from.icmp;
  if (section == "offload") to.offload = from.offload;
  if (section == "control") to.control = from.control;
}

}  // namespace vecflow::control
