// Writes one valid input per fuzzer into DIR/<fuzzer>/ (a chunk file, a checkpoint, the default
// config, a request), so each run starts from the inputs' real shape.
// Usage: make_seeds DIR DEFAULT_CONFIG_YAML
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "chunk_format.h"
#include "index_checkpoint.h"
#include "kvstream.pb.h"

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / "seed", std::ios::binary) << bytes;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const fs::path out = argv[1];
  std::vector<uint8_t> payload(300000, 7);
  const kvstream::ChunkMeta meta = kvstream::DescribeChunk("model@tp0@0123", payload.data(), payload.size(), 65536, 42);
  std::vector<uint8_t> image(meta.file_size());
  kvstream::EncodeChunkFile(meta, payload.data(), image.data());
  Write(out / "fuzz_chunk_header", std::string(image.begin(), image.begin() + meta.header_size()));
  Write(out / "fuzz_checkpoint", kvstream::EncodeCheckpoint({meta, meta}));
  std::ifstream yaml(argv[2]);
  Write(out / "fuzz_daemon_config", std::string(std::istreambuf_iterator<char>(yaml), {}));
  kvstream::v1::RetrieveRequest req;
  req.set_session_id(1);
  req.set_token(std::string(32, 'x'));
  auto* c = req.add_chunks();
  c->set_key("model@tp0@0123");
  c->set_offset(4096);
  c->set_length(65536);
  auto* in_region = req.add_chunks();  // the fuzzer's session has client region 1
  in_region->set_key("model@tp0@4567");
  in_region->set_offset(8192);
  in_region->set_length(4096);
  in_region->set_region(1);
  Write(out / "fuzz_requests", "\x01" + req.SerializeAsString());
  return 0;
}
