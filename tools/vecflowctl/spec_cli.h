// vecflowctl's subcommands, built from the command specs vecflowd answers to
// (api/command_spec.h): each spec's words become a subcommand, its arguments options or
// positionals, its summary and helps the --help text and so the man page. Nothing about a
// command is written here.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "api/command_spec.h"

namespace vecflowctl {

class SpecCli {
 public:
  // Adds a subcommand to `app` for every spec of the catalogue that is not call_only, grouped
  // by their first word, in alphabetical order.
  explicit SpecCli(CLI::App& app);

  // After a successful parse: the command chosen and its arguments as the request carries
  // them (numbers as numbers, paths absolute); false when none of these subcommands was given.
  bool chosen(std::string& command, nlohmann::ordered_json& args) const;

 private:
  struct Built {
    const vecflow::control::CommandSpec* spec = nullptr;
    CLI::App* app = nullptr;
    std::map<std::string, std::string> values;  // by argument name, as typed
    std::map<std::string, bool> flags;          // Bool arguments
    // Positionals whose optional ones come before a required one (`[PART] LEVEL`): taken as
    // one list of words and matched to the spec's order, required ones first.
    std::vector<std::string> words;
    bool gathered = false;
  };
  void add(CLI::App& parent, const vecflow::control::CommandSpec& spec, const std::string& word);
  std::deque<Built> built_;  // stable addresses: CLI11 writes into their members
  // Groups whose word alone runs a command, with that command.
  std::vector<std::pair<CLI::App*, std::string>> group_defaults_;
};

}  // namespace vecflowctl
