// Conversions between the shared types (kvstream/types.h, kvstream/policies.h) and the control
// plane's messages (proto/kvstream.proto), used by kvstreamd, the client and kvstreamctl.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstream.pb.h"
#include "kvstream/policies.h"
#include "kvstream/types.h"

namespace kvstream {

void ToProto(const StepRecord& in, v1::StepRecord* out);
StepRecord FromProto(const v1::StepRecord& in);

void ToProto(const StoreStats& in, v1::StatsReply* out);
StoreStats FromProto(const v1::StatsReply& in);

void ToProto(const ChunkResult& in, v1::ChunkDone* out);
ChunkResult FromProto(const v1::ChunkDone& in);

// Empty fields keep `current`'s value; a field that does not parse is InvalidArgument.
absl::StatusOr<Policies> FromProto(const v1::Policies& in, const Policies& current);
void ToProto(const Policies& in, v1::Policies* out);

EvictRequest FromProto(const v1::EvictRequest& in);
void ToProto(const EvictRequest& in, v1::EvictRequest* out);

}  // namespace kvstream
