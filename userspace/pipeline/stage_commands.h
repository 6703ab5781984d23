// What the stage types' commands (StageModule::add_commands, in each stage type's folder) share.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "api/command.h"
#include "pipeline/pipeline.h"

namespace vecflow::control {

// The error of a `stage=NAME` argument that names no T of `pipeline` ("no route stage 'x';
// route stages: a, b"); nullopt when `only` is absent or names one. `what` is the stage type
// as the message calls it.
template <typename T>
std::optional<CommandError> unknown_stage(Pipeline& pipeline,
                                          const std::optional<std::string>& only,
                                          std::string_view what) {
  if (!only) return std::nullopt;
  std::string names;
  for (T* st : pipeline.all<T>()) {
    if (st->name() == *only) return std::nullopt;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", st->name());
  }
  return CommandError{ErrorCode::BadArguments,
                      fmt::format("no {} stage '{}'; {} stages: {}", what, *only, what,
                                  names.empty() ? "none" : names),
                      {}};
}

}  // namespace vecflow::control
