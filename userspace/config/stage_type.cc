#include "config/stage_type.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vecflow::config {

using Json = nlohmann::ordered_json;

void StageTypes::add(StageType type) {
  for (auto& t : types_) {
    if (t.name == type.name) {
      t = std::move(type);
      return;
    }
  }
  types_.push_back(std::move(type));
}

const StageType* StageTypes::find(std::string_view name) const {
  for (const auto& t : types_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<std::string_view> StageTypes::names() const {
  std::vector<std::string_view> out;
  for (const auto& t : types_)
    out.push_back(t.name);
  return out;
}

YAML::Node locate(const YAML::Node& from, std::initializer_list<PathStep> steps) {
  YAML::Node cur = from;
  for (const auto& s : steps) {
    // YAML::Node's operator= assigns through to the referenced node (it edits the tree);
    // reset() is the rebinding assignment.
    if (s.index >= 0) {
      if (!cur.IsSequence() || static_cast<size_t>(s.index) >= cur.size()) return cur;
      cur.reset(cur[static_cast<size_t>(s.index)]);
    } else {
      if (!cur.IsMap()) return cur;
      bool found = false;
      for (auto it = cur.begin(); it != cur.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == s.key) {
          cur.reset(it->second);
          found = true;
          break;
        }
      }
      if (!found) return cur;
    }
  }
  return cur;
}

bool port_exists(Ctx& ctx, const ApplianceConfig& cfg, const std::string& name,
                 const YAML::Node& at, const std::string& path) {
  if (cfg.find_port(name)) return true;
  std::string known;
  for (const auto& p : cfg.ports)
    known += (known.empty() ? "" : ", ") + p.name;
  ctx.error(at, path,
            fmt::format("no port named '{}' (ports: {})", name, known.empty() ? "none" : known));
  return false;
}

std::string StageCheck::path(std::string_view at) const {
  return fmt::format("pipeline[{}]{}", index_, at);
}

void StageCheck::error(const YAML::Node& at, const std::string& path, std::string message) {
  ctx_.error(at, path, std::move(message));
}

bool StageCheck::port_exists(const std::string& name, const YAML::Node& at,
                             const std::string& path) {
  return config::port_exists(ctx_, cfg_, name, at, path);
}

void read_five_tuple(MapReader& m, FiveTupleMatch& out) {
  m.get_prefix("src", out.src);
  m.get_prefix("dst", out.dst);
  m.get_l4_proto("proto", out.l4_proto);
  m.get_port_range("src_port", out.src_port);
  m.get_port_range("dst_port", out.dst_port);
}

Json prefix_json(const std::optional<IpPrefix>& p) {
  return p ? Json(p->to_string()) : Json(nullptr);
}

Json port_range_json(const std::optional<PortRange>& r) {
  if (!r) return nullptr;
  return r->low == r->high ? Json(r->low) : Json(fmt::format("{}-{}", r->low, r->high));
}

// A protocol by the name the file knows it by (config/reader.cc), else its number.
Json l4_proto_json(const std::optional<uint8_t>& p) {
  if (!p) return nullptr;
  switch (*p) {
    case 1:
      return "icmp";
    case 6:
      return "tcp";
    case 17:
      return "udp";
    case 47:
      return "gre";
    case 50:
      return "esp";
    case 58:
      return "icmpv6";
    case 132:
      return "sctp";
    default:
      return *p;
  }
}

Json five_tuple_json(const FiveTupleMatch& m) {
  return {{"src", prefix_json(m.src)},
          {"dst", prefix_json(m.dst)},
          {"proto", l4_proto_json(m.l4_proto)},
          {"src_port", port_range_json(m.src_port)},
          {"dst_port", port_range_json(m.dst_port)}};
}

bool has_ports(uint8_t proto) {
  return proto == 6 || proto == 17 || proto == 132;
}

}  // namespace vecflow::config
