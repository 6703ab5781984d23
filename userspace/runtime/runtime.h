// The runtime: EAL plus one Lcore per configured lcore. The control lcore runs on the thread
// that called Runtime::create (EAL's main lcore); worker lcores are launched on EAL's threads.
// A worker that is the control lcore (one-core boxes) simply adds its services to the control
// lcore's loop.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "runtime/eal.h"
#include "runtime/lcore.h"
#include "runtime/qsbr.h"

namespace vecflow {

struct RuntimeOptions {
  EalOptions eal;
  BackoffConfig backoff;
  // Back-off of the control lcore when it runs no data-plane services (it is not among the
  // workers); unset: `backoff`. Control-plane work tolerates milliseconds, so it can go to
  // sleep on its descriptors much sooner than a data lcore.
  std::optional<BackoffConfig> control_backoff;
};

class Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> create(const RuntimeOptions& options);
  ~Runtime();  // stops and joins every lcore, then cleans up EAL

  Lcore& control() noexcept { return *lcores_.front(); }
  // The Lcore for an lcore id from the configuration, or nullptr.
  Lcore* lcore(unsigned id) noexcept;
  // Slot of an lcore in per-lcore tables (OutcomeTable rows): 0 is the control lcore.
  size_t slot(unsigned id) const noexcept;
  size_t slots() const noexcept { return lcores_.size(); }
  const std::vector<std::unique_ptr<Lcore>>& lcores() const noexcept { return lcores_; }
  const Eal& eal() const noexcept { return *eal_; }
  // Grace periods for the data plane's shared tables: reader i is the lcore in slot i.
  Qsbr& qsbr() noexcept { return *qsbr_; }

  // Launches every worker lcore other than the control lcore.
  Result<void> launch();
  // Runs the control lcore's loop on the calling thread until request_stop().
  void run_control() noexcept;
  // Async-signal-safe: asks every lcore to stop.
  void request_stop() noexcept;
  // Waits for the worker lcores to return.
  void join() noexcept;

 private:
  Runtime() = default;
  std::unique_ptr<Eal> eal_;
  std::unique_ptr<Qsbr> qsbr_;                  // outlives the lcores that read through it
  std::vector<std::unique_ptr<Lcore>> lcores_;  // [0] is the control lcore
  bool launched_ = false;
};

}  // namespace vecflow
