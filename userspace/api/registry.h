// The registry is where the parts of vecflowd plug into the control plane: commands, counter
// collectors and sections of `status`. The app fills it while wiring the parts (one
// register_<part>() function per part, userspace/control/parts/); the ControlServer serves it.
//
// Threading: registration happens before the server starts or on the control thread; every
// lookup and every handler runs on the control thread. Nothing here is touched by workers.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/command.h"
#include "api/metrics.h"
#include "core/error.h"

namespace vecflow::control {

// One parsed request line (vecflow-control(7)).
struct Request {
  Json id;              // echoed in the reply; null when absent
  std::string command;  // "status"
  Json args;            // an object, or null
  bool view = false;    // the client wants the View of the command (vecflowctl's human output)
};

// Parses one request; a CommandError (malformed_request, unsupported_version) otherwise.
std::expected<Request, CommandError> parse_request(std::string_view text);

// {"version":1,"id":..,"ok":true,"result":..[,"view":..]}
Json reply_ok(const Json& id, Json result, const View* view);
// {"version":1,"id":..,"ok":false,"error":{"code":..,"message":..[,"details":..]}}
Json reply_error(const Json& id, const CommandError& error);

class Registry {
 public:
  // Fails when a command of that name exists: two parts must not answer one name.
  Result<void> add_command(Command command);
  // Removes a command (a part that stops at run time); false if it was not registered.
  bool remove_command(std::string_view name);
  void add_collector(std::string part, Collector collector);
  // A section of `status`, computed when status is asked.
  using StatusSection = std::function<Json(const CommandContext&)>;
  void add_status(std::string key, StatusSection section);

  const Command* find(std::string_view name) const;
  // Names in alphabetical order.
  std::vector<const Command*> commands() const;

  // Runs every collector into one snapshot.
  Snapshot collect() const;
  // Every status section by key.
  Json status_sections(const CommandContext& ctx) const;

  // Checks access, runs the handler, and wraps its result in a reply. Never throws: a handler
  // that throws gets an `internal` error reply.
  Json dispatch(const Request& request, const Peer& peer, const RateWindow& rates) const;

  // `vecflowctl clear`: from now on the counter families `which` selects read, in every
  // command but `metrics`, as counted since this moment. The counters themselves (and so
  // /metrics, rates and the final accounting) go on unchanged: Prometheus sees no reset.
  // Returns how many families it cleared.
  size_t clear(const std::function<bool(const MetricFamily&)>& which);

 private:
  Snapshot baseline_{0};
  std::map<std::string, Command, std::less<>> commands_;
  std::vector<std::pair<std::string, Collector>> collectors_;
  std::vector<std::pair<std::string, StatusSection>> status_;
};

}  // namespace vecflow::control
