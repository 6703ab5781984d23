#include "pipeline/stage_registry.h"

namespace vecflow {

void StageRegistry::add(StageModule module) {
  std::string type = module.config.name;
  config_.add(module.config);
  modules_[std::move(type)] = std::move(module);
}

void StageRegistry::add(std::string type, StageFactory factory) {
  StageModule& m = modules_[type];
  m.config.name = std::move(type);
  m.create = factory;
}

bool StageRegistry::has(std::string_view type) const {
  return modules_.find(type) != modules_.end();
}

const StageModule* StageRegistry::find(std::string_view type) const {
  auto it = modules_.find(type);
  return it == modules_.end() ? nullptr : &it->second;
}

std::vector<const StageModule*> StageRegistry::modules() const {
  std::vector<const StageModule*> out;
  out.reserve(modules_.size());
  for (const auto& [type, module] : modules_)
    out.push_back(&module);
  return out;
}

Result<std::unique_ptr<Stage>> StageRegistry::create(const config::StageConfig& cfg,
                                                     StageContext& ctx) const {
  auto it = modules_.find(cfg.type);
  if (it == modules_.end()) return fail("stage '{}': no stage of type '{}'", cfg.name, cfg.type);
  auto stage = it->second.create(cfg, ctx);
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
