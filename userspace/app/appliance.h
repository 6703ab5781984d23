// The appliance: wires the engine's parts from one ApplianceConfig and runs them until a
// stop is requested (SIGINT/SIGTERM).
#pragma once

#include <memory>

#include "config/config.h"
#include "core/error.h"
#include "runtime/runtime.h"

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

 private:
  explicit Appliance(config::ApplianceConfig cfg) : cfg_(std::move(cfg)) {}
  config::ApplianceConfig cfg_;
  std::unique_ptr<Runtime> runtime_;
};

// EAL and back-off settings derived from the cpu and dpdk sections.
RuntimeOptions runtime_options(const config::ApplianceConfig& cfg);

}  // namespace vecflow
