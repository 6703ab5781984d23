// The appliance configuration as JSON, and the difference between two configurations.
//
// The JSON mirrors the YAML file's keys (configs/reference.yaml), with every default filled in,
// so `vecflowctl config` shows what is really running and a reload can say precisely what it
// changes. Source locations and the file hash are left out: they are not configuration.
#pragma once

#include <string>
#include <vector>

#include "api/command.h"
#include "config/config.h"

namespace vecflow::control {

// Top-level sections in file order: "appliance", "cpu", ..., "control".
const std::vector<std::string>& config_sections();

Json config_to_json(const config::ApplianceConfig& cfg);

struct ConfigChange {
  std::string section;  // "steering"
  std::string path;     // "steering.rules[ssh].action"
  std::string op;       // "added", "removed", "changed"
  Json from;            // absent for "added"
  Json to;              // absent for "removed"
};

// Differences from `before` to `after`. Lists whose items have a unique "name" (ports, rules,
// stages) are matched by name, so inserting a rule shows as one added rule rather than every
// later rule changed; a change of their order is reported at the list's path. Routes match by
// "prefix", neighbours by "ip", l2 rewrites by "port"; other lists by position.
std::vector<ConfigChange> diff_configs(const config::ApplianceConfig& before,
                                       const config::ApplianceConfig& after);

Json to_json(const ConfigChange& c);

// Replaces one top-level section of `to` by the one of `from`.
void copy_section(config::ApplianceConfig& to, const config::ApplianceConfig& from,
                  std::string_view section);

}  // namespace vecflow::control
