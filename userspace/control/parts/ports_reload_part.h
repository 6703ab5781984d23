// Reloading the ports section while traffic runs: VLAN ports (QinQ ones too) added, removed
// and changed, as an operator adds a VLAN on a trunk or moves one to another VLAN id without
// touching the others. Everything else in the section (a link added, removed or changed, a
// change of a VLAN port that other VLAN ports sit on) needs a restart, and the reload says so:
// links own sockets, rings and XDP programs made at start.
//
// The ports section applies first of the sections a reload changes and finishes last:
//   added port:   made and started (kernel VLAN device, exception path), on the tx adapters,
//                 known to the stages; then the VRF and pipeline sections give it its VRF
//                 and routes; then, once the reload applied, its tags are claimed in its link's
//                 demultiplexer, so that its first frame is handled as the new file says.
//   removed port: its tags released at once (its frames are vlan_unknown on the link from
//                 then on); the other sections drop its VRF and routes; then, once the reload
//                 applied, it leaves the tx adapters, a grace period passes, and it stops.
//   changed port: replaced under its id (its counters go on): released and stopped at once,
//                 made again as declared now, its new tags claimed with the added ports'. Its
//                 own frames are vlan_unknown for the length of the reload (~tens of ms).
// A reload that fails in a later section puts the ports back as they were (the added ones
// go before any frame reached them, the removed ones claim their tags again, the changed
// ones are made again as they ran).
//
// Threading: control thread (the Reloader's).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "control/reload.h"

namespace vecflow::control {

// The data path's side of it (datapath/datapath.h, DataPath::add_vlan_port and the rest).
struct PortEditor {
  std::function<Result<void>(const config::ApplianceConfig& next, const config::PortConfig& port)>
      add;
  std::function<void(std::string_view name)> publish;
  std::function<void(std::string_view name)> detach;
  std::function<void(std::string_view name)> reattach;
  std::function<void(std::string_view name)> retire;
};

// What of `next`'s ports a running vecflowd cannot apply, one line each; empty when the
// change is VLAN ports added, removed and changed only.
std::vector<std::string> ports_restart_reasons(const config::ApplianceConfig& running,
                                               const config::ApplianceConfig& next);

// One line per port a reload adds, replaces or removes ("port vlan300: added, VLAN 300 of
// trunk").
std::vector<std::string> ports_changes(const config::ApplianceConfig& running,
                                       const config::ApplianceConfig& next);

// The names of the ports vecflowd runs once `next` is applied: next's when the ports
// section applies live, else the running ones (for the other sections' checks).
std::vector<std::string> ports_after_reload(const config::ApplianceConfig& running,
                                            const config::ApplianceConfig& next);

// `running` is the configuration vecflowd started with (its ports run).
void register_ports_reload(Reloader& reloader, PortEditor editor,
                           const config::ApplianceConfig& running);

}  // namespace vecflow::control
