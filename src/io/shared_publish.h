// The publish protocol of a shared tier: a directory several nodes write chunks into, one
// daemon each (FileDeviceOptions::node). Published chunks are `<root>/<2 hex>/<stem>.kvc`, as on a
// private tier; each node keeps its own state below `<root>/.nodes/<node>/` ("own"): its lock,
// temporaries, saved index, and a hard link to every chunk it published, which is what makes it
// that chunk's owner. A chunk is written as a temporary there, renamed to the node's link and
// published with link(2), which fails if another node published the key first: the first
// publisher wins, atomically, on any POSIX file system. A node unlinks a published name only
// while it is its own file; readers that opened a file keep reading it after its owner removed it.
// Every name is resolved beneath the directory descriptors given, never through a symlink.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kvstream {

// The directories of a shared tier, open, with their paths for messages.
struct SharedDirectories {
  int root = -1;  // the tier directory: published names
  int own = -1;   // this node's directory below it
  const std::string& root_path;
  const std::string& own_path;
};

// Links the node's file of `stem` into the published name (OK if it is published already).
// AlreadyExists, and the node's file removed, when another node's file is published under the
// name; on another failure the node's file is removed only if `remove_on_error`.
absl::Status PublishChunk(const SharedDirectories& dirs, const std::string& stem, bool remove_on_error);

// The published name at `rel` (a chunk's path below the tier directory) is this node's file: a
// regular file, reached without a symlink in either directory.
bool OwnIsPublished(int root, int own, const std::string& rel);

// Unlinks the published name of `stem` while it is the node's own file (OK otherwise).
absl::Status UnpublishChunk(const SharedDirectories& dirs, const std::string& stem);

// Removes the node's own file of `stem`: the published name first while it is that file, then
// the node's link. OK when the node has none.
absl::Status RemoveOwnChunk(const SharedDirectories& dirs, const std::string& stem);

}  // namespace kvstream
