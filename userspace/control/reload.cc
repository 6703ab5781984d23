#include "control/reload.h"

#include <algorithm>
#include <ctime>

#include <fmt/chrono.h>
#include <fmt/ranges.h>

#include "control/command_specs.h"
#include "core/log.h"
#include "pipeline/stage_registry.h"

namespace vecflow::control {
namespace {

inline const MetricFamily kReloads{"vecflow_config_reloads_total",
                                   "Reloads of the appliance file, by result",
                                   MetricType::Counter,
                                   {"result"}};

Json located(const config::ConfigError& e) {
  return {{"file", e.where.file}, {"line", e.where.line}, {"column", e.where.column},
          {"path", e.path},       {"message", e.message}, {"text", e.to_string()}};
}

}  // namespace

Reloader::Reloader(config::ApplianceConfig& running, ControlServer& server)
    : running_(running), server_(server) {}

void Reloader::add_section(std::string section, SectionReloader reloader,
                           SectionDescriber describe) {
  if (describe) describers_[section] = std::move(describe);
  sections_[std::move(section)] = std::move(reloader);
}

Result<Reloader::Applied> Reloader::apply(const config::ApplianceConfig& next) {
  Applied out;
  out.changes = diff_configs(running_, next);
  std::vector<std::string> changed;
  for (const auto& c : out.changes) {
    if (std::find(changed.begin(), changed.end(), c.section) == changed.end())
      changed.push_back(c.section);
  }
  out.restart = Json::array();
  std::vector<std::string> restart;
  for (const auto& section : changed) {
    auto it = sections_.find(section);
    std::vector<std::string> reasons;
    if (it == sections_.end()) {
      reasons.push_back(fmt::format("no part of this vecflowd applies '{}' while running: {}",
                                    section, kRestartToApply));
    } else if (it->second.check) {
      reasons = it->second.check(running_, next);
    }
    if (reasons.empty()) {
      out.live.push_back(section);
    } else {
      restart.push_back(section);
      out.restart.push_back({{"section", section}, {"reasons", reasons}});
    }
  }
  out.summary = Json::array();
  for (const auto& section : out.live) {
    if (auto it = describers_.find(section); it != describers_.end()) {
      for (auto& line : it->second(running_, next))
        out.summary.push_back({{"section", section}, {"change", std::move(line)}});
    }
  }
  std::vector<std::string> done;
  for (const auto& section : out.live) {
    auto r = sections_.at(section).apply(next);
    if (!r) {
      // Put back what this reload already changed; the running configuration is untouched.
      for (auto it = done.rbegin(); it != done.rend(); ++it) {
        if (auto back = sections_.at(*it).apply(running_); !back) {
          log::get("control")->error("reload: could not restore '{}': {}", *it,
                                     back.error().message);
        }
      }
      return fail("applying '{}' failed: {}; the running configuration is unchanged", section,
                  r.error().message);
    }
    done.push_back(section);
  }
  for (const auto& section : out.live)
    copy_section(running_, next, section);
  if (!out.live.empty()) {
    for (const auto& fn : applied_)
      fn();
  }
  running_.source = next.source;
  running_.hash = next.hash;
  restart_required_ = restart;
  loaded_at_ = std::time(nullptr);
  return out;
}

CommandResult Reloader::reload(const std::string& path, uint32_t confirm_within_s) {
  auto log = log::get("control");
  if (pending_) {
    return command_error(
        ErrorCode::Failed,
        "a reload awaits confirmation (reverts in {:.0f} s): `vecflowctl "
        "confirm` or `vecflowctl rollback` first",
        std::chrono::duration<double>(pending_->deadline - std::chrono::steady_clock::now())
            .count());
  }
  auto next = config::load_config(path, builtin_stage_types());
  if (!next) {
    ++reloads_failed_;
    Json errors = Json::array();
    for (const auto& e : next.error()) {
      errors.push_back(located(e));
      log->error("reload refused: {}", e.to_string());
    }
    return std::unexpected(CommandError{
        ErrorCode::InvalidConfig,
        fmt::format("{} has {} error{}; still running {} ({})", path, next.error().size(),
                    next.error().size() == 1 ? "" : "s", running_.source, running_.hash),
        Json{{"errors", std::move(errors)}}});
  }
  config::ApplianceConfig before = running_;
  auto applied = apply(*next);
  if (!applied) {
    ++reloads_failed_;
    log->error("reload of {} refused: {}", path, applied.error().message);
    return command_error(ErrorCode::Failed, "{}", applied.error().message);
  }
  ++reloads_ok_;
  Json changes = Json::array();
  for (const auto& c : applied->changes)
    changes.push_back(to_json(c));
  log->info("reloaded {} ({}): {} change(s), applied: [{}], restart required: [{}]", path,
            running_.hash, applied->changes.size(), fmt::join(applied->live, ", "),
            fmt::join(restart_required_, ", "));
  for (const auto& s : applied->summary) {
    log->info("reload: {}: {}", s["section"].get<std::string>(), s["change"].get<std::string>());
  }
  for (const auto& r : applied->restart) {
    for (const auto& why : r["reasons"])
      log->warn("reload: '{}' not applied: {}", r["section"].get<std::string>(),
                why.get<std::string>());
  }
  Json result = {{"source", running_.source},
                 {"hash", running_.hash},
                 {"applied", applied->live},
                 {"summary", applied->summary},
                 {"restart_required", applied->restart},
                 {"changes", std::move(changes)}};
  if (confirm_within_s > 0 && !applied->live.empty()) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(confirm_within_s);
    auto timer = server_.schedule(std::chrono::seconds(confirm_within_s),
                                  [this]() { revert("not confirmed in time"); });
    pending_ = Pending{std::move(before), deadline, std::move(timer)};
    result["confirm_within_s"] = confirm_within_s;
    log->warn("reload applied; it reverts in {} s unless confirmed (vecflowctl confirm)",
              confirm_within_s);
  }
  return result;
}

void Reloader::revert(std::string_view why) {
  if (!pending_) return;
  Pending p = std::move(*pending_);
  pending_.reset();
  auto log = log::get("control");
  auto r = apply(p.last_good);
  if (!r) {
    log->error("reverting to {} ({}) failed: {}", p.last_good.source, p.last_good.hash,
               r.error().message);
    return;
  }
  log->warn("reload {}: reverted to {} ({}), {} change(s)", why, p.last_good.source,
            p.last_good.hash, r->changes.size());
}

CommandResult Reloader::confirm() {
  if (!pending_) return command_error(ErrorCode::Failed, "no reload awaits confirmation");
  pending_->timer->cancel();
  pending_.reset();
  log::get("control")->info("reload of {} ({}) confirmed", running_.source, running_.hash);
  return Json{{"confirmed", true}, {"source", running_.source}, {"hash", running_.hash}};
}

CommandResult Reloader::rollback() {
  if (!pending_) {
    return command_error(ErrorCode::Failed,
                         "no reload awaits confirmation; reload the file you want instead");
  }
  std::string to = pending_->last_good.source;
  std::string hash = pending_->last_good.hash;
  pending_->timer->cancel();
  revert("rolled back");
  return Json{{"rolled_back", true}, {"source", to}, {"hash", hash}};
}

Json Reloader::status() const {
  Json j = {{"restart_required", restart_required_},
            {"reloads", reloads_ok_},
            {"reloads_failed", reloads_failed_}};
  if (loaded_at_) j["reloaded_at"] = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(*loaded_at_));
  if (pending_) {
    j["confirm_pending"] = {
        {"revert_to", pending_->last_good.source},
        {"revert_to_hash", pending_->last_good.hash},
        {"deadline_in_s",
         std::chrono::duration<double>(pending_->deadline - std::chrono::steady_clock::now())
             .count()}};
  } else {
    j["confirm_pending"] = nullptr;
  }
  return j;
}

void Reloader::register_commands(Registry& registry) {
  registry.add_status("config", [this](const CommandContext&) { return status(); });
  registry.add_collector("reload", [this](Snapshot& s) {
    s.add(kReloads, {"ok"}, reloads_ok_);
    s.add(kReloads, {"failed"}, reloads_failed_);
  });

  (void)registry.add_command(Command{
      &kReloadSpec,
      [this](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        std::string path = a.string("file", running_.source);
        auto within = a.uint("confirm_within", 0);
        if (path.empty() || path.front() != '/') {
          return command_error(
              ErrorCode::BadArguments, "{}",
              running_.source.starts_with("<")
                  ? "vecflowd runs the embedded demo configuration: name the file to load"
                  : "the file must be an absolute path");
        }
        return reload(path, static_cast<uint32_t>(within));
      },
      View{{fields("", "",
                   {{"file", "/source"},
                    {"hash", "/hash"},
                    {"applied", "/applied"},
                    {"reverts unless confirmed within", "/confirm_within_s", Unit::Seconds}}),
            table("applied", "/summary", {{"SECTION", "section"}, {"CHANGE", "change"}}),
            table("restart required", "/restart_required",
                  {{"SECTION", "section"}, {"WHY", "reasons"}}),
            table("changes", "/changes",
                  {{"CHANGE", "op"}, {"PATH", "path"}, {"FROM", "from"}, {"TO", "to"}})}}});

  (void)registry.add_command(Command{
      &kConfirmSpec, [this](const CommandContext&) -> CommandResult { return confirm(); },
      View{{fields("", "",
                   {{"confirmed", "/confirmed"}, {"file", "/source"}, {"hash", "/hash"}})}}});

  (void)registry.add_command(Command{
      &kRollbackSpec, [this](const CommandContext&) -> CommandResult { return rollback(); },
      View{{fields(
          "", "", {{"rolled back", "/rolled_back"}, {"running", "/source"}, {"hash", "/hash"}})}}});

  (void)registry.add_command(Command{
      &kConfigSpec,
      [this](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        auto section = a.string("section");
        Json all = config_to_json(running_);
        if (!section) return all;
        if (!all.contains(*section)) {
          return command_error(ErrorCode::BadArguments, "no section '{}' ({})", *section,
                               fmt::join(config_sections(), ", "));
        }
        return Json{{*section, all[*section]}};
      },
      // Printed as the appliance file's YAML: what vecflowctl prints can be saved and loaded.
      View{{yaml("")}}});

  server_.set_reload_handler([this]() {
    auto log = log::get("control");
    if (running_.source.empty() || running_.source.front() != '/') {
      log->warn("SIGHUP: vecflowd runs {}, which cannot be re-read; use `vecflowctl reload FILE`",
                running_.source);
      return;
    }
    log->info("SIGHUP: reloading {}", running_.source);
    auto r = reload(running_.source, 0);
    if (!r) log->error("SIGHUP reload refused: {}", r.error().message);
  });
}

}  // namespace vecflow::control
