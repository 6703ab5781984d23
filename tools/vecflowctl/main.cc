// vecflowctl: the operator's view of a running vecflowd, over its control socket.
//
//   vecflowctl status                      is it up, what runs, which file
//   vecflowctl errors                      where packets are dropped and why
//   vecflowctl --watch 1 lcores            which core is busy, redrawn every second
//   vecflowctl --json accounting | jq ...  the same data for scripts
//   vecflowctl reload /etc/vecflow/appliance.yaml --confirm-within 60
//
// Exit status: see ExitCode in client.h and vecflowctl(1).
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "client.h"
#include "render.h"
#include "spec_cli.h"

namespace {

using vecflowctl::Client;
using vecflowctl::ExitCode;
using vecflowctl::Json;

volatile sig_atomic_t g_interrupted = 0;

void on_interrupt(int) {
  g_interrupted = 1;
}

ExitCode exit_code_for(const std::string& error_code) {
  if (error_code == "unknown_command") return vecflowctl::kNotServed;
  if (error_code == "permission_denied") return vecflowctl::kPermission;
  if (error_code == "bad_arguments") return vecflowctl::kUsage;
  if (error_code == "malformed_request" || error_code == "unsupported_version" ||
      error_code == "truncated_request" || error_code == "request_too_large" ||
      error_code == "timeout" || error_code == "busy") {
    return vecflowctl::kProtocol;
  }
  return vecflowctl::kCommandFailed;
}

// "key=value": the value as JSON when it parses (numbers, true, {"a":1}), else as a string.
bool parse_assignment(const std::string& text, Json& args) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  std::string value = text.substr(eq + 1);
  Json v = Json::parse(value, nullptr, false);
  args[text.substr(0, eq)] = v.is_discarded() ? Json(value) : v;
  return true;
}

struct Options {
  std::string socket;
  bool json = false;
  bool all = false;
  double watch = 0;
  int timeout_ms = 10000;
};

int print_error(const Options& o, const Json& reply) {
  const Json& e = reply["error"];
  std::string code = e.value("code", "failed");
  if (o.json) {
    std::cout << Json{{"error", e}}.dump(2) << "\n";
  } else {
    std::cerr << "vecflowctl: " << e.value("message", "error") << "\n";
    if (e.contains("details") && e["details"].contains("errors")) {
      for (const auto& err : e["details"]["errors"])
        std::cerr << "  " << err.value("text", "") << "\n";
    }
  }
  return exit_code_for(code);
}

// Sends one command and prints the reply; returns the exit code.
// Columns to fit tables into: $COLUMNS when set (as shells export it), else the terminal's;
// 0 (no limit) when writing to a pipe or a file.
size_t terminal_width() {
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(c, &end, 10);
    if (end != c && *end == '\0' && n >= 20) return n;
  }
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
    return ws.ws_col;
  return 0;
}

int run_once(const Options& o, Client& client, const std::string& command, const Json& args,
             bool clear) {
  Json request = {{"version", 1}, {"command", command}};
  if (!args.empty()) request["args"] = args;
  if (!o.json) request["view"] = true;
  auto reply = client.call(request);
  if (!reply) {
    std::cerr << "vecflowctl: " << reply.error().message << "\n";
    return reply.error().code;
  }
  if (!(*reply)["ok"].get<bool>()) return print_error(o, *reply);
  const Json& result = (*reply)["result"];
  if (o.json) {
    std::cout << (o.watch > 0 ? result.dump() : result.dump(2)) << std::endl;
    return vecflowctl::kOk;
  }
  std::string text =
      vecflowctl::render(result, reply->value("view", Json()), o.all, terminal_width());
  if (clear) {
    std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof(when), "%H:%M:%S", std::localtime(&now));
    std::cout << "\033[H\033[2J"
              << fmt::format("every {}s: vecflowctl {}   {}\n\n", o.watch, command, when);
  }
  std::cout << text << std::flush;
  return vecflowctl::kOk;
}

// `vecflowctl names KIND`: the names a running vecflowd knows, one per line, for completion and
// scripts. Each kind is read from the command that shows it.
struct NameSource {
  const char* command;
  const char* array;  // JSON pointer to the rows
  const char* key;    // member of a row holding the name
  const char* type;   // only rows whose "type" is this (stages); empty: all
};

const std::map<std::string, NameSource>& name_sources() {
  static const std::map<std::string, NameSource> sources = {
      {"ports", {"ports", "/ports", "port", ""}},
      {"stages", {"pipeline", "/stages", "stage", ""}},
      {"route-stages", {"pipeline", "/stages", "stage", "route"}},
      {"acl-stages", {"pipeline", "/stages", "stage", "acl"}},
      {"count-stages", {"pipeline", "/stages", "stage", "count"}},
      {"parts", {"log", "/levels", "part", ""}},
      {"sections", {"config", "", "", ""}},
  };
  return sources;
}

int print_names(const Options& o, const std::string& kind);

std::expected<Client, vecflowctl::ClientError> connect(const Options& o) {
  return Client::connect(o.socket, std::chrono::milliseconds(o.timeout_ms));
}

int print_names(const Options& o, const std::string& kind) {
  const NameSource& src = name_sources().at(kind);
  auto client = connect(o);
  if (!client) {
    std::cerr << "vecflowctl: " << client.error().message << "\n";
    return client.error().code;
  }
  auto reply = client->call(Json{{"version", 1}, {"command", src.command}});
  if (!reply) {
    std::cerr << "vecflowctl: " << reply.error().message << "\n";
    return reply.error().code;
  }
  if (!(*reply)["ok"].get<bool>()) return print_error(o, *reply);
  const Json& result = (*reply)["result"];
  if (std::string_view(src.array).empty()) {  // the result's own keys (config sections)
    for (const auto& [key, value] : result.items())
      std::cout << key << "\n";
    return vecflowctl::kOk;
  }
  const Json::json_pointer at(src.array);
  if (!result.contains(at)) return vecflowctl::kOk;
  std::set<std::string> seen;  // a stage appears once per lcore in some views
  for (const auto& row : result.at(at)) {
    if (!row.contains(src.key) || !row[src.key].is_string()) continue;
    if (*src.type && row.value("type", "") != src.type) continue;
    if (seen.insert(row[src.key].get<std::string>()).second)
      std::cout << row[src.key].get<std::string>() << "\n";
  }
  return vecflowctl::kOk;
}

int execute(const Options& o, const std::string& command, const Json& args) {
  if (o.watch <= 0) {
    auto client = connect(o);
    if (!client) {
      std::cerr << "vecflowctl: " << client.error().message << "\n";
      return client.error().code;
    }
    return run_once(o, *client, command, args, false);
  }
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  bool tty = isatty(STDOUT_FILENO);
  while (!g_interrupted) {
    // A connection per redraw: vecflowd closes connections idle past control.read_timeout_ms,
    // and a restarted vecflowd is picked up on the next round.
    auto client = connect(o);
    if (!client) {
      std::cerr << "vecflowctl: " << client.error().message << "\n";
      return client.error().code;
    }
    int rc = run_once(o, *client, command, args, tty && !o.json);
    if (rc != vecflowctl::kOk) return rc;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.watch);
    while (!g_interrupted && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!tty && !o.json) std::cout << "\n";
  }
  return vecflowctl::kOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vecflowctl: status and control of a running vecflowd"};
  app.require_subcommand(1);
  app.fallthrough();
  Options o;
  const char* env_socket = std::getenv("VECFLOW_SOCKET");
  o.socket = env_socket ? env_socket : "/run/vecflow/control.sock";
  app.add_option("-s,--socket", o.socket,
                 "Control socket (default: $VECFLOW_SOCKET or "
                 "/run/vecflow/control.sock)");
  app.add_flag("-j,--json", o.json, "Print the result as JSON, for scripts");
  app.add_option("-w,--watch", o.watch, "Redraw every SECONDS until interrupted")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_flag("-a,--all", o.all, "Also show rows that are zero");
  app.add_option("--timeout", o.timeout_ms, "Milliseconds to wait for vecflowd's answer")
      ->check(CLI::Range(100, 600000));
  app.footer(
      "Exit status: 0 ok, 1 the command failed, 2 usage error, 3 vecflowd not running, "
      "4 permission denied,\n5 command not served by this vecflowd, 6 no valid reply.");

  std::string command;
  Json args = Json::object();

  // Every command vecflowd answers, from the specs both programs are built from.
  vecflowctl::SpecCli spec_cli(app);

  auto* call = app.add_subcommand("call", "Any command: COMMAND key=value ...");
  std::string call_name;
  std::vector<std::string> call_params;
  call->add_option("command", call_name, "Command name")->required();
  call->add_option("params", call_params, "key=value arguments (values may be JSON)");

  auto* names = app.add_subcommand(
      "names", "Names the running vecflowd knows, one per line (for completion and scripts)");
  std::string names_kind;
  std::vector<std::string> kinds;
  for (const auto& [k, v] : name_sources())
    kinds.push_back(k);
  names->add_option("kind", names_kind, "What to list")->required()->check(CLI::IsMember(kinds));

  app.set_version_flag("--version", std::string("vecflowctl ") + VECFLOW_VERSION);
  // A word that is no command is kept as an extra, so that the error can name it.
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty() && !app.remaining().empty()) {
      std::cerr << "vecflowctl: unknown command '" << app.remaining().front()
                << "' (vecflowctl --help lists the commands)\n";
      return vecflowctl::kUsage;
    }
    int rc = app.exit(e);
    return rc == 0 ? vecflowctl::kOk : vecflowctl::kUsage;
  }
  if (!app.remaining().empty()) {
    std::cerr << "vecflowctl: unexpected '" << app.remaining().front() << "'\n";
    return vecflowctl::kUsage;
  }
  spec_cli.chosen(command, args);
  if (call->parsed()) {
    command = call_name;
    for (const auto& p : call_params) {
      if (!parse_assignment(p, args)) {
        std::cerr << "vecflowctl: '" << p << "' is not key=value\n";
        return vecflowctl::kUsage;
      }
    }
  }
  if (names->parsed()) return print_names(o, names_kind);
  return execute(o, command, args);
}
