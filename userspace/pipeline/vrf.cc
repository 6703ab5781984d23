#include "pipeline/vrf.h"

#include <algorithm>
#include <unordered_map>

namespace vecflow {

Result<std::vector<VrfId>> port_vrfs(const std::vector<config::VrfConfig>& vrfs,
                                     const std::vector<PortInfo>& ports) {
  if (vrfs.size() + 1 > config::kMaxVrfs)
    return fail("{} VRF places: at most {} besides the default one (a restart renumbers them)",
                vrfs.size(), config::kMaxVrfs - 1);
  std::unordered_map<std::string, uint16_t> ids;
  for (size_t i = 0; i < ports.size(); ++i)
    ids.emplace(ports[i].name, static_cast<uint16_t>(i));
  std::vector<VrfId> out(ports.size(), kDefaultVrfId);
  for (size_t v = 0; v < vrfs.size(); ++v) {
    for (const auto& p : vrfs[v].ports) {
      const auto it = ids.find(p);
      if (it == ids.end()) return fail("VRF {}: no port '{}'", vrfs[v].name, p);
      out[it->second] = static_cast<VrfId>(v + 1);
    }
  }
  return out;
}

Result<std::vector<VrfId>> port_zones(const std::vector<config::VrfConfig>& vrfs,
                                      const std::vector<PortInfo>& ports) {
  auto out = port_vrfs(vrfs, ports);
  if (!out) return out;
  std::vector<VrfId> zone(vrfs.size() + 1);
  for (size_t v = 0; v < vrfs.size(); ++v) {
    const std::string& z = vrfs[v].conntrack_zone;
    zone[v + 1] = static_cast<VrfId>(v + 1);
    if (z.empty() || z == vrfs[v].name) continue;
    if (z == config::kDefaultVrf) {
      zone[v + 1] = kDefaultVrfId;
      continue;
    }
    const auto it = std::ranges::find_if(vrfs, [&](const auto& o) { return o.name == z; });
    if (it == vrfs.end())
      return fail("VRF {}: no VRF '{}' for its conntrack zone", vrfs[v].name, z);
    zone[v + 1] = static_cast<VrfId>(it - vrfs.begin() + 1);
  }
  for (VrfId& p : *out)
    p = zone[p];
  return out;
}

std::vector<std::string> vrf_names(const std::vector<config::VrfConfig>& vrfs) {
  std::vector<std::string> names{std::string(config::kDefaultVrf)};
  for (const auto& v : vrfs)
    names.push_back(v.name);
  return names;
}

std::vector<config::VrfConfig> keep_vrf_ids(const std::vector<config::VrfConfig>& running,
                                            const std::vector<config::VrfConfig>& next) {
  std::vector<config::VrfConfig> out;
  std::vector<const config::VrfConfig*> added;
  for (const auto& v : next) {
    if (std::ranges::none_of(running, [&](const auto& r) { return r.name == v.name; }))
      added.push_back(&v);
  }
  size_t a = 0;
  for (const auto& r : running) {
    const auto it = std::ranges::find_if(next, [&](const auto& v) { return v.name == r.name; });
    if (it != next.end() && !r.name.empty()) {
      out.push_back(*it);
    } else if (a < added.size()) {
      out.push_back(*added[a++]);
    } else {
      out.push_back(config::VrfConfig{});
    }
  }
  for (; a < added.size(); ++a)
    out.push_back(*added[a]);
  while (!out.empty() && out.back().name.empty())
    out.pop_back();
  return out;
}

}  // namespace vecflow
