#include "core/packet.h"

#include <rte_errno.h>

namespace vecflow {

Result<void> register_packet_meta() {
  static const rte_mbuf_dynfield desc = {"vecflow_packet_meta", sizeof(PacketMeta),
                                         alignof(PacketMeta), 0};
  if (rte_mbuf_dynfield_register_offset(&desc, kPacketMetaOffset) < 0) {
    return fail("cannot register the mbuf metadata field at offset {}: {}", kPacketMetaOffset,
                rte_strerror(rte_errno));
  }
  return {};
}

}  // namespace vecflow
