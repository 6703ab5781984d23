// The built-in stage types, one line each.
#include "pipeline/acl_stage.h"
#include "pipeline/count_stage.h"
#include "pipeline/l2_stage.h"
#include "pipeline/mirror_stage.h"
#include "pipeline/neighbour_stage.h"
#include "pipeline/route_stage.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

void register_builtin_stages(StageRegistry& r) {
  r.add("acl", make_acl_stage);
  r.add("route", make_route_stage);
  r.add("neighbour", make_neighbour_stage);
  r.add("l2", make_l2_stage);
  r.add("mirror", make_mirror_stage);
  r.add("count", make_count_stage);
}

}  // namespace vecflow
