// One 5-tuple match (the `match:` of a mirror stage) tested packet by packet. For single
// matches a direct test beats building an rte_acl context; rule sets use AclTable.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "config/config.h"

namespace vecflow {

class PacketMatch {
 public:
  explicit PacketMatch(const config::FiveTupleMatch& m);

  // True when every field the match gives holds for `m`. An empty match takes every packet,
  // IP or not; any field makes it take IP packets only.
  bool matches(const rte_mbuf* m) const noexcept;

 private:
  struct Net {
    bool set = false;
    uint8_t version = 0;
    uint8_t addr[16] = {};
    uint8_t mask[16] = {};
  };
  static bool in(const Net& n, const uint8_t* a, uint8_t version) noexcept;

  bool any_ = true;
  Net src_, dst_;
  int proto_ = -1;
  config::PortRange src_port_{0, 65535};
  config::PortRange dst_port_{0, 65535};
  bool ports_ = false;
};

}  // namespace vecflow
