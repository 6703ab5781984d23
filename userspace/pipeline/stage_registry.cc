#include "pipeline/stage_registry.h"

namespace vecflow {

void StageRegistry::add(std::string type, StageFactory factory) {
  factories_[std::move(type)] = factory;
}

bool StageRegistry::has(std::string_view type) const {
  return factories_.find(type) != factories_.end();
}

Result<std::unique_ptr<Stage>> StageRegistry::create(const config::StageConfig& cfg,
                                                     StageContext& ctx) const {
  auto it = factories_.find(cfg.type);
  if (it == factories_.end()) return fail("stage '{}': no stage of type '{}'", cfg.name, cfg.type);
  auto stage = it->second(cfg, ctx);
  if (!stage) return fail("stage '{}': {}", cfg.name, stage.error().message);
  return stage;
}

const StageRegistry& StageRegistry::builtin() {
  static const StageRegistry registry = [] {
    StageRegistry r;
    register_builtin_stages(r);
    return r;
  }();
  return registry;
}

}  // namespace vecflow
