#include "control/resources.h"
#include "control/command_specs.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mempool.h>

namespace vecflow::control {
namespace {

inline const MetricFamily kPoolBuffers{
    "vecflow_buffer_pool_buffers",
    "Buffers of a DPDK pool by state: in_use (taken out), cached (in lcores' caches), free",
    MetricType::Gauge,
    {"pool", "state"}};
inline const MetricFamily kPoolElementBytes{"vecflow_buffer_pool_element_bytes",
                                            "Size of one element of a DPDK pool",
                                            MetricType::Gauge,
                                            {"pool"}};
inline const MetricFamily kHeapBytes{"vecflow_eal_heap_bytes",
                                     "EAL malloc heap of a NUMA socket by state: allocated, free",
                                     MetricType::Gauge,
                                     {"socket", "state"}};
// Prometheus' standard process metrics (client libraries export them under these names).
inline const MetricFamily kProcessCpu{"process_cpu_seconds_total",
                                      "User and system CPU time spent in seconds",
                                      MetricType::Counter,
                                      {}};
inline const MetricFamily kProcessResident{
    "process_resident_memory_bytes", "Resident memory size in bytes", MetricType::Gauge, {}};
inline const MetricFamily kProcessVirtual{
    "process_virtual_memory_bytes", "Virtual memory size in bytes", MetricType::Gauge, {}};
inline const MetricFamily kProcessOpenFds{
    "process_open_fds", "Number of open file descriptors", MetricType::Gauge, {}};
inline const MetricFamily kProcessMaxFds{
    "process_max_fds", "Maximum number of open file descriptors", MetricType::Gauge, {}};

struct PoolRow {
  std::string name;
  uint64_t size = 0, in_use = 0, cached = 0, free = 0, element = 0;
};

// Every mempool of the process. The caches of other lcores are read without their owners'
// consent: a cache length is one word, and a figure a moment old is what a view needs.
std::vector<PoolRow> pools() {
  std::vector<PoolRow> rows;
  rte_mempool_walk(
      [](rte_mempool* mp, void* arg) {
        auto& out = *static_cast<std::vector<PoolRow>*>(arg);
        PoolRow r;
        r.name = mp->name;
        r.size = mp->size;
        r.element = mp->elt_size + mp->header_size + mp->trailer_size;
        const uint64_t avail = rte_mempool_avail_count(mp);  // ring and caches
        if (mp->cache_size != 0 && mp->local_cache != nullptr) {
          for (unsigned l = 0; l < RTE_MAX_LCORE; ++l)
            r.cached += mp->local_cache[l].len;
        }
        r.cached = std::min(r.cached, avail);
        r.in_use = r.size > avail ? r.size - avail : 0;
        r.free = avail - r.cached;
        out.push_back(std::move(r));
      },
      &rows);
  return rows;
}

struct ProcessRow {
  double cpu_s = 0;
  uint64_t resident = 0, virt = 0, open_fds = 0, max_fds = 0;
};

ProcessRow process() {
  ProcessRow p;
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    p.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  std::ifstream statm("/proc/self/statm");
  uint64_t pages_virt = 0, pages_res = 0;
  if (statm >> pages_virt >> pages_res) {
    const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    p.virt = pages_virt * page;
    p.resident = pages_res * page;
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++p.open_fds;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) p.max_fds = rl.rlim_cur;
  return p;
}

}  // namespace

void register_resources(Registry& registry) {
  registry.add_collector("resources", [](Snapshot& s) {
    for (const PoolRow& r : pools()) {
      s.set(kPoolBuffers, {r.name, "in_use"}, static_cast<double>(r.in_use));
      s.set(kPoolBuffers, {r.name, "cached"}, static_cast<double>(r.cached));
      s.set(kPoolBuffers, {r.name, "free"}, static_cast<double>(r.free));
      s.set(kPoolElementBytes, {r.name}, static_cast<double>(r.element));
    }
    for (unsigned socket = 0; socket < rte_socket_count(); ++socket) {
      rte_malloc_socket_stats st{};
      const int id = rte_socket_id_by_idx(socket);
      if (id < 0 || rte_malloc_get_socket_stats(id, &st) != 0) continue;
      const std::string label = std::to_string(id);
      s.set(kHeapBytes, {label, "allocated"}, static_cast<double>(st.heap_allocsz_bytes));
      s.set(kHeapBytes, {label, "free"}, static_cast<double>(st.heap_freesz_bytes));
    }
    const ProcessRow p = process();
    s.set(kProcessCpu, {}, p.cpu_s);
    s.set(kProcessResident, {}, static_cast<double>(p.resident));
    s.set(kProcessVirtual, {}, static_cast<double>(p.virt));
    s.set(kProcessOpenFds, {}, static_cast<double>(p.open_fds));
    s.set(kProcessMaxFds, {}, static_cast<double>(p.max_fds));
  });

  (void)registry.add_command(Command{
      &kBuffersSpec,
      [](const CommandContext& ctx) -> CommandResult {
        const Snapshot& s = ctx.snapshot;
        auto gauge = [&s](const MetricFamily& f, Labels labels) {
          auto v = s.get(f, labels);
          return v ? static_cast<uint64_t>(v->as_double()) : uint64_t{0};
        };
        Json rows = Json::array();
        if (const auto* fam = s.find(kPoolElementBytes.name)) {
          for (const auto& [labels, value] : fam->series) {
            const std::string& pool = labels[0];
            const uint64_t in_use = gauge(kPoolBuffers, {pool, "in_use"});
            const uint64_t cached = gauge(kPoolBuffers, {pool, "cached"});
            const uint64_t free = gauge(kPoolBuffers, {pool, "free"});
            const uint64_t size = in_use + cached + free;
            rows.push_back({{"pool", pool},
                            {"size", size},
                            {"in_use", in_use},
                            {"in_use_pct", size ? 100.0 * double(in_use) / double(size) : 0.0},
                            {"cached", cached},
                            {"free", free},
                            {"element_bytes", static_cast<uint64_t>(value.as_double())},
                            {"bytes", size * static_cast<uint64_t>(value.as_double())}});
          }
        }
        // The ports part's gauges: fill rings kept full, frames not yet read back, sends not
        // yet completed; for the queues vecflow's own AF_XDP sockets read (a queue a DPDK PMD
        // reads keeps its buffers in the PMD's accounts).
        std::set<std::string> afxdp;
        if (const auto* info = s.find("vecflow_port_info")) {
          for (const auto& [labels, value] : info->series)
            if (labels[1] == "afxdp") afxdp.insert(labels[0]);
        }
        std::set<std::pair<std::string, std::string>> own;
        if (const auto* info = s.find("vecflow_port_queue_info")) {
          for (const auto& [labels, value] : info->series)
            if (labels[3] == "vecflow" && afxdp.contains(labels[0]))
              own.emplace(labels[0], labels[1]);
        }
        Json lent = Json::array();
        if (const auto* fam = s.find("vecflow_port_kernel_buffers")) {
          for (const auto& [labels, value] : fam->series) {
            if (!own.contains({labels[0], labels[1]})) continue;
            lent.push_back({{"port", labels[0]},
                            {"queue", labels[1]},
                            {"buffers", static_cast<uint64_t>(value.as_double())}});
          }
        }
        Json heaps = Json::array();
        if (const auto* fam = s.find(kHeapBytes.name)) {
          for (const auto& [labels, value] : fam->series) {
            if (labels[1] != "allocated") continue;
            heaps.push_back({{"socket", labels[0]},
                             {"allocated_bytes", static_cast<uint64_t>(value.as_double())},
                             {"free_bytes", gauge(kHeapBytes, {labels[0], "free"})}});
          }
        }
        Json proc = {{"resident_bytes", gauge(kProcessResident, {})},
                     {"virtual_bytes", gauge(kProcessVirtual, {})},
                     {"open_fds", gauge(kProcessOpenFds, {})},
                     {"max_fds", gauge(kProcessMaxFds, {})}};
        return Json{{"pools", std::move(rows)},
                    {"lent_to_kernel", std::move(lent)},
                    {"heaps", std::move(heaps)},
                    {"process", std::move(proc)}};
      },
      View{{table("pools", "/pools",
                  {{"POOL", "pool"},
                   {"SIZE", "size", Unit::Count},
                   {"IN USE", "in_use", Unit::Count},
                   {"USED", "in_use_pct", Unit::Percent},
                   {"CACHED", "cached", Unit::Count},
                   {"FREE", "free", Unit::Count},
                   {"ELEMENT", "element_bytes", Unit::Bytes},
                   {"MEMORY", "bytes", Unit::Bytes}}),
            table("lent to the kernel (AF_XDP)", "/lent_to_kernel",
                  {{"PORT", "port"}, {"QUEUE", "queue"}, {"BUFFERS", "buffers", Unit::Count}}),
            table("EAL heaps", "/heaps",
                  {{"SOCKET", "socket"},
                   {"ALLOCATED", "allocated_bytes", Unit::Bytes},
                   {"FREE", "free_bytes", Unit::Bytes}}),
            fields("process", "/process",
                   {{"resident", "resident_bytes", Unit::Bytes},
                    {"virtual", "virtual_bytes", Unit::Bytes},
                    {"open fds", "open_fds", Unit::Count},
                    {"max fds", "max_fds", Unit::Count}})}}});
}

}  // namespace vecflow::control
