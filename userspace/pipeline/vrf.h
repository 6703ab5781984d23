// VRF ids: how the data path names a VRF (a byte per port, per packet and per connection).
//
// Id 0 is the default VRF, id i the VRF at place i-1 of the VRF list the stages were given
// (StageContext::vrfs). The route stage's tables are indexed by it, the conntrack stage's zones
// are it, and a packet whose session belongs to another VRF than its ingress port's carries it
// (PacketMeta::vrf). Since sessions outlive reloads, a reload keeps every VRF's id
// (keep_vrf_ids()): the list may hold retired places (an empty name, no ports), which a later
// VRF takes over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "pipeline/stage.h"

namespace vecflow {

using VrfId = uint8_t;
inline constexpr VrfId kDefaultVrfId = 0;

// The VRF of each port (by PortId index); an error names a VRF's port that does not exist.
Result<std::vector<VrfId>> port_vrfs(const std::vector<config::VrfConfig>& vrfs,
                                     const std::vector<PortInfo>& ports);

// The conntrack zone of each port: the id of the VRF whose zone its VRF's connections are
// tracked in (VrfConfig::conntrack_zone), its own VRF's by default.
Result<std::vector<VrfId>> port_zones(const std::vector<config::VrfConfig>& vrfs,
                                      const std::vector<PortInfo>& ports);

// The names by id: "default" first, "" for a retired place.
std::vector<std::string> vrf_names(const std::vector<config::VrfConfig>& vrfs);

// `next` ordered so that each VRF of `running` (a VRF list as the stages hold it, retired
// places included) keeps its place: a VRF gone leaves its place retired, a new one takes the
// first retired place or goes last, and retired places at the end are dropped.
std::vector<config::VrfConfig> keep_vrf_ids(const std::vector<config::VrfConfig>& running,
                                            const std::vector<config::VrfConfig>& next);

}  // namespace vecflow
