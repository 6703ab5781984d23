#include "support/eal_env.h"

#include <unistd.h>

#include <memory>

#include "core/packet.h"
#include "runtime/eal.h"

namespace vecflow::test {

const std::string& init_eal() {
  static std::unique_ptr<Eal> eal;
  static const std::string why = [] {
    EalOptions o;
    o.control_lcore = 0;
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) o.worker_lcores = {1};
    // Without hugepages EAL maps this much anonymous memory and touches only what is used,
    // so the size costs nothing until a test needs it: the pipeline's reference tests build
    // FIBs of 100 000 routes (hundreds of MB).
    o.memory_mb = 1536;
    o.hugepages = HugePagePolicy::Off;
    o.telemetry = false;
    o.file_prefix = "vf-test-" + std::to_string(getpid());
    auto r = Eal::init(o);
    if (!r) return r.error().message;
    eal = std::move(*r);
    if (auto m = register_packet_meta(); !m) return m.error().message;
    return std::string();
  }();
  return why;
}

}  // namespace vecflow::test
