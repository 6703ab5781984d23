// Internal: the `ports` section, for the loader. Each entry is read by its type (afxdp, dpdk,
// vlan); a key of another type is an error at the key.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/reader.h"

namespace vecflow::config::detail {

// Reads `ports[i]` (node `n`, key path `path`) and appends it to `out`, unless its name or type
// could not be read; every mistake is recorded in `ctx`.
void read_port(Ctx& ctx, const YAML::Node& n, const std::string& path,
               std::vector<PortConfig>& out);

// Once every port is read: gives each vlan port without `interface` the name of its Linux VLAN
// device, "<parent's interface>.<vlan>" (what `ip link add link P name P.V type vlan id V`
// conventionally names it), and records an error at the port when that name is longer than an
// interface name may be. A port whose parent is missing or not an afxdp port is left without
// an interface; validate() reports its parent.
void name_vlan_devices(Ctx& ctx, std::vector<PortConfig>& ports);

}  // namespace vecflow::config::detail
