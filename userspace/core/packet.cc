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

std::string_view ct_mark_name(CtMark c) noexcept {
  switch (c) {
    case CtMark::None:
      return "none";
    case CtMark::New:
      return "new";
    case CtMark::Established:
      return "established";
    case CtMark::Related:
      return "related";
    case CtMark::Invalid:
      return "invalid";
  }
  return "?";
}

std::optional<CtMark> ct_mark_from_name(std::string_view name) noexcept {
  for (CtMark c : {CtMark::New, CtMark::Established, CtMark::Related, CtMark::Invalid})
    if (ct_mark_name(c) == name) return c;
  return std::nullopt;
}

}  // namespace vecflow
