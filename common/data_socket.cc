#include "data_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "arena.h"

namespace kvstream {
namespace {

void PutLe(uint8_t* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetLe(const uint8_t* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{in[i]} << (8 * i);
  return v;
}

absl::Status ReceiveAll(int socket, void* out, size_t size) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = recv(socket, static_cast<uint8_t*>(out) + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(n == 0 ? "the daemon closed the data socket without answering"
                                           : std::string("reading the data socket: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> ConnectDataSocket(const std::string& path, int timeout_s) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("data socket path too long: " + path);
  std::strcpy(addr.sun_path, path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
  timeval timeout{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError("cannot reach the daemon's data socket " + path + ": " + std::strerror(e));
  }
  return fd;
}

absl::Status SendDataRequest(int socket, DataOp op, const std::string& token, uint64_t argument, int fd) {
  if (token.size() != kSessionTokenBytes) return absl::InvalidArgumentError("a session token is 32 bytes");
  uint8_t frame[kDataFrameBytes];
  frame[0] = static_cast<uint8_t>(op);
  std::memcpy(frame + 1, token.data(), kSessionTokenBytes);
  PutLe(frame + 1 + kSessionTokenBytes, argument, 8);
  if (!SendWithDescriptor(socket, frame, sizeof(frame), fd)) {
    return absl::UnavailableError(std::string("sending on the data socket: ") + std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReceiveDataReply(int socket) {
  absl::StatusOr<DataReply> reply = ReceiveDataReplyWithMessage(socket);
  if (!reply.ok()) return reply.status();
  return reply->value;
}

absl::StatusOr<DataReply> ReceiveDataReplyWithMessage(int socket) {
  uint8_t head[12];
  if (absl::Status s = ReceiveAll(socket, head, sizeof(head)); !s.ok()) return s;
  const auto code = static_cast<int32_t>(GetLe(head, 4));
  const auto value = static_cast<uint32_t>(GetLe(head + 4, 4));
  const auto length = static_cast<uint32_t>(GetLe(head + 8, 4));
  if (length > kMaxReplyMessageBytes || code < 0 || code > 16) {
    return absl::DataLossError("malformed reply on the data socket");
  }
  std::string message(length, '\0');
  if (absl::Status s = ReceiveAll(socket, message.data(), length); !s.ok()) return s;
  if (code != 0) return absl::Status(static_cast<absl::StatusCode>(code), message);
  return DataReply{value, std::move(message)};
}

absl::StatusOr<CallerIdentity> IdentifyCaller(const std::string& data_socket_path, int timeout_s) {
  absl::StatusOr<int> connection = ConnectDataSocket(data_socket_path, timeout_s);
  if (!connection.ok()) return connection.status();
  absl::Status sent = SendDataRequest(*connection, DataOp::kIdentify, std::string(kSessionTokenBytes, '\0'), 0);
  absl::StatusOr<DataReply> reply = sent.ok() ? ReceiveDataReplyWithMessage(*connection) : absl::StatusOr<DataReply>(sent);
  if (reply.ok() && reply->message.size() != 2 * kSessionTokenBytes) {
    reply = absl::DataLossError("the daemon's caller token is malformed");
  }
  if (!reply.ok()) {
    close(*connection);
    return reply.status();
  }
  return CallerIdentity{*connection, std::move(reply->message)};
}

DataRequest ParseDataRequest(const uint8_t (&frame)[kDataFrameBytes]) {
  return {static_cast<DataOp>(frame[0]), reinterpret_cast<const char*>(frame + 1), GetLe(frame + 1 + kSessionTokenBytes, 8)};
}

absl::Status SendDataReply(int socket, const absl::Status& status, uint32_t value, std::string_view ok_message) {
  const std::string_view text =
      status.ok() ? ok_message : std::string_view(status.message().data(), status.message().size());
  const std::string message(text.substr(0, kMaxReplyMessageBytes));
  std::string frame(12, '\0');
  auto* head = reinterpret_cast<uint8_t*>(frame.data());
  PutLe(head, static_cast<uint32_t>(status.code()), 4);
  PutLe(head + 4, value, 4);
  PutLe(head + 8, message.size(), 4);
  frame += message;
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = send(socket, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(std::string("answering on the data socket: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace kvstream
