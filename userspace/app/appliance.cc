#include "app/appliance.h"

#include <linux/rtnetlink.h>
#include <net/if.h>
#include <systemd/sd-daemon.h>

#include <algorithm>
#include <bit>
#include <ctime>

#include "app/version.h"
#include "control/builtin_commands.h"
#include "control/fault.h"
#include "control/parts/offload_part.h"
#include "control/parts/pipeline_part.h"
#include "control/parts/pipeline_reload_part.h"
#include "control/parts/ports_part.h"
#include "control/parts/ports_reload_part.h"
#include "control/parts/sched_part.h"
#include "control/parts/steering_part.h"
#include "control/parts/vrf_reload_part.h"
#include "control/resources.h"
#include "control/trace.h"
#include "core/log.h"
#include "io/port_factory.h"
#include "io/rx_queues.h"
#include "pipeline/neighbour_table.h"
#include "runtime/cycles.h"
#include "sched/from_config.h"

namespace vecflow {
namespace {

// The control lcore's back-off when it serves only the control plane: after a request it
// spins 20 us, then sleeps on its services' descriptors, or naps up to 1 ms when one of them
// has none (kernel sync). A control request then waits at most one nap (1 ms) or one wake-up
// from poll(2): control-plane work tolerates milliseconds.
constexpr BackoffConfig kControlBackoff{
    .busy_poll = false, .spin_us = 20, .idle_sleep_max_us = 1000};
static_assert(config::CpuSection{}.spin_us == kDefaultSpinUs);

}  // namespace

RuntimeOptions runtime_options(const config::ApplianceConfig& cfg) {
  RuntimeOptions o;
  o.eal.control_lcore = cfg.cpu.control;
  o.eal.worker_lcores = cfg.cpu.workers;
  o.eal.memory_mb = cfg.dpdk.memory_mb;
  switch (cfg.dpdk.hugepages) {
    case config::HugePages::Auto:
      o.eal.hugepages = HugePagePolicy::Auto;
      break;
    case config::HugePages::On:
      o.eal.hugepages = HugePagePolicy::On;
      break;
    case config::HugePages::Off:
      o.eal.hugepages = HugePagePolicy::Off;
      break;
  }
  o.eal.file_prefix = cfg.dpdk.file_prefix;
  o.eal.extra_args = cfg.dpdk.eal_args;
  o.eal.multiprocess = cfg.dpdk.multiprocess;
  o.eal.pci = std::any_of(cfg.ports.begin(), cfg.ports.end(), [](const config::PortConfig& p) {
    auto* d = std::get_if<config::DpdkPort>(&p.kind);
    return d && d->is_pci;
  });
  o.backoff.busy_poll = cfg.cpu.profile == config::CpuProfile::Latency;
  o.backoff.spin_us = cfg.cpu.spin_us;
  o.backoff.idle_sleep_max_us = cfg.cpu.idle_sleep_max_us;
  o.backoff.stall_after_ms = cfg.cpu.stall_after_ms;
  o.control_backoff = kControlBackoff;
  o.control_backoff->stall_after_ms = cfg.cpu.stall_after_ms;
  return o;
}

spdlog::level::level_enum spdlog_level(config::LogLevel l) {
  using config::LogLevel;
  switch (l) {
    case LogLevel::Trace:
      return spdlog::level::trace;
    case LogLevel::Debug:
      return spdlog::level::debug;
    case LogLevel::Info:
      return spdlog::level::info;
    case LogLevel::Warn:
      return spdlog::level::warn;
    case LogLevel::Error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

Result<std::unique_ptr<Appliance>> Appliance::create(config::ApplianceConfig cfg) {
  auto app = std::unique_ptr<Appliance>(new Appliance(std::move(cfg)));
  if (auto r = app->resolve_rx_queues(); !r) return std::unexpected(r.error());
  auto rt = Runtime::create(runtime_options(app->cfg_));
  if (!rt) return std::unexpected(rt.error());
  app->runtime_ = std::move(*rt);
  if (auto r = apply_port_mtus(app->cfg_); !r) return std::unexpected(r.error());
  // Steering goes first among the parts: AF_XDP ports register their sockets in its maps.
  // A failure leaves nothing attached (XdpSteering::start unwinds) and names the port.
  auto steering = steer::XdpSteering::start(steer::steer_setup(app->cfg_));
  if (!steering) return fail("steering: {}", steering.error().message);
  app->steering_ = std::move(*steering);
  // Every id a reload may give a port has its row from the start (DataPath::add_vlan_port).
  app->outcomes_ = std::make_unique<OutcomeTable>(app->runtime_->slots(), kMaxPorts);
  auto dp = DataPath::create(app->cfg_, *app->runtime_, *app->steering_, *app->outcomes_);
  if (!dp) return std::unexpected(dp.error());
  app->datapath_ = std::move(*dp);
  if (auto r = app->start_control(); !r) return std::unexpected(r.error());
  return app;
}

namespace {

uint64_t queue_mask(unsigned count) {
  return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
}

uint64_t read_mask(const config::AfXdpPort& a) {
  uint64_t m = 0;
  for (const auto& r : a.queues) {
    for (unsigned q = r.first; q < unsigned{r.first} + r.count && q < 64; ++q)
      m |= uint64_t{1} << q;
  }
  return m;
}

// What the XDP program does with frames for user space on queues the port does not read.
std::string unread_fate(const config::AfXdpPort& a) {
  if (a.other_queues == config::SteerActionKind::Drop)
    return "dropped (other_queues: drop), counted as queue_not_read";
  return fmt::format("passed to the kernel ({}), counted as queue_not_read",
                     a.other_queues ? "other_queues: pass" : "other_queues unset");
}

// "2", "0-3, 64-127": the queues of `count` in `mask`, and those past the socket map's 64
// (never read).
std::string queue_ids(uint64_t mask, unsigned count) {
  std::string out = config::queue_list(mask & queue_mask(count));
  if (count > 64) out += fmt::format("{}64-{}", out.empty() ? "" : ", ", count - 1);
  return out;
}

// The same with its noun: "queue 2", "queues 0-3".
std::string queues_of(uint64_t mask, unsigned count) {
  const unsigned n = std::popcount(mask & queue_mask(count)) + (count > 64 ? count - 64 : 0);
  return (n == 1 ? "queue " : "queues ") + queue_ids(mask, count);
}

}  // namespace

Result<void> Appliance::resolve_rx_queues() {
  for (size_t i = 0; i < cfg_.ports.size(); ++i) {
    const auto* a = std::get_if<config::AfXdpPort>(&cfg_.ports[i].kind);
    if (!a) continue;
    const std::string& name = cfg_.ports[i].name;
    if (if_nametoindex(a->interface.c_str()) == 0) {
      return fail("port {}: interface '{}' does not exist (in vecflow's network namespace)", name,
                  a->interface);
    }
    auto n = interface_rx_queues(a->interface);
    if (!n) return fail("port {}: {}", name, n.error().message);
    if (auto e = config::resolve_rx_queues(cfg_, i, *n)) return fail("{}", e->to_string());
    RxQueueWatch w;
    w.port = name;
    w.config = *a;
    w.read = read_mask(*a);
    w.at_start = w.now = *n;
    const uint64_t unread = ~w.read & queue_mask(*n);
    if (unread == 0 && *n <= 64) {
      log::get("app")->info("port {}: reads every rx queue of {} ({}: {})", name, a->interface, *n,
                            config::queue_list(w.read));
    } else {
      log::get("app")->info("port {}: reads {} of the {} rx queues of {} ({}); {}: {}", name,
                            std::popcount(w.read), *n, a->interface, config::queue_list(w.read),
                            queues_of(unread, *n), unread_fate(*a));
    }
    rx_queues_.push_back(std::move(w));
  }
  return {};
}

void Appliance::watch_rx_queues() {
  for (auto& w : rx_queues_) {
    const auto& a = w.config;
    const std::string& name = w.port;
    auto n = interface_rx_queues(a.interface);
    if (!n) {
      // The interface went away or cannot be asked: the link watch reports the former.
      if (w.error != n.error().message)
        log::get("app")->warn("port {}: cannot count the rx queues of {}: {}", name, a.interface,
                              n.error().message);
      w.error = n.error().message;
      continue;
    }
    w.error.clear();
    if (*n == w.now) continue;
    const unsigned was = w.now;
    w.now = *n;
    ++w.changes;
    const uint64_t unread = ~w.read & queue_mask(*n);
    const uint64_t gone = w.read & ~queue_mask(*n);
    std::string what;
    if (unread != 0 || *n > 64)
      what = fmt::format("frames for user space on {} are {} until vecflowd restarts",
                         queues_of(unread, *n), unread_fate(a));
    if (gone != 0)
      what += fmt::format("{}{} it reads no longer exist{}", what.empty() ? "" : "; ",
                          queues_of(gone, 64), std::popcount(gone) == 1 ? "s" : "");
    if (what.empty()) what = "it reads every one";
    log::get("app")->log(
        unread != 0 || *n > 64 || gone != 0 ? spdlog::level::warn : spdlog::level::info,
        "port {}: interface {} now has {} rx queue{} (was {}); vecflow reads {} "
        "({}): {}",
        name, a.interface, *n, *n == 1 ? "" : "s", was, std::popcount(w.read),
        config::queue_list(w.read), what);
  }
}

void Appliance::register_rx_queues_status() {
  registry_.add_status("rx_queues", [this](const control::CommandContext&) {
    control::Json rows = control::Json::array();
    for (const auto& w : rx_queues_) {
      const auto& a = w.config;
      const std::string& name = w.port;
      const uint64_t unread = ~w.read & queue_mask(w.now);
      auto counters = steering_->counters(name);
      rows.push_back(
          {{"port", name},
           {"interface", a.interface},
           {"read", std::popcount(w.read)},
           {"read_queues", config::queue_list(w.read)},
           {"interface_queues", w.now},
           {"interface_queues_at_start", w.at_start},
           {"changes", w.changes},
           {"unread_queues", unread != 0 || w.now > 64 ? control::Json(queue_ids(unread, w.now))
                                                       : control::Json(nullptr)},
           {"other_queues", a.other_queues ? control::Json(config::to_string(*a.other_queues))
                                           : control::Json(nullptr)},
           {"queue_not_read",
            counters ? control::Json(counters->queue_not_read) : control::Json(nullptr)},
           {"state", unread != 0 || w.now > 64
                         ? (a.other_queues == config::SteerActionKind::Drop ? "unread: dropped"
                                                                            : "unread: to kernel")
                     : w.read & ~queue_mask(w.now) ? "reads queues that are gone"
                                                   : "every queue read"},
           {"error", w.error.empty() ? control::Json(nullptr) : control::Json(w.error)}});
    }
    return rows;
  });
}

std::vector<std::string> Appliance::running_port_names() const {
  std::vector<std::string> out;
  for (const auto& p : datapath_->ports())
    out.push_back(p ? p->name() : std::string());
  return out;
}

// What the control plane shows and reloads of the data path (the file declares ports).
void Appliance::register_datapath_parts() {
  control::register_ports(
      registry_,
      [this] {
        std::vector<Port*> ports;
        for (const auto& p : datapath_->ports()) {
          if (p) ports.push_back(p.get());  // null: removed by a reload
        }
        return ports;
      },
      &datapath_->mtus());
  std::vector<const sched::RxAdapter*> rx;
  for (const auto& a : datapath_->rx_adapters())
    rx.push_back(a.get());
  std::vector<const sched::Worker*> workers;
  for (const auto& w : datapath_->workers())
    workers.push_back(w.get());
  std::vector<const sched::TxAdapter*> tx;
  for (const auto& t : datapath_->tx_adapters())
    tx.push_back(t.get());
  std::vector<control::DirectPathView> direct;
  if (const DirectPath* d = datapath_->direct()) {
    direct.push_back({d->name(), &d->path_stats().packets, &d->path_stats().runs,
                      &datapath_->tx_adapters().front()->stats()});
  }
  control::register_sched(registry_, datapath_->scheduler(), std::move(rx), std::move(workers),
                          std::move(tx), std::move(direct));
  std::vector<unsigned> lcore_of_slot;
  for (const auto& l : runtime_->lcores())
    lcore_of_slot.push_back(l->id());
  control::register_pipeline(registry_, datapath_->pipeline(), std::move(lcore_of_slot));
  control::register_pipeline_reload(*reloader_, datapath_->pipeline(), cfg_);
  control::register_vrf_reload(*reloader_, datapath_->pipeline());
  DataPath& dp = *datapath_;
  control::register_ports_reload(
      *reloader_,
      control::PortEditor{
          [&dp](const config::ApplianceConfig& next, const config::PortConfig& port) {
            auto id = dp.add_vlan_port(next, port);
            return id ? Result<void>{} : std::unexpected(id.error());
          },
          [&dp](std::string_view name) { dp.publish_vlan_port(name); },
          [&dp](std::string_view name) { dp.detach_vlan_port(name); },
          [&dp](std::string_view name) { dp.reattach_vlan_port(name); },
          [&dp](std::string_view name) { dp.retire_vlan_port(name); }},
      cfg_);
  control::register_vrf_metrics(registry_, cfg_);
  // Every id a reload may give: a trace follows packets out of ports added after it began.
  tap_ = std::make_unique<HookTap>(datapath_->hooks(), kMaxPorts);
  control::TraceNames trace_names;
  trace_names.ports = running_port_names();
  captures_ = std::make_unique<control::CaptureManager>(*server_, *tap_, cfg_.control.capture_dir,
                                                        running_port_names());
  captures_->register_commands(registry_);
  reloader_->on_applied([this] {
    captures_->set_port_names(running_port_names());
    traces_->set_port_names(running_port_names());
  });
  // A scheduler queue is named after the stages it serves, as `vecflowctl pipeline` does.
  const Pipeline& pipeline = datapath_->pipeline();
  const auto queues = sched::stage_queues(cfg_.pipeline);
  for (size_t i = 0; i < pipeline.size(); ++i) {
    trace_names.stages.push_back(pipeline.stage(i).name());
    const uint8_t q = queues.stage_queue.at(i);
    if (trace_names.queues.size() <= q) trace_names.queues.resize(q + 1u);
    std::string& qn = trace_names.queues[q];
    qn += (qn.empty() ? "" : "+") + pipeline.stage(i).name();
  }
  trace_names.nexthop = [&pipeline](uint32_t id) -> std::string {
    for (const NeighbourInfo& n : pipeline.neighbours().entries()) {
      if (n.id == id) return n.ip.to_string();
    }
    return "";
  };
  traces_ = std::make_unique<control::TraceManager>(*server_, *tap_, std::move(trace_names));
  traces_->register_commands(registry_);
  start_offload();
}

// The control plane and what it shows of the parts that exist in this build.
Result<void> Appliance::start_control() {
  auto server = control::ControlServer::create(control::server_options(cfg_.control), registry_);
  if (!server) return std::unexpected(server.error());
  server_ = std::move(*server);

  control::register_introspection(registry_);
  control::register_status(
      registry_, control::StatusSource{kVersion, control::monotonic_ns(), std::time(nullptr), &cfg_,
                                       runtime_->eal().hugepages()});
  control::register_runtime(registry_, *runtime_);
  control::register_faults(registry_, *runtime_, cfg_);
  // By PortId, also of the ports reloads add and remove (DataPath::add_vlan_port).
  control::register_accounting(
      registry_, *outcomes_, [this] { return datapath_->port_names(); },
      [this] { return datapath_->vlans_by_link(); });
  control::register_errors(registry_);
  control::register_logging(registry_);
  control::register_resources(registry_);
  register_rx_queues_status();

  // What the app itself applies live; every other section waits for its part to register.
  reloader_ = std::make_unique<control::Reloader>(cfg_, *server_);
  reloader_->add_section("appliance", {nullptr, [](const config::ApplianceConfig&) {
                                         return Result<void>{};  // status reads the name
                                       }});
  reloader_->add_section("logging", {nullptr, [](const config::ApplianceConfig& next) {
                                       log::init(spdlog_level(next.logging.level));
                                       return Result<void>{};
                                     }});
  reloader_->add_section(
      "control",
      {[](const config::ApplianceConfig& running, const config::ApplianceConfig& next) {
         std::vector<std::string> why;
         const auto& a = running.control;
         const auto& b = next.control;
         if (a.socket != b.socket || a.socket_mode != b.socket_mode || a.group != b.group)
           why.push_back("the control socket's path, mode and group are set when it is bound");
         if (a.metrics != b.metrics) why.push_back("the metrics endpoint is bound at start");
         if (a.capture_dir != b.capture_dir) why.push_back("capture_dir is read at start");
         return why;
       },
       [this](const config::ApplianceConfig& next) {
         server_->set_limits(next.control.max_request_bytes, next.control.read_timeout_ms);
         return Result<void>{};
       }});
  reloader_->register_commands(registry_);

  // The data-path parts, one line each (userspace/control/parts/).
  control::register_steering(registry_, *reloader_, *steering_, cfg_);
  if (datapath_->has_ports()) register_datapath_parts();

  drop_log_ = std::make_unique<control::DropLogger>();
  server_->add_sample_listener(
      [log = drop_log_.get()](const control::Snapshot& s) { log->observe(s); });

  pdump_ = std::make_unique<control::PdumpGuard>(runtime_->eal().shared_memory());
  registry_.add_status("dpdk_tools", [this](const control::CommandContext&) {
    return control::Json{
        {"telemetry", "dpdk-telemetry.py -f " + cfg_.dpdk.file_prefix + ": /vecflow/<command>"},
        {"pdump", pdump_->state().ready},
        {"pdump_detail", pdump_->state().detail}};
  });

  // Last: the bridge offers every read-only command registered so far.
  auto telemetry = control::TelemetryBridge::create(*server_, registry_);
  if (!telemetry) return std::unexpected(telemetry.error());
  telemetry_ = std::move(*telemetry);

  runtime_->control().add_service(server_);
  if (datapath_->has_ports()) {
    // Without link events the periodic watch still refreshes the links, only later.
    if (auto nl = NetlinkSocket::open(RTMGRP_LINK, true); nl) {
      link_events_ = std::move(*nl);
      link_watch_ = server_->on_readable(link_events_->fd(), [this] {
        while (!link_events_->read_events(64).empty()) {
        }
        refresh_links();
      });
    } else {
      log::get("app")->warn("no link events ({}): link changes are seen within {} ms",
                            nl.error().message, kWatchInterval.count());
    }
  }
  watch();
  return {};
}

void Appliance::start_offload() {
  std::vector<steer::OffloadPort> ports;
  for (const auto& p : cfg_.ports) {
    steer::OffloadPort op{p.name, 0, steering_->offload(p.name)};
    // XDP cannot transmit on a VLAN device (no ndo_xdp_xmit): a VLAN port is no egress, and
    // with no program of its own no ingress either; its flows stay in user space.
    const std::string* itf = p.is_vlan() ? nullptr : p.kernel_interface();
    if (itf != nullptr) op.ifindex = if_nametoindex(itf->c_str());
    ports.push_back(std::move(op));
  }
  std::string blocker;
  if (const Stage* s = datapath_->pipeline().offload_blocker())
    blocker = fmt::format("stage '{}' ({}) keeps every flow in user space", s->name(), s->type());
  offloader_ = std::make_shared<steer::FlowOffloader>(
      datapath_->offload_feed(), std::move(ports), steer::offload_settings(cfg_.offload),
      std::move(blocker), datapath_->pipeline().decrements_ttl());
  offloader_->set_paused_while([this] { return captures_->active() || traces_->active(); });
  control::register_offload(registry_, *reloader_, *offloader_);
  if (cfg_.offload.enabled && !offloader_->blocker().empty())
    log::get("app")->warn("offload: {}", offloader_->blocker());
  runtime_->control().add_service(offloader_);
}

void Appliance::refresh_links() {
  if (!datapath_->has_ports()) return;
  datapath_->refresh_mtus();
  for (const auto& p : datapath_->ports()) {
    if (!p) continue;  // removed by a reload
    if (auto now = p->refresh_link()) {
      // A flow offloaded towards a link that went down (or came back) is decided again.
      if (offloader_) offloader_->flush(fmt::format("port {}: link changed", p->name()));
      log::get("app")->log(*now == LinkState::Up ? spdlog::level::info : spdlog::level::warn,
                           "port {}: link {}", p->name(),
                           *now == LinkState::Up     ? "up"
                           : *now == LinkState::Down ? "down"
                                                     : "state unknown");
    }
  }
}

void Appliance::watch_stalls() {
  const auto& lcores = runtime_->lcores();
  stall_watch_.resize(lcores.size());
  for (size_t i = 0; i < lcores.size(); ++i) {
    const Lcore& l = *lcores[i];
    StallWatch& w = stall_watch_[i];
    const bool stalled = l.stalled();
    if (stalled && !w.stalled) {
      std::string services;
      for (const auto& s : l.services())
        services += (services.empty() ? "" : ", ") + s->name();
      log::get("app")->warn(
          "lcore {} stalled: one round has lasted {:.2f} s (cpu.stall_after_ms {}); its services "
          "({}) are not polled and the flows they serve wait",
          l.id(), static_cast<double>(l.round_age_ns()) / 1e9, l.stall_after_ms(), services);
    } else if (!stalled && w.stalled) {
      const uint64_t cycles = l.stats().stalled_cycles.load() - w.stalled_cycles;
      log::get("app")->info("lcore {} resumed after a stall of {:.2f} s", l.id(),
                            static_cast<double>(tsc_to_ns(cycles)) / 1e9);
    }
    if (!w.stalled) w.stalled_cycles = l.stats().stalled_cycles.load();
    w.stalled = stalled;
  }
}

void Appliance::watch() {
  refresh_links();
  watch_stalls();
  watch_rx_queues();
  if (auto r = steering_->watch(); !r) {
    failure_ = r.error();
    request_stop();
    return;
  }
  watch_timer_ = server_->schedule(kWatchInterval, [this] { watch(); });
}

Appliance::~Appliance() {
  // The control plane goes first, while the parts it reads still exist; EAL goes last.
  telemetry_.reset();
  watch_timer_.reset();
  link_watch_.reset();
  if (runtime_ && server_) runtime_->control().remove_service(server_.get());
  if (runtime_ && offloader_) runtime_->control().remove_service(offloader_.get());
  offloader_.reset();
  traces_.reset();
  captures_.reset();  // closes the capture files, then the hooks go
  tap_.reset();
  drop_log_.reset();
  reloader_.reset();
  server_.reset();
  pdump_.reset();
}

Result<void> Appliance::run() {
  auto log = log::get("app");
  if (auto r = runtime_->launch(); !r) return r;
  log->info("appliance '{}' running from {} (config {}), {} port(s) declared", cfg_.appliance.name,
            cfg_.source, cfg_.hash, cfg_.ports.size());
  // Readiness for systemd (Type=notify): every lcore is polling its services, so the ports
  // are forwarding. Outside systemd (no NOTIFY_SOCKET) this does nothing.
  sd_notifyf(0, "READY=1\nSTATUS=forwarding: appliance '%s', %zu port(s)",
             cfg_.appliance.name.c_str(), cfg_.ports.size());
  runtime_->run_control();
  sd_notify(0, "STOPPING=1\nSTATUS=stopping");
  log->info("stopping");
  runtime_->join();
  // Every lcore has stopped receiving: what is in flight is carried to its final outcome, so
  // the counters a stopped appliance leaves add up exactly.
  const uint64_t left = datapath_->drain();
  if (left > 0) log->warn("{} event(s) still in flight after the drain timeout", left);
  // The counters a stopped appliance leaves, per port: where every packet it received went.
  // Ports a reload removed too: what they received went somewhere.
  int64_t unaccounted = 0;
  const auto names = datapath_->port_names();
  for (size_t i = 0; i < names.size(); ++i) {
    AccountingSnapshot a = outcomes_->port_snapshot(PortId{static_cast<uint16_t>(i)});
    log->info("final accounting: port {}: {} unaccounted={}", names[i], a.to_string(),
              a.unaccounted());
    unaccounted += a.unaccounted();
  }
  watch_timer_.reset();
  steering_->stop();
  if (failure_) return std::unexpected(*failure_);
  // A stop that could not carry every packet to an outcome is not a clean stop: the exit
  // status says so, for systemd and for the tests.
  if (left > 0 || unaccounted != 0)
    return fail("stopped with {} event(s) in flight and {} packet(s) unaccounted", left,
                unaccounted);
  return {};
}

void Appliance::request_stop() noexcept {
  if (runtime_) runtime_->request_stop();
}

void Appliance::request_reload() noexcept {
  if (server_) server_->request_reload();
}

}  // namespace vecflow
