// A DPDK ethernet device made from a devargs string, owned: probing it (vdev or PCI hotplug),
// configuring its queues on the appliance's pool, and on destruction stopping, closing and
// removing it, so a failed start-up leaves no device behind.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/drop_reason.h"
#include "core/error.h"
#include "io/port.h"

struct rte_mempool;

namespace vecflow {

struct EthQueueConfig {
  uint16_t queues = 1;  // rx and tx queue pairs
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  rte_mempool* pool = nullptr;
  bool rss = true;            // spread flows over the rx queues (when there are several) and
                              // deliver the NIC's hash where the device offers it
  bool rx_interrupts = true;  // ask for rx interrupts (kept only if the device accepts)
  uint32_t mtu = 0;           // the MTU the device will carry (0: as it has): frames larger
                              // than one mbuf of `pool` are received chained (scatter)
};

class EthDevice {
 public:
  // Probes `devargs` ("net_ring0", "net_pcap0,rx_pcap=a.pcap", "0000:03:00.0"). The error says
  // why, with DPDK's own last error line when it logged one.
  static Result<EthDevice> probe(const std::string& devargs);
  EthDevice() = default;
  EthDevice(EthDevice&& o) noexcept { *this = std::move(o); }
  EthDevice& operator=(EthDevice&& o) noexcept;
  ~EthDevice();

  bool valid() const noexcept { return port_ != kNone; }
  uint16_t port() const noexcept { return port_; }
  const std::string& name() const noexcept { return name_; }

  // Queues, descriptors, RSS and rx interrupts. Fails naming what the device cannot give.
  Result<void> configure(const EthQueueConfig& c);
  Result<void> start();
  void stop() noexcept;
  bool rss_hash() const noexcept { return rss_hash_; }
  bool rx_interrupts() const noexcept { return rx_intr_; }

  LinkState link_state() const noexcept;
  MacAddress mac() const noexcept;
  // Drops the device reports (imissed, rx_nombuf, ierrors, oerrors) by reason.
  std::vector<std::pair<DropReason, uint64_t>> drops() const;
  // The device's xstats, as named by its PMD.
  std::vector<std::pair<std::string, uint64_t>> xstats() const;

  // Explicit close, also done by the destructor.
  void close() noexcept;

 private:
  static constexpr uint16_t kNone = 0xffff;
  uint16_t port_ = kNone;
  std::string name_;
  bool started_ = false;
  bool rss_hash_ = false;
  bool rx_intr_ = false;
};

}  // namespace vecflow
