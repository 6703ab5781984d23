#include "api/registry.h"

#include <exception>

namespace vecflow::control {

std::expected<Request, CommandError> parse_request(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Tell a request cut short from one that is not JSON at all: parse again with exceptions
    // to learn where the parser stopped; one past the last byte means it ran out of input.
    try {
      Json again = Json::parse(text);
      (void)again;
    } catch (const Json::parse_error& e) {
      if (e.byte == text.size() + 1) {
        return std::unexpected(CommandError{
            ErrorCode::TruncatedRequest,
            fmt::format("request ends after {} bytes inside a JSON value", text.size()),
            {}});
      }
      return std::unexpected(CommandError{
          ErrorCode::MalformedRequest, fmt::format("request is not JSON: {}", e.what()), {}});
    } catch (const Json::exception& e) {
      // Not a syntax error: a number the parser cannot hold (1e400), found by fuzzing. It must
      // be answered, not escape into the server's event loop.
      return std::unexpected(CommandError{ErrorCode::MalformedRequest,
                                          fmt::format("request is not usable JSON: {}", e.what()),
                                          {}});
    }
  }
  if (!j.is_object()) {
    return command_error(ErrorCode::MalformedRequest,
                         "request must be a JSON object like {{\"command\":\"status\"}}");
  }
  Request r;
  if (auto it = j.find("id"); it != j.end()) r.id = *it;
  if (auto it = j.find("version"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() != kProtocolVersion) {
      return std::unexpected(CommandError{
          ErrorCode::UnsupportedVersion,
          fmt::format("protocol version {} is not supported; this vecflowd speaks version {}",
                      it->dump(), kProtocolVersion),
          Json{{"supported", Json::array({kProtocolVersion})}}});
    }
  }
  auto cmd = j.find("command");
  if (cmd == j.end() || !cmd->is_string() || cmd->get<std::string>().empty()) {
    return command_error(ErrorCode::MalformedRequest,
                         "request has no \"command\" string, e.g. {{\"command\":\"status\"}}");
  }
  r.command = cmd->get<std::string>();
  if (auto it = j.find("args"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) {
      return command_error(ErrorCode::MalformedRequest, "\"args\" must be a JSON object");
    }
    r.args = *it;
  }
  if (auto it = j.find("view"); it != j.end()) r.view = it->is_boolean() && it->get<bool>();
  for (const auto& [key, value] : j.items()) {
    if (key != "id" && key != "version" && key != "command" && key != "args" && key != "view") {
      return command_error(ErrorCode::MalformedRequest,
                           "unknown request member '{}' (expected version, id, command, args, "
                           "view)",
                           key);
    }
  }
  return r;
}

Json reply_ok(const Json& id, Json result, const View* view) {
  Json r = {{"version", kProtocolVersion}};
  if (!id.is_null()) r["id"] = id;
  r["ok"] = true;
  r["result"] = std::move(result);
  if (view) r["view"] = view->to_json();
  return r;
}

Json reply_error(const Json& id, const CommandError& error) {
  Json r = {{"version", kProtocolVersion}};
  if (!id.is_null()) r["id"] = id;
  r["ok"] = false;
  Json e = {{"code", to_string(error.code)}, {"message", error.message}};
  if (!error.details.is_null()) e["details"] = error.details;
  r["error"] = std::move(e);
  return r;
}

Result<void> Registry::add_command(Command command) {
  if (!command.spec) return fail("a control command has no spec");
  if (auto problem = spec_problem(*command.spec); !problem.empty()) return fail("{}", problem);
  std::string name(command.spec->name);
  if (commands_.contains(name)) return fail("control command '{}' is registered twice", name);
  commands_.emplace(std::move(name), std::move(command));
  return {};
}

bool Registry::remove_command(std::string_view name) {
  auto it = commands_.find(name);
  if (it == commands_.end()) return false;
  commands_.erase(it);
  return true;
}

void Registry::add_collector(std::string part, Collector collector) {
  collectors_.emplace_back(std::move(part), std::move(collector));
}

void Registry::add_status(std::string key, StatusSection section) {
  status_.emplace_back(std::move(key), std::move(section));
}

const Command* Registry::find(std::string_view name) const {
  auto it = commands_.find(name);
  return it == commands_.end() ? nullptr : &it->second;
}

std::vector<const Command*> Registry::commands() const {
  std::vector<const Command*> out;
  for (const auto& [name, c] : commands_)
    out.push_back(&c);
  return out;
}

Snapshot Registry::collect() const {
  Snapshot s;
  for (const auto& [part, collector] : collectors_)
    collector(s);
  return s;
}

Json Registry::status_sections(const CommandContext& ctx) const {
  Json out = Json::object();
  for (const auto& [key, section] : status_)
    out[key] = section(ctx);
  return out;
}

Json Registry::dispatch(const Request& request, const Peer& peer, const RateWindow& rates) const {
  const Command* c = find(request.command);
  if (!c) {
    std::string names;
    for (const auto& [name, cmd] : commands_)
      names += fmt::format("{}{}", names.empty() ? "" : ", ", name);
    return reply_error(request.id,
                       CommandError{ErrorCode::UnknownCommand,
                                    fmt::format("unknown command '{}'; this vecflowd serves: {}",
                                                request.command, names),
                                    {}});
  }
  if (c->spec->access == Access::Change && !peer.may_change) {
    return reply_error(
        request.id,
        CommandError{ErrorCode::PermissionDenied,
                     fmt::format("'{}' changes the appliance: it needs root or membership of the "
                                 "control group (uid {} is neither)",
                                 c->spec->name, peer.uid),
                     {}});
  }
  if (auto bad = check_args(*c->spec, request.args)) return reply_error(request.id, *bad);
  try {
    Snapshot snapshot = collect();
    if (!c->raw_counters) snapshot.subtract(baseline_);
    const Json no_args = Json::object();
    CommandContext ctx{request.args.is_null() ? no_args : request.args, peer, snapshot, rates};
    CommandResult r = c->handler(ctx);
    if (!r) return reply_error(request.id, r.error());
    return reply_ok(request.id, std::move(*r), request.view && c->view ? &*c->view : nullptr);
  } catch (const std::exception& e) {
    return reply_error(request.id, CommandError{ErrorCode::Internal,
                                                fmt::format("'{}' failed inside vecflowd: {}",
                                                            c->spec->name, e.what()),
                                                {}});
  }
}

size_t Registry::clear(const std::function<bool(const MetricFamily&)>& which) {
  Snapshot now = collect();
  size_t n = 0;
  baseline_.replace(now, [&](const MetricFamily& f) {
    const bool cleared = is_cumulative(f.type) && which(f);
    n += cleared;
    return cleared;
  });
  return n;
}

}  // namespace vecflow::control
