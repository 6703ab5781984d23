// The appliance: wires the engine's parts from one ApplianceConfig and runs them until a
// stop is requested (SIGINT/SIGTERM).
#pragma once

#include <memory>

#include "config/config.h"
#include "core/error.h"
#include "runtime/runtime.h"
#include "steer/steering.h"

namespace vecflow {

class Appliance {
 public:
  static Result<std::unique_ptr<Appliance>> create(config::ApplianceConfig cfg);
  ~Appliance();

  // Runs on the calling thread (the control lcore) until request_stop().
  Result<void> run();
  // Async-signal-safe.
  void request_stop() noexcept;

  const config::ApplianceConfig& config() const noexcept { return cfg_; }
  Runtime& runtime() noexcept { return *runtime_; }
  // XDP steering on the afxdp ports' interfaces: attached by create(), detached when run()
  // returns (and by the destructor). AfXdpPort takes its xsks_map here, the control plane
  // its counters.
  steer::XdpSteering& steering() noexcept { return *steering_; }

 private:
  explicit Appliance(config::ApplianceConfig cfg) : cfg_(std::move(cfg)) {}
  config::ApplianceConfig cfg_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<steer::XdpSteering> steering_;
};

// EAL and back-off settings derived from the cpu and dpdk sections.
RuntimeOptions runtime_options(const config::ApplianceConfig& cfg);

}  // namespace vecflow
