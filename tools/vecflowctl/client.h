// The client side of the control protocol: one unix-socket connection to vecflowd, one JSON
// request line out, one reply line back (vecflow-control(7)).
#pragma once

#include <chrono>
#include <expected>
#include <string>

#include <nlohmann/json.hpp>

namespace vecflowctl {

using Json = nlohmann::ordered_json;

// vecflowctl's exit status (vecflowctl(1), EXIT STATUS); scripts branch on these.
enum ExitCode : int {
  kOk = 0,
  kCommandFailed = 1,  // vecflowd refused or could not do it (reason on stderr)
  kUsage = 2,          // bad command line or bad arguments
  kNotRunning = 3,     // no vecflowd at the socket
  kPermission = 4,     // the socket or the command needs root or the control group
  kNotServed = 5,      // this vecflowd does not serve the command (its part is not running)
  kProtocol = 6,       // no valid reply in time
};

struct ClientError {
  ExitCode code;
  std::string message;
};

class Client {
 public:
  // Connects to the socket; the error says whether vecflowd is not running or not accessible.
  static std::expected<Client, ClientError> connect(const std::string& path,
                                                    std::chrono::milliseconds timeout);
  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;
  Client(const Client&) = delete;
  ~Client();

  // Sends one request and waits for its reply line.
  std::expected<Json, ClientError> call(const Json& request);

 private:
  Client(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  std::string pending_;  // bytes received after the last reply line
};

}  // namespace vecflowctl
