#include "control/capture.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>

#include <fmt/chrono.h>
#include <pcap/pcap.h>
#include <rte_bpf.h>
#include <rte_errno.h>
#include <rte_malloc.h>

#include "control/command_specs.h"
#include "core/log.h"

namespace vecflow::control {
namespace {

bool valid_file_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string directions_text(uint8_t d) {
  return d == (kCaptureRx | kCaptureTx) ? "both" : d == kCaptureRx ? "rx" : "tx";
}

}  // namespace

Result<rte_bpf*> compile_capture_filter(const std::string& expression, uint32_t snaplen) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, static_cast<int>(snaplen));
  if (!dead) return fail("filter: libpcap cannot open a dead handle");
  bpf_program prog{};
  if (pcap_compile(dead, &prog, expression.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
    std::string why = pcap_geterr(dead);
    pcap_close(dead);
    return fail("filter '{}': {}", expression, why);
  }
  rte_bpf_prm* prm = rte_bpf_convert(&prog);
  pcap_freecode(&prog);
  pcap_close(dead);
  if (!prm)
    return fail("filter '{}': cannot convert to DPDK BPF: {}", expression, rte_strerror(rte_errno));
  rte_bpf* bpf = rte_bpf_load(prm);
  rte_free(prm);
  if (!bpf)
    return fail("filter '{}': DPDK BPF refused it: {}", expression, rte_strerror(rte_errno));
  return bpf;
}

struct CaptureManager::Capture {
  uint64_t id = 0;
  CaptureRequest request;
  std::string path;
  std::shared_ptr<PcapngCapture> capture;  // while running
  CaptureStats last;                       // when done
  bool running = false;
  std::string ended;  // why it stopped
  std::time_t started_at = 0;
  std::chrono::steady_clock::time_point started;

  CaptureStats stats() const { return capture ? capture->stats() : last; }

  Json to_json() const {
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return {{"id", id},
            {"port", request.port},
            {"direction", directions_text(request.directions)},
            {"filter", request.filter},
            {"file", path},
            {"state", running ? "running" : "done"},
            {"ended", ended},
            {"packets", stats().written},
            {"bytes", stats().bytes},
            {"offered", stats().offered},
            {"lost", stats().lost},
            {"count", request.count},
            {"duration_s", request.duration_s},
            {"elapsed_s", elapsed},
            {"started_at", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(started_at))}};
  }
};

CaptureManager::CaptureManager(ControlServer& server, PacketTap& tap, std::string capture_dir,
                               std::vector<std::string> ports)
    : server_(server), tap_(tap), dir_(std::move(capture_dir)), ports_(std::move(ports)) {}

CaptureManager::~CaptureManager() {
  for (auto& c : captures_) {
    if (c->running) finish(*c, "vecflowd stopped");
  }
}

Result<Json> CaptureManager::start(const CaptureRequest& req) {
  auto port = req.port.empty() ? ports_.end() : std::find(ports_.begin(), ports_.end(), req.port);
  if (port == ports_.end()) {
    std::vector<std::string> names;
    std::copy_if(ports_.begin(), ports_.end(), std::back_inserter(names),
                 [](const std::string& n) { return !n.empty(); });
    return fail("no port '{}' (ports: {})", req.port, fmt::join(names, ", "));
  }
  size_t running =
      std::count_if(captures_.begin(), captures_.end(), [](const auto& c) { return c->running; });
  if (running >= kMaxCaptures) {
    return fail("{} captures run already; stop one first (vecflowctl capture stop ID)",
                kMaxCaptures);
  }
  auto c = std::make_unique<Capture>();
  c->id = next_id_++;
  c->request = req;
  if (c->request.snaplen == 0) c->request.snaplen = kDefaultSnaplen;
  std::time_t now = std::time(nullptr);
  std::string name = req.file.empty() ? fmt::format("{}-{:%Y%m%dT%H%M%S}-{}.pcapng", req.port,
                                                    fmt::gmtime(now), c->id)
                                      : req.file;
  if (!valid_file_name(name)) {
    return fail(
        "file '{}': a plain name of letters, digits, '.', '_' and '-' is expected; it is "
        "written under {}",
        name, dir_);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return fail("cannot create {}: {}", dir_, ec.message());
  c->path = dir_ + "/" + name;
  rte_bpf* bpf = nullptr;  // the capture owns it once opened
  if (!req.filter.empty()) {
    auto compiled = compile_capture_filter(req.filter, c->request.snaplen);
    if (!compiled) return std::unexpected(compiled.error());
    bpf = *compiled;
  }
  CaptureOptions o;
  o.path = c->path;
  o.exclusive = true;
  const auto port_id = static_cast<PortId>(port - ports_.begin());
  o.interfaces = {{port_id, req.port}};
  o.snaplen = c->request.snaplen;
  o.directions = req.directions;
  o.filter = bpf;
  o.limit = req.count;
  o.ring_name = fmt::format("vfcap{}", c->id);
  o.pool_name = fmt::format("vfcapp{}", c->id);
  o.ring_size = kRingSize;
  o.pool_size = kRingSize - 1;
  auto capture = PcapngCapture::open(std::move(o));
  if (!capture) return std::unexpected(capture.error());
  c->capture = std::move(*capture);
  c->started = std::chrono::steady_clock::now();
  c->started_at = now;
  if (auto r = tap_.attach(port_id, c->capture); !r) {
    unlink(c->path.c_str());
    return fail("cannot tap {}: {}", req.port, r.error().message);
  }
  c->running = true;
  log::get("control")->info("capture {} started on {} ({}) into {}", c->id, req.port,
                            directions_text(req.directions), c->path);
  Json out = c->to_json();
  captures_.push_back(std::move(c));
  if (!drain_call_) schedule_drain();
  return out;
}

void CaptureManager::schedule_drain() {
  drain_call_ = server_.schedule(kDrainInterval, [this] {
    drain();
    bool any =
        std::any_of(captures_.begin(), captures_.end(), [](const auto& c) { return c->running; });
    if (any) {
      schedule_drain();
    } else {
      drain_call_.reset();
    }
  });
}

void CaptureManager::drain() {
  auto now = std::chrono::steady_clock::now();
  for (auto& cp : captures_) {
    Capture& c = *cp;
    if (!c.running) continue;
    // Everything queued: copies past the count are dropped by the capture.
    c.capture->flush();
    CaptureStats st = c.capture->stats();
    if (st.write_errors) {
      finish(c, fmt::format("writing {} failed: {}", c.path, std::strerror(st.last_error)));
    } else if (c.capture->full()) {
      finish(c, "count reached");
    } else if (c.request.duration_s > 0 &&
               now - c.started >= std::chrono::duration<double>(c.request.duration_s)) {
      finish(c, "duration reached");
    }
  }
}

void CaptureManager::finish(Capture& c, std::string_view why) {
  tap_.detach(c.capture.get());
  // Copies made before the tap let go are still in the ring: those within the count go in.
  c.capture->flush();
  c.last = c.capture->stats();
  c.capture.reset();  // closes the file, frees the ring, the pool and the filter
  c.running = false;
  c.ended = why;
  log::get("control")->info("capture {} on {} ended ({}): {} packets in {}", c.id, c.request.port,
                            why, c.last.written, c.path);
}

Result<Json> CaptureManager::stop(std::optional<uint64_t> id) {
  Json stopped = Json::array();
  for (auto& c : captures_) {
    if (!c->running || (id && c->id != *id)) continue;
    drain();
    if (c->running) finish(*c, "stopped");
    stopped.push_back(c->to_json());
  }
  if (id && stopped.empty()) return fail("no running capture {}", *id);
  return Json{{"stopped", std::move(stopped)}};
}

bool CaptureManager::active() const noexcept {
  return std::any_of(captures_.begin(), captures_.end(), [](const auto& c) { return c->running; });
}

Json CaptureManager::list() const {
  Json rows = Json::array();
  for (const auto& c : captures_)
    rows.push_back(c->to_json());
  return Json{{"directory", dir_}, {"captures", std::move(rows)}};
}

void CaptureManager::register_commands(Registry& registry) {
  View view{{table("", "/captures",
                   {{"ID", "id"},
                    {"PORT", "port"},
                    {"DIR", "direction"},
                    {"STATE", "state"},
                    {"PACKETS", "packets", Unit::Count},
                    {"BYTES", "bytes", Unit::Bytes},
                    {"LOST", "lost", Unit::Count},
                    {"ELAPSED", "elapsed_s", Unit::Seconds},
                    {"FILE", "file"}})}};
  (void)registry.add_command(Command{&kCaptureStartSpec,
                                     [this](const CommandContext& ctx) -> CommandResult {
                                       ArgReader a(ctx);
                                       CaptureRequest req;
                                       req.port = a.string("port", "");
                                       const std::string dir = a.string("direction", "both");
                                       req.directions = dir == "rx"   ? kCaptureRx
                                                        : dir == "tx" ? kCaptureTx
                                                                      : kCaptureRx | kCaptureTx;
                                       req.count = a.uint("count", 0);
                                       req.duration_s = a.number("duration_s", 0);
                                       req.filter = a.string("filter", "");
                                       req.snaplen = static_cast<uint32_t>(a.uint("snaplen", 0));
                                       req.file = a.string("file", "");
                                       auto r = start(req);
                                       if (!r)
                                         return command_error(ErrorCode::Failed, "{}",
                                                              r.error().message);
                                       return Json{{"captures", Json::array({*r})}};
                                     },
                                     view});
  (void)registry.add_command(Command{&kCaptureStopSpec,
                                     [this](const CommandContext& ctx) -> CommandResult {
                                       auto r = stop(ArgReader(ctx).uint("id"));
                                       if (!r)
                                         return command_error(ErrorCode::Failed, "{}",
                                                              r.error().message);
                                       return Json{{"captures", (*r)["stopped"]}};
                                     },
                                     view});
  (void)registry.add_command(Command{
      &kCapturesSpec, [this](const CommandContext&) -> CommandResult { return list(); }, view});
}

}  // namespace vecflow::control
