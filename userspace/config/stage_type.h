// A stage type's part of the appliance file: the keys of its pipeline entries, how they are
// read and checked, and how `vecflowctl config` shows them.
//
// The loader knows the keys every stage has (stage, name, sched, fuse); the rest belongs to
// the stage's type, which defines its parameter struct and a StageType next to the stage
// (pipeline/*_stage.cc, listed in pipeline/builtin_stages.cc). The pipeline sits above this
// part, so the loader is handed the types it may read (load_config's `stages`). A type's
// reader records located errors through the same MapReader as every section (file:line:col,
// unknown keys with a did-you-mean); its check runs once every section read cleanly.
#pragma once

#include <deque>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json_fwd.hpp>

#include "config/config.h"
#include "config/reader.h"

namespace vecflow::config {

using Ctx = detail::Ctx;
using MapReader = detail::MapReader;
using detail::for_each_item;
using detail::read_string;

class StageCheck;

struct StageType {
  std::string name;                    // the value of `stage:`, "route"
  std::vector<std::string_view> keys;  // its keys besides stage, name, sched and fuse
  // Reads the stage's keys from its mapping; errors go to the context, located.
  std::function<AnyStageParams(Ctx&, MapReader&)> read;
  // The checks that need the rest of the file (port names ...); may be empty.
  std::function<void(StageCheck&, const AnyStageParams&)> check;
  // The stage's keys as `vecflowctl config` shows them, every default filled in, in the
  // order of configs/reference.yaml.
  std::function<nlohmann::ordered_json(const AnyStageParams&)> to_json;
  // Its stages set the packet's connection mark (core/packet.h CtMark), which stages after
  // them may match (acl's `ct:`).
  bool marks_connections = false;
};

// Builds a StageType from functions on the type's own parameter struct T.
template <typename T>
StageType stage_type(std::string name, std::vector<std::string_view> keys,
                     T (*read)(Ctx&, MapReader&), nlohmann::ordered_json (*to_json)(const T&),
                     void (*check)(StageCheck&, const T&) = nullptr) {
  StageType t{std::move(name), std::move(keys),
              [read](Ctx& ctx, MapReader& m) { return AnyStageParams(read(ctx, m)); }, nullptr,
              [to_json](const AnyStageParams& p) { return to_json(p.get<T>()); }};
  if (check) t.check = [check](StageCheck& c, const AnyStageParams& p) { check(c, p.get<T>()); };
  return t;
}

// The stage types a loader knows, in the order they were added (messages list them so). A
// type keeps its address while the list lives (a deque's elements stay where they are when it
// grows): loaded StageConfigs point to theirs.
class StageTypes {
 public:
  // Adds a type; one of the same name is replaced in place.
  void add(StageType type);
  const StageType* find(std::string_view name) const;
  std::vector<std::string_view> names() const;

 private:
  std::deque<StageType> types_;
};

// One step of a path below a node: a key, or an index in a list.
struct PathStep {
  PathStep(const char* k) : key(k) {}
  PathStep(std::string k) : key(std::move(k)) {}
  PathStep(size_t i) : index(static_cast<long>(i)) {}
  std::string key;
  long index = -1;
};

// The node at `steps` below `from`, for an error location; the deepest that exists when the
// path does not (a default has no node).
YAML::Node locate(const YAML::Node& from, std::initializer_list<PathStep> steps);

// What a stage type's check may look at and where it reports.
class StageCheck {
 public:
  StageCheck(Ctx& ctx, const ApplianceConfig& cfg, size_t index, YAML::Node node)
      : ctx_(ctx), cfg_(cfg), index_(index), node_(std::move(node)) {}

  const ApplianceConfig& config() const { return cfg_; }
  size_t index() const { return index_; }  // in cfg.pipeline
  const StageConfig& stage() const { return cfg_.pipeline[index_]; }
  // "pipeline[2]", "pipeline[2].routes[0].port" for at = ".routes[0].port".
  std::string path(std::string_view at = {}) const;
  // The stage's node, or the one at `steps` below it.
  YAML::Node node(std::initializer_list<PathStep> steps = {}) const { return locate(node_, steps); }

  void error(const YAML::Node& at, const std::string& path, std::string message);
  // Whether the file declares port `name`; records an error naming the ports when not.
  bool port_exists(const std::string& name, const YAML::Node& at, const std::string& path);

 private:
  Ctx& ctx_;
  const ApplianceConfig& cfg_;
  size_t index_;
  YAML::Node node_;
};

// Whether the file declares port `name`; records an error at `at` naming the ports when not.
bool port_exists(Ctx& ctx, const ApplianceConfig& cfg, const std::string& name,
                 const YAML::Node& at, const std::string& path);

// Keys the acl rules and the mirror stage share: src, dst, proto, src_port, dst_port.
void read_five_tuple(MapReader& m, FiveTupleMatch& out);
// As the file writes them: prefixes as text, a protocol by its name, a port range as
// "low-high" (a single port as a number), null where absent.
nlohmann::ordered_json five_tuple_json(const FiveTupleMatch& m);
nlohmann::ordered_json prefix_json(const std::optional<IpPrefix>& p);
nlohmann::ordered_json port_range_json(const std::optional<PortRange>& r);
nlohmann::ordered_json l4_proto_json(const std::optional<uint8_t>& p);
// Whether the protocol has ports (tcp, udp, sctp).
bool has_ports(uint8_t proto);

}  // namespace vecflow::config
