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

// Gives some received frames another flow hash than their own 5-tuple's, so that both
// directions of a translated connection share one (pipeline/nat_map.h). A port applies it to
// each classified burst (io/rx_classify.h), once per burst.
class FlowHashRewrite {
 public:
  virtual ~FlowHashRewrite() = default;
  virtual void apply(rte_mbuf** pkts, uint16_t n) const noexcept = 0;
};

}  // namespace vecflow
