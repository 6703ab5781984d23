// Keeping vecflowd visible to the tools DPDK operators already use.
//
// Telemetry: every read-only command of the registry is also a DPDK telemetry command,
// /vecflow/<command> (dpdk-telemetry.py: `--> /vecflow/errors`), and /vecflow/metrics,<prefix>
// lists counter series. DPDK runs telemetry callbacks on its own thread; the bridge posts each
// request to the control thread and waits at most kTelemetryTimeout for the answer, so the
// parts' tables are still only read on the control thread. Telemetry values are flat in DPDK
// 22.11 (dicts of numbers, strings and flat arrays), so nested results are flattened into
// "outer_inner" keys.
//
// pdump: rte_pdump_init() lets dpdk-dumpcap (a DPDK secondary process) capture DPDK ports.
// Secondary processes need EAL's shared configuration, which `--in-memory` and `--no-huge`
// turn off; then pdump reports why it is unavailable and `vecflowctl capture` is the way.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "api/registry.h"
#include "control/server.h"
#include "core/error.h"

namespace vecflow::control {

class TelemetryBridge {
 public:
  // How long a telemetry request waits for the control thread. The control lcore answers in
  // microseconds when it runs; a stopped or stuck control lcore must not hang the telemetry
  // client, so the request then returns an error.
  static constexpr std::chrono::milliseconds kTelemetryTimeout{1000};

  // Registers /vecflow/<command> for every read-only command registered now. DPDK cannot
  // unregister telemetry commands: after the bridge is destroyed they answer with an error.
  static Result<std::unique_ptr<TelemetryBridge>> create(ControlServer& server, Registry& registry);
  ~TelemetryBridge();
  TelemetryBridge(const TelemetryBridge&) = delete;
  TelemetryBridge& operator=(const TelemetryBridge&) = delete;

 private:
  TelemetryBridge() = default;
};

// State of dpdk-dumpcap support, for `status`.
struct PdumpState {
  bool ready = false;
  std::string detail;  // why not, or how to use it
};

// Initialises DPDK's packet-capture framework once per process (after EAL), or says why it is
// unavailable. rte_pdump_uninit() runs at exit through PdumpGuard.
class PdumpGuard {
 public:
  // `secondaries_can_attach`: EAL keeps its memory where secondary processes can map it
  // (Eal::shared_memory()).
  explicit PdumpGuard(bool secondaries_can_attach);
  ~PdumpGuard();
  PdumpGuard(const PdumpGuard&) = delete;
  PdumpGuard& operator=(const PdumpGuard&) = delete;
  const PdumpState& state() const noexcept { return state_; }

 private:
  PdumpState state_;
  bool initialised_ = false;
};

}  // namespace vecflow::control
