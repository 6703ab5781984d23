// YAML -> ApplianceConfig. Section readers fill the structs and record located errors; the
// cross-checks between sections live in validate.cc.
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include "config/config.h"
#include "config/ports.h"
#include "config/reader.h"
#include "config/stage_type.h"
#include "config/validate.h"
#include "core/ids.h"

namespace vecflow::config {

using detail::Ctx;
using detail::MapReader;
using detail::read_string;

std::string ConfigError::to_string() const {
  std::string loc =
      where.line > 0 ? fmt::format("{}:{}:{}", where.file, where.line, where.column) : where.file;
  return path.empty() ? fmt::format("{}: {}", loc, message)
                      : fmt::format("{}: {}: {}", loc, path, message);
}

bool kernel_has_xsk_multi_buffer(std::string_view release) {
  unsigned major = 0, minor = 0;
  const char* end = release.data() + release.size();
  auto [p, ec] = std::from_chars(release.data(), end, major);
  if (ec != std::errc() || p == end || *p != '.') return false;
  if (std::from_chars(p + 1, end, minor).ec != std::errc()) return false;
  return major > 6 || (major == 6 && minor >= 6);
}

const std::string* PortConfig::kernel_interface() const {
  if (auto* a = std::get_if<AfXdpPort>(&kind)) return &a->interface;
  // Empty only while the loader has not named the VLAN device (its parent is not known yet).
  if (auto* v = std::get_if<VlanPort>(&kind)) return v->interface.empty() ? nullptr : &v->interface;
  const auto& d = std::get<DpdkPort>(kind);
  return d.interface.empty() ? nullptr : &d.interface;
}

std::string queue_list(uint64_t mask) {
  std::string out;
  for (unsigned q = 0; q < 64; ++q) {
    if (!(mask >> q & 1)) continue;
    unsigned last = q;
    while (last + 1 < 64 && (mask >> (last + 1) & 1))
      ++last;
    out += fmt::format("{}{}", out.empty() ? "" : ", ", q);
    if (last > q) out += fmt::format("-{}", last);
    q = last;
  }
  return out;
}

std::optional<ConfigError> resolve_rx_queues(ApplianceConfig& cfg, size_t port,
                                             unsigned interface_queues) {
  auto& a = std::get<AfXdpPort>(cfg.ports[port].kind);
  auto refuse = [&](std::string message) {
    return ConfigError{a.queues_where, fmt::format("ports[{}].queues", port), std::move(message)};
  };
  const auto plural = [](unsigned n) { return n == 1 ? "" : "s"; };
  if (a.all_queues) {
    if (interface_queues > kMaxRxQueues) {
      return refuse(fmt::format(
          "interface {} has {} rx queues; a port reads at most {} (queues 0-{}): name the "
          "queues to read and say what happens to the others (`other_queues: pass` or `drop`), "
          "or lower the count (ethtool -L {} rx|combined N)",
          a.interface, interface_queues, kMaxRxQueues, kMaxRxQueues - 1, a.interface));
    }
    a.queues = {QueueRange{0, static_cast<uint16_t>(interface_queues), QueueOwner::Vecflow}};
    return std::nullopt;
  }
  uint64_t read = 0;
  unsigned count = 0;
  uint64_t missing = 0;
  for (const auto& r : a.queues) {
    for (unsigned q = r.first; q < unsigned{r.first} + r.count; ++q) {
      ++count;
      if (q >= kMaxRxQueues) {
        return refuse(fmt::format("the file reads queue {}, but a port reads at most {} (0-{})", q,
                                  kMaxRxQueues, kMaxRxQueues - 1));
      }
      (q < interface_queues ? read : missing) |= uint64_t{1} << q;
    }
  }
  if (missing) {
    return refuse(fmt::format(
        "interface {} has {} rx queue{} (0-{}), the file reads queue{} {} it does not have",
        a.interface, interface_queues, plural(interface_queues), interface_queues - 1,
        std::popcount(missing) == 1 ? "" : "s", queue_list(missing)));
  }
  // Queues past the socket map are never read.
  const unsigned beyond = interface_queues > kMaxRxQueues ? interface_queues - kMaxRxQueues : 0;
  const unsigned known = interface_queues - beyond;
  const uint64_t unread = (known == 64 ? ~uint64_t{0} : (uint64_t{1} << known) - 1) & ~read;
  if ((unread || beyond) && !a.other_queues) {
    std::string others = queue_list(unread);
    if (beyond)
      others += fmt::format("{}{}-{}", others.empty() ? "" : ", ", known, interface_queues - 1);
    return refuse(fmt::format(
        "interface {} has {} rx queues, the file reads {} (queue{} {}): flows the interface "
        "hashes to queue{} {} would bypass vecflow. Read them all (`queues: all`) or say what "
        "happens to the others (`other_queues: pass` hands them to the kernel, "
        "`other_queues: drop` drops them; either is counted)",
        a.interface, interface_queues, count, plural(count), queue_list(read),
        plural(std::popcount(unread) + beyond), others));
  }
  return std::nullopt;
}

const PortConfig* ApplianceConfig::find_port(std::string_view name) const {
  for (const auto& p : ports) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const PortConfig* ApplianceConfig::link_of(const PortConfig& port) const {
  const PortConfig* p = &port;
  // Bounded: the validation allows two VLAN levels; a file that loops stops here too.
  for (size_t depth = 0; depth <= ports.size(); ++depth) {
    const auto* v = std::get_if<VlanPort>(&p->kind);
    if (v == nullptr) return p;
    p = find_port(v->parent);
    if (p == nullptr) return nullptr;
  }
  return nullptr;
}

std::optional<uint16_t> ApplianceConfig::port_index(std::string_view name) const {
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i].name == name) return static_cast<uint16_t>(i);
  }
  return std::nullopt;
}

std::string_view to_string(SteerActionKind k) {
  switch (k) {
    case SteerActionKind::Pass:
      return "pass";
    case SteerActionKind::Drop:
      return "drop";
    case SteerActionKind::Userspace:
      return "userspace";
    case SteerActionKind::Tx:
      return "tx";
    case SteerActionKind::Redirect:
      return "redirect";
  }
  return "?";
}

std::string_view to_string(XskMode m) {
  switch (m) {
    case XskMode::Auto:
      return "auto";
    case XskMode::Copy:
      return "copy";
    case XskMode::ZeroCopy:
      return "zerocopy";
  }
  return "?";
}

namespace {

void read_appliance(Ctx& ctx, const YAML::Node& n, ApplianceSection& out) {
  MapReader m(ctx, n, "appliance", {"name"});
  if (m.get("name", out.name) && out.name.empty()) {
    ctx.error(m.child("name"), "appliance.name", "must not be empty");
  }
}

void read_cpu(Ctx& ctx, const YAML::Node& n, CpuSection& out) {
  MapReader m(ctx, n, "cpu",
              {"control", "workers", "profile", "spin_us", "idle_sleep_max_us", "stall_after_ms"});
  m.get_lcore("control", out.control);
  if (m.get_lcores("workers", out.workers) && out.workers.empty()) {
    ctx.error(m.child("workers"), "cpu.workers", "needs at least one lcore");
  }
  m.get_enum<CpuProfile>("profile", out.profile,
                         {{"power", CpuProfile::Power}, {"latency", CpuProfile::Latency}});
  m.get("spin_us", out.spin_us, 0, 1'000'000);
  m.get("idle_sleep_max_us", out.idle_sleep_max_us, 1, 1'000'000);
  if (out.profile == CpuProfile::Latency) {
    // Both tune how an lcore sleeps, which it never does with this profile.
    for (std::string_view key : {"spin_us", "idle_sleep_max_us"}) {
      if (m.has(key))
        ctx.error(m.child(key), m.key_path(key),
                  "has no effect with profile latency, whose lcores never sleep");
    }
  }
  m.get("stall_after_ms", out.stall_after_ms, 1, 3'600'000);
}

void read_dpdk(Ctx& ctx, const YAML::Node& n, DpdkSection& out) {
  MapReader m(
      ctx, n, "dpdk",
      {"memory_mb", "hugepages", "file_prefix", "eal_args", "mbufs", "mbuf_cache", "multiprocess"});
  m.get("memory_mb", out.memory_mb, 64, 1 << 20);
  m.get_enum<HugePages>(
      "hugepages", out.hugepages,
      {{"auto", HugePages::Auto}, {"on", HugePages::On}, {"off", HugePages::Off}});
  if (m.get("file_prefix", out.file_prefix)) {
    bool ok = !out.file_prefix.empty();
    for (char c : out.file_prefix) {
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
    }
    if (!ok) {
      ctx.error(m.child("file_prefix"), "dpdk.file_prefix",
                "must be letters, digits, '-' or '_' (it names files under /run/dpdk)");
    }
  }
  m.get_strings("eal_args", out.eal_args);
  m.get("mbufs", out.mbufs, 1024, 16u << 20);
  m.get("mbuf_cache", out.mbuf_cache, 0, 512);  // RTE_MEMPOOL_CACHE_MAX_SIZE
  if (m.get("multiprocess", out.multiprocess) && out.multiprocess &&
      out.hugepages == HugePages::Off) {
    ctx.error(m.child("multiprocess"), "dpdk.multiprocess",
              "needs hugepages (secondary processes map the primary's hugepage files); set "
              "hugepages: auto or on");
  }
}

void read_logging(Ctx& ctx, const YAML::Node& n, LoggingSection& out) {
  MapReader m(ctx, n, "logging", {"level"});
  m.get_enum<LogLevel>("level", out.level,
                       {{"trace", LogLevel::Trace},
                        {"debug", LogLevel::Debug},
                        {"info", LogLevel::Info},
                        {"warn", LogLevel::Warn},
                        {"error", LogLevel::Error}});
}

bool read_steer_action(Ctx& ctx, const YAML::Node& n, const std::string& path, SteerAction& out) {
  if (!ctx.spend(n)) return false;
  if (n.IsMap()) {
    MapReader m(ctx, n, path, {"redirect"});
    std::string port;
    if (m.ok() && m.require("redirect") && m.get("redirect", port)) {
      out = SteerAction{SteerActionKind::Redirect, port};
      return true;
    }
    return false;
  }
  auto s = read_string(ctx, n, path);
  if (!s) return false;
  static constexpr std::pair<std::string_view, SteerActionKind> kNames[] = {
      {"pass", SteerActionKind::Pass},
      {"drop", SteerActionKind::Drop},
      {"userspace", SteerActionKind::Userspace},
      {"tx", SteerActionKind::Tx}};
  for (auto [name, kind] : kNames) {
    if (*s == name) {
      out = SteerAction{kind, {}};
      return true;
    }
  }
  std::vector<std::string_view> names{"pass", "drop", "userspace", "tx"};
  std::string hint = detail::suggest(*s, names);
  ctx.error(n, path,
            fmt::format("unknown action '{}': expected {} or {{redirect: <port>}}{}", *s,
                        detail::join_names(names),
                        hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
  return false;
}

void read_steering(Ctx& ctx, const YAML::Node& n, SteeringSection& out) {
  MapReader m(ctx, n, "steering",
              {"default", "malformed", "no_socket", "symmetric_hash", "on_detach", "rules"});
  if (!m.ok()) return;
  if (m.has("default"))
    read_steer_action(ctx, m.child("default"), "steering.default", out.default_action);
  if (m.has("malformed"))
    read_steer_action(ctx, m.child("malformed"), "steering.malformed", out.malformed);
  if (m.has("no_socket"))
    read_steer_action(ctx, m.child("no_socket"), "steering.no_socket", out.no_socket);
  m.get("symmetric_hash", out.symmetric_hash);
  m.get_enum<OnDetach>("on_detach", out.on_detach,
                       {{"reattach", OnDetach::Reattach}, {"exit", OnDetach::Exit}});
  for_each_item(
      ctx, m.child("rules"), "steering.rules", [&](const YAML::Node& item, const std::string& ip) {
        MapReader r(ctx, item, ip, {"name", "priority", "match", "action"});
        if (!r.ok()) return;
        SteerRule rule;
        rule.where = ctx.at(item);
        rule.name = fmt::format("rule{}", out.rules.size());
        r.get("name", rule.name);
        r.get("priority", rule.priority, 0, 65535);
        if (r.has("match")) {
          MapReader mm(
              ctx, r.child("match"), r.key_path("match"),
              {"port", "vlan", "inner_vlan", "l3", "src", "dst", "proto", "src_port", "dst_port"});
          std::string port;
          if (mm.get("port", port)) rule.match.port = port;
          uint16_t vlan = 0;
          if (mm.get("vlan", vlan, 0, 4095)) rule.match.vlan = vlan;
          if (mm.get("inner_vlan", vlan, 0, 4095)) rule.match.inner_vlan = vlan;
          L3Proto l3{};
          if (mm.get_enum<L3Proto>(
                  "l3", l3,
                  {{"ipv4", L3Proto::Ipv4}, {"ipv6", L3Proto::Ipv6}, {"arp", L3Proto::Arp}})) {
            rule.match.l3 = l3;
          }
          mm.get_prefix("src", rule.match.src);
          mm.get_prefix("dst", rule.match.dst);
          mm.get_l4_proto("proto", rule.match.l4_proto);
          mm.get_port_range("src_port", rule.match.src_port);
          mm.get_port_range("dst_port", rule.match.dst_port);
        }
        if (r.require("action"))
          read_steer_action(ctx, r.child("action"), r.key_path("action"), rule.action);
        out.rules.push_back(std::move(rule));
      });
}

void read_scheduler(Ctx& ctx, const YAML::Node& n, SchedulerSection& out) {
  MapReader m(ctx, n, "scheduler",
              {"backend", "device", "devargs", "workers", "path", "vector", "queue_depth",
               "worker_backlog", "flow_id"});
  if (!m.ok()) return;
  m.get_enum<SchedBackend>(
      "backend", out.backend,
      {{"builtin", SchedBackend::Builtin}, {"eventdev", SchedBackend::Eventdev}});
  m.get("device", out.device);
  m.get("devargs", out.devargs);
  m.get_lcores("workers", out.workers);
  m.get_enum<SchedPath>("path", out.path,
                        {{"auto", SchedPath::Auto}, {"scheduled", SchedPath::Scheduled}});
  if (m.has("vector")) {
    MapReader v(ctx, m.child("vector"), "scheduler.vector", {"size", "timeout_us", "buckets"});
    if (v.get("size", out.vector_size, 1, 1024) && (out.vector_size & (out.vector_size - 1)) != 0) {
      ctx.error(v.child("size"), "scheduler.vector.size",
                fmt::format("{} is not a power of two (1, 2, 4 ... 1024)", out.vector_size));
    }
    v.get("timeout_us", out.vector_timeout_us, 1, 1'000'000);
    if (v.has("buckets") &&
        !(v.child("buckets").IsScalar() && v.child("buckets").Scalar() == "auto") &&
        v.get("buckets", out.vector_buckets, 1, 1024) &&
        (out.vector_buckets & (out.vector_buckets - 1)) != 0) {
      ctx.error(
          v.child("buckets"), "scheduler.vector.buckets",
          fmt::format("{} is not a power of two (1, 2, 4 ... 1024) or 'auto'", out.vector_buckets));
    }
  }
  if (m.get("queue_depth", out.queue_depth, 64, 1u << 20) &&
      (out.queue_depth & (out.queue_depth - 1)) != 0) {
    ctx.error(m.child("queue_depth"), "scheduler.queue_depth",
              fmt::format("{} is not a power of two", out.queue_depth));
  }
  m.get("worker_backlog", out.worker_backlog, 0, 1u << 24);
  m.get_enum<FlowIdSource>("flow_id", out.flow_id,
                           {{"auto", FlowIdSource::Auto},
                            {"xdp", FlowIdSource::Xdp},
                            {"rss", FlowIdSource::Rss},
                            {"software", FlowIdSource::Software}});
}

void read_pipeline(Ctx& ctx, const YAML::Node& n, const StageTypes& types,
                   std::vector<StageConfig>& out) {
  for_each_item(ctx, n, "pipeline", [&](const YAML::Node& item, const std::string& ip) {
    // The stage type decides which keys are allowed, so read it before the reader checks keys.
    std::string type;
    if (item.IsMap()) {
      for (auto it = item.begin(); it != item.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == "stage" && it->second.IsScalar()) {
          type = it->second.Scalar();
        }
      }
    }
    const StageType* kind = types.find(type);
    std::vector<std::string_view> allowed = {"stage", "name", "sched", "fuse"};
    if (kind) allowed.insert(allowed.end(), kind->keys.begin(), kind->keys.end());

    MapReader m(ctx, item, ip, allowed);
    // The type read again as any string is, so that a list, or bytes that are not UTF-8, are
    // reported as such rather than repeated as the name of an unknown stage.
    std::string checked_type;
    if (!m.ok() || !m.require("stage") || !m.get("stage", checked_type)) return;
    StageConfig st;
    st.where = ctx.at(item);
    st.type = type;
    m.get_enum<SchedType>("sched", st.sched,
                          {{"atomic", SchedType::Atomic},
                           {"ordered", SchedType::Ordered},
                           {"parallel", SchedType::Parallel}});
    m.get("fuse", st.fuse);
    if (!kind) {
      std::vector<std::string_view> names = types.names();
      std::string hint = detail::suggest(type, names);
      ctx.error(m.child("stage"), m.key_path("stage"),
                fmt::format("unknown stage '{}': expected {}{}", type, detail::join_names(names),
                            hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
      return;
    }
    st.params = kind->read(ctx, m);
    st.kind = kind;
    size_t same = 0;
    for (const auto& prev : out)
      same += prev.type == type;
    st.name = same == 0 ? type : fmt::format("{}-{}", type, same + 1);
    if (m.get("name", st.name) && st.name.empty()) {
      ctx.error(m.child("name"), m.key_path("name"), "must not be empty");
    }
    out.push_back(std::move(st));
  });
}

void read_icmp(Ctx& ctx, const YAML::Node& n, IcmpSection& out) {
  MapReader m(ctx, n, "icmp", {"ratelimit_ms", "burst", "per_second"});
  m.get("ratelimit_ms", out.ratelimit_ms, 0, 3'600'000);
  m.get("burst", out.burst, 1, 1'000'000);
  m.get("per_second", out.per_second, 0, 100'000'000);
}

void read_offload(Ctx& ctx, const YAML::Node& n, OffloadSection& out) {
  MapReader m(ctx, n, "offload", {"enabled", "table_size", "idle_timeout_ms", "sweep_ms"});
  m.get("enabled", out.enabled);
  m.get("table_size", out.table_size, 16, 1u << 22);
  m.get("idle_timeout_ms", out.idle_timeout_ms, 100, 86'400'000);
  m.get("sweep_ms", out.sweep_ms, 10, 10'000);
}

void read_vrfs(Ctx& ctx, const YAML::Node& n, std::vector<VrfConfig>& out) {
  for_each_item(ctx, n, "vrfs", [&](const YAML::Node& item, const std::string& ip) {
    MapReader m(ctx, item, ip, {"name", "table", "ports", "conntrack_zone"});
    if (!m.ok()) return;
    VrfConfig v;
    v.where = ctx.at(item);
    if (m.require("name")) m.get("name", v.name);
    m.get("table", v.table, 1, 0xfffffffe);
    m.get_strings("ports", v.ports);
    m.get("conntrack_zone", v.conntrack_zone);
    out.push_back(std::move(v));
  });
}

void read_control(Ctx& ctx, const YAML::Node& n, ControlSection& out) {
  MapReader m(ctx, n, "control",
              {"socket", "mode", "group", "metrics", "capture_dir", "max_request_bytes",
               "read_timeout_ms", "fault_injection"});
  if (m.get("socket", out.socket) && (out.socket.empty() || out.socket[0] != '/')) {
    ctx.error(m.child("socket"), "control.socket", "must be an absolute path");
  } else if (out.socket.size() >= 108) {  // sizeof(sockaddr_un::sun_path)
    ctx.error(m.child("socket"), "control.socket",
              "path is longer than a unix socket allows (107)");
  }
  std::string mode;
  if (m.get("mode", mode)) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(mode.data(), mode.data() + mode.size(), v, 8);
    if (mode.empty() || ec != std::errc() || end != mode.data() + mode.size() || v > 0777) {
      ctx.error(m.child("mode"), "control.mode",
                fmt::format("'{}' is not an octal mode like 0660", mode));
    } else {
      out.socket_mode = v;
    }
  }
  m.get("group", out.group);
  if (m.get("metrics", out.metrics) && !out.metrics.empty()) {
    auto colon = out.metrics.rfind(':');
    unsigned port = 0;
    std::string_view digits = colon == std::string::npos
                                  ? std::string_view()
                                  : std::string_view(out.metrics).substr(colon + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    std::string host = colon == std::string::npos ? "" : out.metrics.substr(0, colon);
    if (!host.empty() && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || port == 0 ||
        port > 65535 || !parse_ip_address(host)) {
      ctx.error(m.child("metrics"), "control.metrics",
                fmt::format("'{}' is not an address:port like 127.0.0.1:9469", out.metrics));
    }
  }
  if (m.get("capture_dir", out.capture_dir) &&
      (out.capture_dir.empty() || out.capture_dir[0] != '/')) {
    ctx.error(m.child("capture_dir"), "control.capture_dir", "must be an absolute path");
  }
  m.get("max_request_bytes", out.max_request_bytes, 256, 16u << 20);
  m.get("read_timeout_ms", out.read_timeout_ms, 10, 600'000);
  m.get("fault_injection", out.fault_injection);
}

// yaml-cpp 0.7 refuses a file nested deeper than its parser's recursion limit (2000 levels,
// four per node: it reads nodes 499 levels deep, mappings and lists inside one another and
// what the deepest holds, and no 500th) with DeepRecursion, whose message is only "bad file"
// and whose mark, for flow collections, lies past the closing brackets. On that error the text
// is parsed again with this handler, which notes the last collection entered at the deepest
// level reached: the 499th, whose contents the parser would not read, with its exact mark.
// Only on that error: parsing every file twice would add half again to a large file's load.
class NestingProbe final : public YAML::EventHandler {
 public:
  int deepest() const { return deepest_; }
  const YAML::Mark& deepest_mark() const { return mark_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    enter(m);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    enter(m);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void enter(const YAML::Mark& m) {
    if (++depth_ >= deepest_) {
      deepest_ = depth_;
      mark_ = m;
    }
  }
  int depth_ = 0;
  int deepest_ = 0;
  YAML::Mark mark_;
};

// The error for a file yaml-cpp found nested too deeply: where, and how deep it may go.
ConfigError too_deep(Ctx& ctx, std::string_view text) {
  NestingProbe probe;
  std::istringstream in{std::string(text)};
  YAML::Parser parser(in);
  try {
    parser.HandleNextDocument(probe);
  } catch (const YAML::DeepRecursion&) {
    // The same refusal as the first parse's: the probe has seen what it needs.
  }
  return ConfigError{ctx.at(probe.deepest_mark()), "",
                     fmt::format("nested deeper than {} levels (mappings and lists inside one "
                                 "another): the YAML parser reads none inside this one",
                                 probe.deepest())};
}

// Line and column (from 1) of byte `offset` of `text`.
Location position(const std::string& file, std::string_view text, size_t offset) {
  const std::string_view before = text.substr(0, offset);
  const size_t line_start = before.rfind('\n') + 1;  // 0 on the first line (npos + 1)
  return Location{file, static_cast<int>(std::count(before.begin(), before.end(), '\n')) + 1,
                  static_cast<int>(offset - line_start) + 1};
}

std::string fnv1a_hex(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

}  // namespace

LoadResult load_config_text(std::string_view text, const std::string& source,
                            const StageTypes& stages) {
  Ctx ctx(source, text.size());
  // yaml-cpp 0.7 does not read a NUL byte as a character (in a plain scalar it comes out as
  // other bytes), so a NUL is looked for in the text, where only its line and column are known.
  // A "\0" escape in a quoted string is read_string's to report, with its key.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    ctx.error(position(source, text, nul), "",
              "the file contains a NUL byte, which YAML text may not hold");
    return std::unexpected(std::move(ctx.errors()));
  }
  YAML::Node root;
  try {
    root.reset(YAML::Load(std::string(text)));
  } catch (const YAML::DeepRecursion&) {
    ctx.errors().push_back(too_deep(ctx, text));
    return std::unexpected(std::move(ctx.errors()));
  } catch (const YAML::Exception& e) {
    // Syntax errors: yaml-cpp knows where it stopped.
    ctx.error(ctx.at(e.mark), "", e.msg);
    return std::unexpected(std::move(ctx.errors()));
  }
  ApplianceConfig cfg;
  cfg.source = source;
  cfg.hash = fnv1a_hex(text);
  if (!root.IsDefined() || root.IsNull()) {
    ctx.error(Location{source, 1, 1}, "", "the file is empty; an appliance needs at least 'ports'");
    return std::unexpected(std::move(ctx.errors()));
  }
  MapReader top(ctx, root, "",
                {"appliance", "cpu", "dpdk", "logging", "ports", "steering", "scheduler",
                 "pipeline", "icmp", "offload", "control", "vrfs"});
  if (!top.ok()) return std::unexpected(std::move(ctx.errors()));
  if (top.has("appliance")) read_appliance(ctx, top.child("appliance"), cfg.appliance);
  if (top.has("cpu")) read_cpu(ctx, top.child("cpu"), cfg.cpu);
  if (top.has("dpdk")) read_dpdk(ctx, top.child("dpdk"), cfg.dpdk);
  if (top.has("logging")) read_logging(ctx, top.child("logging"), cfg.logging);
  if (top.require("ports")) {
    const size_t errors_before = ctx.errors().size();
    for_each_item(ctx, top.child("ports"), "ports",
                  [&](const YAML::Node& item, const std::string& ip) {
                    detail::read_port(ctx, item, ip, cfg.ports);
                  });
    if (cfg.ports.size() > kMaxPorts) {
      ctx.error(cfg.ports[kMaxPorts].where, fmt::format("ports[{}]", kMaxPorts),
                fmt::format("{} ports; an appliance has at most {} (VLAN ports included)",
                            cfg.ports.size(), kMaxPorts));
    }
    // The VLAN devices' default names need the parents' interfaces: every port read.
    if (ctx.errors().size() == errors_before) detail::name_vlan_devices(ctx, cfg.ports);
  }
  if (top.has("steering")) read_steering(ctx, top.child("steering"), cfg.steering);
  if (top.has("scheduler")) read_scheduler(ctx, top.child("scheduler"), cfg.scheduler);
  if (top.has("pipeline")) read_pipeline(ctx, top.child("pipeline"), stages, cfg.pipeline);
  if (top.has("icmp")) read_icmp(ctx, top.child("icmp"), cfg.icmp);
  if (top.has("offload")) read_offload(ctx, top.child("offload"), cfg.offload);
  if (top.has("control")) read_control(ctx, top.child("control"), cfg.control);
  if (top.has("vrfs")) read_vrfs(ctx, top.child("vrfs"), cfg.vrfs);
  if (cfg.cpu.workers.empty()) cfg.cpu.workers = {cfg.cpu.control};
  if (cfg.scheduler.workers.empty()) cfg.scheduler.workers = cfg.cpu.workers;

  // Cross-checks only make sense on sections that read cleanly.
  if (ctx.errors().empty()) detail::validate(ctx, root, cfg);
  if (!ctx.errors().empty()) {
    auto& errors = ctx.errors();
    std::stable_sort(errors.begin(), errors.end(), [](const ConfigError& a, const ConfigError& b) {
      return std::tie(a.where.line, a.where.column) < std::tie(b.where.line, b.where.column);
    });
    return std::unexpected(std::move(errors));
  }
  return cfg;
}

// A file with 100k steering rules is ~10 MB; anything near this cap is a mistake or an attack,
// and yaml-cpp's node tree costs ~20x the text, so the cap also bounds the memory a load takes.
constexpr size_t kMaxFileBytes = 32u << 20;

namespace {

// The bytes of the file at `path`, or why they cannot be had (the caller names the file).
std::expected<std::string, std::string> read_file(const std::string& path) {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return std::unexpected(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    return std::unexpected(fmt::format("cannot read: {}", std::strerror(errno)));
  }
  // Opening a directory succeeds and reading it fails; said as what it is.
  if (S_ISDIR(st.st_mode)) return std::unexpected(std::string("is a directory"));
  const auto too_large = [] {
    return std::unexpected(fmt::format("file is larger than {} bytes", kMaxFileBytes));
  };
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > kMaxFileBytes) return too_large();
  // Read to the end, whatever the size said: a pipe or a file in /proc has none.
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(fmt::format("cannot read: {}", std::strerror(errno)));
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) return too_large();
  }
}

}  // namespace

LoadResult load_config(const std::string& path, const StageTypes& stages) {
  // The file as a whole is at fault: the error names it, with no line or column.
  auto text = read_file(path);
  if (!text) {
    return std::unexpected(std::vector<ConfigError>{{Location{path, 0, 0}, "", text.error()}});
  }
  auto cfg = load_config_text(*text, path, stages);
  // yaml-cpp builds its tree from many small blocks (~750 MB for a 10 MB file of 100k rules)
  // and glibc keeps freed blocks in the heap. The configuration was built among them, so its
  // blocks would pin most of those pages: copy it into the now free memory (compactly), free
  // the scattered original, and hand the free pages back. A daemon that loaded 100k rules
  // otherwise holds ~1 GB for its whole life.
  if (cfg) {
    ApplianceConfig compact = *cfg;
    *cfg = std::move(compact);
  }
  malloc_trim(0);
  return cfg;
}

}  // namespace vecflow::config
