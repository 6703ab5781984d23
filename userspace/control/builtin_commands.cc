#include "control/builtin_commands.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/chrono.h>

#include "api/counter_table.h"
#include "api/families.h"
#include "api/values.h"
#include "control/command_specs.h"
#include "core/drop_reason.h"
#include "core/log.h"
#include "runtime/cycles.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kBuildInfo{
    "vecflow_build_info", "vecflowd version (value is 1)", MetricType::Gauge, {"version"}};
inline const MetricFamily kConfigInfo{"vecflow_config_info",
                                      "Running appliance file (value is 1)",
                                      MetricType::Gauge,
                                      {"name", "source", "hash"}};
inline const MetricFamily kStartTime{"vecflow_start_time_seconds",
                                     "Start time of vecflowd since the Unix epoch",
                                     MetricType::Gauge,
                                     {}};
std::string iso_time(std::time_t t) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(t));
}

// Percentage of wall time a cycle counter advanced over the last sampling interval.
Json percent(const RateWindow& rates, const MetricFamily& f, Labels labels) {
  return tsc_percent(rates.rate(f, labels));
}

// "stalled" while the lcore is stuck in one round (a service blocked or looping: the flows it
// serves wait), "running" while it polls, "stopped" before launch and after shutdown.
std::string_view lcore_state(const Lcore& l) {
  if (!l.running()) return "stopped";
  return l.stalled() ? "stalled" : "running";
}

// How long a stalled lcore has been in its round; null when it is not stalled.
Json round_seconds(const Lcore& l) {
  if (!l.stalled()) return nullptr;
  return static_cast<double>(l.round_age_ns()) / 1e9;
}

std::string_view port_type(const config::PortConfig& p) {
  return p.is_afxdp() ? "afxdp" : p.is_vlan() ? "vlan" : "dpdk";
}

}  // namespace

void register_introspection(Registry& registry) {
  (void)registry.add_command(
      Command{&kCommandsSpec,
              [&registry](const CommandContext&) -> CommandResult {
                Json list = Json::array();
                for (const Command* c : registry.commands()) {
                  const CommandSpec& spec = *c->spec;
                  list.push_back({{"name", spec.name},
                                  {"access", spec.access == Access::Change ? "change" : "read"},
                                  {"args", spec.usage()},
                                  {"summary", spec.summary}});
                }
                return Json{{"commands", std::move(list)}};
              },
              View{{table("", "/commands",
                          {{"COMMAND", "name"},
                           {"ACCESS", "access"},
                           {"ARGS", "args"},
                           {"SUMMARY", "summary"}})}}});

  (void)registry.add_command(Command{
      &kMetricsSpec,
      [](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        std::string prefix = a.string("family", "");
        Json families = Json::array();
        Json rows = Json::array();
        for (const auto& fam : ctx.snapshot.families()) {
          const MetricFamily& f = *fam.family;
          if (!f.name.starts_with(prefix)) continue;
          Json series = Json::array();
          for (const auto& [labels, value] : fam.series) {
            Json l = Json::object();
            std::string text;
            for (size_t i = 0; i < labels.size(); ++i) {
              l[std::string(f.labels[i])] = labels[i];
              text += fmt::format("{}{}={}", i ? "," : "", f.labels[i], labels[i]);
            }
            Json v = value.integral ? Json(value.count) : Json(value.real);
            series.push_back({{"labels", l}, {"value", v}});
            rows.push_back({{"name", f.name}, {"labels", text}, {"value", v}});
          }
          families.push_back({{"name", f.name},
                              {"type", to_string(f.type)},
                              {"help", f.help},
                              {"series", std::move(series)}});
        }
        return Json{{"families", std::move(families)}, {"samples", std::move(rows)}};
      },
      View{{table("", "/samples", {{"METRIC", "name"}, {"LABELS", "labels"}, {"VALUE", "value"}})}},
      true});

  (void)registry.add_command(Command{
      &kClearSpec,
      [&registry](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        const std::string what = a.string("what", "counters");
        auto selects = [&what](const MetricFamily& f) {
          if (what == "errors")
            return f.name.find("drops") != std::string::npos ||
                   f.name.find("errors") != std::string::npos;
          if (what == "runtime") {
            for (std::string_view p :
                 {"vecflow_lcore_", "vecflow_service_", "vecflow_stage_", "vecflow_sched_"})
              if (f.name.starts_with(p)) return true;
            return false;
          }
          return true;
        };
        const size_t n = registry.clear(selects);
        log::get("control")->info("counters cleared ({}: {} families) by pid {}", what, n,
                                  ctx.peer.pid);
        return Json{{"cleared", what}, {"families", n}};
      },
      View{{fields("", "", {{"cleared", "/cleared"}, {"families", "/families", Unit::Count}})}}});
}

void register_status(Registry& registry, StatusSource source) {
  registry.add_collector("process", [source](Snapshot& s) {
    s.set(kBuildInfo, {source.version}, 1);
    s.set(kConfigInfo,
          {source.running->appliance.name, source.running->source, source.running->hash}, 1);
    s.set(kStartTime, {}, static_cast<double>(source.started_at));
  });

  (void)registry.add_command(Command{
      &kStatusSpec,
      [&registry, source](const CommandContext& ctx) -> CommandResult {
        const config::ApplianceConfig& cfg = *source.running;
        Json sections = registry.status_sections(ctx);
        Json out;
        out["name"] = cfg.appliance.name;
        out["version"] = source.version;
        out["pid"] = getpid();
        out["started_at"] = iso_time(source.started_at);
        out["uptime_s"] = static_cast<double>(monotonic_ns() - source.started_ns) / 1e9;
        Json conf = {{"source", cfg.source}, {"hash", cfg.hash}};
        if (sections.contains("config")) conf.update(sections["config"]);
        out["config"] = std::move(conf);
        Json workers = Json::array();
        for (unsigned w : cfg.cpu.workers)
          workers.push_back(w);
        out["control_lcore"] = cfg.cpu.control;
        out["workers"] = std::move(workers);
        out["hugepages"] = source.hugepages;
        out["scheduler"] = {{"backend", to_string(cfg.scheduler.backend)}};
        if (sections.contains("scheduler")) out["scheduler"].update(sections["scheduler"]);
        if (sections.contains("ports")) {
          out["ports"] = sections["ports"];
        } else {
          // No part has opened ports in this vecflowd: say so rather than guess a link state.
          Json ports = Json::array();
          for (const auto& p : cfg.ports) {
            const std::string* iface = p.kernel_interface();
            ports.push_back({{"name", p.name},
                             {"type", port_type(p)},
                             {"interface", iface ? *iface : ""},
                             {"state", "not opened"}});
          }
          out["ports"] = std::move(ports);
        }
        for (auto& [key, value] : sections.items()) {
          if (key != "config" && key != "scheduler" && key != "ports") out[key] = value;
        }
        return out;
      },
      View{{fields("", "",
                   {{"name", "/name"},
                    {"version", "/version"},
                    {"uptime", "/uptime_s", Unit::Seconds},
                    {"config", "/config/source"},
                    {"config hash", "/config/hash"},
                    {"restart required for", "/config/restart_required"},
                    {"confirm pending", "/config/confirm_pending/deadline_in_s", Unit::Seconds},
                    {"control lcore", "/control_lcore"},
                    {"workers", "/workers"},
                    {"hugepages", "/hugepages"},
                    {"scheduler", "/scheduler/backend"}}),
            table("lcores", "/lcores",
                  {{"LCORE", "lcore"},
                   {"ROLE", "role"},
                   {"STATE", "state"},
                   {"IN ROUND", "round_s", Unit::Seconds},
                   {"BUSY", "busy_pct", Unit::Percent},
                   {"SERVICES", "services"}}),
            table("ports", "/ports",
                  {{"PORT", "name"},
                   {"TYPE", "type"},
                   {"INTERFACE", "interface"},
                   {"STATE", "state"}}),
            table("rx queues", "/rx_queues",
                  {{"PORT", "port"},
                   {"INTERFACE", "interface"},
                   {"READ", "read_queues"},
                   {"INTERFACE QUEUES", "interface_queues", Unit::Count},
                   {"AT START", "interface_queues_at_start", Unit::Count},
                   {"UNREAD", "unread_queues"},
                   {"NOT READ", "queue_not_read", Unit::Count},
                   {"STATE", "state"}}),
            table("xdp", "/steering",
                  {{"PORT", "port"},
                   {"INTERFACE", "interface"},
                   {"PROGRAM", "prog_id"},
                   {"ATTACH", "attach"},
                   {"MODE", "mode"},
                   {"STATE", "state"},
                   {"DETACHES", "detaches", Unit::Count},
                   {"REATTACHES", "reattaches", Unit::Count}}),
            fields("dpdk tools", "/dpdk_tools",
                   {{"telemetry", "/telemetry"},
                    {"dpdk-dumpcap", "/pdump"},
                    {"why not", "/pdump_detail"}})}}});
}

namespace {

// An lcore's counters under {lcore}; its stalled gauge is set from Lcore::stalled().
constexpr auto kLcoreCounters = std::to_array<CounterField<LcoreStats>>({
    {"rounds", &kLcoreRounds, &LcoreStats::rounds},
    {"busy_cycles", &kLcoreBusy, &LcoreStats::busy_cycles},
    {"idle_cycles", &kLcoreIdle, &LcoreStats::idle_cycles},
    {"sleep_cycles", &kLcoreSleep, &LcoreStats::sleep_cycles},
    {"naps", &kLcoreNaps, &LcoreStats::naps},
    {"interrupt_sleeps", &kLcoreInterruptSleeps, &LcoreStats::interrupt_sleeps},
    {"stalls", &kLcoreStalls, &LcoreStats::stalls},
    {"stalled_cycles", &kLcoreStalledCycles, &LcoreStats::stalled_cycles},
});
static_assert(covers_struct(kLcoreCounters));
// A service's counters under {lcore, service}; `sleeping` is a state, shown by `lcores`.
constexpr auto kServiceCounters = std::to_array<CounterField<ServiceStats>>({
    {"polls", &kServicePolls, &ServiceStats::polls},
    {"busy_polls", &kServiceBusyPolls, &ServiceStats::busy_polls},
    {"busy_cycles", &kServiceBusy, &ServiceStats::busy_cycles},
    {"idle_cycles", &kServiceIdle, &ServiceStats::idle_cycles},
    {"sleeps", &kServiceSleeps, &ServiceStats::sleeps},
});
static_assert(covers_struct(kServiceCounters, sizeof(ServiceStats::sleeping)));

}  // namespace

std::vector<CounterTableInfo> runtime_counter_tables() {
  return {describe("LcoreStats", kLcoreCounters), describe("ServiceStats", kServiceCounters)};
}

void register_runtime(Registry& registry, Runtime& runtime) {
  std::vector<const Lcore*> lcores;
  for (const auto& l : runtime.lcores())
    lcores.push_back(l.get());
  register_runtime(registry, std::move(lcores));
}

void register_runtime(Registry& registry, std::vector<const Lcore*> lcores) {
  registry.add_collector("runtime", [lcores](Snapshot& s) {
    s.set(kTscHz, {}, static_cast<double>(tsc_hz()));
    for (const Lcore* l : lcores) {
      std::string id = std::to_string(l->id());
      add_counters(s, kLcoreCounters, l->stats(), {id});
      s.set(kLcoreStalled, {id}, l->stalled() ? 1 : 0);
      for (const auto& svc : l->services())
        add_counters(s, kServiceCounters, svc->stats(), {id, svc->name()});
    }
  });

  // The one-line-per-lcore summary of `status`.
  registry.add_status("lcores", [lcores](const CommandContext& ctx) {
    Json rows = Json::array();
    for (size_t i = 0; i < lcores.size(); ++i) {
      const Lcore* l = lcores[i];
      Json names = Json::array();
      for (const auto& svc : l->services())
        names.push_back(svc->name());
      rows.push_back({{"lcore", l->id()},
                      {"role", i == 0 ? "control" : "worker"},
                      {"state", lcore_state(*l)},
                      {"round_s", round_seconds(*l)},
                      {"busy_pct", percent(ctx.rates, kLcoreBusy, {std::to_string(l->id())})},
                      {"services", std::move(names)}});
    }
    return rows;
  });

  (void)registry.add_command(Command{
      &kLcoresSpec,
      [lcores](const CommandContext& ctx) -> CommandResult {
        Json rows = Json::array();
        Json services = Json::array();
        for (size_t i = 0; i < lcores.size(); ++i) {
          const Lcore* l = lcores[i];
          std::string id = std::to_string(l->id());
          const Snapshot& s = ctx.snapshot;
          bool sleeping = false;
          Json names = Json::array();
          for (const auto& svc : l->services()) {
            names.push_back(svc->name());
            sleeping |= svc->stats().sleeping.load(std::memory_order_relaxed);
            services.push_back(
                {{"lcore", l->id()},
                 {"service", svc->name()},
                 {"busy_pct", percent(ctx.rates, kServiceBusy, {id, svc->name()})},
                 {"polls_per_s", number_or_null(ctx.rates.rate(kServicePolls, {id, svc->name()}))},
                 {"polls", s.count(kServicePolls, {id, svc->name()})},
                 {"busy_polls", s.count(kServiceBusyPolls, {id, svc->name()})},
                 {"busy_cycles", s.count(kServiceBusy, {id, svc->name()})},
                 {"idle_cycles", s.count(kServiceIdle, {id, svc->name()})},
                 {"sleeps", svc->stats().sleeps.load()}});
          }
          rows.push_back(
              {{"lcore", l->id()},
               {"role", i == 0 ? "control" : "worker"},
               {"busy_pct", percent(ctx.rates, kLcoreBusy, {id})},
               {"idle_pct", percent(ctx.rates, kLcoreIdle, {id})},
               {"sleep_pct", percent(ctx.rates, kLcoreSleep, {id})},
               {"asleep", sleeping},
               {"state", lcore_state(*l)},
               {"round_s", round_seconds(*l)},
               {"stalls", s.count(kLcoreStalls, {id})},
               {"stalled_s",
                static_cast<double>(tsc_to_ns(s.count(kLcoreStalledCycles, {id}))) / 1e9},
               {"rounds", s.count(kLcoreRounds, {id})},
               {"naps", s.count(kLcoreNaps, {id})},
               {"interrupt_sleeps", s.count(kLcoreInterruptSleeps, {id})},
               {"busy_cycles", s.count(kLcoreBusy, {id})},
               {"idle_cycles", s.count(kLcoreIdle, {id})},
               {"sleep_cycles", s.count(kLcoreSleep, {id})},
               {"services", std::move(names)}});
        }
        return Json{{"interval_s", ctx.rates.interval_s()},
                    {"tsc_hz", tsc_hz()},
                    {"lcores", std::move(rows)},
                    {"services", std::move(services)}};
      },
      View{{table("lcores", "/lcores",
                  {{"LCORE", "lcore"},
                   {"ROLE", "role"},
                   {"BUSY", "busy_pct", Unit::Percent},
                   {"IDLE", "idle_pct", Unit::Percent},
                   {"SLEEP", "sleep_pct", Unit::Percent},
                   {"ROUNDS", "rounds", Unit::Count},
                   {"NAPS", "naps", Unit::Count},
                   {"ASLEEP", "asleep"},
                   {"STATE", "state"},
                   {"STALLS", "stalls", Unit::Count}}),
            table("services", "/services",
                  {{"LCORE", "lcore"},
                   {"SERVICE", "service"},
                   {"BUSY", "busy_pct", Unit::Percent},
                   {"POLLS/S", "polls_per_s", Unit::Count},
                   {"POLLS", "polls", Unit::Count},
                   {"BUSY POLLS", "busy_polls", Unit::Count},
                   {"SLEEPS", "sleeps", Unit::Count}})}}});
}

void register_accounting(Registry& registry, const OutcomeTable& table_ref, PortNames ports,
                         VlansByLink vlans_of) {
  registry.add_collector("accounting", [&table_ref, ports](Snapshot& s) {
    const auto names = ports();
    for (size_t p = 0; p < names.size() && p < table_ref.ports(); ++p) {
      const std::string& name = names[p];
      if (name.empty()) continue;
      uint64_t rx = 0, rx_bytes = 0, tx = 0, tx_bytes = 0, kernel = 0, held = 0;
      std::array<uint64_t, kDropReasonCount> drops{};
      for (size_t l = 0; l < table_ref.lcore_slots(); ++l) {
        const PortOutcomes& o = table_ref.at(l, static_cast<PortId>(p));
        // Given back before taken, so that the difference is never negative.
        const uint64_t unheld = o.unheld.load();
        held += o.held.load() - unheld;
        rx += o.rx_packets.load();
        rx_bytes += o.rx_bytes.load();
        tx += o.tx_packets.load();
        tx_bytes += o.tx_bytes.load();
        kernel += o.kernel_packets.load();
        for (size_t r = 0; r < kDropReasonCount; ++r)
          drops[r] += o.drops.load(static_cast<DropReason>(r));
      }
      s.add(kAccountRxPackets, {name}, rx);
      s.add(kAccountRxBytes, {name}, rx_bytes);
      s.add(kAccountTxPackets, {name}, tx);
      s.add(kAccountTxBytes, {name}, tx_bytes);
      s.add(kAccountKernelPackets, {name}, kernel);
      s.set(kAccountHeldPackets, {name}, static_cast<double>(held));
      for (size_t r = 0; r < kDropReasonCount; ++r) {
        const auto reason = static_cast<DropReason>(r);
        if (drops[r] || drop_possible(DropLayer::Userspace, reason))
          s.add(kDrops, {name, drop_reason_name(reason), "userspace"}, drops[r]);
      }
    }
  });

  (void)registry.add_command(Command{
      &kAccountingSpec,
      [ports, vlans_of = std::move(vlans_of)](const CommandContext& ctx) -> CommandResult {
        const Snapshot& s = ctx.snapshot;
        Json rows = Json::array();
        const auto vlans =
            vlans_of ? vlans_of() : std::map<std::string, std::vector<std::string>>{};
        for (const auto& name : ports()) {
          if (name.empty()) continue;
          uint64_t rx = s.count(kAccountRxPackets, {name});
          uint64_t tx = s.count(kAccountTxPackets, {name});
          uint64_t kernel = s.count(kAccountKernelPackets, {name});
          auto held = static_cast<uint64_t>(s.sum(kAccountHeldPackets, {{"port", name}}));
          auto dropped =
              static_cast<uint64_t>(s.sum(kDrops, {{"port", name}, {"layer", "userspace"}}));
          auto rx_pps = ctx.rates.rate(kAccountRxPackets, {name});
          auto rx_Bps = ctx.rates.rate(kAccountRxBytes, {name});
          auto tx_pps = ctx.rates.rate(kAccountTxPackets, {name});
          auto tx_Bps = ctx.rates.rate(kAccountTxBytes, {name});
          auto layer_sum = [&](const char* layer) {
            return static_cast<uint64_t>(s.sum(kDrops, {{"port", name}, {"layer", layer}}));
          };
          const uint64_t device_dropped = layer_sum("device");
          const uint64_t port_dropped = layer_sum("port");
          // The layer before user space: what the port's XDP program did with every frame
          // its interface received. A port without one (a pure DPDK port) has none.
          Json xdp = nullptr;
          Json in_rings = nullptr;
          if (auto seen = s.get(kSteerRxPackets, {name})) {
            auto verdict = [&](const char* v) { return s.count(kSteerVerdicts, {name, v}); };
            const uint64_t lifted = verdict("userspace");
            xdp = {{"seen", s.count(kSteerRxPackets, {name})},
                   {"pass", verdict("pass")},
                   {"dropped", layer_sum("xdp")},
                   {"sent", verdict("tx") + verdict("redirect")},
                   {"offloaded", verdict("offload")},
                   {"lifted", lifted}};
            // Lifted frames the sockets' rx rings still hold; the program's and the port's
            // counters are read one after the other, so under traffic this moves.
            // A trunk's lifted frames include those its VLAN sub-interfaces received.
            uint64_t received = rx;
            if (auto v = vlans.find(name); v != vlans.end()) {
              for (const auto& sub : v->second)
                received += s.count(kAccountRxPackets, {sub});
            }
            in_rings = static_cast<int64_t>(lifted) -
                       static_cast<int64_t>(device_dropped + port_dropped + received);
          }
          rows.push_back({{"port", name},
                          {"xdp", std::move(xdp)},
                          {"device_dropped", device_dropped},
                          {"port_dropped", port_dropped},
                          {"in_rings", std::move(in_rings)},
                          {"rx_packets", rx},
                          {"rx_bytes", s.count(kAccountRxBytes, {name})},
                          {"tx_packets", tx},
                          {"tx_bytes", s.count(kAccountTxBytes, {name})},
                          {"kernel_packets", kernel},
                          {"dropped", dropped},
                          {"held", held},
                          // Counters are read one by one while workers run, so a packet between
                          // stages shows here; on a drained box this is zero.
                          {"in_flight", static_cast<int64_t>(rx) -
                                            static_cast<int64_t>(tx + kernel + dropped + held)},
                          {"rx_pps", number_or_null(rx_pps)},
                          {"rx_bps", rx_Bps ? Json(*rx_Bps * 8) : Json(nullptr)},
                          {"tx_pps", number_or_null(tx_pps)},
                          {"tx_bps", tx_Bps ? Json(*tx_Bps * 8) : Json(nullptr)}});
        }
        return Json{{"interval_s", ctx.rates.interval_s()}, {"ports", std::move(rows)}};
      },
      View{{table("", "/ports",
                  {{"PORT", "port"},
                   {"RX", "rx_packets", Unit::Count},
                   {"RX RATE", "rx_pps", Unit::Pps},
                   {"RX BITS", "rx_bps", Unit::Bps},
                   {"TX", "tx_packets", Unit::Count},
                   {"TX RATE", "tx_pps", Unit::Pps},
                   {"KERNEL", "kernel_packets", Unit::Count},
                   {"DROPPED", "dropped", Unit::Count},
                   {"HELD", "held", Unit::Count},
                   {"IN FLIGHT", "in_flight", Unit::Count}}),
            // Where RX above came from. XDP SEEN = PASS + DROPPED + SENT + OFFLOADED +
            // LIFTED, and LIFTED = DEVICE DROP + PORT DROP + RX + IN RINGS.
            table("from the wire", "/ports",
                  {{"PORT", "port"},
                   {"XDP SEEN", "/xdp/seen", Unit::Count},
                   {"PASS", "/xdp/pass", Unit::Count},
                   {"DROPPED", "/xdp/dropped", Unit::Count},
                   {"SENT", "/xdp/sent", Unit::Count},
                   {"OFFLOADED", "/xdp/offloaded", Unit::Count},
                   {"LIFTED", "/xdp/lifted", Unit::Count},
                   {"DEVICE DROP", "device_dropped", Unit::Count},
                   {"PORT DROP", "port_dropped", Unit::Count},
                   {"IN RINGS", "in_rings", Unit::Count}})}}});
}

void register_errors(Registry& registry) {
  (void)registry.add_command(Command{
      &kErrorsSpec,
      [](const CommandContext& ctx) -> CommandResult {
        const Snapshot& s = ctx.snapshot;
        Json reasons = Json::array();
        uint64_t total = 0;
        for (size_t r = 0; r < kDropReasonCount; ++r) {
          auto reason = static_cast<DropReason>(r);
          std::string name(drop_reason_name(reason));
          auto count = static_cast<uint64_t>(s.sum(kDrops, {{"reason", name}}));
          total += count;
          reasons.push_back(
              {{"reason", name},
               {"count", count},
               {"rate_pps", number_or_null(ctx.rates.rate_sum(kDrops, {{"reason", name}}))},
               {"description", drop_reason_text(reason)}});
        }
        // Where: each (port, reason, layer) series that counted something.
        Json where = Json::array();
        if (const auto* fam = s.find(kDrops.name)) {
          for (const auto& [labels, value] : fam->series) {
            if (value.count == 0) continue;
            where.push_back({{"port", labels[0]},
                             {"reason", labels[1]},
                             {"layer", labels[2]},
                             {"count", value.count}});
          }
        }
        return Json{{"total", total},
                    {"rate_pps", number_or_null(ctx.rates.rate_sum(kDrops))},
                    {"interval_s", ctx.rates.interval_s()},
                    {"reasons", std::move(reasons)},
                    {"by_port", std::move(where)}};
      },
      View{{fields("", "", {{"dropped", "/total", Unit::Count}, {"rate", "/rate_pps", Unit::Pps}}),
            table("reasons", "/reasons",
                  {{"REASON", "reason"},
                   {"COUNT", "count", Unit::Count},
                   {"RATE", "rate_pps", Unit::Pps},
                   {"DESCRIPTION", "description"}},
                  "/count"),
            table("by port", "/by_port",
                  {{"PORT", "port"},
                   {"REASON", "reason"},
                   {"LAYER", "layer"},
                   {"COUNT", "count", Unit::Count}})}}});
}

namespace {

std::string_view level_name(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

Json levels_json() {
  Json rows = Json::array();
  for (const auto& [part, level] : log::levels())
    rows.push_back({{"part", part}, {"level", level_name(level)}});
  return rows;
}

}  // namespace

void register_logging(Registry& registry) {
  (void)registry.add_command(
      Command{&kLogSpec,
              [](const CommandContext& ctx) -> CommandResult {
                ArgReader a(ctx);
                const uint64_t n = a.uint("lines", 20);
                Json lines = Json::array();
                if (n > 0) {
                  for (auto& l : log::recent_lines(n))
                    lines.push_back({{"text", std::move(l)}});
                }
                return Json{{"levels", levels_json()}, {"lines", std::move(lines)}};
              },
              View{{table("levels", "/levels", {{"PART", "part"}, {"LEVEL", "level"}}),
                    table("last lines", "/lines", {{"LINE", "text"}})}}});

  (void)registry.add_command(Command{
      &kLogLevelSpec,
      [](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        const std::string level = a.string("level", "info");
        auto part = a.string("part");
        const auto l = spdlog::level::from_str(level == "error" ? "err" : level);
        if (part && std::find(std::begin(log::kSubsystems), std::end(log::kSubsystems), *part) ==
                        std::end(log::kSubsystems)) {
          std::string known;
          for (auto s : log::kSubsystems)
            known += (known.empty() ? "" : ", ") + std::string(s);
          return command_error(ErrorCode::BadArguments, "no part '{}' logs ({})", *part, known);
        }
        // Logged before the change, so that a level that silences the control part still
        // leaves a line saying who made it quiet.
        log::get("control")->warn("log level of {} set to {} by pid {}",
                                  part ? *part : "every part", level, ctx.peer.pid);
        for (auto s : log::kSubsystems)
          if (!part || s == *part) log::set_level(s, l);
        return Json{{"levels", levels_json()}};
      },
      View{{table("levels", "/levels", {{"PART", "part"}, {"LEVEL", "level"}})}}});
}

}  // namespace vecflow::control
