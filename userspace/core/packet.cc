#include "core/packet.h"

#include <rte_errno.h>

namespace vecflow {

int g_packet_meta_offset = -1;

Result<void> register_packet_meta() {
  static const rte_mbuf_dynfield desc = {"vecflow_packet_meta", sizeof(PacketMeta),
                                         alignof(PacketMeta), 0};
  int off = rte_mbuf_dynfield_register(&desc);
  if (off < 0) return fail("cannot register the mbuf metadata field: {}", rte_strerror(rte_errno));
  g_packet_meta_offset = off;
  return {};
}

}  // namespace vecflow
