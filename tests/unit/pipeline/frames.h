// Test frames: Ethernet (optionally VLAN-tagged) IPv4/IPv6 UDP/TCP/ICMP packets built into
// mbufs with the fields a port's rx path fills (packet type, header lengths, flow hash, reset
// PacketMeta), as the pipeline receives them.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <rte_mbuf.h>

#include "core/net.h"
#include "pipeline/pipeline_worker.h"

namespace vecflow::test {

struct FrameSpec {
  uint8_t version = 4;
  std::string src = "10.0.0.1";
  std::string dst = "10.0.0.2";
  uint8_t proto = IPPROTO_UDP;
  uint16_t sport = 1000;
  uint16_t dport = 2000;
  uint8_t ttl = 64;
  uint16_t vlan = 0;  // 0: untagged
  uint16_t payload = 18;
  uint16_t port = 0;  // ingress PortId
  MacAddress src_mac{{0x02, 0, 0, 0, 0, 0x0a}};
  MacAddress dst_mac{{0x02, 0, 0, 0, 0, 0x0b}};
};

// A pool for test packets (EAL must be up).
rte_mempool* test_pool();

rte_mbuf* make_frame(const FrameSpec& spec);
rte_mbuf* make_arp(uint16_t port);
// A frame of an ethertype the pipeline does not know (LLDP).
rte_mbuf* make_lldp(uint16_t port);
// A UDP datagram as `spec` describes it (IPv4 or IPv6; its payload a pattern, its UDP
// checksum over all of it), cut into fragments of `sizes` bytes of IP payload each (multiples
// of 8 but the last; the first holds the UDP header; an IPv6 fragment's fragment header comes
// on top), each parsed as a port parses it (flow hash: the first on its ports, the later ones
// on addresses), with identification `id` (IPv4: its low 16 bits).
std::vector<rte_mbuf*> make_fragments(FrameSpec spec, uint32_t id,
                                      const std::vector<uint16_t>& sizes);

IpAddress address(const std::string& text);
IpPrefix prefix(const std::string& text);
MacAddress mac(const std::string& text);

// Sinks that keep what they are given.
class CollectSinks final : public Sinks {
 public:
  ~CollectSinks() override { free_all(); }
  void transmit(std::span<rte_mbuf*> p) noexcept override {
    tx.insert(tx.end(), p.begin(), p.end());
    // Charged as the tx adapter charges: packets vecflow made (an ICMP answer) are not.
    for (rte_mbuf* m : p)
      transmitted += !(meta(m).flags & kMetaFlagCopy);
  }
  void kernel(std::span<rte_mbuf*> p) noexcept override {
    to_kernel.insert(to_kernel.end(), p.begin(), p.end());
    handed_to_kernel += p.size();
  }
  void next(std::span<rte_mbuf*> p) noexcept override {
    later.insert(later.end(), p.begin(), p.end());
  }
  void copies(std::span<rte_mbuf*> p) noexcept override {
    copied.insert(copied.end(), p.begin(), p.end());
  }
  void free_all();
  size_t total() const { return tx.size() + to_kernel.size() + later.size(); }

  std::vector<rte_mbuf*> tx, to_kernel, later, copied;
  // Everything ever given to transmit() (but packets vecflow made) and kernel(), also after
  // free_all().
  uint64_t transmitted = 0;
  uint64_t handed_to_kernel = 0;
};

}  // namespace vecflow::test
