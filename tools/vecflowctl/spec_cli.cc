#include "spec_cli.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

namespace vecflowctl {

using vecflow::control::ArgSpec;
using vecflow::control::ArgType;
using vecflow::control::CommandCatalogue;
using vecflow::control::CommandGroupSpec;
using vecflow::control::CommandSpec;

namespace {

std::string word_of(const CommandSpec& spec, size_t i) {
  return std::string(spec.words.empty() ? (i == 0 ? spec.name : std::string_view{})
                                        : (i < spec.words.size() ? spec.words[i] : ""));
}

std::string flags_of(const ArgSpec& a) {
  if (!a.flags.empty()) return std::string(a.flags);
  std::string name(a.name);
  std::replace(name.begin(), name.end(), '_', '-');
  return "--" + name;
}

// "N in [1 - 65535]": what --help and the man page show for a number.
std::string number_type(const ArgSpec& a) {
  std::string desc = a.type == ArgType::Uint ? "N" : "X";
  if (a.max < static_cast<double>(std::numeric_limits<uint64_t>::max()) || a.min > 0)
    desc += fmt::format(" in [{} - {}]", a.min, a.max);
  return desc;
}

// Parses the value as the request will carry it, so that vecflowctl refuses what vecflowd
// would.
CLI::Validator number_check(const ArgSpec& a) {
  const bool whole = a.type == ArgType::Uint;
  return CLI::Validator(
      [&a, whole](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = whole ? static_cast<double>(std::stoull(text, &used)) : std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || (whole && text.front() == '-'))
          return fmt::format("'{}' is not {}", text, whole ? "a whole number" : "a number");
        if (v < a.min || v > a.max)
          return fmt::format("{} is outside [{} - {}]", text, a.min, a.max);
        return {};
      },
      "");
}

// Checks CLI11 applies to a value as typed: a number in range, one of the choices, a file.
void add_checks(CLI::Option* o, const ArgSpec& a) {
  switch (a.type) {
    case ArgType::Uint:
    case ArgType::Number:
      o->type_name(number_type(a))->check(number_check(a));
      break;
    case ArgType::Path:
      o->type_name("FILE")->check(CLI::ExistingFile);
      break;
    case ArgType::Bool:
    case ArgType::String:
      o->type_name("TEXT");
      break;
  }
  if (!a.choices.empty()) {
    std::vector<std::string> allowed(a.choices.begin(), a.choices.end());
    o->check(CLI::IsMember(allowed));
  }
  if (a.required) o->required();
}

nlohmann::ordered_json typed(const ArgSpec& a, const std::string& text) {
  switch (a.type) {
    case ArgType::Uint:
      return std::stoull(text);
    case ArgType::Number:
      return std::stod(text);
    case ArgType::Path:
      return std::filesystem::absolute(text).lexically_normal().string();
    case ArgType::Bool:
      return text == "true";
    case ArgType::String:
      break;
  }
  return text;
}

}  // namespace

SpecCli::SpecCli(CLI::App& app) {
  std::vector<const CommandSpec*> specs;
  for (const CommandSpec* s : CommandCatalogue::commands())
    if (!s->call_only) specs.push_back(s);
  std::sort(specs.begin(), specs.end(), [](const CommandSpec* a, const CommandSpec* b) {
    return std::make_pair(word_of(*a, 0), word_of(*a, 1)) <
           std::make_pair(word_of(*b, 0), word_of(*b, 1));
  });
  std::map<std::string, CLI::App*> groups;
  for (const CommandSpec* s : specs) {
    if (s->words.size() < 2) {
      add(app, *s, word_of(*s, 0));
      continue;
    }
    const std::string group = word_of(*s, 0);
    CLI::App*& g = groups[group];
    if (g == nullptr) {
      const CommandGroupSpec* spec = nullptr;
      for (const CommandGroupSpec* gs : CommandCatalogue::groups())
        if (gs->word == group) spec = gs;
      g = app.add_subcommand(group, spec ? std::string(spec->summary) : std::string());
      if (spec && !spec->default_command.empty()) {
        g->require_subcommand(0, 1);
        group_defaults_.emplace_back(g, std::string(spec->default_command));
      } else {
        g->require_subcommand(1);
      }
    }
    add(*g, *s, word_of(*s, 1));
  }
}

void SpecCli::add(CLI::App& parent, const CommandSpec& spec, const std::string& word) {
  Built& b = built_.emplace_back();
  b.spec = &spec;
  b.app = parent.add_subcommand(word, std::string(spec.summary));
  bool optional_seen = false;
  for (const ArgSpec& a : spec.args) {
    if (!a.positional) continue;
    if (a.required && optional_seen) b.gathered = true;
    optional_seen |= !a.required;
  }
  if (b.gathered) {
    std::string names, help, id;
    size_t required = 0, total = 0;
    for (const ArgSpec& a : spec.args) {
      if (!a.positional) continue;
      std::string upper(a.name);
      std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
      names += (names.empty() ? "" : " ") + (a.required ? upper : "[" + upper + "]");
      id += (id.empty() ? "" : "-") + std::string(a.name);
      help += (help.empty() ? "" : "; ") + upper + ": " + std::string(a.help);
      required += a.required;
      ++total;
    }
    b.app->add_option(id, b.words, names + "  " + help)
        ->expected(static_cast<int>(required), static_cast<int>(total))
        ->required(required > 0);
  }
  for (const ArgSpec& a : spec.args) {
    if (a.positional && b.gathered) continue;
    const std::string key(a.name);
    if (a.type == ArgType::Bool) {
      b.app->add_flag(flags_of(a), b.flags[key], std::string(a.help));
      continue;
    }
    CLI::Option* o =
        b.app->add_option(a.positional ? key : flags_of(a), b.values[key], std::string(a.help));
    add_checks(o, a);
  }
}

bool SpecCli::chosen(std::string& command, nlohmann::ordered_json& args) const {
  for (const Built& b : built_) {
    if (!b.app->parsed()) continue;
    command = std::string(b.spec->name);
    size_t optional_words = b.words.size();
    for (const ArgSpec& a : b.spec->args)
      if (a.positional && a.required) --optional_words;
    auto word = b.words.begin();
    for (const ArgSpec& a : b.spec->args) {
      const std::string key(a.name);
      if (a.positional && b.gathered) {
        if (!a.required && optional_words == 0) continue;
        if (!a.required) --optional_words;
        args[key] = typed(a, *word++);
      } else if (a.type == ArgType::Bool) {
        if (b.flags.at(key)) args[key] = true;
      } else if (const std::string& v = b.values.at(key); !v.empty()) {
        args[key] = typed(a, v);
      }
    }
    return true;
  }
  for (const auto& [group, name] : group_defaults_) {
    if (group->parsed()) {
      command = name;
      return true;
    }
  }
  return false;
}

}  // namespace vecflowctl
