// Internal: checks that span sections (names that must exist, things claimed twice, what a
// backend cannot do). Runs on a config whose sections each read without error.
#pragma once

#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/reader.h"

namespace vecflow::config::detail {

void validate(Ctx& ctx, const YAML::Node& root, const ApplianceConfig& cfg);

}  // namespace vecflow::config::detail
