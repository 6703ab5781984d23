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

  // Read-only commands without arguments.
  struct Simple {
    const char* name;
    const char* help;
  };
  for (const Simple& s : std::initializer_list<Simple>{
           {"status", "Is it up: version, uptime, configuration, lcores, ports, scheduler"},
           {"lcores", "Which core is busy: busy/idle/sleep of every lcore and service"},
           {"accounting",
            "Where each port's packets went (rx = tx + kernel + dropped) and came from (XDP)"},
           {"errors", "Every drop reason with its count across the box"},
           {"buffers", "Buffer pools, buffers lent to the kernel, EAL heaps, process memory"},
           {"commands", "The commands this vecflowd serves"},
           {"steering", "XDP steering: hits per rule and action, parse errors"},
           {"confirm", "Keep a reload made with --confirm-within"},
           {"rollback", "Revert a reload made with --confirm-within now"}}) {
    std::string name = s.name;
    app.add_subcommand(name, s.help)->callback([&command, name] { command = name; });
  }

  // Table commands that take an optional filter: the option's value goes as argument `key`.
  struct Filtered {
    const char* name;
    const char* help;
    std::vector<std::pair<const char*, const char*>> options;  // {key, help}
  };
  std::map<std::string, std::string> filters;
  for (const Filtered& f : std::initializer_list<Filtered>{
           {"ports",
            "Ports and queues: packets, bytes, rates, drops, link, MTU, AF_XDP mode",
            {{"port", "Only this port"}}},
           {"hardware",
            "What each port's device is: driver, bus, NUMA, speed, MTU, queues, offloads, XDP",
            {{"port", "Only this port"}}},
           {"routes",
            "The routes in use per route stage, and what each stage did",
            {{"stage", "Only this route stage"},
             {"lookup", "Also show the route that decides this IP address"}}},
           {"acl", "The ACL rules in use, in order, with hits", {{"stage", "Only this acl stage"}}},
           {"sessions",
            "Connection-tracking sessions: how many by state, the largest first; all of a "
            "session when one matches",
            {{"stage", "Only this conntrack stage"},
             {"address", "Only sessions with this IP address at either end"},
             {"port", "Only sessions with this TCP/UDP/SCTP port at either end"},
             {"state", "Only sessions in this state (established, syn_sent, udp_assured ...)"},
             {"top", "Show this many sessions (default 20)"},
             {"sort", "Order by packets (default), bytes or age"}}},
           {"neighbours",
            "The neighbour (ARP/NDP) table in use",
            {{"port", "Only next hops on this port"}}}}) {
    std::string name = f.name;
    auto* sub = app.add_subcommand(name, f.help);
    for (const auto& [key, help] : f.options)
      sub->add_option(std::string("--") + key, filters[name + "." + key], help);
    sub->callback([&command, &args, &filters, name] {
      command = name;
      for (const auto& [k, v] : filters) {
        if (!k.starts_with(name + ".") || v.empty()) continue;
        const std::string key = k.substr(name.size() + 1);
        // The sessions' numeric filters go as numbers; a port name stays a string.
        const bool number = name == "sessions" && (key == "port" || key == "top") &&
                            v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 9;
        if (number) {
          args[key] = std::stoull(v);
        } else {
          args[key] = v;
        }
      }
    });
  }

  auto* pipe = app.add_subcommand(
      "pipeline", "Pipeline stages: calls, packets, packets per call, cycles per packet");
  std::optional<unsigned> pipe_lcore;
  pipe->add_option("--lcore", pipe_lcore, "Only what this lcore ran");
  pipe->callback([&] {
    command = "pipeline";
    if (pipe_lcore) args["lcore"] = *pipe_lcore;
  });

  auto* sched = app.add_subcommand(
      "sched", "Scheduler: per lcore's rx adapters and workers, busy/idle, events, vectors");
  std::optional<unsigned> sched_lcore;
  sched->add_option("--lcore", sched_lcore, "Only this lcore's rx adapters and workers");
  sched->callback([&] {
    command = "sched";
    if (sched_lcore) args["lcore"] = *sched_lcore;
  });

  auto* metrics = app.add_subcommand("metrics", "Every counter, the numbers /metrics serves");
  std::string family;
  metrics->add_option("--family", family, "Only families whose name starts with PREFIX");
  metrics->callback([&] {
    command = "metrics";
    if (!family.empty()) args["family"] = family;
  });

  auto* config = app.add_subcommand("config", "The running configuration, defaults filled in");
  std::string section;
  config->add_option("section", section, "Only this section (ports, steering, ...)");
  config->callback([&] {
    command = "config";
    if (!section.empty()) args["section"] = section;
  });

  auto* flows = app.add_subcommand("flows", "Top flows by packets or bytes");
  unsigned top = 20;
  std::string by = "packets";
  flows->add_option("-n,--top", top, "How many flows")->check(CLI::Range(1, 100000));
  flows->add_option("--by", by, "Order by packets or bytes")
      ->check(CLI::IsMember({"packets", "bytes"}));
  std::string flow_stage;
  flows->add_option("--stage", flow_stage, "Only this count stage");
  flows->callback([&] {
    command = "flows";
    args["top"] = top;
    args["by"] = by;
    if (!flow_stage.empty()) args["stage"] = flow_stage;
  });

  auto* reload = app.add_subcommand(
      "reload", "Validate and apply an appliance file (default: the running one)");
  std::string file;
  unsigned confirm_within = 0;
  reload->add_option("file", file, "Appliance file")->check(CLI::ExistingFile);
  reload
      ->add_option("--confirm-within", confirm_within,
                   "Revert unless `vecflowctl confirm` comes within SECONDS")
      ->type_name("SECONDS")
      ->check(CLI::Range(1u, 86400u));
  reload->callback([&] {
    command = "reload";
    if (!file.empty()) args["file"] = std::filesystem::absolute(file).lexically_normal().string();
    if (confirm_within > 0) args["confirm_within"] = confirm_within;
  });

  auto* capture = app.add_subcommand("capture", "Packet captures to pcapng files");
  capture->require_subcommand(1);
  auto* cap_start = capture->add_subcommand("start", "Start capturing on a port");
  std::string cap_port, cap_dir = "both", cap_filter, cap_file;
  unsigned cap_count = 0, cap_snaplen = 0;
  double cap_duration = 0;
  cap_start->add_option("port", cap_port, "Port name")->required();
  cap_start->add_option("--direction", cap_dir, "rx, tx or both")
      ->check(CLI::IsMember({"rx", "tx", "both"}));
  cap_start->add_option("-c,--count", cap_count, "Stop after N packets");
  cap_start->add_option("-d,--duration", cap_duration, "Stop after SECONDS");
  cap_start->add_option("-f,--filter", cap_filter, "pcap filter expression (as tcpdump)");
  cap_start->add_option("--snaplen", cap_snaplen, "Bytes kept of each packet");
  cap_start->add_option("--file", cap_file, "File name under control.capture_dir");
  cap_start->callback([&] {
    command = "capture";
    args = {{"action", "start"}, {"port", cap_port}, {"direction", cap_dir}};
    if (cap_count) args["count"] = cap_count;
    if (cap_duration > 0) args["duration_s"] = cap_duration;
    if (!cap_filter.empty()) args["filter"] = cap_filter;
    if (cap_snaplen) args["snaplen"] = cap_snaplen;
    if (!cap_file.empty()) args["file"] = cap_file;
  });
  auto* cap_stop = capture->add_subcommand("stop", "Stop a capture (all when no id)");
  unsigned cap_id = 0;
  cap_stop->add_option("id", cap_id, "Capture id");
  cap_stop->callback([&] {
    command = "capture";
    args = {{"action", "stop"}};
    if (cap_id) args["id"] = cap_id;
  });
  capture->add_subcommand("list", "Captures running and done")->callback([&] {
    command = "captures";
  });

  auto* trace = app.add_subcommand(
      "trace", "Follow packets through every step of the data path: add, show, clear");
  trace->require_subcommand(1);
  auto* trace_add = trace->add_subcommand("add", "Follow the next COUNT packets that match");
  unsigned trace_count = 0;
  std::string trace_port, trace_filter;
  trace_add->add_option("count", trace_count, "Packets to follow (1-1000)")
      ->required()
      ->check(CLI::Range(1u, 1000u));
  trace_add->add_option("-p,--port", trace_port, "Only packets received on this port");
  trace_add->add_option("-f,--filter", trace_filter, "pcap filter expression (as tcpdump)");
  trace_add->callback([&] {
    command = "trace-arm";
    args = {{"action", "add"}, {"count", trace_count}};
    if (!trace_port.empty()) args["port"] = trace_port;
    if (!trace_filter.empty()) args["filter"] = trace_filter;
  });
  trace->add_subcommand("show", "The steps of the packets followed so far")->callback([&] {
    command = "trace";
  });
  trace->add_subcommand("clear", "Stop following and forget the steps")->callback([&] {
    command = "trace-arm";
    args = {{"action", "clear"}};
  });

  auto* clear = app.add_subcommand(
      "clear", "Counters shown by commands restart from zero (/metrics stays monotonic)");
  std::string clear_what = "counters";
  clear->add_option("what", clear_what, "counters (all), errors or runtime")
      ->check(CLI::IsMember({"counters", "errors", "runtime"}));
  clear->callback([&] {
    command = "clear";
    args["what"] = clear_what;
  });

  auto* logc = app.add_subcommand("log", "Log levels and the last lines logged; set a level");
  unsigned log_lines = 20;
  auto* log_show = logc->add_subcommand("show", "Each part's level and the last lines logged");
  log_show->add_option("-n,--lines", log_lines, "How many lines (0-1000)")
      ->check(CLI::Range(0u, 1000u));
  auto* log_level =
      logc->add_subcommand("level", "Set the level of every part, or of one: [PART] LEVEL");
  std::vector<std::string> level_words;
  log_level->add_option("level", level_words, "[PART] trace|debug|info|warn|error|off")
      ->required()
      ->expected(1, 2);

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
  if (logc->parsed()) {
    command = log_level->parsed() ? "log-level" : "log";
    if (log_level->parsed()) {
      args["level"] = level_words.back();
      if (level_words.size() == 2) args["part"] = level_words.front();
    } else {
      args["lines"] = log_lines;
    }
  }
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
