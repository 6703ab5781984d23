// DPDK's EAL, initialised once per process from the appliance's cpu and dpdk sections.
//
// vecflow always runs EAL, whatever its ports are: every packet is an rte_mbuf and DPDK's
// libraries (lpm, acl, hash, rcu, rings, pcapng) serve all port types. With hugepages (when
// `hugepages: auto` finds enough reserved and mounted) EAL runs in-memory: no page files, no
// secondary processes. Without, it runs `--no-huge` on anonymous memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace vecflow {

enum class HugePagePolicy { Auto, On, Off };

struct EalOptions {
  unsigned control_lcore = 0;
  std::vector<unsigned> worker_lcores;  // may include control_lcore
  uint32_t memory_mb = 512;
  HugePagePolicy hugepages = HugePagePolicy::Auto;
  std::string file_prefix = "vecflow";
  bool pci = false;       // scan the PCI bus (only when a port names a PCI device)
  bool telemetry = true;  // DPDK telemetry socket, for dpdk-telemetry.py
  // Keep hugepage memory in files secondary processes can map (no --in-memory). Without
  // hugepages EAL has no shared memory and this changes nothing.
  bool multiprocess = false;
  std::vector<std::string> extra_args;
};

struct HugePageInfo {
  uint64_t free_bytes = 0;
  uint64_t page_bytes = 0;
  std::string mount;  // a hugetlbfs mount point, empty if none
};

// What /proc says about 2 MB (default-size) hugepages right now.
HugePageInfo probe_hugepages();

class Eal {
 public:
  // Initialises EAL; fails if it already is, or with EAL's own reason.
  static Result<std::unique_ptr<Eal>> init(const EalOptions& options);
  ~Eal();  // rte_eal_cleanup

  bool hugepages() const noexcept { return hugepages_; }
  // Secondary processes (dpdk-dumpcap) can attach: hugepages kept in files.
  bool shared_memory() const noexcept { return shared_memory_; }
  const std::vector<std::string>& args() const noexcept { return args_; }

 private:
  Eal() = default;
  bool hugepages_ = false;
  bool shared_memory_ = false;
  std::vector<std::string> args_;
};

// The EAL command line for `options` (exposed for tests and for `vecflowd --check -v`).
Result<std::vector<std::string>> eal_args(const EalOptions& options, const HugePageInfo& huge);

}  // namespace vecflow
