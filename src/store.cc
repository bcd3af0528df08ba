#include "kvstream/store.h"

#include <cstdlib>
#include <future>

#include "absl/strings/str_cat.h"
#include "engine.h"
#include "format/chunk_mac.h"
#include "io/cluster_key_file.h"
#include "io/event_reactor.h"
#include "io/file_device.h"
#include "io/s3_device.h"
#include "s3/s3_client.h"
#include "spdlog/spdlog.h"

namespace kvstream {

namespace {

// An s3 tier's device, from its configuration and the options a file tier would have.
absl::StatusOr<std::unique_ptr<S3Device>> OpenS3Tier(const TierConfig& t, const StoreConfig& config,
                                                     const FileDeviceOptions& like) {
  absl::StatusOr<S3Credentials> credentials = LoadS3Credentials(t.s3.credentials_file, t.s3.credentials_profile);
  if (!credentials.ok()) return credentials.status();
  S3DeviceOptions options;
  options.client.endpoint = t.s3.endpoint;
  options.client.bucket = t.s3.bucket;
  options.client.region = t.s3.region;
  options.client.virtual_hosted = t.s3.virtual_hosted;
  options.client.credentials = *std::move(credentials);
  options.client.verify_tls = t.s3.verify_tls;
  options.client.ca_file = t.s3.ca_file;
  options.client.request_timeout_seconds = t.s3.request_timeout_seconds;
  options.prefix = t.s3.prefix;
  options.path = t.path;
  options.read_depth = like.read_depth;
  options.write_depth = like.write_depth;
  options.event_fd = like.event_fd;
  options.mac_key = like.mac_key;
  options.require_mac = like.require_mac;
  if (t.shared) options.node = config.node;
  return S3Device::Open(std::move(options));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const StoreConfig& raw) {
  absl::StatusOr<StoreConfig> config = ValidateConfig(raw);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<EventReactor>> reactor = EventReactor::Create();
  if (!reactor.ok()) return reactor.status();
  std::shared_ptr<const ChunkMacKey> mac_key;
  if (!config->shared_key_file.empty()) {
    absl::StatusOr<std::shared_ptr<const ChunkMacKey>> key = LoadClusterKeyFile(config->shared_key_file);
    if (!key.ok()) return key.status();
    mac_key = *std::move(key);
  }
  // `auto` is io_uring where it can be set up, else threads; KVSTREAM_IO_ENGINE=threads (or
  // io_uring) decides it instead, so the test suite runs on each engine in turn.
  IoEngine io_engine = config->io_engine;
  if (const char* env = std::getenv("KVSTREAM_IO_ENGINE"); env != nullptr && *env != '\0' && io_engine == IoEngine::kAuto) {
    absl::StatusOr<IoEngine> chosen = ParseIoEngine(env);
    if (!chosen.ok()) return absl::InvalidArgumentError(absl::StrCat("KVSTREAM_IO_ENGINE: ", chosen.status().message()));
    io_engine = *chosen;
  }
  const bool copy_threads = CopyThreadsPay();
  std::vector<FileDeviceOptions> tier_options;
  for (const TierConfig& t : config->tiers) {
    FileDeviceOptions& options = tier_options.emplace_back();
    options.path = t.path;
    options.read_depth = t.queue_depth_max;  // the ceiling (queue_depth auto grows up to it)
    options.write_depth = t.write_queue_depth + 1;  // + the fsync of a finished replica
    options.allow_buffered_fallback = t.allow_buffered_fallback;
    options.event_fd = (*reactor)->event_fd();
    options.owner = {t.owner_uid, t.owner_gid};
    options.mac_key = mac_key;
    options.io_engine = io_engine;
    options.copy_threads = copy_threads;
    options.require_mac = t.shared && mac_key != nullptr;  // anyone may write a shared tier
    if (t.shared) {
      options.node = config->node;
      options.revalidate_seconds = t.miss_ttl_seconds;
    }
  }
  uint32_t io_workers = 0;  // one per request the loop can have in flight on any device
  for (size_t i = 0; i < tier_options.size(); ++i) {
    if (config->tiers[i].type == TierType::kDirectory) io_workers += tier_options[i].read_depth + tier_options[i].write_depth;
  }
  std::vector<std::unique_ptr<TierDevice>> devices;
  for (size_t i = 0; i < tier_options.size(); ++i) {
    const TierConfig& t = config->tiers[i];
    if (t.type == TierType::kS3) {
      absl::StatusOr<std::unique_ptr<S3Device>> device = OpenS3Tier(t, *config, tier_options[i]);
      if (!device.ok()) {
        return absl::Status(device.status().code(), absl::StrCat("tier '", t.name, "': ", device.status().message()));
      }
      spdlog::info("tier {} ({} at {}): objects", t.name, t.path, t.s3.endpoint);
      devices.push_back(*std::move(device));
      continue;
    }
    tier_options[i].io_workers = io_workers;
    absl::StatusOr<std::unique_ptr<FileDevice>> device = FileDevice::Open(tier_options[i]);
    if (!device.ok()) {
      return absl::Status(device.status().code(), absl::StrCat("tier '", t.name, "': ", device.status().message()));
    }
    if (!(*device)->properties().direct_io) {
      spdlog::warn("tier {} ({}): buffered I/O: {}", t.name, t.path, (*device)->buffered_reason());
    }
    spdlog::info("tier {} ({}): I/O engine {}", t.name, t.path, (*device)->properties().io_engine);
    devices.push_back(*std::move(device));
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(*std::move(config), std::move(devices), std::shared_ptr<Reactor>(std::move(*reactor)), mac_key);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<Store>(*std::move(engine));
}

uint64_t Store::DescriptorsToGrow(const StoreConfig& config) {
  uint64_t descriptors = 0;
  for (const TierConfig& t : config.tiers) {
    // Cached read handles, those dropped while reads of them are in flight, one file per write
    // in flight and its fsync.
    descriptors += FileDeviceOptions{}.max_cached_files + t.queue_depth_max + t.write_queue_depth + 1;
  }
  return descriptors;
}

StepRecord Store::Retrieve(std::vector<ChunkRead> step, std::vector<ChunkResult>* results, ChunkCallback on_chunk) {
  if (results) results->assign(step.size(), ChunkResult{});
  std::promise<StepRecord> done;
  std::future<StepRecord> record = done.get_future();
  RetrieveAsync(
      std::move(step),
      [results, on_chunk](const ChunkResult& r) {
        if (results) (*results)[r.index] = r;
        if (on_chunk) on_chunk(r);
      },
      [&done](StepRecord r) { done.set_value(std::move(r)); });
  return record.get();
}

}  // namespace kvstream
