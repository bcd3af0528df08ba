#include "kvstream/store.h"

#include "engine.h"
#include "event_reactor.h"
#include "file_device.h"
#include "spdlog/spdlog.h"

namespace kvstream {

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const StoreConfig& raw) {
  absl::StatusOr<StoreConfig> config = ValidateConfig(raw);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<EventReactor>> reactor = EventReactor::Create();
  if (!reactor.ok()) return reactor.status();
  std::vector<std::unique_ptr<TierDevice>> devices;
  for (const TierConfig& t : config->tiers) {
    FileDeviceOptions options;
    options.path = t.path;
    options.read_depth = t.queue_depth;
    options.write_depth = t.write_queue_depth + 1;  // + the fsync of a finished replica
    options.allow_buffered_fallback = t.allow_buffered_fallback;
    options.event_fd = (*reactor)->event_fd();
    absl::StatusOr<std::unique_ptr<FileDevice>> device = FileDevice::Open(options);
    if (!device.ok()) {
      return absl::Status(device.status().code(),
                          absl::StrCat("tier '", t.name, "': ", device.status().message()));
    }
    if (!(*device)->properties().direct_io) {
      spdlog::warn("tier {} ({}): buffered I/O: {}", t.name, t.path, (*device)->buffered_reason());
    }
    devices.push_back(*std::move(device));
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(*std::move(config), std::move(devices), std::shared_ptr<Reactor>(std::move(*reactor)));
  if (!engine.ok()) return engine.status();
  return std::make_unique<Store>(*std::move(engine));
}

Store::Store(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
Store::~Store() { engine_->Shutdown(); }

void Store::RetrieveAsync(std::vector<ChunkRead> batch, ChunkCallback on_chunk,
                          std::function<void(StepRecord)> on_done) {
  engine_->RetrieveAsync(std::move(batch), std::move(on_chunk), std::move(on_done));
}
StepRecord Store::Retrieve(std::vector<ChunkRead> batch, std::vector<ChunkResult>* results,
                           ChunkCallback on_chunk) {
  return engine_->Retrieve(std::move(batch), results, std::move(on_chunk));
}
absl::Status Store::Persist(std::string_view key, const void* data, size_t size, PersistCallback cb) {
  return engine_->Persist(key, data, size, std::move(cb), /*block=*/true);
}
absl::Status Store::TryPersist(std::string_view key, const void* data, size_t size, PersistCallback cb) {
  return engine_->Persist(key, data, size, std::move(cb), /*block=*/false);
}
void Store::Flush() { engine_->Flush(); }
std::vector<LookupResult> Store::Lookup(const std::vector<std::string>& keys) const { return engine_->Lookup(keys); }
size_t Store::PrefixHits(const std::vector<std::string>& keys) const { return engine_->PrefixHits(keys); }
absl::StatusOr<EvictResult> Store::Evict(const EvictRequest& request) { return engine_->Evict(request); }
absl::Status Store::RegisterMemory(void* base, size_t size) { return engine_->RegisterMemory(base, size); }
void Store::UnregisterMemory(void* base) { engine_->UnregisterMemory(base); }
void Store::SetPolicies(const Policies& policies) { engine_->SetPolicies(policies); }
Policies Store::policies() const { return engine_->policies(); }
StoreStats Store::Stats() const { return engine_->Stats(); }
std::vector<StepRecord> Store::RecentSteps(size_t max) const { return engine_->RecentSteps(max); }
const StoreConfig& Store::config() const { return engine_->config(); }

}  // namespace kvstream
