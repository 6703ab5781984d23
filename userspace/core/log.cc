#include "core/log.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace vecflow::log {
namespace {

// "<N>" syslog priority prefix understood by journald on a service's stderr.
class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kPriority[] = {'7', '7', '6', '4', '3', '2', '6'};
    auto level = static_cast<size_t>(msg.level);
    const char text[] = {'<', kPriority[level < sizeof(kPriority) ? level : 6], '>'};
    dest.append(text, text + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriorityFlag>();
  }
};

std::mutex g_mutex;
spdlog::sink_ptr g_sink;

spdlog::sink_ptr sink() {
  if (!g_sink) g_sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  return g_sink;
}

std::unique_ptr<spdlog::formatter> make_formatter() {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    f->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%n: %v");
  } else {
    f->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %n: %v");
  }
  return f;
}

}  // namespace

void init(spdlog::level::level_enum level) {
  std::lock_guard lock(g_mutex);
  sink()->set_formatter(make_formatter());
  spdlog::set_level(level);
  spdlog::apply_all([level](const std::shared_ptr<spdlog::logger>& l) { l->set_level(level); });
}

std::shared_ptr<spdlog::logger> get(std::string_view subsystem) {
  std::string name(subsystem);
  std::lock_guard lock(g_mutex);
  if (auto existing = spdlog::get(name)) return existing;
  if (!g_sink) sink()->set_formatter(make_formatter());
  auto logger = std::make_shared<spdlog::logger>(name, sink());
  logger->set_level(spdlog::get_level());
  spdlog::register_logger(logger);
  return logger;
}

bool RateLimiter::allow(uint64_t now_ns) noexcept {
  if (now_ns - window_start_ns_ >= period_ns_) {
    window_start_ns_ = now_ns;
    used_ = 0;
  }
  if (used_ < burst_) {
    ++used_;
    return true;
  }
  ++suppressed_;
  return false;
}

}  // namespace vecflow::log
