#include "steer/steering.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/log.h"
#include "steer.skel.h"

#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC 0xcafe4a11
#endif

namespace vecflow::steer {
namespace {

// Rule sets may grow this many times over the one vecflowd started with before a
// replacement needs a restart (map sizes are fixed at load). Unused hash entries cost nothing
// (BPF_F_NO_PREALLOC); per-rule counters cost 16 bytes per CPU each.
constexpr uint32_t kMapHeadroom = 4;

constexpr const char* kBpffs = "/sys/fs/bpf";
constexpr const char* kInstalledBpfDir = "/usr/lib/vecflow/bpf";

std::shared_ptr<spdlog::logger> logger() {
  static auto l = log::get("steer");
  return l;
}

// One logger line per line of the message: libbpf hands over a whole verifier log at once,
// and its last lines say why a program was refused.
void log_lines(spdlog::level::level_enum level, const char* format, va_list args) {
  if (!logger()->should_log(level)) return;
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n <= 0) return;
  std::string text(size_t(n) + 1, '\0');
  std::vsnprintf(text.data(), text.size(), format, args);
  text.resize(size_t(n));
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    while (!line.empty() && line.back() == ' ')
      line.remove_suffix(1);
    if (!line.empty()) logger()->log(level, "{}", line);
    if (eol == std::string_view::npos) break;
    rest.remove_prefix(eol + 1);
  }
}

int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  log_lines(level == LIBBPF_WARN   ? spdlog::level::warn
            : level == LIBBPF_INFO ? spdlog::level::debug
                                   : spdlog::level::trace,
            format, args);
  return 0;
}

int libxdp_print(enum libxdp_print_level level, const char* format, va_list args) {
  log_lines(level == LIBXDP_WARN   ? spdlog::level::warn
            : level == LIBXDP_INFO ? spdlog::level::info
                                   : spdlog::level::debug,
            format, args);
  return 0;
}

// libxdp pins its dispatcher state under bpffs; without bpffs it can only attach a single
// program. `ip netns exec` and fresh boxes may lack the mount.
void ensure_bpffs() {
  struct statfs st {};
  if (statfs(kBpffs, &st) == 0 && st.f_type == BPF_FS_MAGIC) return;
  mkdir("/sys/fs", 0755);
  mkdir(kBpffs, 0700);
  if (mount("bpf", kBpffs, "bpf", 0, "mode=0700") == 0) {
    logger()->info("mounted bpffs on {}", kBpffs);
  } else {
    logger()->warn(
        "bpffs is not mounted on {} and mounting it failed ({}); libxdp can attach "
        "only a single program",
        kBpffs, std::strerror(errno));
  }
}

std::string prog_name(const xdp_program* p) {
  const char* n = xdp_program__name(p);
  return n ? n : "";
}

}  // namespace

void route_bpf_logs() {
  static std::once_flag once;
  std::call_once(once, [] {
    libbpf_set_print(libbpf_print);
    libxdp_set_print(libxdp_print);
  });
}

// One interface's program: the loaded instance holding the maps, and the libxdp program
// attached to the interface, which shares them. Detached on destruction.
struct XdpSteering::Attached {
  SteerPort port;
  uint32_t ifindex = 0;
  xdp_attach_mode mode = XDP_MODE_NATIVE;
  std::unique_ptr<SteerProgram> program;
  SteerSkeleton attach_skel;
  xdp_program* xprog = nullptr;
  bool attached = false;
  // The program watch() expects to run first on the interface: ours, or the libxdp dispatcher
  // that runs it.
  uint32_t watched_id = 0;
  // Failed re-attachments while the program is missing (the interface may be gone for good):
  // logged with back-off.
  log::Repeating reattach_failures;

  ~Attached() { detach(); }

  void detach() noexcept {
    if (attached) {
      int err = xdp_program__detach(xprog, int(ifindex), mode, 0);
      if (err) {
        logger()->warn("port {}: detaching from {} failed: {}", port.name, port.interface,
                       errno_text(err));
      } else {
        logger()->info("port {}: detached from {}", port.name, port.interface);
      }
      attached = false;
    }
    if (xprog) {
      xdp_program__close(xprog);
      xprog = nullptr;
    }
    attach_skel.reset();
  }
};

SteerSetup steer_setup(const config::ApplianceConfig& cfg) {
  SteerSetup s;
  s.steering = cfg.steering;
  s.offload_entries = cfg.offload.table_size;
  for (const auto& p : cfg.ports) {
    if (const std::string* ifname = p.kernel_interface()) s.interfaces.emplace(p.name, *ifname);
    if (const auto* a = std::get_if<config::AfXdpPort>(&p.kind)) {
      bool dpdk_queues = std::any_of(a->queues.begin(), a->queues.end(),
                                     [](const auto& q) { return q.owner == QueueOwner::Dpdk; });
      s.ports.push_back({p.name, a->interface, a->xdp_mode, !dpdk_queues, RxQueuePlan::of(*a)});
    }
  }
  return s;
}

std::string XdpSteering::bpf_object_path() {
  const bool meta = kernel_allows_xdp_metadata();
  const char* file = meta ? "/steer.bpf.o" : "/steer_nometa.bpf.o";
  if (const char* dir = std::getenv("VECFLOW_BPF_DIR"); dir && *dir) return std::string(dir) + file;
  const char* built = meta ? VECFLOW_BPF_STEER_OBJECT : VECFLOW_BPF_STEER_NOMETA_OBJECT;
  if (access(built, R_OK) == 0) return built;
  return std::string(kInstalledBpfDir) + file;
}

Result<int> XdpSteering::remove_stale(uint32_t ifindex) {
  xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(int(ifindex));
  long err = libxdp_get_error(mp);
  if (err == -ENOENT || (!err && !mp)) return 0;
  if (err)
    return fail("cannot inspect the XDP programs on ifindex {}: {}", ifindex, errno_text(int(err)));
  int removed = 0;
  Result<int> result = 0;
  if (xdp_multiprog__is_legacy(mp)) {
    xdp_program* main = xdp_multiprog__main_prog(mp);
    if (main && prog_name(main) == VF_STEER_PROG_NAME) {
      uint32_t id = xdp_program__id(main);
      if (int e = xdp_multiprog__detach(mp)) {
        result = fail("cannot remove stale steering program {}: {}", id, errno_text(e));
      } else {
        logger()->info("removed a stale vecflow steering program (id {}) from ifindex {}", id,
                       ifindex);
        ++removed;
      }
    }
  } else {
    enum xdp_attach_mode mode = xdp_multiprog__attach_mode(mp);
    for (xdp_program* p = xdp_multiprog__next_prog(nullptr, mp); p;
         p = xdp_multiprog__next_prog(p, mp)) {
      if (prog_name(p) != VF_STEER_PROG_NAME) continue;
      uint32_t id = xdp_program__id(p);
      if (int e = xdp_program__detach(p, int(ifindex), mode, 0)) {
        result = fail("cannot remove stale steering program {}: {}", id, errno_text(e));
        break;
      }
      logger()->info(
          "removed a stale vecflow steering program (id {}) from the dispatcher of "
          "ifindex {}",
          id, ifindex);
      ++removed;
    }
  }
  xdp_multiprog__close(mp);
  if (!result) return result;
  return removed;
}

Result<std::unique_ptr<XdpSteering>> XdpSteering::start(const SteerSetup& setup) {
  route_bpf_logs();
  std::unique_ptr<XdpSteering> s(new XdpSteering());
  s->setup_ = setup;
  if (setup.ports.empty()) return s;
  ensure_bpffs();
  // Without it nothing is lost but the count of what egress drivers refuse.
  if (auto x = XmitDrops::start(); x) {
    s->xmit_drops_ = std::move(*x);
  } else {
    logger()->warn("{}: frames XDP hands to an interface that refuses them go uncounted",
                   x.error().message);
  }
  for (const auto& port : setup.ports) {
    if (port.attach) {
      if (auto r = s->attach(setup, port); !r) {
        s->stop();
        return std::unexpected(r.error());
      }
      continue;
    }
    // DPDK attaches this one; make room for it.
    uint32_t ifindex = if_nametoindex(port.interface.c_str());
    if (ifindex == 0) {
      s->stop();
      return fail("port {}: interface '{}' does not exist", port.name, port.interface);
    }
    if (auto stale = remove_stale(ifindex); !stale) {
      s->stop();
      return fail("port {}: interface {}: {}", port.name, port.interface, stale.error().message);
    }
  }
  return s;
}

Result<void> XdpSteering::adopt(std::string_view name) {
  auto it = std::find_if(setup_.ports.begin(), setup_.ports.end(),
                         [&](const SteerPort& p) { return p.name == name && !p.attach; });
  if (it == setup_.ports.end())
    return fail("port {}: not a port whose steering program DPDK attaches", name);
  const SteerPort& port = *it;
  for (const auto& a : attached_)
    if (a->port.name == name) return fail("port {}: already adopted", name);
  auto a = std::make_unique<Attached>();
  a->port = port;
  a->ifindex = if_nametoindex(port.interface.c_str());
  if (a->ifindex == 0)
    return fail("port {}: interface '{}' does not exist", port.name, port.interface);
  uint32_t prog_id = 0;
  if (int err = bpf_xdp_query_id(int(a->ifindex), 0, &prog_id); err || prog_id == 0)
    return fail("port {}: no XDP program on {} to adopt{}", port.name, port.interface,
                err ? ": " + errno_text(err) : "");
  auto program = SteerProgram::adopt(prog_id);
  if (!program) return fail("port {}: {}", port.name, program.error().message);
  a->program = std::move(*program);

  auto ifindex_of = [&](std::string_view target) -> Result<uint32_t> {
    auto t = setup_.interfaces.find(target);
    uint32_t idx = t == setup_.interfaces.end() ? 0 : if_nametoindex(t->second.c_str());
    if (idx == 0) return fail("redirect target '{}' has no kernel interface here", target);
    return idx;
  };
  auto compiled = compile_rules(setup_.steering, port.name, ifindex_of, port.queues);
  if (!compiled) return fail("port {}: {}", port.name, compiled.error().message);
  if (auto r = a->program->install(*compiled); !r)
    return fail("port {}: {}", port.name, r.error().message);

  SteerInterface st;
  st.port = port.name;
  st.interface = port.interface;
  st.ifindex = a->ifindex;
  st.prog_id = prog_id;
  st.generic = port.mode == config::XdpAttachMode::Generic;
  st.adopted = true;
  a->watched_id = prog_id;
  logger()->info("port {}: adopted the steering program DPDK attached to {} (id {}), {} entries",
                 port.name, port.interface, prog_id, compiled->entries.size());
  status_.push_back(st);
  watch_devmap(*a);
  attached_.push_back(std::move(a));
  return {};
}

namespace {

// Ids of the XDP programs the kernel runs first on the interface, in each mode (0: none).
// One netlink query and no descriptors: cheap enough to run a few times a second.
std::array<uint32_t, 3> first_programs(uint32_t ifindex) {
  bpf_xdp_query_opts q{};
  q.sz = sizeof(q);
  if (bpf_xdp_query(int(ifindex), 0, &q) != 0) return {};
  return {q.drv_prog_id, q.skb_prog_id, q.hw_prog_id};
}

// Whether program `id` runs under the libxdp dispatcher of the interface. Opens every
// program's descriptor, so only asked when the first program changed.
bool under_dispatcher(uint32_t ifindex, uint32_t id) {
  xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(int(ifindex));
  if (libxdp_get_error(mp) || !mp) return false;
  bool found = false;
  if (!xdp_multiprog__is_legacy(mp)) {
    for (xdp_program* p = xdp_multiprog__next_prog(nullptr, mp); p && !found;
         p = xdp_multiprog__next_prog(p, mp))
      found = xdp_program__id(p) == id;
  }
  xdp_multiprog__close(mp);
  return found;
}

}  // namespace

Result<void> XdpSteering::attach(const SteerSetup& setup, const SteerPort& port) {
  auto a = std::make_unique<Attached>();
  a->port = port;
  a->ifindex = if_nametoindex(port.interface.c_str());
  if (a->ifindex == 0)
    return fail("port {}: interface '{}' does not exist", port.name, port.interface);
  a->mode = port.mode == config::XdpAttachMode::Generic ? XDP_MODE_SKB : XDP_MODE_NATIVE;

  auto ifindex_of = [&](std::string_view name) -> Result<uint32_t> {
    auto it = setup.interfaces.find(name);
    if (it == setup.interfaces.end())
      return fail("port {}: redirect target '{}' has no kernel interface", port.name, name);
    uint32_t idx = if_nametoindex(it->second.c_str());
    if (idx == 0)
      return fail("port {}: redirect target '{}': interface '{}' does not exist", port.name, name,
                  it->second);
    return idx;
  };
  auto compiled = compile_rules(setup.steering, port.name, ifindex_of, port.queues);
  if (!compiled) return std::unexpected(compiled.error());

  SteerProgram::Limits limits = SteerProgram::limits_for(*compiled, kMapHeadroom);
  limits.offload_entries = setup.offload_entries;
  auto program = SteerProgram::load(limits);
  if (!program) return fail("port {}: {}", port.name, program.error().message);
  a->program = std::move(*program);
  if (auto r = a->program->install(*compiled); !r)
    return fail("port {}: {}", port.name, r.error().message);

  if (auto stale = remove_stale(a->ifindex); !stale)
    return fail("port {}: interface {}: {}", port.name, port.interface, stale.error().message);

  auto skel = a->program->open_sharing_maps();
  if (!skel) return fail("port {}: {}", port.name, skel.error().message);
  a->attach_skel = std::move(*skel);
  xdp_program_opts opts{};
  opts.sz = sizeof(opts);
  opts.obj = a->attach_skel->obj;
  opts.prog_name = VF_STEER_PROG_NAME;
  a->xprog = xdp_program__create(&opts);
  if (long err = libxdp_get_error(a->xprog)) {
    a->xprog = nullptr;
    return fail("port {}: libxdp cannot use the steering program: {}", port.name,
                errno_text(int(err)));
  }
  int err = xdp_program__attach(a->xprog, int(a->ifindex), a->mode, 0);
  // `auto`: a driver without native XDP refuses with EOPNOTSUPP (or EINVAL on older kernels);
  // generic mode works on any interface, at the cost of an skb per frame.
  if (err && port.mode == config::XdpAttachMode::Auto && (err == -EOPNOTSUPP || err == -EINVAL)) {
    logger()->warn("port {}: {} has no native XDP ({}); attaching in generic mode", port.name,
                   port.interface, errno_text(err));
    a->mode = XDP_MODE_SKB;
    err = xdp_program__attach(a->xprog, int(a->ifindex), a->mode, 0);
  }
  if (err) {
    return fail("port {}: attaching XDP ({} mode) to {} was refused: {}{}", port.name,
                a->mode == XDP_MODE_SKB ? "generic" : "native", port.interface, errno_text(err),
                err == -EEXIST || err == -EBUSY
                    ? " (another XDP program that is not vecflow's is attached)"
                    : "");
  }
  a->attached = true;

  SteerInterface st;
  st.port = port.name;
  st.interface = port.interface;
  st.ifindex = a->ifindex;
  st.generic = a->mode == XDP_MODE_SKB;
  st.prog_id = xdp_program__id(a->xprog);
  {
    const auto first = first_programs(a->ifindex);
    a->watched_id = *std::max_element(first.begin(), first.end());
  }
  xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(int(a->ifindex));
  if (!libxdp_get_error(mp) && mp) {
    st.dispatcher = !xdp_multiprog__is_legacy(mp);
    xdp_multiprog__close(mp);
  }
  logger()->info("port {}: steering attached to {} ({} mode, {}), program id {}, {} rule(s)",
                 port.name, port.interface, st.generic ? "generic" : "native",
                 st.dispatcher ? "libxdp dispatcher" : "single program", st.prog_id,
                 compiled->entries.size());
  status_.push_back(st);
  watch_devmap(*a);
  attached_.push_back(std::move(a));
  return {};
}

Result<void> XdpSteering::watch() {
  for (auto& ap : attached_) {
    Attached& a = *ap;
    SteerInterface* st = nullptr;
    for (auto& s : status_)
      if (s.port == a.port.name) st = &s;
    if (!st) continue;
    const auto first = first_programs(a.ifindex);
    const bool empty = first == std::array<uint32_t, 3>{};
    if (std::find(first.begin(), first.end(), a.watched_id) != first.end()) {
      st->state = SteerInterface::State::Attached;
      continue;
    }
    // Another libxdp user added or removed a program: a new dispatcher that still runs ours.
    if (!empty && st->dispatcher && under_dispatcher(a.ifindex, st->prog_id)) {
      a.watched_id = *std::max_element(first.begin(), first.end());
      st->state = SteerInterface::State::Attached;
      continue;
    }
    const bool other = !empty;
    if (st->state == SteerInterface::State::Attached) {
      ++st->detaches;
      logger()->warn("port {}: the steering program (id {}) is no longer on {}{}", a.port.name,
                     st->prog_id, a.port.interface,
                     other ? ": another XDP program replaced it" : "");
    }
    st->state = other ? SteerInterface::State::Replaced : SteerInterface::State::Missing;
    if (setup_.steering.on_detach == config::OnDetach::Exit)
      return fail("port {}: the steering program was removed from {} (steering.on_detach: exit)",
                  a.port.name, a.port.interface);
    // Someone else's program now owns the interface: taking it back would undo an operator's
    // deliberate change, so it stays reported until they remove theirs.
    if (other) continue;
    int err = 0;
    if (a.xprog) {
      err = xdp_program__attach(a.xprog, int(a.ifindex), a.mode, 0);
    } else {
      // Adopted from DPDK's net_af_xdp, which attaches a single native program.
      err = bpf_xdp_attach(int(a.ifindex), a.program->prog_fd(),
                           XDP_FLAGS_UPDATE_IF_NOEXIST | XDP_FLAGS_DRV_MODE, nullptr);
    }
    if (err) {
      const auto now = std::chrono::steady_clock::now().time_since_epoch();
      if (a.reattach_failures.report(static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()))) {
        const uint64_t more = a.reattach_failures.suppressed();
        logger()->warn("port {}: re-attaching the steering program to {} failed: {}{}", a.port.name,
                       a.port.interface, errno_text(err),
                       more ? fmt::format(" ({} more failed attempts not logged; {} in all)", more,
                                          a.reattach_failures.count())
                            : std::string());
      }
      continue;
    }
    a.reattach_failures.clear();
    const auto now = first_programs(a.ifindex);
    a.watched_id = *std::max_element(now.begin(), now.end());
    ++st->reattaches;
    st->state = SteerInterface::State::Attached;
    logger()->warn("port {}: steering program re-attached to {} (id {})", a.port.name,
                   a.port.interface, st->prog_id);
  }
  return {};
}

XdpSteering::~XdpSteering() {
  stop();
}

void XdpSteering::stop() noexcept {
  // Last attached first, like any unwinding.
  while (!attached_.empty())
    attached_.pop_back();
  status_.clear();
}

Result<void> XdpSteering::replace_rules(const config::SteeringSection& steering) {
  // Compile everything first, so a rule set that does not fit changes nothing.
  std::vector<CompiledRules> compiled;
  for (const auto& a : attached_) {
    auto ifindex_of = [&](std::string_view name) -> Result<uint32_t> {
      auto it = setup_.interfaces.find(name);
      uint32_t idx = it == setup_.interfaces.end() ? 0 : if_nametoindex(it->second.c_str());
      if (idx == 0) return fail("redirect target '{}' has no kernel interface here", name);
      return idx;
    };
    auto c = compile_rules(steering, a->port.name, ifindex_of, a->port.queues);
    if (!c) return fail("port {}: {}", a->port.name, c.error().message);
    const auto& l = a->program->limits();
    if (c->rule_count > l.rules || c->entries.size() > l.rule_entries)
      return fail(
          "port {}: the new rule set does not fit the loaded maps ({} rules / {} entries,"
          " room for {} / {}); restart vecflowd to apply it",
          a->port.name, c->rule_count, c->entries.size(), l.rules, l.rule_entries);
    compiled.push_back(std::move(*c));
  }
  for (size_t i = 0; i < attached_.size(); ++i) {
    if (auto r = attached_[i]->program->install(compiled[i]); !r)
      return fail("port {}: {}", attached_[i]->port.name, r.error().message);
  }
  setup_.steering = steering;
  return {};
}

int XdpSteering::xsks_map_fd(std::string_view port) const noexcept {
  for (const auto& a : attached_)
    if (a->port.name == port) return a->program->xsks_map_fd();
  return -1;
}

OffloadTable* XdpSteering::offload(std::string_view port) noexcept {
  for (const auto& a : attached_)
    if (a->port.name == port) return &a->program->offload();
  return nullptr;
}

void XdpSteering::watch_devmap(const Attached& a) {
  if (!xmit_drops_) return;
  if (auto r = xmit_drops_->watch_devmap(a.program->devmap_fd()); !r)
    logger()->warn("port {}: {}", a.port.name, r.error().message);
}

Result<SteerCounters> XdpSteering::counters(const Attached& a) const {
  auto c = a.program->counters();
  if (c && xmit_drops_) c->xmit_drops = xmit_drops_->of(a.ifindex).frames;
  return c;
}

Result<SteerCounters> XdpSteering::counters(std::string_view port) const {
  for (const auto& a : attached_)
    if (a->port.name == port) return counters(*a);
  return fail("port {} has no XDP steering", port);
}

Result<SteerCounters> XdpSteering::counters() const {
  SteerCounters sum;
  for (const auto& a : attached_) {
    auto c = counters(*a);
    if (!c) return fail("port {}: {}", a->port.name, c.error().message);
    sum += *c;
  }
  return sum;
}

}  // namespace vecflow::steer
