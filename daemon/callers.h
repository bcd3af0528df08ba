// Who is calling, and what they may do (docs/security.md).
//
// gRPC does not tell a Unix socket server its peer's credentials, so a client proves who it is
// on the data socket instead: it connects, sends DataOp::kIdentify and keeps that connection
// open; the daemon reads the peer's credentials off it (SO_PEERCRED, SO_PEERGROUPS) and answers
// with a caller token, which the client sends with every gRPC call as the `kvstream-caller`
// metadata. The identity lives as long as that connection: a client that exits, or closes it,
// takes its token with it.
//
// Access: with isolation `uid`, every key a client names lives in a namespace of the client's
// uid (tenants never read, overwrite, probe or unlock each other's keys), a call that names a
// session is for the session's uid only, anonymous calls that touch keys are refused, and
// administration (evict, policies) is for root, the daemon's own uid and the admin group only.
// With isolation `none`, every member of the socket group is trusted with everything, as one
// tenant.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data_socket.h"  // kCallerMetadata
#include "descriptor_caps.h"
#include "uid_slots.h"

namespace kvstream {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS), where the kernel tells them
};
// The credentials of the process at the other end of a connected Unix socket.
absl::StatusOr<PeerCredentials> ReadPeerCredentials(int socket);

struct AccessOptions {
  bool isolate_uids = false;          // sessions.isolation: uid
  std::optional<gid_t> admin_gid;     // sessions.admin_group
};

struct Caller {
  uint64_t id = 0;
  uid_t uid = 0;
  bool admin = false;  // root, the daemon's uid, or a member of the admin group
};

// The rules, from AccessOptions; thread-safe (immutable).
class AccessPolicy {
 public:
  explicit AccessPolicy(AccessOptions options = {});
  const AccessOptions& options() const { return options_; }
  bool isolated() const { return options_.isolate_uids; }
  bool IsAdmin(const PeerCredentials& peer) const;
  // Calls that touch keys or sessions: under isolation, only identified callers.
  absl::Status MayUse(const Caller* caller) const;
  // Calls that name session `session` of uid `owner` (Retrieve, Persist): under isolation, only
  // callers of that uid (PermissionDenied), whatever token they present.
  absl::Status MayUseSession(const Caller* caller, uint64_t session, uid_t owner) const;
  // Evict and SetPolicies: under isolation, administrators only (PermissionDenied).
  absl::Status MayAdminister(const Caller* caller) const;
  // The key as the store knows it: under isolation, `key` inside the namespace of `uid` (a prefix
  // no other uid's keys can start with); else `key` itself. InvalidArgument if the result is not a
  // valid key (too long).
  absl::StatusOr<std::string> StoreKey(uid_t uid, std::string_view key) const;

 private:
  AccessOptions options_;
  uid_t daemon_uid_;
};

// Identities proven on the data socket, by token. Thread-safe.
class CallerRegistry {
 public:
  // `identities`: how many may live at once, in total and per uid (each holds a connection).
  explicit CallerRegistry(const AccessPolicy* policy, UidSlots::Limits identities = DescriptorCaps{}.identities)
      : policy_(policy), slots_("identities (connected clients)", identities) {}
  // A new identity for `peer`: its id (for Remove) and token (32 random bytes). ResourceExhausted
  // when every identity, or every one the uid may have, is taken.
  absl::StatusOr<std::pair<uint64_t, std::string>> Add(const PeerCredentials& peer) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The caller presenting `token` (raw bytes), or null.
  std::shared_ptr<const Caller> Find(std::string_view token) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t count() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Identity {
    std::string token;
    UidSlots::Slot slot;
  };
  const AccessPolicy* const policy_;
  UidSlots slots_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Caller>> by_token_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Identity> identities_ ABSL_GUARDED_BY(mu_);  // by id
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace kvstream
