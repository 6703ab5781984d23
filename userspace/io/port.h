// A port is where packets enter and leave user space: an AF_XDP port (a kernel interface
// whose selected flows the XDP program lifts) or a DPDK port of any PMD. Both hand the rest
// of the engine the same thing: bursts of rte_mbuf* carrying the fields core/packet.h lists.
//
// Threading: each rx queue is polled by exactly one lcore, and each tx queue is used by
// exactly one lcore at a time; the burst calls take no lock. start()/stop() and the
// statistics readers run on the control thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/ids.h"

struct rte_mbuf;

namespace vecflow {

enum class LinkState : uint8_t { Unknown, Down, Up };

class Port {
 public:
  Port(std::string name, PortId id) : name_(std::move(name)), id_(id) {}
  virtual ~Port() = default;
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  const std::string& name() const noexcept { return name_; }
  PortId id() const noexcept { return id_; }
  // "afxdp" or "dpdk".
  virtual std::string_view kind() const noexcept = 0;

  virtual uint16_t rx_queue_count() const noexcept = 0;
  virtual uint16_t tx_queue_count() const noexcept = 0;

  // Receives up to `n` packets from rx queue `q` into `pkts`. Every returned mbuf has
  // m->port == id(), its flow id in m->hash.rss and a reset PacketMeta (core/packet.h).
  virtual uint16_t rx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept = 0;

  // Transmits up to `n` packets on tx queue `q`; returns how many the port took (it owns and
  // frees those). The caller keeps the rest and decides whether to retry or drop them.
  virtual uint16_t tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept = 0;

  virtual LinkState link_state() const noexcept = 0;

  virtual Result<void> start() = 0;
  virtual void stop() noexcept = 0;

 private:
  std::string name_;
  PortId id_;
};

}  // namespace vecflow
