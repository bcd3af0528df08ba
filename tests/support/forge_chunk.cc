// forge_chunk: writes a chunk file whose fixed header says whatever it is told, with a header
// checksum that matches (recomputed here with xxhash, not by the encoder, so nothing the encoder
// checks stops a lie). For the hostile-input tests: a header can then claim a 2 TiB payload in
// 4 KiB segments, a segment count or header size that does not follow from its sizes, and so on,
// and still pass the checksum every reader checks first.
//
// Usage: forge_chunk (--dir TIER | --out FILE) --key KEY [--payload-size N] [--segment-size N]
//                    [--segment-count N] [--header-size N] [--key-length N] [--version N]
//                    [--flags N] [--file-size N]
// Defaults describe an honest chunk of `payload-size` (default 4096) bytes: the segment count and
// header size follow from the sizes in 64-bit arithmetic, then are truncated to the header's 32
// bits (as a buggy writer would). Only the first min(header size, 1 MiB) bytes are written (at
// least the 4096 a reader reads first), then the file is truncated (sparse) to --file-size if
// given. With --dir the file goes where a tier keeps KEY's chunk (<2 hex>/<stem>.kvc); the path
// written is printed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "format/chunk_format.h"
#include "xxhash.h"

namespace {

// The fixed header, as docs/chunk-format.md lays it out (little-endian, 64 bytes).
struct FixedHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_size;
  uint64_t payload_size;
  uint64_t payload_checksum;
  int64_t created_unix_ns;
  uint32_t segment_size;
  uint32_t segment_count;
  uint32_t key_length;
  uint32_t flags;
  uint64_t header_checksum;  // xxh3-64 of [0, header_size) with this field zeroed
};
static_assert(sizeof(FixedHeader) == 64);

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr, "forge_chunk: %s\nusage: forge_chunk (--dir TIER | --out FILE) --key KEY [--payload-size N] "
               "[--segment-size N] [--segment-count N] [--header-size N] [--key-length N] [--version N] [--flags N] "
               "[--file-size N]\n", why);
  std::exit(2);
}

uint64_t Number(const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 0);
  if (end == s || *end != '\0') Usage("not a number");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, out, key;
  uint64_t payload_size = 4096, segment_size = 4096, version = kvstream::kChunkFormatPlain, flags = 0;
  std::optional<uint64_t> segment_count, header_size, key_length, file_size;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage("an option without its value");
    const char* value = argv[++i];
    if (arg == "--dir") dir = value;
    else if (arg == "--out") out = value;
    else if (arg == "--key") key = value;
    else if (arg == "--payload-size") payload_size = Number(value);
    else if (arg == "--segment-size") segment_size = Number(value);
    else if (arg == "--segment-count") segment_count = Number(value);
    else if (arg == "--header-size") header_size = Number(value);
    else if (arg == "--key-length") key_length = Number(value);
    else if (arg == "--version") version = Number(value);
    else if (arg == "--flags") flags = Number(value);
    else if (arg == "--file-size") file_size = Number(value);
    else Usage("unknown option");
  }
  if (key.empty() || dir.empty() == out.empty()) Usage("needs --key and one of --dir, --out");
  // 64-bit arithmetic, truncated to the header's 32-bit fields: what a writer without checks does.
  const uint64_t count = segment_count.value_or(segment_size == 0 ? 0 : (payload_size + segment_size - 1) / segment_size);
  const uint64_t header = header_size.value_or((64 + key.size() + 8 * count + 4095) / 4096 * 4096);

  FixedHeader h{};
  h.magic = kvstream::kChunkMagic;
  h.version = static_cast<uint32_t>(version);
  h.header_size = static_cast<uint32_t>(header);
  h.payload_size = payload_size;
  h.payload_checksum = 0;
  h.created_unix_ns = 1;
  h.segment_size = static_cast<uint32_t>(segment_size);
  h.segment_count = static_cast<uint32_t>(count);
  h.key_length = static_cast<uint32_t>(key_length.value_or(key.size()));
  h.flags = static_cast<uint32_t>(flags);

  const size_t written = std::max<size_t>(4096, std::min<uint64_t>(h.header_size, 1u << 20));
  std::vector<uint8_t> bytes(written, 0);
  std::memcpy(bytes.data(), &h, sizeof(h));
  std::memcpy(bytes.data() + 64, key.data(), std::min(key.size(), written - 64));
  // Segment checksums, as many as fit: any values (the header checksum is what readers check).
  for (size_t at = 64 + key.size(); at + 8 <= written && at < 64 + key.size() + 8 * count; at += 8) {
    const uint64_t sum = 0x5eed0000 + at;
    std::memcpy(bytes.data() + at, &sum, 8);
  }
  const size_t covered = std::min<size_t>(std::max<uint32_t>(h.header_size, 64), written);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const uint64_t zero = 0;
  XXH3_64bits_update(state, bytes.data(), offsetof(FixedHeader, header_checksum));
  XXH3_64bits_update(state, &zero, sizeof(zero));
  XXH3_64bits_update(state, bytes.data() + 64, covered - 64);
  const uint64_t checksum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  std::memcpy(bytes.data() + offsetof(FixedHeader, header_checksum), &checksum, sizeof(checksum));

  std::string path = out;
  if (!dir.empty()) {
    path = dir + "/" + kvstream::RelativeChunkPath(kvstream::FileStem(key));
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0 || write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()) ||
      (file_size && ftruncate(fd, static_cast<off_t>(*file_size)) != 0) || close(fd) != 0) {
    std::perror(path.c_str());
    return 1;
  }
  std::printf("%s\n", path.c_str());
  return 0;
}
