#include "sim_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvstream {

SimDevice::SimDevice(SimClock* clock, double bandwidth_bps, int64_t latency_ns)
    : clock_(clock), bandwidth_bps_(bandwidth_bps), latency_ns_(latency_ns) {
  props_.direct_io = true;  // behaves like O_DIRECT: exact alignment rules are enforced below
  props_.mem_alignment = 1;
  props_.offset_alignment = kFileAlignment;
  clock_->AddSource(this);
}

SimDevice::~SimDevice() { clock_->RemoveSource(this); }

void SimDevice::SetBandwidth(double bandwidth_bps) {
  std::lock_guard lock(mu_);
  bandwidth_bps_ = bandwidth_bps;
}

void SimDevice::SetFaultHook(std::function<SimFault(const IoOp&, const std::string&, uint64_t)> hook) {
  std::lock_guard lock(mu_);
  fault_hook_ = std::move(hook);
}

std::vector<SimOpRecord> SimDevice::ops() const {
  std::lock_guard lock(mu_);
  return records_;
}

void SimDevice::ClearOps() {
  std::lock_guard lock(mu_);
  records_.clear();
}

absl::StatusOr<ScanReport> SimDevice::Scan() {
  std::lock_guard lock(mu_);
  ScanReport report;
  for (auto it = files_.begin(); it != files_.end();) {
    absl::StatusOr<ChunkMeta> meta = DecodeChunkHeader(it->second.data(), it->second.size());
    if (!meta.ok() || FileStem(meta->key) != it->first || meta->file_size() != it->second.size()) {
      it = files_.erase(it);
      ++report.removed_invalid;
      continue;
    }
    report.chunks.push_back({*std::move(meta), it->second.size()});
    ++it;
  }
  return report;
}

absl::StatusOr<FileHandle> SimDevice::OpenChunk(const std::string& stem) {
  std::lock_guard lock(mu_);
  if (!files_.contains(stem)) return absl::NotFoundError(absl::StrCat("no file ", stem));
  const FileHandle h = next_handle_++;
  open_[h] = stem;
  return h;
}

absl::StatusOr<FileHandle> SimDevice::CreateTemp(const std::string& stem) {
  std::lock_guard lock(mu_);
  const FileHandle h = next_handle_++;
  temps_[h] = Temp{stem, {}};
  return h;
}

absl::Status SimDevice::CommitTemp(FileHandle temp, const std::string& stem, bool) {
  std::lock_guard lock(mu_);
  auto it = temps_.find(temp);
  if (it == temps_.end()) return absl::InternalError("unknown temporary");
  files_[stem] = std::move(it->second.bytes);
  temps_.erase(it);
  return absl::OkStatus();
}

void SimDevice::AbortTemp(FileHandle temp) {
  std::lock_guard lock(mu_);
  temps_.erase(temp);
}

absl::Status SimDevice::RemoveChunk(const std::string& stem) {
  std::lock_guard lock(mu_);
  if (files_.erase(stem) == 0) return absl::NotFoundError(absl::StrCat("no file ", stem));
  return absl::OkStatus();
}

std::vector<uint8_t>* SimDevice::FileOf(FileHandle h, std::string* stem) {
  if (auto t = temps_.find(h); t != temps_.end()) {
    *stem = t->second.stem;
    return &t->second.bytes;
  }
  auto o = open_.find(h);
  if (o == open_.end()) return nullptr;
  *stem = o->second;
  auto f = files_.find(o->second);
  return f == files_.end() ? nullptr : &f->second;  // removed after open: reads fail
}

bool SimDevice::Queue(const IoOp& op) {
  std::lock_guard lock(mu_);
  Pending p{op, {}, SimFault::kNone, 0, 0};
  if (auto t = temps_.find(op.file); t != temps_.end()) p.stem = t->second.stem;
  if (auto o = open_.find(op.file); o != open_.end()) p.stem = o->second;
  if (fault_hook_) p.fault = fault_hook_(op, p.stem, op_index_);
  ++op_index_;
  queued_.push_back(std::move(p));
  return true;
}

void SimDevice::Submit() {
  const int64_t now = clock_->NowNs();
  std::lock_guard lock(mu_);
  for (Pending& p : queued_) {
    const double seconds = bandwidth_bps_ > 0 ? p.op.length / bandwidth_bps_ : 0.0;
    const int64_t start = std::max(now, free_at_ns_);
    free_at_ns_ = start + static_cast<int64_t>(seconds * 1e9);
    p.done_ns = free_at_ns_ + latency_ns_;
    p.record = records_.size();
    records_.push_back({p.op.kind, p.stem, p.op.offset, p.op.length, now, p.done_ns});
    pending_.push_back(std::move(p));
  }
  queued_.clear();
}

int64_t SimDevice::NextEventNs() {
  std::lock_guard lock(mu_);
  int64_t best = -1;
  for (const Pending& p : pending_) {
    if (best < 0 || p.done_ns < best) best = p.done_ns;
  }
  return best;
}

void SimDevice::Reap(std::vector<IoCompletion>* out) {
  const int64_t now = clock_->NowNs();
  std::lock_guard lock(mu_);
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const Pending& a, const Pending& b) { return a.done_ns < b.done_ns; });
  size_t n = 0;
  for (; n < pending_.size() && pending_[n].done_ns <= now; ++n) {
    Pending& p = pending_[n];
    const IoOp& op = p.op;
    int32_t result = static_cast<int32_t>(op.length);
    std::string stem;
    std::vector<uint8_t>* file = FileOf(op.file, &stem);
    if (p.fault == SimFault::kError || file == nullptr) {
      result = -EIO;
    } else if (p.fault == SimFault::kTransient) {
      result = -ECANCELED;
    } else if ((op.offset % kFileAlignment) != 0 ||
               (op.kind != IoKind::kSync && op.length % kFileAlignment != 0)) {
      result = -EINVAL;  // what O_DIRECT does with misaligned requests
    } else if (op.kind == IoKind::kRead) {
      if (op.offset + op.length > file->size()) {
        result = -ENODATA;
      } else {
        std::memcpy(op.buffer, file->data() + op.offset, op.length);
        if (p.fault == SimFault::kCorrupt) static_cast<uint8_t*>(op.buffer)[0] ^= 0xff;
      }
    } else if (op.kind == IoKind::kWrite) {
      if (file->size() < op.offset + op.length) file->resize(op.offset + op.length);
      std::memcpy(file->data() + op.offset, op.buffer, op.length);
    }
    out->push_back({op.tag, result});
  }
  pending_.erase(pending_.begin(), pending_.begin() + n);
}

}  // namespace kvstream
