// Stage types by name. Each stage type is one StageModule, defined next to its stage (in the
// stage type's own folder, pipeline/route/, pipeline/conntrack/ ..., or pipeline/*_stage.cc for
// a stage type with no commands of its own): its part of the appliance file (config::StageType: its
// parameter struct's keys, reader, checks and JSON), its factory, if the running stage can take a
// new configuration its reload, and its own commands and metrics if it has any. The loader,
// `vecflowctl config`, reloads, the pipeline and the control plane loop over the modules; none of
// them names a stage type.
//
// The built-in stages are listed in builtin_stages.cc, one line each: an explicit list,
// because static self-registering objects are silently dropped from a static library.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/config.h"
#include "config/stage_type.h"
#include "core/error.h"
#include "pipeline/stage.h"

namespace vecflow {

namespace control {
class Registry;
}
class Pipeline;

using StageFactory = Result<std::unique_ptr<Stage>> (*)(const config::StageConfig& cfg,
                                                        StageContext& ctx);

// One key of a stage's JSON (config::StageType::to_json) that the running stage swaps in: a
// table.
struct LiveTable {
  std::string_view key;  // "routes"
  // A list: a reload's summary counts its items as `one`/`many` and names them by `item`.
  // Without `item`, a single value: the summary shows it as "key a → b".
  std::string_view one;
  std::string_view many;
  std::string (*item)(const nlohmann::ordered_json&) = nullptr;
};

// How a running stage takes a new configuration of its tables.
struct StageReload {
  // The keys it swaps in; a change of any other key needs a restart.
  std::vector<LiveTable> tables;
  // Swaps the tables of `to` into `stage`, which was built from (or last given) `from`. On
  // error the stage keeps `from`'s.
  Result<void> (*apply)(Stage& stage, const StageContext& ctx, const config::AnyStageParams& from,
                        const config::AnyStageParams& to) = nullptr;
  // The ports the tables of `params` send to, each with the item that names it ("route
  // 10.0.0.0/8"): a reload naming a port the running daemon lacks needs a restart.
  std::vector<std::pair<std::string, std::string>> (*ports)(const config::AnyStageParams& params) =
      nullptr;
};

struct StageModule {
  config::StageType config;
  StageFactory create = nullptr;
  // Whether the stage follows the kernel (routes, addresses, neighbours over netlink), so the
  // pipeline must start a KernelSync. Absent: it does not.
  bool (*needs_kernel)(const config::AnyStageParams& params) = nullptr;
  // Absent (no tables): every change of the stage needs a restart.
  StageReload reload;
  // Adds the stage type's own commands and metric families (route: `routes`, conntrack:
  // `sessions`). Called for every module, whether or not `pipeline` has stages of its type: a
  // command may answer that there are none (`routes`), or the module adds nothing then
  // (conntrack). `pipeline` outlives the registry's use of it; the commands and collectors run
  // on the control thread. Absent: the generic ones (`pipeline`, `errors`) are all it has.
  void (*add_commands)(control::Registry& registry, Pipeline& pipeline) = nullptr;
  // Packets a stage of this type with `params` may hold on each worker lcore
  // (Stage::holds_packets), which the buffer pool must have beyond the ports' rings. Absent: 0.
  uint64_t (*held_packets)(const config::AnyStageParams& params) = nullptr;
};

class StageRegistry {
 public:
  // Adds a stage type; a second module of the same type replaces the first.
  void add(StageModule module);
  // Replaces the factory of a type, or adds a type with only a factory (tests use this to put
  // a probe stage in place of a built-in one).
  void add(std::string type, StageFactory factory);
  Result<std::unique_ptr<Stage>> create(const config::StageConfig& cfg, StageContext& ctx) const;
  bool has(std::string_view type) const;
  const StageModule* find(std::string_view type) const;
  // Every module, by type name.
  std::vector<const StageModule*> modules() const;
  // What the loader needs: every type's part of the appliance file.
  const config::StageTypes& config_types() const { return config_; }

  // A registry holding every built-in stage.
  static const StageRegistry& builtin();

 private:
  std::map<std::string, StageModule, std::less<>> modules_;
  config::StageTypes config_;
};

// Adds the built-in stages (builtin_stages.cc).
void register_builtin_stages(StageRegistry& registry);

// The built-in stage types' part of the appliance file, for load_config.
inline const config::StageTypes& builtin_stage_types() {
  return StageRegistry::builtin().config_types();
}

}  // namespace vecflow
