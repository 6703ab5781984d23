#include "api/command_spec.h"

#include <set>

namespace vecflow::control {

const ArgSpec* CommandSpec::arg(std::string_view key) const noexcept {
  for (const ArgSpec& a : args) {
    if (a.name == key) return &a;
  }
  return nullptr;
}

namespace {

std::string placeholder(const ArgSpec& a) {
  if (!a.choices.empty()) {
    std::string out;
    for (auto c : a.choices)
      out += (out.empty() ? "" : "|") + std::string(c);
    return out;
  }
  switch (a.type) {
    case ArgType::Uint:
      return "N";
    case ArgType::Number:
      return "X";
    case ArgType::Bool:
      return "true|false";
    case ArgType::Path:
      return "PATH";
    case ArgType::String:
      break;
  }
  return "TEXT";
}

}  // namespace

std::string CommandSpec::usage() const {
  std::string out;
  for (const ArgSpec& a : args) {
    std::string one = std::string(a.name) + "=" + placeholder(a);
    if (!a.required) one = "[" + one + "]";
    out += (out.empty() ? "" : " ") + one;
  }
  return out;
}

std::vector<const CommandSpec*>& CommandCatalogue::mutable_commands() noexcept {
  static std::vector<const CommandSpec*> specs;
  return specs;
}

std::vector<const CommandGroupSpec*>& CommandCatalogue::mutable_groups() noexcept {
  static std::vector<const CommandGroupSpec*> groups;
  return groups;
}

const std::vector<const CommandSpec*>& CommandCatalogue::commands() noexcept {
  return mutable_commands();
}

const std::vector<const CommandGroupSpec*>& CommandCatalogue::groups() noexcept {
  return mutable_groups();
}

const CommandSpec* CommandCatalogue::find(std::string_view name) noexcept {
  for (const CommandSpec* s : mutable_commands()) {
    if (s->name == name) return s;
  }
  return nullptr;
}

CommandCatalogue::Entry::Entry(const CommandSpec& spec) {
  mutable_commands().push_back(&spec);
}

CommandCatalogue::Entry::Entry(const CommandGroupSpec& group) {
  mutable_groups().push_back(&group);
}

std::string spec_problem(const CommandSpec& spec) {
  if (spec.name.empty()) return "a command has no name";
  const std::string at = "command '" + std::string(spec.name) + "'";
  if (spec.summary.empty()) return at + " has no summary";
  std::set<std::string_view> names;
  for (const ArgSpec& a : spec.args) {
    const std::string arg = at + ": argument '" + std::string(a.name) + "'";
    if (a.name.empty()) return at + " has an argument without a name";
    if (!names.insert(a.name).second) return arg + " is declared twice";
    if (a.help.empty()) return arg + " has no help";
    if (!a.choices.empty() && a.type != ArgType::String) return arg + " has choices but no string";
    if (a.min > a.max) return arg + " has an empty range";
  }
  return {};
}

}  // namespace vecflow::control
