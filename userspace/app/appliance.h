// The appliance: wires the engine's parts from one ApplianceConfig and runs them until a
// stop is requested (SIGINT/SIGTERM). SIGHUP reloads the running file.
//
// Each part plugs into the control plane here: it registers its commands, counters and
// `status` sections in the Registry (userspace/control/parts/ holds one register function per
// part), and, if it can apply its section of the file while running, a SectionReloader.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "api/registry.h"
#include "app/hook_tap.h"
#include "config/config.h"
#include "control/capture.h"
#include "control/dpdk_tools.h"
#include "control/drop_log.h"
#include "control/reload.h"
#include "control/server.h"
#include "core/accounting.h"
#include "core/error.h"
#include "datapath/datapath.h"
#include "pipeline/netlink.h"
#include "runtime/runtime.h"
#include "steer/flow_offloader.h"
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
  // Async-signal-safe: reloads the running file on the control thread, like `vecflowctl reload`.
  void request_reload() noexcept;

  // The running configuration; reload replaces its sections on the control thread.
  const config::ApplianceConfig& config() const noexcept { return cfg_; }
  Runtime& runtime() noexcept { return *runtime_; }
  // XDP steering on the afxdp ports' interfaces: attached by create(), detached when run()
  // returns (and by the destructor). AfXdpPort takes its xsks_map here, the control plane
  // its counters.
  steer::XdpSteering& steering() noexcept { return *steering_; }
  // Per (lcore slot, ingress port) outcome counters; parts take the rows of their lcores.
  OutcomeTable& outcomes() noexcept { return *outcomes_; }
  // Ports, scheduler, pipeline; nothing to forward when the file declares no port.
  DataPath& datapath() noexcept { return *datapath_; }
  control::Registry& control_registry() noexcept { return registry_; }
  control::ControlServer& control_server() noexcept { return *server_; }

 private:
  explicit Appliance(config::ApplianceConfig cfg) : cfg_(std::move(cfg)) {}
  Result<void> start_control();
  // Control thread, every kWatchInterval: refreshes the ports' cached link states, checks
  // that the steering program still runs on every interface (steering.on_detach) and logs
  // lcores that stall and resume.
  void watch();
  void watch_stalls();
  static constexpr std::chrono::milliseconds kWatchInterval{200};
  // Compares every afxdp port's interface rx queue count with the last one seen (ethtool -L
  // changes it at run time); logs each change once. Queues gained are not read until a
  // restart: their frames for user space meet the port's other_queues (pass unless dropped).
  void watch_rx_queues();
  // Before anything opens a port: gives `queues: all` ports their interface's rx queues and
  // refuses a file that leaves queues unread without other_queues (config::resolve_rx_queues).
  Result<void> resolve_rx_queues();
  // The `rx_queues` section of `status`: per afxdp port, the queues read and the interface's.
  void register_rx_queues_status();
  void register_datapath_parts();
  // By PortId, the ports that run now ("" for an id whose port a reload removed).
  std::vector<std::string> running_port_names() const;
  // Reads every port's link state into its cache (Port::refresh_link), logging changes. Also
  // run on each rtnetlink link event, so the tx path sees a link go down within
  // microseconds, before a down port's tx ring fills.
  void refresh_links();
  // Flow offload over the ports with steering (steer/flow_offloader.h), its part and service.
  void start_offload();

  config::ApplianceConfig cfg_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<steer::XdpSteering> steering_;
  std::unique_ptr<OutcomeTable> outcomes_;
  std::unique_ptr<DataPath> datapath_;
  std::unique_ptr<control::PdumpGuard> pdump_;
  control::Registry registry_;
  std::shared_ptr<control::ControlServer> server_;
  std::unique_ptr<control::Reloader> reloader_;
  std::unique_ptr<control::DropLogger> drop_log_;
  std::unique_ptr<control::TelemetryBridge> telemetry_;
  std::unique_ptr<HookTap> tap_;
  std::unique_ptr<control::CaptureManager> captures_;
  std::unique_ptr<control::TraceManager> traces_;
  // Flow offload's control side (a service of the control lcore); before the data path and
  // steering it reads go.
  std::shared_ptr<steer::FlowOffloader> offloader_;
  std::unique_ptr<control::ScheduledCall> watch_timer_;
  std::optional<NetlinkSocket> link_events_;
  std::unique_ptr<control::ScheduledCall> link_watch_;
  // Per lcore (runtime order): stalled at the last watch, and its stalled cycles then.
  struct StallWatch {
    bool stalled = false;
    uint64_t stalled_cycles = 0;
  };
  std::vector<StallWatch> stall_watch_;
  // Per afxdp port: the rx queues it reads and the count its interface had at start and now.
  struct RxQueueWatch {
    std::string port;          // its name (a reload may move it in cfg_.ports)
    config::AfXdpPort config;  // as it was at start (an afxdp port is not changed live)
    uint64_t read = 0;         // bit q: queue q is read (vecflow's sockets or DPDK's)
    unsigned at_start = 0;     // the interface's rx queues when the ports were created
    unsigned now = 0;          // at the last watch
    uint64_t changes = 0;      // times watch_rx_queues() saw the count change
    std::string error;         // why the last count could not be read, if it could not
  };
  std::vector<RxQueueWatch> rx_queues_;
  // Set by watch() when steering.on_detach says the appliance must stop; run() returns it.
  std::optional<Error> failure_;
};

// EAL and back-off settings derived from the cpu and dpdk sections.
RuntimeOptions runtime_options(const config::ApplianceConfig& cfg);

spdlog::level::level_enum spdlog_level(config::LogLevel level);

}  // namespace vecflow
