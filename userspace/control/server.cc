#include "control/server.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "control/wake_set.h"
#include "core/log.h"

namespace vecflow::control {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using UnixProto = asio::local::stream_protocol;
using Tcp = asio::ip::tcp;

// Bytes read from a socket per read call; a request larger than this arrives in several.
constexpr size_t kReadChunk = 4096;
// After accept() fails (out of descriptors), wait this long before accepting again, so a
// pending connection that cannot be accepted does not turn the control lcore into a busy loop.
constexpr std::chrono::milliseconds kAcceptRetry{100};
// HTTP request headers Prometheus sends are a few hundred bytes; anything past this is refused.
constexpr uint32_t kMaxHttpHeaderBytes = 8192;

std::string dump(const Json& j) {
  // A peer's bytes may be echoed in a message (an unknown command name); invalid UTF-8 must
  // not make serialisation throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::optional<gid_t> group_id(const std::string& name) {
  if (name.empty()) return std::nullopt;
  std::array<char, 16384> buf{};
  group gr{};
  group* result = nullptr;
  if (getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &result) != 0 || !result)
    return std::nullopt;
  return gr.gr_gid;
}

Peer peer_of(int fd, std::optional<gid_t> change_group) {
  Peer p;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    p.pid = cred.pid;
    p.uid = cred.uid;
    p.gid = cred.gid;
  } else {
    p.uid = static_cast<uid_t>(-1);  // unknown peer: read-only
    p.gid = static_cast<gid_t>(-1);
  }
  std::vector<gid_t> groups(64);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen);
  if (rc != 0 && errno == ERANGE) {
    groups.resize(glen / sizeof(gid_t));
    rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen);
  }
  if (rc == 0) {
    groups.resize(glen / sizeof(gid_t));
    p.groups = std::move(groups);
  }
  bool in_group = false;
  if (change_group) {
    in_group = p.gid == *change_group;
    for (gid_t g : p.groups)
      in_group |= g == *change_group;
  }
  p.may_change = p.uid == 0 || p.uid == geteuid() || in_group;
  return p;
}

std::optional<Tcp::endpoint> parse_endpoint(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return std::nullopt;
  unsigned port = 0;
  try {
    port = static_cast<unsigned>(std::stoul(text.substr(colon + 1)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (port > 65535) return std::nullopt;
  return Tcp::endpoint(addr, static_cast<uint16_t>(port));
}

}  // namespace

ServerOptions server_options(const config::ControlSection& c) {
  ServerOptions o;
  o.socket_path = c.socket;
  o.socket_mode = c.socket_mode;
  o.group = c.group;
  o.metrics_address = c.metrics;
  o.max_request_bytes = c.max_request_bytes;
  o.read_timeout_ms = c.read_timeout_ms;
  return o;
}

// A connection of either kind, tracked so the server can count and close them.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void close() noexcept = 0;
};

struct ControlServer::Impl {
  Impl(const ServerOptions& o, Registry& r, WakeSet w)
      : registry(r), options(o), wake(std::move(w)) {}

  Registry& registry;
  ServerOptions options;
  WakeSet wake;  // declared before the io_context: every socket is removed from it on close
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  UnixProto::acceptor unix_acceptor{io};
  std::optional<Tcp::acceptor> metrics_acceptor;
  asio::steady_timer unix_retry{io};
  asio::steady_timer metrics_retry{io};
  asio::steady_timer sample_timer{io};
  std::optional<gid_t> change_group;
  bool socket_bound = false;
  RateWindow rates;
  std::vector<std::function<void(const Snapshot&)>> sample_listeners;
  std::function<void()> reload_handler;
  std::atomic<bool> reload_requested{false};
  std::set<ConnectionBase*> connections;
  std::shared_ptr<spdlog::logger> log = log::get("control");
  log::RateLimiter accept_log{1, 10'000'000'000ull};

  void expire_after(asio::steady_timer& t, std::chrono::milliseconds d) {
    t.expires_after(d);
    wake.note_deadline(t.expiry());
  }

  Result<void> bind_unix();
  Result<void> bind_metrics();
  void accept_unix();
  void accept_metrics();
  void sample();
  void shutdown();
};

namespace {

// One client of the control socket: newline-delimited requests, one reply line each.
class ControlConnection final : public ConnectionBase,
                                public std::enable_shared_from_this<ControlConnection> {
 public:
  ControlConnection(ControlServer::Impl& server, UnixProto::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io) {
    fd_ = socket_.native_handle();
    server_.wake.add(fd_);
    server_.connections.insert(this);
    peer_ = peer_of(fd_, server_.change_group);
  }
  ~ControlConnection() override {
    server_.connections.erase(this);
    close();
  }

  void start() {
    arm_timer();
    process();
  }

  // Replies `busy` and closes: the connection limit is reached.
  void refuse_busy() {
    reply(reply_error(nullptr, CommandError{ErrorCode::Busy,
                                            fmt::format("vecflowd serves {} control connections "
                                                        "at once; try again",
                                                        ControlServer::kMaxConnections),
                                            {}}),
          true);
  }

  void close() noexcept override {
    if (state_ == State::Closed) return;
    state_ = State::Closed;
    error_code ec;
    timer_.cancel();
    server_.wake.remove(fd_);
    socket_.shutdown(UnixProto::socket::shutdown_both, ec);
    socket_.close(ec);
  }

 private:
  enum class State { Reading, Writing, Closed };

  void arm_timer() {
    server_.expire_after(timer_, std::chrono::milliseconds(server_.options.read_timeout_ms));
    // A wait whose timer had already expired cannot be cancelled: its handler still runs,
    // with success, after the timer was re-armed for the next phase (a busy control lcore
    // serves the request and its expiry in the same round). The generation tells it is stale.
    timer_.async_wait([self = shared_from_this(), gen = ++timer_gen_](error_code ec) {
      if (ec || gen != self->timer_gen_ || self->state_ == State::Closed) return;
      if (self->state_ == State::Writing) {
        self->close();  // the client does not read its reply
        return;
      }
      self->reply(
          reply_error(nullptr, CommandError{ErrorCode::Timeout,
                                            fmt::format("no complete request within {} ms",
                                                        self->server_.options.read_timeout_ms),
                                            {}}),
          true);
    });
  }

  void read_more() {
    socket_.async_read_some(asio::buffer(chunk_),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              if (self->state_ == State::Closed) return;
                              if (ec) {
                                self->at_end(ec);
                                return;
                              }
                              self->in_.append(self->chunk_.data(), n);
                              self->process();
                            });
  }

  // Serves every complete request buffered, one at a time, then reads more.
  void process() {
    if (state_ != State::Reading) return;
    size_t max = server_.options.max_request_bytes;
    size_t pos = in_.find('\n');
    while (pos != std::string::npos) {
      if (pos > max) break;
      std::string line = in_.substr(0, pos);
      in_.erase(0, pos + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) {
        pos = in_.find('\n');
        continue;
      }
      reply(handle(line), false);
      return;
    }
    if ((pos == std::string::npos ? in_.size() : pos) > max) {
      reply(reply_error(nullptr, CommandError{ErrorCode::RequestTooLarge,
                                              fmt::format("request longer than {} bytes "
                                                          "(control.max_request_bytes)",
                                                          max),
                                              {}}),
            true);
      return;
    }
    read_more();
  }

  void at_end(error_code ec) {
    if (ec != asio::error::eof) {
      close();
      return;
    }
    // The client closed its side: a last request without a newline is still served, and one
    // cut short is answered as truncated.
    if (in_.find_first_not_of(" \t\r\n") == std::string::npos) {
      close();
      return;
    }
    std::string line = std::move(in_);
    in_.clear();
    reply(handle(line), true);
  }

  Json handle(std::string_view line) {
    auto request = parse_request(line);
    if (!request) {
      Json id;
      return reply_error(id, request.error());
    }
    if (server_.registry.find(request->command) &&
        server_.registry.find(request->command)->spec->access == Access::Change) {
      server_.log->info("'{}' requested by pid {} uid {}", request->command, peer_.pid, peer_.uid);
    }
    return server_.registry.dispatch(*request, peer_, server_.rates);
  }

  void reply(const Json& j, bool then_close) {
    state_ = State::Writing;
    close_after_ = then_close;
    out_ = dump(j);
    arm_timer();
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](error_code ec, size_t) {
                        if (self->state_ == State::Closed) return;
                        if (ec || self->close_after_) {
                          self->close();
                          return;
                        }
                        self->state_ = State::Reading;
                        self->arm_timer();
                        self->process();
                      });
  }

  ControlServer::Impl& server_;
  UnixProto::socket socket_;
  asio::steady_timer timer_;
  int fd_ = -1;
  Peer peer_;
  State state_ = State::Reading;
  bool close_after_ = false;
  uint64_t timer_gen_ = 0;  // arm_timer() calls so far; only the last one's expiry counts
  std::string in_;
  std::string out_;
  std::array<char, kReadChunk> chunk_{};
};

// One client of the metrics endpoint: HTTP/1.1 GET /metrics, keep-alive honoured. Beast's
// tcp_stream would bring its own timers, which the wake-up set cannot see; the connection
// keeps its timeout in a server timer instead.
class MetricsConnection final : public ConnectionBase,
                                public std::enable_shared_from_this<MetricsConnection> {
 public:
  MetricsConnection(ControlServer::Impl& server, Tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io) {
    fd_ = socket_.native_handle();
    server_.wake.add(fd_);
    server_.connections.insert(this);
  }
  ~MetricsConnection() override {
    server_.connections.erase(this);
    close();
  }

  void start() { read(); }

  void close() noexcept override {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    timer_.cancel();
    server_.wake.remove(fd_);
    socket_.shutdown(Tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

 private:
  void arm_timer() {
    server_.expire_after(timer_, std::chrono::milliseconds(server_.options.read_timeout_ms));
    // As for the control connections: an expiry that was already queued when the timer was
    // re-armed is stale.
    timer_.async_wait([self = shared_from_this(), gen = ++timer_gen_](error_code ec) {
      if (!ec && gen == self->timer_gen_) self->close();
    });
  }

  void read() {
    arm_timer();
    parser_.emplace();
    parser_->header_limit(kMaxHttpHeaderBytes);
    parser_->body_limit(server_.options.max_request_bytes);
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (self->closed_) return;
                       if (ec) {
                         self->close();
                         return;
                       }
                       self->respond(self->parser_->release());
                     });
  }

  void respond(const http::request<http::string_body>& req) {
    response_ = {};
    response_.version(req.version());
    response_.keep_alive(req.keep_alive());
    response_.set(http::field::server, "vecflowd");
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.set(http::field::allow, "GET, HEAD");
      response_.set(http::field::content_type, "text/plain");
      response_.body() = "only GET and HEAD are served\n";
    } else if (req.target() == "/metrics") {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      if (req.method() == http::verb::get) {
        response_.body() = render_prometheus(server_.registry.collect());
      } else {
        response_.content_length(render_prometheus(server_.registry.collect()).size());
      }
    } else {
      response_.result(http::status::not_found);
      response_.set(http::field::content_type, "text/plain");
      response_.body() = "vecflowd serves Prometheus metrics at /metrics\n";
    }
    if (req.method() != http::verb::head || req.target() != "/metrics") response_.prepare_payload();
    arm_timer();
    http::async_write(socket_, response_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec || !self->response_.keep_alive()) {
        self->close();
        return;
      }
      self->read();
    });
  }

  ControlServer::Impl& server_;
  Tcp::socket socket_;
  asio::steady_timer timer_;
  int fd_ = -1;
  bool closed_ = false;
  uint64_t timer_gen_ = 0;  // arm_timer() calls so far; only the last one's expiry counts
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
};

class AsioScheduledCall final : public ScheduledCall {
 public:
  AsioScheduledCall(ControlServer::Impl& server, std::chrono::milliseconds delay,
                    std::function<void()> fn)
      : state_(std::make_shared<State>(server.io)) {
    server.expire_after(state_->timer, delay);
    state_->timer.async_wait([state = state_, fn = std::move(fn)](error_code ec) {
      if (ec || state->cancelled) return;
      fn();
    });
  }
  ~AsioScheduledCall() override { cancel(); }
  void cancel() noexcept override {
    state_->cancelled = true;
    state_->timer.cancel();
  }

 private:
  struct State {
    explicit State(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
    bool cancelled = false;
  };
  std::shared_ptr<State> state_;
};

class AsioReadableCall final : public ScheduledCall {
 public:
  AsioReadableCall(ControlServer::Impl& server, int fd, std::function<void()> fn)
      : server_(server), state_(std::make_shared<State>(server.io, fd, std::move(fn))) {
    server_.wake.add(fd);
    wait(state_);
  }
  ~AsioReadableCall() override { cancel(); }
  void cancel() noexcept override {
    if (state_->cancelled) return;
    state_->cancelled = true;
    server_.wake.remove(state_->fd.native_handle());
    error_code ec;
    state_->fd.cancel(ec);
    (void)state_->fd.release();  // the caller owns the descriptor
  }

 private:
  struct State {
    State(asio::io_context& io, int fd, std::function<void()> fn) : fd(io, fd), fn(std::move(fn)) {}
    asio::posix::stream_descriptor fd;
    std::function<void()> fn;
    bool cancelled = false;
  };
  static void wait(const std::shared_ptr<State>& state) {
    state->fd.async_wait(asio::posix::descriptor_base::wait_read, [state](error_code ec) {
      if (ec || state->cancelled) return;
      state->fn();
      if (!state->cancelled) wait(state);
    });
  }
  ControlServer::Impl& server_;
  std::shared_ptr<State> state_;
};

}  // namespace

Result<void> ControlServer::Impl::bind_unix() {
  namespace fs = std::filesystem;
  const std::string& path = options.socket_path;
  std::error_code fec;
  fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::exists(dir, fec)) {
    fs::create_directories(dir, fec);
    if (fec)
      return fail("cannot create the directory of control socket {}: {}", path, fec.message());
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return fail("{} exists and is not a socket: remove it or set control.socket", path);
    }
    UnixProto::socket probe(io);
    error_code ec;
    probe.connect(UnixProto::endpoint(path), ec);
    if (!ec) {
      return fail(
          "{} is served by another process (a running vecflowd?): stop it or set "
          "control.socket to another path",
          path);
    }
    unlink(path.c_str());  // left behind by a vecflowd that did not stop cleanly
  }
  error_code ec;
  unix_acceptor.open(UnixProto(), ec);
  if (!ec) unix_acceptor.bind(UnixProto::endpoint(path), ec);
  if (ec) return fail("cannot bind control socket {}: {}", path, ec.message());
  socket_bound = true;
  // Mode and group are set before listen(): until then a connect is refused, so no client
  // ever reaches the socket with the umask's permissions.
  if (chmod(path.c_str(), options.socket_mode) != 0) {
    return fail("cannot set mode {:o} on {}: {}", options.socket_mode, path, std::strerror(errno));
  }
  change_group = group_id(options.group);
  if (change_group) {
    if (chown(path.c_str(), static_cast<uid_t>(-1), *change_group) != 0) {
      return fail("cannot give {} to group {}: {}", path, options.group, std::strerror(errno));
    }
  } else if (!options.group.empty()) {
    log->info("group '{}' does not exist: only root may use {} to change state", options.group,
              path);
  }
  unix_acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("cannot listen on control socket {}: {}", path, ec.message());
  wake.add(unix_acceptor.native_handle());
  return {};
}

Result<void> ControlServer::Impl::bind_metrics() {
  if (options.metrics_address.empty()) return {};
  auto ep = parse_endpoint(options.metrics_address);
  if (!ep) {
    return fail("control.metrics '{}' is not an address:port", options.metrics_address);
  }
  metrics_acceptor.emplace(io);
  error_code ec;
  metrics_acceptor->open(ep->protocol(), ec);
  if (!ec) metrics_acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) metrics_acceptor->bind(*ep, ec);
  if (!ec) metrics_acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return fail("cannot serve metrics on {}: {}", options.metrics_address, ec.message());
  }
  wake.add(metrics_acceptor->native_handle());
  return {};
}

void ControlServer::Impl::accept_unix() {
  unix_acceptor.async_accept([this](error_code ec, UnixProto::socket socket) {
    if (ec == asio::error::operation_aborted || !unix_acceptor.is_open()) return;
    if (ec) {
      if (accept_log.allow(monotonic_ns())) log->warn("control socket: accept: {}", ec.message());
      expire_after(unix_retry, kAcceptRetry);
      unix_retry.async_wait([this](error_code e) {
        if (!e) accept_unix();
      });
      return;
    }
    bool full = connections.size() >= kMaxConnections;
    auto c = std::make_shared<ControlConnection>(*this, std::move(socket));
    if (full) {
      c->refuse_busy();
    } else {
      c->start();
    }
    accept_unix();
  });
}

void ControlServer::Impl::accept_metrics() {
  metrics_acceptor->async_accept([this](error_code ec, Tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !metrics_acceptor->is_open()) return;
    if (ec) {
      if (accept_log.allow(monotonic_ns())) log->warn("metrics: accept: {}", ec.message());
      expire_after(metrics_retry, kAcceptRetry);
      metrics_retry.async_wait([this](error_code e) {
        if (!e) accept_metrics();
      });
      return;
    }
    if (connections.size() >= kMaxConnections) {
      error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<MetricsConnection>(*this, std::move(socket))->start();
    }
    accept_metrics();
  });
}

void ControlServer::Impl::sample() {
  Snapshot s = registry.collect();
  for (const auto& listener : sample_listeners)
    listener(s);
  rates.push(std::move(s));
  // Fixed rate: the next tick is one interval after this one was due, not after it ran.
  auto next = sample_timer.expiry() + kSampleInterval;
  if (next <= std::chrono::steady_clock::now())
    next = std::chrono::steady_clock::now() + kSampleInterval;
  sample_timer.expires_at(next);
  wake.note_deadline(next);
  sample_timer.async_wait([this](error_code ec) {
    if (!ec) sample();
  });
}

void ControlServer::Impl::shutdown() {
  error_code ec;
  unix_acceptor.close(ec);
  if (metrics_acceptor) metrics_acceptor->close(ec);
  unix_retry.cancel();
  metrics_retry.cancel();
  sample_timer.cancel();
  std::vector<ConnectionBase*> open(connections.begin(), connections.end());
  for (ConnectionBase* c : open)
    c->close();
  // Let the cancelled operations complete so every connection is released.
  io.restart();
  io.poll();
  if (socket_bound) unlink(options.socket_path.c_str());
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl)
    : Service("control"), impl_(std::move(impl)) {}

Result<std::shared_ptr<ControlServer>> ControlServer::create(const ServerOptions& options,
                                                             Registry& registry) {
  auto wake = WakeSet::create();
  if (!wake) return std::unexpected(wake.error());
  auto impl = std::make_unique<Impl>(options, registry, std::move(*wake));
  if (auto r = impl->bind_unix(); !r) {
    impl->shutdown();
    return std::unexpected(r.error());
  }
  if (auto r = impl->bind_metrics(); !r) {
    impl->shutdown();
    return std::unexpected(r.error());
  }
  impl->accept_unix();
  if (impl->metrics_acceptor) impl->accept_metrics();
  impl->sample_timer.expires_after(std::chrono::milliseconds(0));
  impl->sample();
  impl->log->info("control socket {}{}", options.socket_path,
                  options.metrics_address.empty()
                      ? std::string()
                      : fmt::format(", metrics at http://{}/metrics", options.metrics_address));
  return std::shared_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::~ControlServer() {
  impl_->shutdown();
}

bool ControlServer::poll() noexcept {
  impl_->wake.drain();
  bool worked = false;
  if (impl_->reload_requested.exchange(false, std::memory_order_acq_rel)) {
    worked = true;
    if (impl_->reload_handler) {
      try {
        impl_->reload_handler();
      } catch (const std::exception& e) {
        impl_->log->error("reload on SIGHUP failed: {}", e.what());
      }
    }
  }
  try {
    worked |= impl_->io.poll() > 0;
  } catch (const std::exception& e) {
    // Handlers catch their own errors; this is a last guard so the control lcore survives.
    impl_->log->error("control server: {}", e.what());
    worked = true;
  }
  return worked;
}

bool ControlServer::arm_wakeup(WakeFds& fds) noexcept {
  const int fd = impl_->wake.arm();
  return fd >= 0 && fds.add(fd);
}

void ControlServer::post(std::function<void()> fn) {
  asio::post(impl_->io, std::move(fn));
  impl_->wake.notify();
}

void ControlServer::request_reload() noexcept {
  impl_->reload_requested.store(true, std::memory_order_release);
  impl_->wake.notify();
}

void ControlServer::set_reload_handler(std::function<void()> handler) {
  impl_->reload_handler = std::move(handler);
}

std::unique_ptr<ScheduledCall> ControlServer::schedule(std::chrono::milliseconds delay,
                                                       std::function<void()> fn) {
  return std::make_unique<AsioScheduledCall>(*impl_, delay, std::move(fn));
}

std::unique_ptr<ScheduledCall> ControlServer::on_readable(int fd, std::function<void()> fn) {
  return std::make_unique<AsioReadableCall>(*impl_, fd, std::move(fn));
}

void ControlServer::add_sample_listener(std::function<void(const Snapshot&)> listener) {
  impl_->sample_listeners.push_back(std::move(listener));
}

void ControlServer::set_limits(uint32_t max_request_bytes, uint32_t read_timeout_ms) {
  impl_->options.max_request_bytes = max_request_bytes;
  impl_->options.read_timeout_ms = read_timeout_ms;
}

const RateWindow& ControlServer::rates() const noexcept {
  return impl_->rates;
}

const std::string& ControlServer::socket_path() const noexcept {
  return impl_->options.socket_path;
}

std::string ControlServer::metrics_endpoint() const {
  if (!impl_->metrics_acceptor) return {};
  error_code ec;
  auto ep = impl_->metrics_acceptor->local_endpoint(ec);
  if (ec) return {};
  return ep.address().is_v6() ? fmt::format("[{}]:{}", ep.address().to_string(), ep.port())
                              : fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

size_t ControlServer::connections() const noexcept {
  return impl_->connections.size();
}

}  // namespace vecflow::control
