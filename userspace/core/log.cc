#include "core/log.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <systemd/sd-journal.h>

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

std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> g_recent;

spdlog::sink_ptr sink() {
  if (!g_sink) g_sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  return g_sink;
}

// Every logger writes to stderr and to the in-memory ring of recent lines.
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> recent() {
  if (!g_recent) {
    g_recent = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(kRecentLines);
    g_recent->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        "%Y-%m-%d %H:%M:%S.%e %-5l %n: %v", spdlog::pattern_time_type::local, ""));
  }
  return g_recent;
}

bool known(std::string_view subsystem) {
  for (auto s : kSubsystems)
    if (s == subsystem) return true;
  return false;
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

// True when stderr is connected to the journal: JOURNAL_STREAM names its device and inode
// (systemd.exec(5)); an inherited variable with another stderr does not count.
bool stderr_is_journal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  if (!js) return false;
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(js, "%llu:%llu", &dev, &ino) != 2) return false;
  return dev == st.st_dev && ino == st.st_ino;
}

int syslog_priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return LOG_DEBUG;
    case spdlog::level::info:
      return LOG_INFO;
    case spdlog::level::warn:
      return LOG_WARNING;
    case spdlog::level::err:
      return LOG_ERR;
    case spdlog::level::critical:
      return LOG_CRIT;
    default:
      return LOG_INFO;
  }
}

}  // namespace

void event(const std::shared_ptr<spdlog::logger>& logger, spdlog::level::level_enum level,
           std::string_view message, std::initializer_list<Field> fields) {
  if (!logger->should_log(level)) return;
  static const bool journal = stderr_is_journal();
  if (journal) {
    std::vector<std::string> lines;
    lines.push_back(fmt::format("MESSAGE={}: {}", logger->name(), message));
    lines.push_back(fmt::format("PRIORITY={}", syslog_priority(level)));
    lines.push_back("SYSLOG_IDENTIFIER=vecflowd");
    lines.push_back(fmt::format("VECFLOW_SUBSYSTEM={}", logger->name()));
    for (const auto& f : fields) {
      std::string key;
      for (char c : f.key)
        key += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      lines.push_back(fmt::format("VECFLOW_{}={}", key, f.value));
    }
    std::vector<iovec> iov;
    for (auto& l : lines)
      iov.push_back(iovec{l.data(), l.size()});
    if (sd_journal_sendv(iov.data(), static_cast<int>(iov.size())) == 0) return;
  }
  std::string text(message);
  for (const auto& f : fields)
    text += fmt::format(" {}={}", f.key, f.value);
  logger->log(level, "{}", text);
}

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
  auto logger = std::make_shared<spdlog::logger>(name, spdlog::sinks_init_list{sink(), recent()});
  logger->set_level(spdlog::get_level());
  spdlog::register_logger(logger);
  return logger;
}

bool set_level(std::string_view subsystem, spdlog::level::level_enum level) {
  if (!known(subsystem)) return false;
  get(subsystem)->set_level(level);
  return true;
}

std::vector<std::pair<std::string, spdlog::level::level_enum>> levels() {
  std::vector<std::pair<std::string, spdlog::level::level_enum>> out;
  for (auto s : kSubsystems)
    out.emplace_back(std::string(s), get(s)->level());
  return out;
}

std::vector<std::string> recent_lines(size_t max) {
  std::lock_guard lock(g_mutex);
  auto lines = recent()->last_formatted(max);
  for (auto& l : lines)
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r'))
      l.pop_back();
  return lines;
}

bool Repeating::report(uint64_t now_ns) noexcept {
  ++count_;
  if (count_ == 1) {
    interval_ns_ = kFirstIntervalNs;
    next_ns_ = now_ns + interval_ns_;
    return true;
  }
  if (now_ns < next_ns_) {
    ++pending_;
    return false;
  }
  suppressed_ = pending_;
  pending_ = 0;
  interval_ns_ = std::min(interval_ns_ * 2, kMaxIntervalNs);
  next_ns_ = now_ns + interval_ns_;
  return true;
}

bool Repeating::clear() noexcept {
  const bool reported = count_ > 0;
  count_ = 0;
  suppressed_ = 0;
  pending_ = 0;
  return reported;
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
