#include "control/drop_log.h"

#include <utility>

#include <fmt/format.h>

#include "api/families.h"

namespace vecflow::control {
namespace {

template <size_t... I>
std::array<log::RateLimiter, sizeof...(I)> make_limits(std::index_sequence<I...>) {
  return {((void)I, log::RateLimiter(DropLogger::kBurst, DropLogger::kPeriodNs))...};
}

}  // namespace

DropLogger::DropLogger() : limits_(make_limits(std::make_index_sequence<kDropReasonCount>())) {}

void DropLogger::observe(const Snapshot& s) {
  const auto* fam = s.find(kDrops.name);
  if (!fam) return;
  uint64_t now = s.taken_ns();
  for (const auto& [labels, value] : fam->series) {
    Key key{labels[0], labels[1], labels[2]};
    uint64_t& last = last_[key];
    // The first sample sets the baseline: drops from before the logger started (a restart of
    // the control plane does not happen, but a part registered late might) are not news.
    if (primed_ && value.count > last) {
      Pending& p = pending_[key];
      if (p.count == 0) p.since_ns = last_sample_ns_;
      p.count += value.count - last;
    }
    last = value.count;
  }
  primed_ = true;
  last_sample_ns_ = now;

  // One decision per reason per sample, then every port of that reason is reported.
  std::array<int, kDropReasonCount> allowed{};  // 0 unknown, 1 yes, -1 no
  auto logger = log::get("drops");
  for (auto it = pending_.begin(); it != pending_.end();) {
    const auto& [port, reason_name, layer] = it->first;
    auto reason = drop_reason_from_name(reason_name);
    size_t r = reason ? static_cast<size_t>(*reason) : 0;
    if (allowed[r] == 0) allowed[r] = limits_[r].allow(now) ? 1 : -1;
    if (allowed[r] < 0) {
      ++it;
      continue;
    }
    double seconds = static_cast<double>(now - it->second.since_ns) / 1e9;
    std::string count = std::to_string(it->second.count);
    log::event(logger, spdlog::level::warn,
               fmt::format("port {}: {} packet(s) dropped in the last {:.0f} s: {} ({}, {})", port,
                           count, seconds, reason_name,
                           reason ? drop_reason_text(*reason) : std::string_view("?"), layer),
               {{"port", port}, {"reason", reason_name}, {"layer", layer}, {"count", count}});
    it = pending_.erase(it);
  }
}

}  // namespace vecflow::control
