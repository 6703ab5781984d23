#include "steer/xmit_drops.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include "xmit_drops.skel.h"

namespace vecflow::steer {

Result<std::unique_ptr<XmitDrops>> XmitDrops::start() {
  struct stat ns {};
  if (stat("/proc/self/ns/net", &ns) != 0)
    return fail("xmit drops: cannot read this network namespace: {}", errno_text(-errno));
  std::unique_ptr<XmitDrops> x(new XmitDrops());
  x->skel_ = xmit_drops_bpf__open();
  if (x->skel_ == nullptr)
    return fail("xmit drops: cannot open the BPF object: {}", errno_text(-errno));
  x->skel_->rodata->vf_netns = uint32_t(ns.st_ino);
  if (int err = xmit_drops_bpf__load(x->skel_))
    return fail("xmit drops: the kernel refused the program: {}", errno_text(err));
  const std::pair<bpf_program*, const char*> tracepoints[] = {
      {x->skel_->progs.vf_xmit_drops, "xdp_devmap_xmit"},
      {x->skel_->progs.vf_redirect_errors, "xdp_redirect_err"}};
  for (size_t i = 0; i < x->links_.size(); ++i) {
    const auto [prog, name] = tracepoints[i];
    x->links_[i] = bpf_program__attach_raw_tracepoint(prog, name);
    if (x->links_[i] == nullptr)
      return fail("xmit drops: cannot attach to {}: {}", name, errno_text(-errno));
  }
  return x;
}

Result<void> XmitDrops::watch_devmap(int map_fd) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(map_fd, &info, &len) != 0)
    return fail("xmit drops: cannot read a devmap's id: {}", errno_text(-errno));
  const uint8_t one = 1;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.vf_xmit_maps), &info.id, &one, BPF_ANY) != 0)
    return fail("xmit drops: cannot watch devmap {}: {}", info.id, errno_text(-errno));
  return {};
}

XmitDrops::~XmitDrops() {
  for (bpf_link* l : links_)
    bpf_link__destroy(l);
  xmit_drops_bpf__destroy(skel_);
}

vf_xmit_drops XmitDrops::of(uint32_t ifindex) const noexcept {
  vf_xmit_drops sum{};
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return sum;
  std::vector<vf_xmit_drops> per_cpu(static_cast<size_t>(cpus));
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.vf_xmit), &ifindex, per_cpu.data()) != 0)
    return sum;  // none lost
  for (const auto& c : per_cpu) {
    sum.frames += c.frames;
    sum.events += c.events;
    sum.errors += c.errors;
  }
  return sum;
}

}  // namespace vecflow::steer
