// The data socket: where shared memory changes hands between kvstreamd and a session's client
// (descriptors travel with SCM_RIGHTS; the control plane, gRPC, cannot carry them).
//
// A client connects once per request and sends one fixed frame: the operation (1 byte), the
// session's token (32 bytes) and an argument (8 bytes, little-endian), with a descriptor attached
// for kAddRegion and kAddPinnedRegion. The daemon answers kFetchArena with one byte carrying the arena's descriptor
// (or closes the connection: unknown token, or the arena was handed out already), and the region
// operations with a reply frame: status code (4 bytes), value (4 bytes), message length (4 bytes),
// message; all little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvstream {

enum class DataOp : char {
  kFetchArena = 'A',    // argument unused; the reply carries the session arena's descriptor
  kAddRegion = 'R',     // argument: the region's size in bytes; descriptor attached; value: region id
  kAddPinnedRegion = 'P',  // as kAddRegion, for memory a device has pinned (reads land through bounce buffers)
  kRemoveRegion = 'U',  // argument: the region id; value unused
  // Token and argument unused (zero). The reply's message is a caller token in hex, valid for
  // gRPC calls (metadata `kvstream-caller`) while this connection stays open.
  kIdentify = 'I',
};

inline constexpr size_t kSessionTokenBytes = 32;
// The gRPC metadata that carries a caller token (kIdentify), in hex.
inline constexpr char kCallerMetadata[] = "kvstream-caller";
inline constexpr size_t kDataFrameBytes = 1 + kSessionTokenBytes + 8;
inline constexpr size_t kMaxReplyMessageBytes = 4096;

// Client side: connects to `path` with `timeout_s` for every send and receive.
absl::StatusOr<int> ConnectDataSocket(const std::string& path, int timeout_s);
// Client side: sends a request frame, with `fd` attached when >= 0.
absl::Status SendDataRequest(int socket, DataOp op, const std::string& token, uint64_t argument, int fd = -1);
// Client side: the value of a reply frame, or the status it carries.
absl::StatusOr<uint32_t> ReceiveDataReply(int socket);
struct DataReply {
  uint32_t value = 0;
  std::string message;
};
// Client side: as ReceiveDataReply, with the message an OK reply carries.
absl::StatusOr<DataReply> ReceiveDataReplyWithMessage(int socket);
// Client side: proves who this process is (kIdentify). Returns the connection, which must stay
// open while the caller token is used, and the token in hex.
struct CallerIdentity {
  int connection = -1;
  std::string token;
};
absl::StatusOr<CallerIdentity> IdentifyCaller(const std::string& data_socket_path, int timeout_s);
// Daemon side: what a request frame says (the op byte unchecked: an unknown one is the caller's
// to refuse).
struct DataRequest {
  DataOp op;
  const char* token;  // kSessionTokenBytes, inside the frame
  uint64_t argument;
};
DataRequest ParseDataRequest(const uint8_t (&frame)[kDataFrameBytes]);
// Daemon side: answers a request; `ok_message` travels with an OK status (a failed one carries
// its own message).
absl::Status SendDataReply(int socket, const absl::Status& status, uint32_t value, std::string_view ok_message = {});

}  // namespace kvstream
