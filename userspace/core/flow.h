// Flow identity: the key and hash shared with the XDP program (bpf/include/vecflow/flow.h),
// so user space and the kernel agree on a flow's id.
#pragma once

#include <cstdint>

#include "vecflow/flow.h"

struct rte_mbuf;

namespace vecflow {

using FlowKey = vf_flow_key;

inline uint32_t flow_hash(const FlowKey& key, bool symmetric) noexcept {
  return vf_flow_hash(&key, symmetric ? 1 : 0);
}

// Gives some received frames another flow hash than their own 5-tuple's, so that the packets
// a stage must see together share one: both directions of a translated connection
// (pipeline/conntrack/nat_map.h), a datagram's later fragments and its first
// (pipeline/conntrack/fragment_hash.h). A port applies it to each classified burst
// (io/rx_classify.h), once per burst.
class FlowHashRewrite {
 public:
  virtual ~FlowHashRewrite() = default;
  virtual void apply(rte_mbuf** pkts, uint16_t n) const noexcept = 0;
  // Whether it follows address translation. A translating rewrite covers fragments as well,
  // so a pipeline with one uses it over any other (Pipeline::flow_hash_rewrite).
  virtual bool translates() const noexcept { return false; }
};

}  // namespace vecflow
