#include "sim/sim_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace kvstream {
namespace {

SimOp SimOpOf(IoKind kind) {
  switch (kind) {
    case IoKind::kRead: return SimOp::kRead;
    case IoKind::kWrite: return SimOp::kWrite;
    case IoKind::kSync: return SimOp::kSync;
    case IoKind::kCommit: break;  // never queued: SimDevice commits with CommitTemp
  }
  return SimOp::kRead;
}

}  // namespace

SimDevice::SimDevice(SimClock* clock, double bandwidth_bps, int64_t latency_ns)
    : clock_(clock), bandwidth_bps_(bandwidth_bps), latency_ns_(latency_ns) {
  props_.direct_io = true;  // behaves like O_DIRECT: offsets and lengths must be aligned
  props_.mem_alignment = 1;
  props_.offset_alignment = kFileAlignment;
  props_.fixed_buffers = true;  // registered buffers as bookkeeping (RegisterRegion)
  clock_->AddSource(this);
}

SimDevice::~SimDevice() { clock_->RemoveSource(this); }

void SimDevice::SetBandwidth(double bandwidth_bps) {
  absl::MutexLock lock(&mu_);
  bandwidth_bps_ = bandwidth_bps;
}

void SimDevice::SetFaultHook(SimFaultHook hook) {
  absl::MutexLock lock(&mu_);
  fault_hook_ = std::move(hook);
}

void SimDevice::ReleaseHung() {
  const int64_t now = clock_->NowNs();  // before the device lock: the clock locks before devices
  {
    absl::MutexLock lock(&mu_);
    for (Pending& p : hung_) {
      p.fault = SimFault::None();
      p.done_ns = now;
      pending_.push_back(std::move(p));
    }
    hung_.clear();
  }
  clock_->Wake();
}

std::vector<SimOpRecord> SimDevice::ops() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

void SimDevice::ClearOps() {
  absl::MutexLock lock(&mu_);
  records_.clear();
}

size_t SimDevice::temporaries() const {
  absl::MutexLock lock(&mu_);
  return temps_.size();
}

uint64_t SimDevice::resubmits() const {
  absl::MutexLock lock(&mu_);
  return resubmits_;
}

SimFault SimDevice::FaultLocked(SimOp op, std::string_view stem, uint64_t offset, uint32_t length) {
  if (power_ != nullptr) power_->CountOp();
  PoweredLocked();  // a cut just now comes before this operation
  const SimOpInfo info{op, stem, offset, length, op_index_++};
  return fault_hook_ ? fault_hook_(info) : SimFault::None();
}

absl::Status SimDevice::ControlFaultLocked(SimOp op, std::string_view stem) {
  const SimFault f = FaultLocked(op, stem, 0, 0);
  if (f.kind != SimFault::Kind::kError) return absl::OkStatus();
  return ErrnoStatus(f.error, absl::StrCat("simulated fault on ", std::string(stem)));
}

absl::StatusOr<ScanReport> SimDevice::Scan() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ControlFaultLocked(SimOp::kScan, ""); !s.ok()) return s;
  ScanReport report;
  report.removed_temporaries = temps_.size();
  temps_.clear();
  if (saved_index_) {  // taken once, as FileDevice takes its checkpoint
    report.from_checkpoint = true;
    for (ChunkMeta& m : *saved_index_) {
      const uint64_t size = m.file_size();
      report.chunks.push_back({std::move(m), size});
    }
    saved_index_.reset();
    return report;
  }
  for (auto it = files_.begin(); it != files_.end();) {
    absl::StatusOr<ChunkMeta> meta = DecodeChunkHeader(it->second.data(), it->second.size());
    if (!meta.ok() || FileStem(meta->key) != it->first || meta->file_size() != it->second.size()) {
      inode_of_.erase(it->first);
      it = files_.erase(it);
      ++report.removed_invalid;
      continue;
    }
    report.chunks.push_back({*std::move(meta), it->second.size()});
    ++it;
  }
  return report;
}

void SimDevice::SetCondition(TierCondition condition) {
  absl::MutexLock lock(&mu_);
  condition_ = std::move(condition);
}

TierCondition SimDevice::Condition() const {
  absl::MutexLock lock(&mu_);
  return condition_;
}

absl::Status SimDevice::Recreate() {
  absl::MutexLock lock(&mu_);
  files_.clear();
  inode_of_.clear();
  durable_names_.clear();
  condition_ = {};
  return absl::OkStatus();
}

absl::Status SimDevice::Reopen() {
  return absl::FailedPreconditionError("a simulated tier comes back only when its test sets its condition");
}

absl::StatusOr<std::vector<ListedChunk>> SimDevice::ListChunks() {
  absl::MutexLock lock(&mu_);
  std::vector<ListedChunk> out;
  for (const auto& [stem, bytes] : files_) out.push_back({stem, bytes.size()});
  return out;
}

absl::StatusOr<ScannedChunk> SimDevice::ReadChunkHeader(const std::string& stem) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(stem);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file for ", stem));
  absl::StatusOr<ChunkMeta> meta = DecodeChunkHeader(it->second.data(), it->second.size());
  if (!meta.ok()) return meta.status();
  return ScannedChunk{*std::move(meta), it->second.size()};
}

absl::StatusOr<uint64_t> SimDevice::ChunkFileSize(const std::string& stem) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ControlFaultLocked(SimOp::kOpen, stem); !s.ok()) return s;  // its name resolved
  auto it = files_.find(stem);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file for ", stem));
  return static_cast<uint64_t>(it->second.size());
}

absl::Status SimDevice::SaveIndex(const std::vector<ChunkMeta>& chunks) {
  absl::MutexLock lock(&mu_);
  saved_index_ = chunks;
  return absl::OkStatus();
}

absl::StatusOr<FileHandle> SimDevice::OpenChunk(const std::string& stem) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ControlFaultLocked(SimOp::kOpen, stem); !s.ok()) return s;
  if (!files_.contains(stem)) return absl::NotFoundError(absl::StrCat("no file ", stem));
  const FileHandle h = next_handle_++;
  open_[h] = stem;
  return h;
}

absl::StatusOr<FileHandle> SimDevice::CreateTemp(const std::string& stem) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ControlFaultLocked(SimOp::kCreateTemp, stem); !s.ok()) return s;
  const FileHandle h = next_handle_++;
  temps_[h] = Temp{stem, {}, next_inode_++};
  return h;
}

absl::Status SimDevice::CommitTemp(FileHandle temp, const std::string& stem, bool sync_directory) {
  absl::MutexLock lock(&mu_);
  auto it = temps_.find(temp);
  if (it == temps_.end()) return absl::InternalError("unknown temporary");
  if (absl::Status s = ControlFaultLocked(SimOp::kCommit, stem); !s.ok()) {
    temps_.erase(it);
    return s;
  }
  files_[stem] = std::move(it->second.bytes);
  inode_of_[stem] = it->second.inode;
  temps_.erase(it);
  if (sync_directory && PoweredLocked()) SyncDirectoryLocked(stem);
  return absl::OkStatus();
}

void SimDevice::AbortTemp(FileHandle temp) {
  absl::MutexLock lock(&mu_);
  temps_.erase(temp);
}

absl::Status SimDevice::RemoveChunk(const std::string& stem) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ControlFaultLocked(SimOp::kRemove, stem); !s.ok()) return s;
  if (files_.erase(stem) == 0) return absl::NotFoundError(absl::StrCat("no file ", stem));
  inode_of_.erase(stem);  // on the medium until its directory is synced
  return absl::OkStatus();
}

std::vector<uint8_t>* SimDevice::FileOfLocked(FileHandle h) {
  if (auto t = temps_.find(h); t != temps_.end()) return &t->second.bytes;
  auto o = open_.find(h);
  if (o == open_.end()) return nullptr;
  auto f = files_.find(o->second);
  return f == files_.end() ? nullptr : &f->second;  // removed after open: reads fail
}

absl::StatusOr<int> SimDevice::RegisterRegion(void* base, size_t size) {
  absl::MutexLock lock(&mu_);
  size_t index = 0;
  while (index < regions_.size() && regions_[index].generation != 0) ++index;
  if (index == regions_.size()) regions_.emplace_back();
  regions_[index] = {static_cast<uint8_t*>(base), size, next_generation_++};
  return static_cast<int>(index);
}

void SimDevice::Abandon(IoRequest* request) {
  absl::MutexLock lock(&mu_);
  request->abandoned = true;
}

void SimDevice::UnregisterRegion(int region) {
  absl::MutexLock lock(&mu_);
  if (region >= 0 && static_cast<size_t>(region) < regions_.size()) regions_[region] = {};
}

uint64_t SimDevice::fixed_ops() const {
  absl::MutexLock lock(&mu_);
  return fixed_ops_;
}

bool SimDevice::Queue(IoRequest* request) {
  absl::MutexLock lock(&mu_);
  request->transferred = 0;
  request->region = -1;
  Pending p{request, {}, SimFault::None(), 0};
  const auto* b = static_cast<const uint8_t*>(request->buffer);
  for (size_t i = 0; i < regions_.size() && request->kind != IoKind::kSync; ++i) {
    const Region& r = regions_[i];
    if (r.generation != 0 && b >= r.base && b + request->length <= r.base + r.size) {
      request->region = static_cast<int16_t>(i);
      ++fixed_ops_;
      break;
    }
  }
  if (auto t = temps_.find(request->file); t != temps_.end()) p.stem = t->second.stem;
  if (auto o = open_.find(request->file); o != open_.end()) p.stem = o->second;
  p.fault = FaultLocked(SimOpOf(request->kind), p.stem, request->offset, request->length);
  queued_.push_back(std::move(p));
  return true;
}

void SimDevice::ScheduleLocked(Pending p, int64_t now) {
  const uint32_t bytes = p.request->length - p.request->transferred;
  const double seconds = bandwidth_bps_ > 0 ? bytes / bandwidth_bps_ : 0.0;
  const int64_t start = std::max(now, free_at_ns_);
  free_at_ns_ = start + static_cast<int64_t>(seconds * 1e9);
  p.done_ns = free_at_ns_ + latency_ns_ + p.fault.delay_ns;
  records_.push_back({p.request->kind, p.stem, p.request->offset + p.request->transferred, bytes, now, p.done_ns});
  if (p.fault.kind == SimFault::Kind::kHang) {
    hung_.push_back(std::move(p));
  } else {
    pending_.push_back(std::move(p));
  }
}

void SimDevice::Submit() {
  const int64_t now = clock_->NowNs();
  absl::MutexLock lock(&mu_);
  for (Pending& p : queued_) ScheduleLocked(std::move(p), now);
  queued_.clear();
}

int64_t SimDevice::NextEventNs() {
  absl::MutexLock lock(&mu_);
  int64_t best = -1;
  for (const Pending& p : pending_) {
    if (best < 0 || p.done_ns < best) best = p.done_ns;
  }
  return best;
}

int SimDevice::TransferLocked(Pending& p) {
  IoRequest& r = *p.request;
  const SimFault::Kind kind = p.fault.kind;
  p.fault.kind = SimFault::Kind::kNone;  // a resubmitted remainder runs clean
  if (kind == SimFault::Kind::kError) return -p.fault.error;
  if (kind == SimFault::Kind::kAgain) return -EAGAIN;
  std::vector<uint8_t>* file = FileOfLocked(r.file);
  if (file == nullptr) return -EIO;
  const uint64_t offset = r.offset + r.transferred;
  uint32_t length = r.length - r.transferred;
  if (r.kind == IoKind::kSync) {
    if (power_ != nullptr && PoweredLocked()) {
      const uint64_t inode = InodeOfHandleLocked(r.file);
      synced_[inode] = *file;
      if (last_write_.inode == inode) last_write_.valid = false;
    }
    return 0;
  }
  if (offset % kFileAlignment != 0 || length % kFileAlignment != 0) return -EINVAL;  // as O_DIRECT
  if (kind == SimFault::Kind::kShort && length > kFileAlignment) {
    length = static_cast<uint32_t>(AlignUp(length / 2, kFileAlignment));
  }
  auto* buffer = static_cast<uint8_t*>(r.buffer) + r.transferred;
  if (r.kind == IoKind::kRead) {
    if (offset >= file->size()) return 0;  // end of file
    length = static_cast<uint32_t>(std::min<uint64_t>(length, file->size() - offset));
    if (r.abandoned) return static_cast<int>(length);  // its bytes reach nobody
    std::memcpy(buffer, file->data() + offset, length);
    if (kind == SimFault::Kind::kCorrupt) buffer[0] ^= 0xff;
  } else {
    if (file->size() < offset + length) file->resize(offset + length);
    std::memcpy(file->data() + offset, buffer, length);
    if (power_ != nullptr && PoweredLocked()) {
      last_write_ = {InodeOfHandleLocked(r.file), offset, std::vector<uint8_t>(buffer, buffer + length), true};
    }
  }
  return static_cast<int>(length);
}

void SimDevice::Reap(std::vector<IoCompletion>* out) {
  const int64_t now = clock_->NowNs();
  absl::MutexLock lock(&mu_);
  PoweredLocked();  // a cut since the last operation comes before these completions
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const Pending& a, const Pending& b) { return a.done_ns < b.done_ns; });
  std::vector<Pending> due;
  size_t n = 0;
  while (n < pending_.size() && pending_[n].done_ns <= now) ++n;
  due.assign(std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.begin() + n));
  pending_.erase(pending_.begin(), pending_.begin() + n);
  for (Pending& p : due) {
    IoCompletion done;
    if (AdvanceTransfer(p.request, TransferLocked(p), &done) == TransferStep::kResubmit) {
      ++resubmits_;
      p.fault.delay_ns = 0;
      ScheduleLocked(std::move(p), now);
      continue;
    }
    out->push_back(done);
  }
}

void SimDevice::SetPower(std::shared_ptr<SimPower> power) {
  absl::MutexLock lock(&mu_);
  power_ = std::move(power);
}

bool SimDevice::PoweredLocked() {
  if (power_ == nullptr || !power_->off()) return true;
  if (!names_at_cut_) {
    names_at_cut_.emplace();
    for (const auto& [stem, bytes] : files_) (*names_at_cut_)[stem] = {InodeLocked(stem), bytes};
  }
  return false;
}

uint64_t SimDevice::InodeLocked(const std::string& stem) {
  auto [it, added] = inode_of_.try_emplace(stem, next_inode_);
  if (added) ++next_inode_;  // a file put in place through files()
  return it->second;
}

uint64_t SimDevice::InodeOfHandleLocked(FileHandle h) {
  if (auto t = temps_.find(h); t != temps_.end()) return t->second.inode;
  if (auto o = open_.find(h); o != open_.end()) return InodeLocked(o->second);
  return 0;
}

void SimDevice::SyncDirectoryLocked(const std::string& stem) {
  if (power_ == nullptr) return;
  const std::string dir = stem.substr(0, 2);
  const auto in_dir = [&dir](const std::string& name) { return name.compare(0, dir.size(), dir) == 0; };
  std::erase_if(durable_names_, [&](const auto& entry) { return in_dir(entry.first); });
  for (auto it = files_.lower_bound(dir); it != files_.end() && in_dir(it->first); ++it) {
    durable_names_[it->first] = InodeLocked(it->first);
  }
}

void SimDevice::SyncAll() {
  absl::MutexLock lock(&mu_);
  if (power_ == nullptr || !PoweredLocked()) return;
  for (const auto& [handle, temp] : temps_) synced_[temp.inode] = temp.bytes;
  durable_names_.clear();
  for (const auto& [stem, bytes] : files_) {
    const uint64_t inode = InodeLocked(stem);
    synced_[inode] = bytes;
    durable_names_[stem] = inode;
  }
  last_write_.valid = false;
}

std::map<std::string, std::vector<uint8_t>> SimDevice::Medium(const SimPowerCut& cut) {
  absl::MutexLock lock(&mu_);
  PoweredLocked();
  std::map<std::string, NameAtCut> names;
  if (!cut.names_ahead_of_data) {
    for (const auto& [stem, inode] : durable_names_) names[stem] = {inode, {}};
  } else if (names_at_cut_) {
    names = *names_at_cut_;
  } else {
    for (const auto& [stem, bytes] : files_) names[stem] = {InodeLocked(stem), bytes};
  }
  std::mt19937_64 rng(cut.seed);
  std::map<std::string, std::vector<uint8_t>> medium;
  for (const auto& [stem, name] : names) {
    std::vector<uint8_t>& bytes = medium[stem];
    if (auto s = synced_.find(name.inode); s != synced_.end()) bytes = s->second;
    if (cut.names_ahead_of_data) {  // its size as at the cut; writeback reached each block or not
      bytes.resize(name.bytes.size());
      for (size_t at = 0; at < bytes.size(); at += kFileAlignment) {
        const size_t n = std::min<size_t>(kFileAlignment, bytes.size() - at);
        if (rng() % 2 == 0) std::memcpy(bytes.data() + at, name.bytes.data() + at, n);
      }
    }
    if (!cut.tear_last_write || !last_write_.valid || last_write_.inode != name.inode) continue;
    // The torn write: each piece up to a block boundary landed or not.
    const uint64_t end = last_write_.offset + last_write_.bytes.size();
    for (uint64_t at = last_write_.offset; at < end;) {
      const uint64_t piece_end = std::min<uint64_t>(AlignUp(at + 1, kFileAlignment), end);
      if (rng() % 2 == 0) {
        if (bytes.size() < piece_end) bytes.resize(piece_end);
        std::memcpy(bytes.data() + at, last_write_.bytes.data() + (at - last_write_.offset), piece_end - at);
      }
      at = piece_end;
    }
  }
  return medium;
}

}  // namespace kvstream
