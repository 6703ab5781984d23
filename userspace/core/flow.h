// Flow identity: the key and hash shared with the XDP program (bpf/include/vecflow/flow.h),
// so user space and the kernel agree on a flow's id.
#pragma once

#include <cstdint>

#include "vecflow/flow.h"

namespace vecflow {

using FlowKey = vf_flow_key;

inline uint32_t flow_hash(const FlowKey& key, bool symmetric) noexcept {
  return vf_flow_hash(&key, symmetric ? 1 : 0);
}

}  // namespace vecflow
