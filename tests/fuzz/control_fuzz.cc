// Fuzzes the control protocol as the server serves it (control/server.cc): the bytes of one
// connection are split into request lines, each parsed (parse_request), dispatched through a
// registry holding vecflowd's built-in commands and one command that reads every kind of
// argument, and its reply serialised as the server sends it. Whatever the bytes, every request
// line gets exactly one reply: a JSON object of protocol version 1 with "ok" true and a
// "result", or "ok" false and an "error" with a known code and a message, which a client can
// parse back. A state-changing command from a peer without the right is always refused.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "api/registry.h"
#include "config/config.h"
#include "control/builtin_commands.h"
#include "core/accounting.h"
#include "fuzz_check.h"
#include "pipeline/stage_registry.h"

using namespace vecflow;
using namespace vecflow::control;

namespace {

// What a vecflowd built from this file registers for `status` and `accounting`.
constexpr const char* kAppliance = R"(
ports:
  - {name: wan, type: dpdk, devargs: net_null0}
  - {name: lan, type: dpdk, devargs: net_null1}
)";

// Lines of one connection fuzzed per input: enough for pipelined requests, few enough that one
// input stays fast.
constexpr size_t kMaxLines = 8;

const std::set<std::string, std::less<>> kErrorCodes = [] {
  std::set<std::string, std::less<>> s;
  for (int c = 0; c <= int(ErrorCode::Internal); ++c)
    s.emplace(to_string(ErrorCode(c)));
  return s;
}();

const CommandSpec kFuzzArgs{"fuzz-args",
                            "reads every kind of argument",
                            Access::Change,
                            {{"s", ArgType::String, "a string"},
                             {"u", ArgType::Uint, "a bounded count", false, false, {}, {}, 0, 100},
                             {"o", ArgType::Uint, "an optional count", false, false, {}, {}, 5, 10},
                             {"n", ArgType::Number, "a fraction", false, false, {}, {}, -1, 1},
                             {"b", ArgType::Bool, "a flag"},
                             {"c", ArgType::String, "a choice", false, false, {}, {"a", "b"}},
                             {"r", ArgType::String, "a required one", true}}};

struct Server {
  config::ApplianceConfig running;
  OutcomeTable outcomes{1, 2};
  Registry registry;
  RateWindow rates;

  Server() {
    auto cfg = config::load_config_text(kAppliance, "fuzz.yaml", builtin_stage_types());
    FUZZ_CHECK(cfg.has_value());
    running = std::move(*cfg);
    register_introspection(registry);
    register_status(registry, StatusSource{"fuzz", monotonic_ns(), 0, &running, false});
    register_accounting(registry, outcomes, [] { return std::vector<std::string>{"wan", "lan"}; });
    register_errors(registry);
    // The argument check and every ArgReader accessor on arguments the fuzzer chooses.
    FUZZ_CHECK(registry
                   .add_command(Command{
                       &kFuzzArgs,
                       [](const CommandContext& ctx) -> CommandResult {
                         ArgReader a(ctx);
                         return Json{{"s", a.string("s", "x")},      {"u", a.uint("u", 1)},
                                     {"o", a.uint("o").value_or(0)}, {"n", a.number("n", 0.5)},
                                     {"b", a.boolean("b", false)},   {"c", a.string("c", "a")},
                                     {"r", a.string("r", "")}};
                       },
                       View{{fields("", "", {{"S", "s"}})}}})
                   .has_value());
    // Two samples, so rates exist.
    rates.push(registry.collect());
    rates.push(registry.collect());
  }
};

// The server's request handling (ControlServer's Connection::handle), then its serialisation.
Json handle(Server& s, std::string_view line, const Peer& peer) {
  auto request = parse_request(line);
  if (!request) return reply_error(Json(), request.error());
  return s.registry.dispatch(*request, peer, s.rates);
}

void check_reply(const Json& reply, const Peer& peer, std::string_view line) {
  FUZZ_CHECK(reply.is_object());
  FUZZ_CHECK(reply.value("version", 0) == kProtocolVersion);
  FUZZ_CHECK(reply.contains("ok") && reply["ok"].is_boolean());
  if (reply["ok"].get<bool>()) {
    FUZZ_CHECK(reply.contains("result") && !reply.contains("error"));
  } else {
    FUZZ_CHECK(reply.contains("error") && !reply.contains("result"));
    const Json& e = reply["error"];
    FUZZ_CHECK(e.is_object() && e.contains("code") && e["code"].is_string());
    FUZZ_CHECK(kErrorCodes.contains(e["code"].get<std::string>()));
    FUZZ_CHECK(e.contains("message") && e["message"].is_string());
    FUZZ_CHECK(!e["message"].get<std::string>().empty());
  }
  if (!peer.may_change) {
    auto request = parse_request(line);
    if (request && request->command == "fuzz-args") {
      FUZZ_CHECK(reply["error"]["code"] == "permission_denied");
    }
  }
  // What goes on the wire (invalid UTF-8 a peer sent is replaced, as the server does) parses
  // back into the same reply.
  std::string wire = reply.dump(-1, ' ', false, Json::error_handler_t::replace);
  Json back = Json::parse(wire, nullptr, false);
  FUZZ_CHECK(!back.is_discarded() && back.is_object());
  FUZZ_CHECK(back["ok"] == reply["ok"]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server server;
  Peer reader{1, 1000, 1000, {}, false};
  Peer root{1, 0, 0, {}, true};
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t lines = 0;
  while (!in.empty() && lines < kMaxLines) {
    size_t nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    // As the server reads a line: without a trailing CR, blank lines skipped.
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    ++lines;
    const Peer& peer = lines % 2 ? root : reader;
    check_reply(handle(server, line, peer), peer, line);
  }
  return 0;
}
