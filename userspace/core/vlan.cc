#include "core/vlan.h"

#include <cstring>

#include <rte_ether.h>
#include <rte_mbuf.h>

namespace vecflow {

bool vlan_pop(rte_mbuf* m) noexcept {
  if (m->data_len < sizeof(rte_ether_hdr) + sizeof(rte_vlan_hdr)) return false;
  auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
  if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN) &&
      eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_QINQ)) {
    return false;
  }
  // The 12 address bytes move 4 bytes forward over the tag; the rest stays in place.
  auto* moved = reinterpret_cast<uint8_t*>(rte_pktmbuf_adj(m, sizeof(rte_vlan_hdr)));
  std::memmove(moved, eth, 2 * RTE_ETHER_ADDR_LEN);
  if (m->l2_len >= sizeof(rte_vlan_hdr)) m->l2_len -= sizeof(rte_vlan_hdr);
  return true;
}

bool vlan_push(rte_mbuf* m, uint16_t tci) noexcept {
  m->vlan_tci = tci;
  return rte_vlan_insert(&m) == 0;  // moves the addresses, writes the tag, grows l2_len
}

}  // namespace vecflow
