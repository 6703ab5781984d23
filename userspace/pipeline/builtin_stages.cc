// The built-in stage types, one line each.
#include "pipeline/acl/acl_stage.h"
#include "pipeline/conntrack/conntrack_stage.h"
#include "pipeline/count/count_stage.h"
#include "pipeline/dscp_stage.h"
#include "pipeline/l2_stage.h"
#include "pipeline/mirror_stage.h"
#include "pipeline/neighbour/neighbour_stage.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

void register_builtin_stages(StageRegistry& r) {
  r.add(route_stage_module());
  r.add(neighbour_stage_module());
  r.add(acl_stage_module());
  r.add(l2_stage_module());
  r.add(mirror_stage_module());
  r.add(count_stage_module());
  r.add(dscp_stage_module());
  r.add(conntrack_stage_module());
}

}  // namespace vecflow
