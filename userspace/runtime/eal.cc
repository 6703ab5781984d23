#include "runtime/eal.h"

#include <stdio.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>

#include "core/log.h"

namespace vecflow {
namespace {

std::atomic<bool> g_eal_up{false};

// DPDK writes its log lines to a stdio stream; this cookie stream hands each line to the
// "dpdk" logger at the level DPDK gave it, so EAL and PMD messages land in the journal with
// everything else.
ssize_t dpdk_log_write(void*, const char* buf, size_t size) {
  static thread_local std::string pending;
  pending.append(buf, size);
  size_t nl;
  while ((nl = pending.find('\n')) != std::string::npos) {
    std::string line = pending.substr(0, nl);
    pending.erase(0, nl + 1);
    if (line.empty()) continue;
    spdlog::level::level_enum lvl;
    switch (rte_log_cur_msg_loglevel()) {
      case RTE_LOG_EMERG:
      case RTE_LOG_ALERT:
      case RTE_LOG_CRIT:
        lvl = spdlog::level::critical;
        break;
      case RTE_LOG_ERR:
        lvl = spdlog::level::err;
        break;
      case RTE_LOG_WARNING:
        lvl = spdlog::level::warn;
        break;
      case RTE_LOG_NOTICE:
      case RTE_LOG_INFO:
        lvl = spdlog::level::info;
        break;
      default:
        lvl = spdlog::level::debug;
    }
    log::get("dpdk")->log(lvl, "{}", line);
  }
  return static_cast<ssize_t>(size);
}

void route_dpdk_logs() {
  static FILE* stream = [] {
    cookie_io_functions_t io{};
    io.write = dpdk_log_write;
    FILE* f = fopencookie(nullptr, "w", io);
    if (f) setvbuf(f, nullptr, _IOLBF, 0);
    return f;
  }();
  if (stream) rte_openlog_stream(stream);
}

}  // namespace

HugePageInfo probe_hugepages() {
  HugePageInfo info;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  uint64_t free_pages = 0;
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream ls(line);
    ls >> key >> value;
    if (key == "HugePages_Free:") free_pages = value;
    if (key == "Hugepagesize:") info.page_bytes = value * 1024;
  }
  info.free_bytes = free_pages * info.page_bytes;
  std::ifstream mounts("/proc/mounts");
  while (std::getline(mounts, line)) {
    std::istringstream ls(line);
    std::string dev, dir, type;
    ls >> dev >> dir >> type;
    if (type == "hugetlbfs") {
      info.mount = dir;
      break;
    }
  }
  return info;
}

Result<std::vector<std::string>> eal_args(const EalOptions& o, const HugePageInfo& huge) {
  std::set<unsigned> lcores(o.worker_lcores.begin(), o.worker_lcores.end());
  lcores.insert(o.control_lcore);
  std::vector<std::string> args = {"vecflowd"};
  args.push_back("-l");
  args.push_back(fmt::format("{}", fmt::join(lcores, ",")));
  args.push_back("--main-lcore");
  args.push_back(std::to_string(o.control_lcore));
  args.push_back("--file-prefix");
  args.push_back(o.file_prefix);

  uint64_t want = uint64_t{o.memory_mb} << 20;
  bool have = !huge.mount.empty() && huge.free_bytes >= want;
  bool use_huge =
      o.hugepages == HugePagePolicy::On || (o.hugepages == HugePagePolicy::Auto && have);
  if (o.hugepages == HugePagePolicy::On && !have) {
    return fail(
        "dpdk.hugepages is 'on' but only {} MB of hugepages are free{} (need {} MB): reserve "
        "them with `echo N > /proc/sys/vm/nr_hugepages` and mount hugetlbfs, or set "
        "hugepages: auto",
        huge.free_bytes >> 20, huge.mount.empty() ? " and no hugetlbfs is mounted" : "",
        o.memory_mb);
  }
  args.push_back("-m");
  args.push_back(std::to_string(o.memory_mb));
  // --no-huge implies EAL's legacy memory mode, which refuses --in-memory; without hugepages
  // there are no page files to keep out of the file system anyway (the unique file prefix
  // keeps runtime files apart).
  if (!use_huge) {
    args.push_back("--no-huge");
  } else if (!o.multiprocess) {
    args.push_back("--in-memory");
  }
  if (!o.pci) args.push_back("--no-pci");
  if (!o.telemetry) args.push_back("--no-telemetry");
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  return args;
}

Result<std::unique_ptr<Eal>> Eal::init(const EalOptions& options) {
  if (g_eal_up.exchange(true)) return fail("EAL is already initialised in this process");
  auto args = eal_args(options, probe_hugepages());
  if (!args) {
    g_eal_up = false;
    return std::unexpected(args.error());
  }
  route_dpdk_logs();
  std::vector<char*> argv;
  for (auto& a : *args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  log::get("runtime")->info("EAL: {}", fmt::join(*args, " "));
  int rc = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  if (rc < 0) {
    int err = rte_errno;
    // EAL cannot be initialised twice even after a failure; keep the flag set.
    return fail("EAL initialisation failed: {} ({})", rte_strerror(err), fmt::join(*args, " "));
  }
  auto eal = std::unique_ptr<Eal>(new Eal());
  eal->hugepages_ = std::find(args->begin(), args->end(), "--no-huge") == args->end();
  eal->shared_memory_ =
      eal->hugepages_ && std::find(args->begin(), args->end(), "--in-memory") == args->end();
  eal->args_ = std::move(*args);
  return eal;
}

Eal::~Eal() {
  // Copied first: the path lives in EAL's configuration.
  const std::string runtime_dir = rte_eal_get_runtime_dir();
  const bool primary = rte_eal_process_type() == RTE_PROC_PRIMARY;
  rte_eal_cleanup();
  // DPDK 22.11 leaves the primary's runtime directory behind: its memory segment lists' files,
  // ~19 MB without hugepages. Every test process and every vecflowd run with its own file
  // prefix added one; thousands of them filled this machine's disk. When the primary ends no
  // process can use them any more.
  if (primary) {
    std::error_code ignored;
    std::filesystem::remove_all(runtime_dir, ignored);
  }
}

}  // namespace vecflow
