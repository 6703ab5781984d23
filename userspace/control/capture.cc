#include "control/capture.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/chrono.h>
#include <pcap/pcap.h>
#include <rte_bpf.h>
#include <rte_errno.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "core/log.h"
#include "runtime/cycles.h"

namespace vecflow::control {
namespace {

// ---- pcapng (https://www.ietf.org/archive/id/draft-tuexen-opsawg-pcapng-05.html) ----------

constexpr uint32_t kSectionHeader = 0x0A0D0D0A;
constexpr uint32_t kInterfaceDescription = 1;
constexpr uint32_t kEnhancedPacket = 6;
constexpr uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr uint16_t kLinkEthernet = 1;
constexpr uint16_t kOptEnd = 0;
constexpr uint16_t kOptShbUserAppl = 4;
constexpr uint16_t kOptIfName = 2;
constexpr uint16_t kOptIfTsresol = 9;
constexpr uint16_t kOptEpbFlags = 2;

template <typename T>
void put(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void pad4(std::string& b) {
  while (b.size() % 4)
    b.push_back('\0');
}

void option(std::string& b, uint16_t code, std::string_view value) {
  put(b, code);
  put(b, static_cast<uint16_t>(value.size()));
  b.append(value);
  pad4(b);
}

// Wraps a block body in type, total length and the trailing length.
std::string block(uint32_t type, const std::string& body) {
  std::string b;
  uint32_t total = static_cast<uint32_t>(12 + body.size());
  put(b, type);
  put(b, total);
  b += body;
  put(b, total);
  return b;
}

std::string section_header() {
  std::string body;
  put(body, kByteOrderMagic);
  put(body, uint16_t{1});
  put(body, uint16_t{0});
  put(body, int64_t{-1});  // section length unknown
  option(body, kOptShbUserAppl, "vecflowd");
  option(body, kOptEnd, "");
  return block(kSectionHeader, body);
}

std::string interface_description(const std::string& name, uint32_t snaplen) {
  std::string body;
  put(body, kLinkEthernet);
  put(body, uint16_t{0});
  put(body, snaplen);
  option(body, kOptIfName, name);
  option(body, kOptIfTsresol, std::string(1, '\x09'));  // timestamps in nanoseconds
  option(body, kOptEnd, "");
  return block(kInterfaceDescription, body);
}

void enhanced_packet(std::string& out, uint64_t ts_ns, const rte_mbuf* m, uint32_t wire_len,
                     uint8_t direction) {
  uint32_t caplen = rte_pktmbuf_pkt_len(m);
  std::string body;
  put(body, uint32_t{0});  // interface 0: the capture's port
  put(body, static_cast<uint32_t>(ts_ns >> 32));
  put(body, static_cast<uint32_t>(ts_ns));
  put(body, caplen);
  put(body, wire_len);
  size_t at = body.size();
  body.resize(at + caplen);
  for (const rte_mbuf* seg = m; seg; seg = seg->next) {
    std::memcpy(body.data() + at, rte_pktmbuf_mtod(seg, const char*), seg->data_len);
    at += seg->data_len;
  }
  pad4(body);
  // epb_flags bits 0-1: 01 inbound, 10 outbound.
  uint32_t flags = direction == kCaptureRx ? 1 : 2;
  option(body, kOptEpbFlags, std::string_view(reinterpret_cast<const char*>(&flags), 4));
  option(body, kOptEnd, "");
  out += block(kEnhancedPacket, body);
}

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
  ~Capture() {
    if (fd >= 0) close(fd);
    if (ring) {
      void* m;
      while (rte_ring_sc_dequeue(ring, &m) == 0)
        rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
      rte_ring_free(ring);
    }
    if (pool) rte_mempool_free(pool);
    if (bpf) rte_bpf_destroy(bpf);
  }

  uint64_t id = 0;
  CaptureRequest request;
  std::string path;
  int fd = -1;
  rte_ring* ring = nullptr;
  rte_mempool* pool = nullptr;
  rte_bpf* bpf = nullptr;
  std::shared_ptr<CaptureSink> sink;
  bool running = false;
  std::string ended;  // why it stopped
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t offered = 0;
  uint64_t lost = 0;
  std::time_t started_at = 0;
  std::chrono::steady_clock::time_point started;
  uint64_t start_tsc = 0;
  uint64_t start_real_ns = 0;

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
            {"packets", packets},
            {"bytes", bytes},
            {"offered", sink ? sink->offered() : offered},
            {"lost", sink ? sink->lost() : lost},
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
  auto port = std::find(ports_.begin(), ports_.end(), req.port);
  if (port == ports_.end()) {
    return fail("no port '{}' (ports: {})", req.port, fmt::join(ports_, ", "));
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
  if (!req.filter.empty()) {
    auto bpf = compile_capture_filter(req.filter, c->request.snaplen);
    if (!bpf) return std::unexpected(bpf.error());
    c->bpf = *bpf;
  }
  c->fd = open(c->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (c->fd < 0) return fail("cannot create {}: {}", c->path, std::strerror(errno));
  std::string ring_name = fmt::format("vfcap{}", c->id);
  c->ring = rte_ring_create(ring_name.c_str(), kRingSize, SOCKET_ID_ANY, RING_F_SC_DEQ);
  std::string pool_name = fmt::format("vfcapp{}", c->id);
  uint16_t room = static_cast<uint16_t>(
      std::min<uint32_t>(c->request.snaplen, RTE_MBUF_DEFAULT_DATAROOM) + RTE_PKTMBUF_HEADROOM);
  c->pool = rte_pktmbuf_pool_create(pool_name.c_str(), kRingSize - 1, 0, sizeof(CaptureRecord),
                                    room, SOCKET_ID_ANY);
  if (!c->ring || !c->pool) {
    int err = rte_errno;
    unlink(c->path.c_str());
    return fail("capture buffers for {}: {}", req.port, rte_strerror(err));
  }
  std::string header = section_header() + interface_description(req.port, c->request.snaplen);
  if (write(c->fd, header.data(), header.size()) != static_cast<ssize_t>(header.size())) {
    int err = errno;
    unlink(c->path.c_str());
    return fail("cannot write {}: {}", c->path, std::strerror(err));
  }
  c->sink =
      std::make_shared<CaptureSink>(static_cast<PortId>(port - ports_.begin()), req.directions,
                                    c->request.snaplen, c->ring, c->pool, c->bpf);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  c->start_real_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + ts.tv_nsec;
  c->start_tsc = rte_rdtsc();
  c->started = std::chrono::steady_clock::now();
  c->started_at = now;
  if (auto r = tap_.attach(c->sink); !r) {
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
  uint64_t hz = tsc_hz();
  auto now = std::chrono::steady_clock::now();
  for (auto& cp : captures_) {
    Capture& c = *cp;
    if (!c.running) continue;
    std::string out;
    void* objs[256];
    unsigned n;
    bool full = false;
    while (!full && (n = rte_ring_sc_dequeue_burst(c.ring, objs, 256, nullptr)) > 0) {
      for (unsigned i = 0; i < n; ++i) {
        auto* m = static_cast<rte_mbuf*>(objs[i]);
        if (c.request.count && c.packets >= c.request.count) {
          full = true;
        } else {
          const auto* rec = static_cast<const CaptureRecord*>(rte_mbuf_to_priv(m));
          uint64_t dt = rec->tsc > c.start_tsc && hz ? rec->tsc - c.start_tsc : 0;
          uint64_t ts = c.start_real_ns + static_cast<uint64_t>(static_cast<double>(dt) * 1e9 /
                                                                static_cast<double>(hz));
          enhanced_packet(out, ts, m, rec->wire_len, rec->direction);
          ++c.packets;
          c.bytes += rte_pktmbuf_pkt_len(m);
        }
        rte_pktmbuf_free(m);
      }
    }
    if (!out.empty() && write(c.fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
      finish(c, fmt::format("writing {} failed: {}", c.path, std::strerror(errno)));
      continue;
    }
    if (c.request.count && c.packets >= c.request.count) {
      finish(c, "count reached");
    } else if (c.request.duration_s > 0 &&
               now - c.started >= std::chrono::duration<double>(c.request.duration_s)) {
      finish(c, "duration reached");
    }
  }
}

void CaptureManager::finish(Capture& c, std::string_view why) {
  tap_.detach(c.sink.get());
  c.offered = c.sink->offered();
  c.lost = c.sink->lost();
  c.sink.reset();
  c.running = false;
  c.ended = why;
  // Copies made before the tap let go are still in the ring: keep those within the count.
  void* m;
  std::string out;
  uint64_t hz = tsc_hz();
  while (rte_ring_sc_dequeue(c.ring, &m) == 0) {
    auto* mb = static_cast<rte_mbuf*>(m);
    if (!c.request.count || c.packets < c.request.count) {
      const auto* rec = static_cast<const CaptureRecord*>(rte_mbuf_to_priv(mb));
      uint64_t dt = rec->tsc > c.start_tsc && hz ? rec->tsc - c.start_tsc : 0;
      enhanced_packet(out,
                      c.start_real_ns + static_cast<uint64_t>(static_cast<double>(dt) * 1e9 /
                                                              static_cast<double>(hz)),
                      mb, rec->wire_len, rec->direction);
      ++c.packets;
      c.bytes += rte_pktmbuf_pkt_len(mb);
    }
    rte_pktmbuf_free(mb);
  }
  if (!out.empty()) {
    ssize_t n = write(c.fd, out.data(), out.size());
    (void)n;  // the capture ends either way; a short file still reads up to its last block
  }
  close(c.fd);
  c.fd = -1;
  rte_ring_free(c.ring);
  c.ring = nullptr;
  rte_mempool_free(c.pool);
  c.pool = nullptr;
  if (c.bpf) rte_bpf_destroy(c.bpf);
  c.bpf = nullptr;
  log::get("control")->info("capture {} on {} ended ({}): {} packets in {}", c.id, c.request.port,
                            why, c.packets, c.path);
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
  (void)registry.add_command(Command{
      "capture", "Start or stop a pcapng capture of a port (files under control.capture_dir)",
      Access::Change,
      "action=start port=NAME [direction=rx|tx|both] [count=N] [duration_s=S] [filter=EXPR] "
      "[snaplen=N] [file=NAME] | action=stop [id=N]",
      [this](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx.args, {"action", "port", "direction", "count", "duration_s", "filter",
                               "snaplen", "file", "id"});
        a.require("action");
        std::string action = a.choice("action", "", {"start", "stop"});
        if (action == "stop") {
          auto id = a.uint("id", 1, UINT64_MAX);
          if (auto e = a.error()) return std::unexpected(*e);
          auto r = stop(id);
          if (!r) return command_error(ErrorCode::Failed, "{}", r.error().message);
          return Json{{"captures", (*r)["stopped"]}};
        }
        CaptureRequest req;
        a.require("port");
        req.port = a.string("port", "");
        std::string dir = a.choice("direction", "both", {"rx", "tx", "both"});
        req.directions = dir == "rx"   ? kCaptureRx
                         : dir == "tx" ? kCaptureTx
                                       : kCaptureRx | kCaptureTx;
        req.count = a.uint("count", 0, 0, UINT64_MAX);
        req.duration_s = a.number("duration_s", 0, 0, 86400 * 7);
        req.filter = a.string("filter", "");
        req.snaplen = static_cast<uint32_t>(a.uint("snaplen", 0, 64, kMaxSnaplen));
        req.file = a.string("file", "");
        if (auto e = a.error()) return std::unexpected(*e);
        auto r = start(req);
        if (!r) return command_error(ErrorCode::Failed, "{}", r.error().message);
        return Json{{"captures", Json::array({*r})}};
      },
      view});
  (void)registry.add_command(Command{"captures", "Captures running and done", Access::Read, "",
                                     [this](const CommandContext& ctx) -> CommandResult {
                                       ArgReader a(ctx.args, {});
                                       if (auto e = a.error()) return std::unexpected(*e);
                                       return list();
                                     },
                                     view});
}

}  // namespace vecflow::control
