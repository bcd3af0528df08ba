// Writes valid inputs per fuzzer into DIR/<fuzzer>/ (chunk headers with and without a MAC and of
// more than a page, checkpoints of both versions, the default config, a request), so each run
// starts from the inputs' real shape.
// Usage: make_seeds DIR DEFAULT_CONFIG_YAML
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "format/chunk_format.h"
#include "format/chunk_mac.h"
#include "format/index_checkpoint.h"
#include "kvstream.pb.h"

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& bytes, const std::string& name = "seed") {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// The header of `meta`'s file (EncodeChunkHeader writes the padding after the payload too, so it
// takes the whole image).
std::string Header(const kvstream::ChunkMeta& meta) {
  std::string image(meta.file_size(), '\0');
  kvstream::EncodeChunkHeader(meta, image.data());
  return image.substr(0, meta.header_size());
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// A version 1 checkpoint (no flags, no MACs), as daemons before version 2 wrote them.
std::string CheckpointV1(const std::vector<kvstream::ChunkMeta>& chunks) {
  std::string out = "KVSINDEX";
  Put(&out, uint32_t{1});
  Put(&out, static_cast<uint64_t>(chunks.size()));
  for (const kvstream::ChunkMeta& m : chunks) {
    Put(&out, static_cast<uint32_t>(m.key.size()));
    out += m.key;
    Put(&out, m.payload_size);
    Put(&out, m.payload_checksum);
    Put(&out, m.created_unix_ns);
    Put(&out, m.segment_size);
    Put(&out, m.segment_count());
    for (uint64_t c : m.segment_checksums) Put(&out, c);
  }
  Put(&out, kvstream::Checksum(out.data(), out.size()));
  return out;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const fs::path out = argv[1];
  std::vector<uint8_t> payload(300000, 7);
  const kvstream::ChunkMeta meta = kvstream::DescribeChunk("model@tp0@0123", payload.data(), payload.size(), 65536, 42);
  std::vector<uint8_t> image(meta.file_size());
  kvstream::EncodeChunkFile(meta, payload.data(), image.data());
  Write(out / "fuzz_chunk_header", std::string(image.begin(), image.begin() + meta.header_size()));
  const auto key = *kvstream::ChunkMacKey::FromBytes("0123456789abcdef0123456789abcdef", 32);
  kvstream::ChunkMeta signed_meta = meta;  // format version 2: nonce, tags, MAC
  if (!key->Sign(&signed_meta, payload.data()).ok()) return 1;
  Write(out / "fuzz_chunk_header", Header(signed_meta), "signed");
  kvstream::ChunkMeta v1_mac = meta;  // format version 1 with a MAC, as written before version 2
  v1_mac.mac = key->Compute(v1_mac);
  Write(out / "fuzz_chunk_header", Header(v1_mac), "v1-mac");
  std::vector<uint8_t> many(600 * 4096, 3);  // 600 segments: a header of two pages
  const kvstream::ChunkMeta long_meta = kvstream::DescribeChunk("model@tp1@89ab", many.data(), many.size(), 4096, 43);
  Write(out / "fuzz_chunk_header", Header(long_meta), "two-pages");
  Write(out / "fuzz_checkpoint", kvstream::EncodeCheckpoint({meta, meta}));
  Write(out / "fuzz_checkpoint", kvstream::EncodeCheckpoint({signed_meta, meta, v1_mac}), "signed");
  Write(out / "fuzz_checkpoint", CheckpointV1({meta}), "version1");
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
  Write(out / "fuzz_http_request", "GET /metrics HTTP/1.1\r\nHost: localhost:9400\r\nAccept: */*\r\n\r\n");
  return 0;
}
