// Stage types by name. A factory builds a stage from its typed configuration slice
// (config::StageConfig, parsed and validated by the loader) and the pipeline's context.
// The built-in stages are listed in builtin_stages.cc, one line each: an explicit list,
// because static self-registering objects are silently dropped from a static library.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "config/config.h"
#include "core/error.h"
#include "pipeline/stage.h"

namespace vecflow {

using StageFactory = Result<std::unique_ptr<Stage>> (*)(const config::StageConfig& cfg,
                                                        StageContext& ctx);

class StageRegistry {
 public:
  // Adds a stage type; a second factory for the same type replaces the first (tests use this
  // to put a probe stage in place of a built-in one).
  void add(std::string type, StageFactory factory);
  Result<std::unique_ptr<Stage>> create(const config::StageConfig& cfg, StageContext& ctx) const;
  bool has(std::string_view type) const;

  // A registry holding every built-in stage.
  static const StageRegistry& builtin();

 private:
  std::map<std::string, StageFactory, std::less<>> factories_;
};

// Adds the built-in stages (builtin_stages.cc).
void register_builtin_stages(StageRegistry& registry);

}  // namespace vecflow
