// The commands and counters of what every vecflowd has: the process and its configuration
// (`status`), the runtime's lcores and services (`lcores`), the exact packet accounting
// (`accounting`), every drop of the box (`errors`), and the registry itself (`commands`,
// `metrics`). The data-path parts add theirs through control/parts/.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "api/counter_table.h"
#include "api/registry.h"
#include "config/config.h"
#include "core/accounting.h"
#include "runtime/runtime.h"

namespace vecflow::control {

// `commands` (what this vecflowd serves) and `metrics` (one snapshot of every counter, the
// same numbers a /metrics scrape shows).
void register_introspection(Registry& registry);

struct StatusSource {
  std::string version;
  uint64_t started_ns = 0;     // monotonic_ns() at start
  std::time_t started_at = 0;  // wall clock at start
  // The running configuration, owned by the app and replaced by reload on the control thread.
  const config::ApplianceConfig* running = nullptr;
  bool hugepages = false;  // EAL runs on hugepages
};

// `status`: name, version, uptime, configuration (file, hash), lcores, ports, scheduler. Parts
// add sections with Registry::add_status(); until a part reports the ports' state, `status`
// lists the declared ports as "not opened".
void register_status(Registry& registry, StatusSource source);

// `lcores` and the vecflow_lcore_* / vecflow_service_* families: busy, idle and sleep time of
// every lcore and service, read from the runtime's single-writer counters.
void register_runtime(Registry& registry, Runtime& runtime);
// The same over lcores the caller owns and keeps alive (lcores[0] is the control lcore).
void register_runtime(Registry& registry, std::vector<const Lcore*> lcores);
// The runtime's counter tables (api/counter_table.h), for the test that checks every table.
std::vector<CounterTableInfo> runtime_counter_tables();

// `accounting` and the vecflow_accounting_* families plus vecflow_drops_total{layer=
// "userspace"}: the OutcomeTable summed per ingress port. `ports` names the table's columns
// ("" for a column no port has); `vlans`, by port, the VLAN sub-interfaces whose frames it
// lifts (their rx is its lifted). Both are asked at every read: a reload adds ports.
using PortNames = std::function<std::vector<std::string>()>;
using VlansByLink = std::function<std::map<std::string, std::vector<std::string>>()>;
void register_accounting(Registry& registry, const OutcomeTable& table, PortNames ports,
                         VlansByLink vlans = nullptr);

// `errors`: every drop reason with its count across the box (the vecflow_drops_total family,
// whichever part added to it), with rates and the ports that dropped.
void register_errors(Registry& registry);

// `log` (each subsystem's level and the last lines logged, from memory) and `log-level`
// (a subsystem's level, or every one's, changed at run time until the next reload of the
// logging section or restart).
void register_logging(Registry& registry);

}  // namespace vecflow::control
