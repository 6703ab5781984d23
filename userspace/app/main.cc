// vecflowd: the appliance daemon.
//
//   vecflowd                       run the embedded demo configuration
//   vecflowd -c /etc/vecflow/appliance.yaml
//   vecflowd --check FILE          validate a file: prints "ok" or every located error
//   vecflowd --list-drop-reasons   every drop reason with its meaning (docs/drop-reasons.md)
//
// SIGINT/SIGTERM stop it; SIGHUP reloads the running file (like `vecflowctl reload`).
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>

#include "app/appliance.h"
#include "app/demo_config.h"
#include "app/version.h"
#include "config/config.h"
#include "core/drop_reason.h"
#include "core/log.h"
#include "pipeline/stage_registry.h"

namespace {

vecflow::Appliance* g_appliance = nullptr;
// A stop asked for while the appliance is still being built (attaching XDP, creating sockets
// and pools can take seconds): honoured once create() returns, so that everything it attached
// is detached again instead of the default action killing the process mid-way.
volatile sig_atomic_t g_stop_requested = 0;
// Likewise a SIGHUP: the control socket accepts connections before create() returns, so a
// client (or systemd's ExecReload) may signal a reload then; it is applied once the appliance
// exists, re-reading the file that may have changed since it was first read.
volatile sig_atomic_t g_reload_requested = 0;

void on_signal(int) {
  g_stop_requested = 1;
  if (g_appliance) g_appliance->request_stop();
}

void on_hangup(int) {
  g_reload_requested = 1;
  if (g_appliance) g_appliance->request_reload();
}

int print_errors(const std::vector<vecflow::config::ConfigError>& errors) {
  for (const auto& e : errors)
    std::cerr << e.to_string() << "\n";
  std::cerr << errors.size() << (errors.size() == 1 ? " error" : " errors") << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{
      "vecflowd: packet-forwarding appliance (XDP steering, AF_XDP and DPDK ports, "
      "vector event scheduler)"};
  std::string config_path;
  std::vector<std::string> check_paths;
  bool print_demo = false;
  bool list_drop_reasons = false;
  bool version = false;
  cli.add_option("-c,--config", config_path,
                 "Appliance file to run (default: the embedded demo configuration)");
  cli.add_option("--check", check_paths,
                 "Validate appliance files and exit: prints 'ok' or "
                 "every error with file:line:col")
      ->type_name("FILE");
  cli.add_flag("--print-demo-config", print_demo, "Print the embedded demo configuration");
  cli.add_flag("--list-drop-reasons", list_drop_reasons,
               "Print every drop reason the counters use, with its meaning");
  cli.add_flag("-V,--version", version, "Print the version");
  cli.footer(
      "Signals: SIGINT/SIGTERM stop, SIGHUP reloads the file (see vecflowctl reload).\n"
      "Exit status: 0 on clean shutdown or valid files, 1 on configuration errors, 2 on "
      "start-up failures.\nReference of every key: /usr/share/doc/vecflow/reference.yaml "
      "(configs/reference.yaml in the source).");
  CLI11_PARSE(cli, argc, argv);

  if (version) {
    std::cout << "vecflowd " << vecflow::kVersion << "\n";
    return 0;
  }
  if (print_demo) {
    std::cout << vecflow::kDemoConfig;
    return 0;
  }
  if (list_drop_reasons) {
    std::cout << vecflow::drop_reasons_markdown();
    return 0;
  }
  if (!check_paths.empty()) {
    int rc = 0;
    for (const auto& path : check_paths) {
      auto cfg = vecflow::config::load_config(path, vecflow::builtin_stage_types());
      if (cfg) {
        std::cout << path << ": ok\n";
      } else {
        rc = print_errors(cfg.error());
      }
    }
    return rc;
  }

  // Before the file is read (100 000 steering rules take seconds to load): a stop asked for
  // from here on ends the process with status 0 once the current step is done.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = on_hangup;
  sigaction(SIGHUP, &sa, nullptr);

  // An absolute path, so status names the file wherever vecflowctl runs and SIGHUP re-reads
  // the same file whatever the daemon's working directory becomes.
  auto cfg = config_path.empty()
                 ? vecflow::config::load_config_text(vecflow::kDemoConfig, "<embedded demo>",
                                                     vecflow::builtin_stage_types())
                 : vecflow::config::load_config(
                       std::filesystem::absolute(config_path).lexically_normal().string(),
                       vecflow::builtin_stage_types());
  if (!cfg) return print_errors(cfg.error());
  vecflow::log::init(vecflow::spdlog_level(cfg->logging.level));
  auto log = vecflow::log::get("app");
  log->info("vecflowd {} starting", vecflow::kVersion);
  if (g_stop_requested) {
    log->info("stop requested while the file was read: stopped before starting");
    return 0;
  }

  auto app = vecflow::Appliance::create(std::move(*cfg));
  if (!app) {
    log->error("{}", app.error().message);
    return 2;
  }
  g_appliance = app->get();
  // From here the ports are attached and counting: a stop that landed during start-up still
  // goes through run(), whose lcores see the stop at once, so it ends with the same drain and
  // final accounting as any other stop.
  if (g_stop_requested) {
    log->info("stop requested during start-up: stopping before forwarding");
    g_appliance->request_stop();
  }
  // A reload asked for during start-up (a second request from the handler itself, should the
  // signal land right now, only re-reads the file once more).
  if (g_reload_requested) g_appliance->request_reload();

  auto rc = (*app)->run();
  g_appliance = nullptr;
  // Everything is taken down before the verdict: a teardown that fails must not follow a
  // "stopped cleanly" already logged.
  app->reset();
  if (!rc) {
    log->error("{}", rc.error().message);
    return 2;
  }
  log->info("stopped cleanly");
  return 0;
}
