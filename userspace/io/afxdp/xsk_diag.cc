#include "io/afxdp/xsk_diag.h"

#include <dirent.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/xdp_diag.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#ifndef AF_XDP
#define AF_XDP 44
#endif

namespace vecflow {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// inode -> (ifindex, queue) of every AF_XDP socket in the namespace.
Result<std::map<uint64_t, xdp_diag_info>> dump_xdp_sockets() {
  Fd nl(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (nl.get() < 0) return fail("sock_diag: socket: {}", strerror(errno));
  struct {
    nlmsghdr nlh;
    xdp_diag_req req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.req.sdiag_family = AF_XDP;
  msg.req.xdiag_show = XDP_SHOW_INFO;
  if (send(nl.get(), &msg, sizeof(msg), 0) < 0) return fail("sock_diag: send: {}", strerror(errno));

  std::map<uint64_t, xdp_diag_info> out;
  alignas(nlmsghdr) char buf[16384];
  for (;;) {
    ssize_t len = recv(nl.get(), buf, sizeof(buf), 0);
    if (len < 0) {
      if (errno == EINTR) continue;
      return fail("sock_diag: recv: {}", strerror(errno));
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<uint32_t>(len));
         h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        return fail("sock_diag: xdp_diag answered {} (is the xsk_diag module loaded?)",
                    strerror(-e->error));
      }
      auto* m = static_cast<xdp_diag_msg*>(NLMSG_DATA(h));
      int rem = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
      for (auto* a = reinterpret_cast<nlattr*>(m + 1); rem >= static_cast<int>(sizeof(nlattr));) {
        if (a->nla_len < sizeof(nlattr) || a->nla_len > rem) break;
        if ((a->nla_type & NLA_TYPE_MASK) == XDP_DIAG_INFO &&
            a->nla_len >= NLA_HDRLEN + sizeof(xdp_diag_info)) {
          xdp_diag_info info;
          std::memcpy(&info, reinterpret_cast<char*>(a) + NLA_HDRLEN, sizeof(info));
          out[m->xdiag_ino] = info;
        }
        int step = NLA_ALIGN(a->nla_len);
        rem -= step;
        a = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(a) + step);
      }
    }
  }
}

}  // namespace

Result<std::vector<BoundXsk>> find_bound_xsks(int ifindex) {
  auto sockets = dump_xdp_sockets();
  if (!sockets) return std::unexpected(sockets.error());
  std::vector<BoundXsk> found;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return fail("cannot list /proc/self/fd: {}", strerror(errno));
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    auto it = sockets->find(st.st_ino);
    if (it == sockets->end() || static_cast<int>(it->second.ifindex) != ifindex) continue;
    found.push_back(BoundXsk{static_cast<int>(fd), it->second.queue_id});
  }
  closedir(dir);
  std::sort(found.begin(), found.end(),
            [](const BoundXsk& a, const BoundXsk& b) { return a.queue_id < b.queue_id; });
  return found;
}

}  // namespace vecflow
