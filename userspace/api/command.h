// Commands of the control protocol: what a part registers, what a handler receives and returns.
//
// A command is its spec (api/command_spec.h: name, summary, access, arguments), a handler and,
// for commands whose result is a table, a View that tells vecflowctl how to print it. Handlers run
// on the control thread (the control lcore's ControlServer service), one at a time, so they may
// read the parts' tables without locks; they read data-path counters through their single-writer
// Counters, never through locks. A handler must answer quickly: it runs between the control
// lcore's polls.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/command_spec.h"

namespace vecflow::control {

// Key order is kept so replies read in the order a handler wrote them.
using Json = nlohmann::ordered_json;

// Version of the request/response protocol (vecflow-control(7)). A request may name
// the version it speaks; the server answers requests of versions it knows and refuses others.
inline constexpr int kProtocolVersion = 1;

enum class ErrorCode {
  MalformedRequest,    // not JSON, or not an object with a string "command"
  TruncatedRequest,    // the connection closed inside a request
  RequestTooLarge,     // longer than control.max_request_bytes
  Timeout,             // no complete request within control.read_timeout_ms
  Busy,                // too many connections at once
  UnsupportedVersion,  // "version" the server does not speak
  UnknownCommand,      // no such command in this vecflowd
  BadArguments,        // an argument missing, unknown, of the wrong type or out of range
  PermissionDenied,    // a state-changing command from a peer outside root/control.group
  InvalidConfig,       // reload: the file has errors (details: each located error)
  Failed,              // the command ran and could not do what was asked
  Internal,            // a bug: the handler threw; the server keeps running
};

// "malformed_request", ... as they appear on the wire.
std::string_view to_string(ErrorCode code) noexcept;

struct CommandError {
  ErrorCode code = ErrorCode::Failed;
  std::string message;  // one line an operator can act on
  Json details;         // optional structured detail (reload: the located errors)
};

using CommandResult = std::expected<Json, CommandError>;

template <typename... Args>
std::unexpected<CommandError> command_error(ErrorCode code, fmt::format_string<Args...> f,
                                            Args&&... args) {
  return std::unexpected(CommandError{code, fmt::format(f, std::forward<Args>(args)...), {}});
}

// The process at the other end of a control connection, as the kernel reports it.
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS)
  bool may_change = false;    // decided once per connection by the server
};

struct CommandContext;

// Checks a request's arguments against its command's spec: an object (or null) whose keys are
// the spec's arguments, each of its type, range and choices, the required ones present. The
// registry runs it before every handler, so that handlers only read.
std::optional<CommandError> check_args(const CommandSpec& spec, const Json& args);

// Reads arguments that check_args accepted; a key the request left out gives the fallback.
//
//   ArgReader a(ctx);
//   uint64_t top = a.uint("top", 10);
//   std::string by = a.string("by", "packets");
class ArgReader {
 public:
  explicit ArgReader(const CommandContext& ctx);

  std::optional<std::string> string(std::string_view key) const;
  std::string string(std::string_view key, std::string fallback) const;
  std::optional<uint64_t> uint(std::string_view key) const;
  uint64_t uint(std::string_view key, uint64_t fallback) const;
  double number(std::string_view key, double fallback) const;
  bool boolean(std::string_view key, bool fallback) const;

 private:
  const Json* find(std::string_view key) const;
  const Json& args_;
};

// ---- how vecflowctl prints a result ------------------------------------------------------------

// Units tell vecflowctl how to print a number: rates get SI prefixes (1.20 Mpps, 980 kbit/s),
// byte counts binary ones (1.5 MiB), percentages one decimal.
enum class Unit {
  None,     // printed as is (strings, ids)
  Count,    // integer with thousands grouping
  Bytes,    // byte count: B, KiB, MiB ...
  Pps,      // packets per second
  Bps,      // bits per second (the data carries bits/s)
  Percent,  // 0..100
  Seconds,  // a duration in seconds: 3d 04:05:06 for long ones
  Cycles,   // TSC cycles
};

std::string_view to_string(Unit u) noexcept;

struct Column {
  std::string header;  // "RX PPS"
  std::string key;     // JSON pointer inside a row ("/rx/pps") or a plain member name
  Unit unit = Unit::None;
};

// One block of output: a table over an array of objects (`rows` is a JSON pointer to the
// array), a list of "name: value" fields of one object (`rows` points to the object), or
// lines of text written by vecflowd (`rows` points to an array of strings; vecflowctl wraps a
// line wider than the terminal, continuing it indented), for output no table holds well, or
// a JSON value printed as YAML (`rows` points to it; null members left out), for a result in
// the appliance file's syntax.
struct Block {
  enum class Kind { Table, Fields, Text, Yaml };
  Kind kind = Kind::Table;
  std::string title;
  std::string rows;
  std::vector<Column> columns;
  // Table only: leave out rows whose value at this key is 0 unless vecflowctl --all.
  std::string hide_zero;
};

struct View {
  std::vector<Block> blocks;
  Json to_json() const;
};

// Builders that keep registrations short.
Block table(std::string title, std::string rows, std::vector<Column> columns,
            std::string hide_zero = {});
Block fields(std::string title, std::string object, std::vector<Column> columns);
Block text(std::string title, std::string lines);
Block yaml(std::string value);

// ---- commands ---------------------------------------------------------------------------------

class Snapshot;
class RateWindow;

// What a handler receives. `snapshot` holds every registered counter as collected for this
// request; `rates` gives per-second rates over the control plane's last sampling interval.
struct CommandContext {
  const Json& args;
  const Peer& peer;
  const Snapshot& snapshot;
  const RateWindow& rates;
};

using Handler = std::function<CommandResult(const CommandContext&)>;

struct Command {
  const CommandSpec* spec = nullptr;  // name, summary, access, arguments
  Handler handler = nullptr;
  std::optional<View> view = std::nullopt;  // how vecflowctl prints the result
  // The counters as collected, never minus the baseline of `clear` (the `metrics` command,
  // which shows what /metrics serves).
  bool raw_counters = false;
};

}  // namespace vecflow::control
