#include "callers.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvstream/key.h"

namespace kvstream {

absl::StatusOr<PeerCredentials> ReadPeerCredentials(int socket) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return absl::InternalError(absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  PeerCredentials peer{cred.pid, cred.uid, cred.gid, {}};
  std::vector<gid_t> groups(64);
  socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int rc = getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes);
  if (rc != 0 && errno == ERANGE && bytes <= 65536 * sizeof(gid_t)) {  // bytes now says how many
    groups.resize(bytes / sizeof(gid_t));
    rc = getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes);
  }
  if (rc == 0) {
    groups.resize(bytes / sizeof(gid_t));
    peer.groups = std::move(groups);
  }
  return peer;
}

AccessPolicy::AccessPolicy(AccessOptions options) : options_(std::move(options)), daemon_uid_(geteuid()) {}

bool AccessPolicy::IsAdmin(const PeerCredentials& peer) const {
  if (peer.uid == 0 || peer.uid == daemon_uid_) return true;
  if (!options_.admin_gid) return false;
  const gid_t admin = *options_.admin_gid;
  return peer.gid == admin || std::find(peer.groups.begin(), peer.groups.end(), admin) != peer.groups.end();
}

absl::Status AccessPolicy::MayUse(const Caller* caller) const {
  if (!options_.isolate_uids || caller != nullptr) return absl::OkStatus();
  return absl::UnauthenticatedError(
      "sessions.isolation is uid: identify on the data socket and send the caller token (a kvstream client does)");
}

absl::Status AccessPolicy::MayUseSession(const Caller* caller, uint64_t session, uid_t owner) const {
  if (!options_.isolate_uids) return absl::OkStatus();
  if (caller == nullptr) return MayUse(caller);
  if (caller->uid == owner) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("session ", session, " belongs to another uid: uid ", caller->uid,
                                                  " may not use it, whatever token it presents"));
}

absl::Status AccessPolicy::MayAdminister(const Caller* caller) const {
  if (!options_.isolate_uids || (caller != nullptr && caller->admin)) return absl::OkStatus();
  if (caller == nullptr) return MayUse(caller);
  return absl::PermissionDeniedError(absl::StrCat(
      "uid ", caller->uid, " may not administer kvstreamd: evict and policies are for root, the daemon's uid",
      options_.admin_gid ? absl::StrCat(" and group ", *options_.admin_gid) : std::string(), " (sessions.admin_group)"));
}

absl::StatusOr<std::string> AccessPolicy::StoreKey(uid_t uid, std::string_view key) const {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  if (!options_.isolate_uids) return std::string(key);
  // "\x1d" "u<decimal uid>" "\x1d": a uid's digits end at the separator, so no two uids' prefixes
  // are prefixes of one another and no key of one uid can equal a key of another.
  std::string stored = NamespacedKey(absl::StrCat("u", uid), key);
  if (stored.size() > kMaxKeyLength) {
    return absl::InvalidArgumentError(absl::StrCat("key is ", key.size(), " bytes; under sessions.isolation uid the limit is ",
                                                   kMaxKeyLength - (stored.size() - key.size())));
  }
  return stored;
}

absl::StatusOr<std::pair<uint64_t, std::string>> CallerRegistry::Add(const PeerCredentials& peer) {
  std::string token(32, '\0');
  if (getrandom(token.data(), token.size(), 0) != static_cast<ssize_t>(token.size())) {
    return absl::InternalError("getrandom failed");
  }
  absl::StatusOr<UidSlots::Slot> slot = slots_.Take(peer.uid);
  if (!slot.ok()) return slot.status();
  auto caller = std::make_shared<Caller>();
  caller->uid = peer.uid;
  caller->admin = policy_->IsAdmin(peer);
  absl::MutexLock lock(&mu_);
  caller->id = next_id_++;
  identities_[caller->id] = Identity{token, *std::move(slot)};
  by_token_[token] = caller;
  return std::make_pair(caller->id, token);
}

void CallerRegistry::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = identities_.find(id);
  if (it == identities_.end()) return;
  by_token_.erase(it->second.token);
  identities_.erase(it);
}

std::shared_ptr<const Caller> CallerRegistry::Find(std::string_view token) const {
  absl::MutexLock lock(&mu_);
  auto it = by_token_.find(absl::string_view(token.data(), token.size()));
  return it == by_token_.end() ? nullptr : it->second;
}

size_t CallerRegistry::count() const {
  absl::MutexLock lock(&mu_);
  return by_token_.size();
}

}  // namespace kvstream
