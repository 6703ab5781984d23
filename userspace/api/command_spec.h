// What a control command is, said once: its name on the wire, its summary, who may run it, its
// arguments with their types, ranges and help, and the words vecflowctl offers it under.
//
// A spec is plain data in a file of its own (`*_specs.cc` beside the part that answers it), so
// that two programs build from the same text: vecflowd registers its handler against the spec
// (api/command.h) and checks every request's arguments by it before the handler runs, and
// vecflowctl, which links the specs but none of the handlers, builds its subcommands, options
// and --help from them, and so its man page. A spec adds itself to the catalogue when its file
// is linked (CommandCatalogue::Entry); vecflowctl links every spec file.
//
// Plain standard library only: vecflowctl includes this without DPDK.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace vecflow::control {

// Read: anyone who can open the socket. Change: root, the daemon's own user, or a member of
// control.group, checked against the peer's SO_PEERCRED/SO_PEERGROUPS credentials.
enum class Access { Read, Change };

enum class ArgType {
  String,
  Uint,    // a non-negative integer within [min, max]
  Number,  // a finite real within [min, max]
  Bool,
  Path,  // a string; vecflowctl checks the file exists and sends it as an absolute path
};

struct ArgSpec {
  std::string_view name;  // the key in the request's "args" ("confirm_within")
  ArgType type = ArgType::String;
  std::string_view help;  // one line, shown by vecflowctl --help and in the man page
  bool required = false;
  // vecflowctl takes it as a word after the command rather than as an option. Positionals are
  // filled in order, required ones first when fewer words are given (`log level [PART] LEVEL`).
  bool positional = false;
  // vecflowctl's option names, CLI11 style ("-n,--top"); empty: "--" + name, '_' as '-'.
  std::string_view flags = {};
  std::vector<std::string_view> choices = {};  // allowed values of a String; empty: any
  double min = 0;
  double max = static_cast<double>(std::numeric_limits<uint64_t>::max());
};

struct CommandSpec {
  std::string_view name;     // the command on the wire ("capture-start")
  std::string_view summary;  // one line: `vecflowctl commands`, --help, the man page
  Access access = Access::Read;
  std::vector<ArgSpec> args = {};
  // The words vecflowctl offers it under ({"capture", "start"}); empty: the name. A command
  // with `call_only` is reached with `vecflowctl call NAME key=value` alone (test hooks).
  std::vector<std::string_view> words = {};
  bool call_only = false;

  const ArgSpec* arg(std::string_view key) const noexcept;
  // "[top=N] [by=packets|bytes]": the arguments in one line, for `vecflowctl commands`.
  std::string usage() const;
};

// A word vecflowctl groups commands under ("capture", "trace", "log") and what the group is for.
struct CommandGroupSpec {
  std::string_view word;
  std::string_view summary;
  // The command the word alone runs (`vecflowctl log` is `log show`); empty: a subcommand is
  // required.
  std::string_view default_command = {};
};

// Every spec linked into this program, in the order their files were initialised.
class CommandCatalogue {
 public:
  static const std::vector<const CommandSpec*>& commands() noexcept;
  static const std::vector<const CommandGroupSpec*>& groups() noexcept;
  static const CommandSpec* find(std::string_view name) noexcept;

  // Defining one at namespace scope beside a spec adds it when the program starts:
  //   const CommandSpec kRoutes{...};
  //   const CommandCatalogue::Entry kRoutesEntry{kRoutes};
  struct Entry {
    explicit Entry(const CommandSpec& spec);
    explicit Entry(const CommandGroupSpec& group);
  };

 private:
  static std::vector<const CommandSpec*>& mutable_commands() noexcept;
  static std::vector<const CommandGroupSpec*>& mutable_groups() noexcept;
};

// What is wrong with a spec, or empty: a summary and every argument's help present, argument
// names unique, required positionals not after optional ones, choices only on strings, a range
// that is not empty. Registry::add_command refuses a spec with a problem and the catalogue
// test (tests/unit/control/command_spec_test.cc) checks every linked spec.
std::string spec_problem(const CommandSpec& spec);

}  // namespace vecflow::control
