// The receive side of IP fragments without reassembly (pipeline/conntrack/fragment_table.h).
//
// A first fragment carries its ports and the parser hashes it as its connection; a later
// fragment carries none and is hashed on addresses, so it would reach another flow bucket,
// whose owner knows nothing of the connection. The port's flow hash rewrite therefore
// remembers the hash each first fragment leaves the receive path with, by datagram
// (addresses, protocol, identification), and gives it to the datagram's later fragments: all
// of it reaches the owner of the connection's bucket, in order. IPv4 and IPv6 alike.
//
// One memory per receiving thread (the fragments of a datagram arrive on one queue: a NIC's
// RSS hashes fragments on addresses), direct mapped: a datagram whose slot another took before
// its later fragments came keeps them on their own hash, and the conntrack stage treats them
// as fragments of an unknown datagram.
//
// The conntrack zone is not known here (Datagram::zone 0): two tenants' datagrams of the same
// identity share a slot, and as their first fragments hash alike, both tenants' later
// fragments still reach the one bucket, where the fragment table tells them apart by zone.
#pragma once

#include <rte_mbuf.h>

#include "core/flow.h"
#include "pipeline/conntrack/fragment_table.h"

namespace vecflow {

namespace fragment_hash {
// On a first fragment (offset 0, more to come) whose hash is final.
void remember_first(const rte_mbuf* m, const FragmentTable::Datagram& d) noexcept;
// On a later fragment: its first fragment's hash, when remembered.
void give_later(rte_mbuf* m, const FragmentTable::Datagram& d) noexcept;
// On any classified packet: the two above for fragments. Returns whether it was one.
bool on_fragment(rte_mbuf* m) noexcept;
}  // namespace fragment_hash

// The rewrite a port runs for a conntrack stage without NAT: fragments only (the NAT's own,
// pipeline/conntrack/nat_map.h, does this too).
class FragmentHashRewrite final : public FlowHashRewrite {
 public:
  void apply(rte_mbuf** pkts, uint16_t n) const noexcept override {
    for (uint16_t i = 0; i < n; ++i)
      fragment_hash::on_fragment(pkts[i]);
  }
};

}  // namespace vecflow
