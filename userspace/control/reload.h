// Reloading the appliance file while traffic runs.
//
// A reload reads and validates the whole file first (config::load_config); a file with any
// error is refused with every located error, and nothing changes. A valid file is compared
// with the running configuration section by section (config_json.h). Each changed section is
// applied live by the part that registered a SectionReloader for it, or, when no part can (or
// the part says this change needs a restart), left as it runs and reported as "restart
// required": a section is never half-applied. If applying a section fails, the sections applied
// before it are put back and the reload is refused.
//
// `reload --confirm-within S` (netplan try, Junos commit confirmed) keeps the configuration that
// ran before; unless `confirm` arrives within S seconds it is applied again, so an operator
// who cuts off their own access gets it back. `rollback` does the same at once.
//
// Threading: control thread only (the reload command, SIGHUP via ControlServer, the timer).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/registry.h"
#include "config/config.h"
#include "control/config_json.h"
#include "control/server.h"

namespace vecflow::control {

// The end of every reason a change waits for a restart.
inline constexpr std::string_view kRestartToApply = "restart vecflowd to apply it";

struct SectionReloader {
  // What of `next`'s section cannot be applied while running (one line per reason); empty
  // when all of it can. Only called when the section changed.
  std::function<std::vector<std::string>(const config::ApplianceConfig& running,
                                         const config::ApplianceConfig& next)>
      check;
  // Applies the section as it is in `next`. On failure nothing of the section may stay
  // applied; the reloader then re-applies the running configuration to sections it had
  // already changed.
  std::function<Result<void>(const config::ApplianceConfig& next)> apply;
};

// What applying `next` changes in a section, one line each ("route: 2 routes → 3 (added
// 203.0.113.0/24)"), for the reply and the log. Called before the section is applied.
using SectionDescriber = std::function<std::vector<std::string>(
    const config::ApplianceConfig& running, const config::ApplianceConfig& next)>;

class Reloader {
 public:
  // `running` is the appliance's configuration, replaced section by section as reloads apply.
  Reloader(config::ApplianceConfig& running, ControlServer& server);

  // A part that applies `section` ("steering", "pipeline" ...) live.
  // `describe` (optional) summarises what a reload changes in the section.
  void add_section(std::string section, SectionReloader reloader,
                   SectionDescriber describe = nullptr);
  // Called after a reload, a confirmation's revert or a rollback applied some section.
  void on_applied(std::function<void()> fn) { applied_.push_back(std::move(fn)); }

  // Reload from `path` (absolute). `confirm_within`: seconds until an unconfirmed reload is
  // reverted; 0 for none.
  CommandResult reload(const std::string& path, uint32_t confirm_within_s);
  CommandResult confirm();
  CommandResult rollback();

  // `reload`, `confirm`, `rollback`, `config` (the running configuration as JSON), the
  // "config" section of `status`, and SIGHUP (reloads the running file, no confirmation).
  void register_commands(Registry& registry);

 private:
  struct Applied {
    std::vector<std::string> live;
    Json summary;  // [{section, change}]: what the live sections' parts say they changed
    Json restart;  // [{section, reasons}]
    std::vector<ConfigChange> changes;
  };
  Result<Applied> apply(const config::ApplianceConfig& next);
  void revert(std::string_view why);
  Json status() const;

  config::ApplianceConfig& running_;
  ControlServer& server_;
  std::map<std::string, SectionReloader, std::less<>> sections_;
  std::map<std::string, SectionDescriber, std::less<>> describers_;
  std::vector<std::function<void()>> applied_;
  std::vector<std::string> restart_required_;  // sections where the file differs from what runs
  std::optional<std::time_t> loaded_at_;
  uint64_t reloads_ok_ = 0;
  uint64_t reloads_failed_ = 0;

  struct Pending {
    config::ApplianceConfig last_good;
    std::chrono::steady_clock::time_point deadline;
    std::unique_ptr<ScheduledCall> timer;
  };
  std::optional<Pending> pending_;
};

}  // namespace vecflow::control
