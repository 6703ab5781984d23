#include "support/port_io.h"

#include <chrono>
#include <thread>

namespace vecflow::test {

std::vector<rte_mbuf*> receive(Port& port, size_t want, int ms, std::vector<uint16_t>* queue_of) {
  std::vector<rte_mbuf*> got;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  rte_mbuf* burst[64];
  while (got.size() < want && std::chrono::steady_clock::now() < until) {
    bool any = false;
    for (uint16_t q = 0; q < port.rx_queue_count(); ++q) {
      const uint16_t n = port.rx_burst(q, burst, 64);
      got.insert(got.end(), burst, burst + n);
      if (queue_of) queue_of->insert(queue_of->end(), n, q);
      any |= n > 0;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return got;
}

void free_all(std::vector<rte_mbuf*>& pkts) {
  for (rte_mbuf* m : pkts)
    rte_pktmbuf_free(m);
  pkts.clear();
}

}  // namespace vecflow::test
