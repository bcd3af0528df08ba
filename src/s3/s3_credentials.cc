// LoadS3Credentials (s3/s3_client.h): an AWS shared-credentials file, opened without following a
// link and without blocking on a FIFO, taken only when it is a private regular file of bounded
// size; or the environment.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "s3/s3_client.h"

namespace kvstream {
namespace {

constexpr off_t kMaxCredentialsFile = 64 << 10;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

absl::StatusOr<std::string> ReadPrivateFile(const std::string& file) {
  const int fd = open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP) return absl::PermissionDeniedError(absl::StrCat("S3 credentials file ", file, " is a symlink"));
    return absl::Status(e == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kPermissionDenied,
                        absl::StrCat("S3 credentials file ", file, ": ", std::strerror(e)));
  }
  struct stat st {};
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = absl::InternalError(absl::StrCat("S3 credentials file ", file, ": fstat: ", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::PermissionDeniedError(absl::StrCat("S3 credentials file ", file, " is not a regular file"));
  } else if ((st.st_mode & 077) != 0) {
    status = absl::PermissionDeniedError(absl::StrFormat(
        "S3 credentials file %s has mode %04o: others than its owner may read it (chmod 600)", file,
        st.st_mode & 07777));
  } else if (st.st_size > kMaxCredentialsFile) {
    status = absl::InvalidArgumentError(
        absl::StrCat("S3 credentials file ", file, " is larger than ", kMaxCredentialsFile, " bytes"));
  }
  std::string text;
  if (status.ok()) {
    text.resize(static_cast<size_t>(kMaxCredentialsFile) + 1);
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = absl::InternalError(absl::StrCat("S3 credentials file ", file, ": read: ", std::strerror(errno)));
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (status.ok() && got > static_cast<size_t>(kMaxCredentialsFile)) {
      status = absl::InvalidArgumentError(absl::StrCat("S3 credentials file ", file, " grew past ",
                                                       kMaxCredentialsFile, " bytes while read"));
    }
    text.resize(got);
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

}  // namespace

absl::StatusOr<S3Credentials> LoadS3Credentials(const std::string& file, const std::string& profile) {
  S3Credentials c;
  if (file.empty()) {
    const char* id = std::getenv("AWS_ACCESS_KEY_ID");
    const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
    const char* token = std::getenv("AWS_SESSION_TOKEN");
    if (id == nullptr || *id == '\0' || secret == nullptr || *secret == '\0') {
      return absl::NotFoundError(
          "S3 credentials: no credentials file given and AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY unset");
    }
    c.access_key_id = id;
    c.secret_access_key = secret;
    if (token != nullptr) c.session_token = token;
    return c;
  }
  absl::StatusOr<std::string> text = ReadPrivateFile(file);
  if (!text.ok()) return text.status();

  bool in_profile = false, found = false;
  std::string_view rest = *text;
  for (int line_no = 1; !rest.empty(); ++line_no) {
    const size_t end = rest.find('\n');
    std::string_view line = Trim(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return absl::InvalidArgumentError(absl::StrCat("S3 credentials file ", file, " line ", line_no,
                                                       ": a section header without its ']'"));
      }
      in_profile = Trim(line.substr(1, line.size() - 2)) == profile;
      found |= in_profile;
      continue;
    }
    if (!in_profile) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("S3 credentials file ", file, " line ", line_no, ": neither a section nor name = value"));
    }
    const std::string_view name = Trim(line.substr(0, eq));
    const std::string_view value = Trim(line.substr(eq + 1));
    if (name == "aws_access_key_id") c.access_key_id = value;
    if (name == "aws_secret_access_key") c.secret_access_key = value;
    if (name == "aws_session_token") c.session_token = value;
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("S3 credentials file ", file, " has no profile [", profile, "]"));
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("S3 credentials file ", file, " profile [", profile,
                                                   "] lacks aws_access_key_id or aws_secret_access_key"));
  }
  return c;
}

}  // namespace kvstream
