#include "client.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace vecflowctl {
namespace {

std::string group_name(gid_t gid) {
  struct group* g = getgrgid(gid);
  return g ? g->gr_name : std::to_string(gid);
}

}  // namespace

std::expected<Client, ClientError> Client::connect(const std::string& path,
                                                   std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return std::unexpected(ClientError{kUsage, fmt::format("socket path too long: {}", path)});
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return std::unexpected(ClientError{kProtocol, fmt::format("socket: {}", std::strerror(errno))});
  }
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    switch (err) {
      case ENOENT:
        return std::unexpected(ClientError{
            kNotRunning, fmt::format("vecflowd is not running: no control socket at {} (is it "
                                     "started? another socket: --socket or VECFLOW_SOCKET)",
                                     path)});
      case ECONNREFUSED:
        return std::unexpected(ClientError{
            kNotRunning,
            fmt::format("vecflowd is not running: nobody listens on {} (a stale socket)", path)});
      case EACCES:
      case EPERM: {
        struct stat st {};
        std::string who = stat(path.c_str(), &st) == 0
                              ? fmt::format(" (owner uid {}, group {}, mode {:04o})", st.st_uid,
                                            group_name(st.st_gid), st.st_mode & 07777)
                              : std::string();
        return std::unexpected(ClientError{
            kPermission, fmt::format("permission denied on {}{}: run as root or as a member of "
                                     "the socket's group",
                                     path, who)});
      }
      default:
        return std::unexpected(ClientError{
            kNotRunning, fmt::format("cannot connect to {}: {}", path, std::strerror(err))});
    }
  }
  return Client(fd, path);
}

Client::Client(Client&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)), pending_(std::move(o.pending_)) {
  o.fd_ = -1;
}

Client& Client::operator=(Client&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    pending_ = std::move(o.pending_);
    o.fd_ = -1;
  }
  return *this;
}

Client::~Client() {
  if (fd_ >= 0) close(fd_);
}

std::expected<Json, ClientError> Client::call(const Json& request) {
  std::string line = request.dump() + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(ClientError{
          kProtocol, fmt::format("sending to vecflowd ({}): {}", path_, std::strerror(errno))});
    }
    off += static_cast<size_t>(n);
  }
  char buf[65536];
  size_t nl;
  while ((nl = pending_.find('\n')) == std::string::npos) {
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return std::unexpected(
          ClientError{kProtocol, fmt::format("vecflowd ({}) did not answer in time", path_)});
    }
    if (n <= 0) {
      return std::unexpected(ClientError{
          kProtocol, fmt::format("vecflowd ({}) closed the connection without a reply", path_)});
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
  std::string reply = pending_.substr(0, nl);
  pending_.erase(0, nl + 1);
  Json j = Json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("ok")) {
    return std::unexpected(ClientError{kProtocol,
                                       "vecflowd sent a reply that is not a protocol "
                                       "reply (a different vecflowd version?)"});
  }
  return j;
}

}  // namespace vecflowctl
