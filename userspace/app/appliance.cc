#include "app/appliance.h"

#include <systemd/sd-daemon.h>

#include <algorithm>

#include "core/log.h"

namespace vecflow {

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
  o.eal.pci = std::any_of(cfg.ports.begin(), cfg.ports.end(), [](const config::PortConfig& p) {
    auto* d = std::get_if<config::DpdkPort>(&p.kind);
    return d && d->is_pci;
  });
  o.backoff.idle_sleep_max_us = cfg.cpu.idle_sleep_max_us;
  o.backoff.interrupt_after_ms = cfg.cpu.interrupt_after_ms;
  return o;
}

Result<std::unique_ptr<Appliance>> Appliance::create(config::ApplianceConfig cfg) {
  auto app = std::unique_ptr<Appliance>(new Appliance(std::move(cfg)));
  auto rt = Runtime::create(runtime_options(app->cfg_));
  if (!rt) return std::unexpected(rt.error());
  app->runtime_ = std::move(*rt);
  // Steering goes first among the parts: AF_XDP ports register their sockets in its maps.
  // A failure leaves nothing attached (XdpSteering::start unwinds) and names the port.
  auto steering = steer::XdpSteering::start(steer::steer_setup(app->cfg_));
  if (!steering) return fail("steering: {}", steering.error().message);
  app->steering_ = std::move(*steering);
  return app;
}

Appliance::~Appliance() = default;

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
  steering_->stop();
  return {};
}

void Appliance::request_stop() noexcept {
  if (runtime_) runtime_->request_stop();
}

}  // namespace vecflow
