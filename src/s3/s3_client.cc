// S3Client: requests made into S3Exchanges for the loop (s3/s3_loop.h), the multipart Put
// (s3/s3_multipart.h), and the synchronous calls that wait for the loop.
#include "s3/s3_client.h"

#include <atomic>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "s3/s3_loop.h"
#include "s3/s3_multipart.h"
#include "s3/s3_xml.h"
#include "s3/sigv4.h"

namespace kvstream {
namespace {

constexpr size_t kMaxListPage = 16 << 20;  // 1000 keys of 1 KiB and their XML fit well inside
constexpr size_t kMaxMetadataBytes = 2048;  // S3's limit on user metadata
constexpr uint64_t kMinPartSize = 5ull << 20;
constexpr uint64_t kMaxParts = 10000;

S3Result Failed(S3Outcome outcome, std::string message) {
  S3Result r;
  r.outcome = outcome;
  r.message = std::move(message);
  return r;
}

std::string CheckKey(const std::string& key) {
  if (key.empty()) return "an empty key";
  if (key.size() > kS3MaxKeyBytes) return absl::StrCat("a key of ", key.size(), " bytes (S3 takes ", kS3MaxKeyBytes, ")");
  if (key.find('\0') != std::string::npos) return "a key with a NUL byte";
  return "";
}

// x-amz-meta-<name>: value headers; "" or why they cannot be sent.
std::string MetadataHeaders(const S3PutOptions& put, std::vector<std::pair<std::string, std::string>>* headers) {
  size_t bytes = 0;
  for (const auto& [name, value] : put.metadata) {
    const bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    });
    const bool value_ok = std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (!name_ok || !value_ok) {
      return "metadata '" + name + "': names of letters, digits, '-' and '_', values of printable ASCII";
    }
    bytes += name.size() + value.size();
    headers->emplace_back("x-amz-meta-" + absl::AsciiStrToLower(name), value);
  }
  if (bytes > kMaxMetadataBytes) return absl::StrCat(bytes, " bytes of metadata (S3 takes ", kMaxMetadataBytes, ")");
  return "";
}

}  // namespace

const char* ToString(S3Outcome outcome) {
  switch (outcome) {
    case S3Outcome::kOk: return "ok";
    case S3Outcome::kNotFound: return "not found";
    case S3Outcome::kPreconditionFailed: return "precondition failed";
    case S3Outcome::kDenied: return "denied";
    case S3Outcome::kThrottled: return "throttled";
    case S3Outcome::kServerError: return "server error";
    case S3Outcome::kUnreachable: return "unreachable";
    case S3Outcome::kTimedOut: return "timed out";
    case S3Outcome::kBadResponse: return "bad response";
    case S3Outcome::kCancelled: return "cancelled";
    case S3Outcome::kFailed: return "failed";
  }
  return "?";
}

absl::Status ToStatus(const S3Result& result, const std::string& what) {
  if (result.ok()) return absl::OkStatus();
  static constexpr absl::StatusCode kCodes[] = {
      absl::StatusCode::kOk,               absl::StatusCode::kNotFound,    absl::StatusCode::kFailedPrecondition,
      absl::StatusCode::kPermissionDenied, absl::StatusCode::kUnavailable, absl::StatusCode::kUnavailable,
      absl::StatusCode::kUnavailable,      absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kDataLoss,
      absl::StatusCode::kCancelled,        absl::StatusCode::kUnknown};
  const auto index = static_cast<size_t>(result.outcome);
  const absl::StatusCode code = index < std::size(kCodes) ? kCodes[index] : absl::StatusCode::kUnknown;
  return absl::Status(code, absl::StrCat(what, ": ", ToString(result.outcome), ": ", result.message, " (",
                                         result.attempts, result.attempts == 1 ? " attempt)" : " attempts)"));
}

struct S3Client::Impl {
  std::unique_ptr<S3Loop> loop;
  std::atomic<uint64_t> next_id{1};

  const S3ClientOptions& options() const { return loop->options(); }

  std::string ObjectPath(const std::string& key) const {
    return options().virtual_hosted ? "/" + key : "/" + options().bucket + "/" + key;
  }
  std::string BucketPath() const { return options().virtual_hosted ? "/" : "/" + options().bucket; }

  // `done` with `result`, from the loop (never from inside the call that failed).
  void FailLater(Done done, S3Result result) {
    loop->Post([done = std::move(done), result = std::move(result)]() mutable { done(result); });
  }

  // One exchange as operation `id`: Cancel(id) ends it.
  void StartOne(uint64_t id, std::unique_ptr<S3Exchange> ex, Done done) {
    loop->Post([loop = loop.get(), id, ex = std::move(ex), done = std::move(done)]() mutable {
      const uint64_t seq = loop->next_seq();
      ex->done = [loop, id, done = std::move(done)](S3Exchange& e) mutable {
        loop->RemoveOperation(id);
        done(e.result);
      };
      loop->AddOperation(id, [loop, seq] { loop->Cancel(seq); });
      loop->Start(std::move(ex));
    });
  }

  struct Answer {
    S3Result result;
    std::string body;
    std::string error_code;  // S3's <Code>, if it sent one
    bool too_large = false;
  };
  // Runs `ex` and waits for it: never on the loop, which would wait for itself.
  absl::StatusOr<Answer> RunSync(std::unique_ptr<S3Exchange> ex) {
    if (loop->OnLoopThread()) {
      return absl::FailedPreconditionError("a synchronous S3Client call on the client's own thread (from a done)");
    }
    auto answer = std::make_shared<Answer>();
    auto over = std::make_shared<absl::Notification>();
    ex->done = [answer, over](S3Exchange& e) {
      answer->result = std::move(e.result);
      answer->body = std::move(e.body_in);
      answer->error_code = std::move(e.error_code);
      answer->too_large = e.too_large;
      over->Notify();
    };
    loop->Post([loop = loop.get(), ex = std::move(ex)]() mutable { loop->Start(std::move(ex)); });
    over->WaitForNotification();
    return std::move(*answer);
  }

  std::unique_ptr<S3Exchange> Exchange(const char* method, std::string path) {
    auto ex = std::make_unique<S3Exchange>();
    ex->method = method;
    ex->path = std::move(path);
    return ex;
  }
};

absl::StatusOr<std::unique_ptr<S3Client>> S3Client::Create(S3ClientOptions options) {
  if (options.multipart_part_size < kMinPartSize) {
    return absl::InvalidArgumentError(absl::StrCat("S3: multipart_part_size ", options.multipart_part_size,
                                                   " is below S3's minimum of 5 MiB"));
  }
  if (options.list_page_size == 0 || options.list_page_size > 1000) {
    return absl::InvalidArgumentError("S3: list_page_size must be 1 to 1000");
  }
  absl::StatusOr<std::unique_ptr<S3Loop>> loop = S3Loop::Create(options);
  if (!loop.ok()) return loop.status();
  auto impl = std::make_unique<Impl>();
  impl->loop = std::move(*loop);
  return std::unique_ptr<S3Client>(new S3Client(std::move(impl)));
}

S3Client::S3Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
S3Client::~S3Client() = default;  // the loop's destructor cancels, drains and joins

const S3ClientOptions& S3Client::options() const { return impl_->options(); }

S3Client::RequestId S3Client::Get(const std::string& key, uint64_t offset, uint32_t length, void* dest, Done done) {
  const RequestId id = impl_->next_id++;
  std::string bad = CheckKey(key);
  if (bad.empty() && length == 0) bad = "a Get of 0 bytes";
  if (bad.empty() && offset > std::numeric_limits<uint64_t>::max() - length) bad = "a range past 2^64";
  if (!bad.empty()) {
    impl_->FailLater(std::move(done), Failed(S3Outcome::kFailed, "GET " + key + ": " + bad));
    return id;
  }
  auto ex = impl_->Exchange("GET", impl_->ObjectPath(key));
  ex->headers.emplace_back("range", absl::StrCat("bytes=", offset, "-", offset + length - 1));
  ex->sink = S3Exchange::Sink::kRange;
  ex->dest = static_cast<char*>(dest);
  ex->offset = offset;
  ex->length = length;
  impl_->StartOne(id, std::move(ex), std::move(done));
  return id;
}

S3Client::RequestId S3Client::Put(const std::string& key, const void* data, size_t size, S3PutOptions put,
                                  Done done) {
  const RequestId id = impl_->next_id++;
  const S3ClientOptions& o = impl_->options();
  std::vector<std::pair<std::string, std::string>> metadata;
  std::string bad = CheckKey(key);
  if (bad.empty()) bad = MetadataHeaders(put, &metadata);
  if (!bad.empty()) {
    impl_->FailLater(std::move(done), Failed(S3Outcome::kFailed, "PUT " + key + ": " + bad));
    return id;
  }
  const char* bytes = static_cast<const char*>(data);
  if (size > o.multipart_threshold) {
    MultipartPutSpec spec;
    spec.path = impl_->ObjectPath(key);
    spec.data = bytes;
    spec.size = size;
    // At most 10000 parts: larger parts, in whole MiB, when the configured size would need more.
    const uint64_t least = (size + kMaxParts - 1) / kMaxParts;
    spec.part_size = std::max<uint64_t>(o.multipart_part_size, (least + (1 << 20) - 1) >> 20 << 20);
    for (size_t offset = 0; offset < size; offset += spec.part_size) {
      const size_t part = std::min(spec.part_size, size - offset);
      spec.part_sha256.push_back(o.sign_payload ? Sha256Hex(bytes + offset, part) : kUnsignedPayload);
    }
    spec.create_headers = std::move(metadata);
    spec.if_none_match = put.if_none_match;
    impl_->loop->Post([loop = impl_->loop.get(), id, spec = std::move(spec), done = std::move(done)]() mutable {
      StartMultipartPut(loop, id, std::move(spec), std::move(done));
    });
    return id;
  }
  auto ex = impl_->Exchange("PUT", impl_->ObjectPath(key));
  ex->body = bytes;
  ex->body_size = size;
  ex->payload_sha256 = o.sign_payload ? Sha256Hex(bytes, size) : kUnsignedPayload;
  ex->headers = std::move(metadata);
  if (put.if_none_match) ex->headers.emplace_back("if-none-match", "*");
  impl_->StartOne(id, std::move(ex), [done = std::move(done), size](const S3Result& r) mutable {
    S3Result result = r;
    if (result.ok()) result.bytes = size;
    done(result);
  });
  return id;
}

S3Client::RequestId S3Client::Delete(const std::string& key, Done done) {
  const RequestId id = impl_->next_id++;
  if (std::string bad = CheckKey(key); !bad.empty()) {
    impl_->FailLater(std::move(done), Failed(S3Outcome::kFailed, "DELETE " + key + ": " + bad));
    return id;
  }
  impl_->StartOne(id, impl_->Exchange("DELETE", impl_->ObjectPath(key)), [done = std::move(done)](const S3Result& r) mutable {
    S3Result result = r;
    if (result.outcome == S3Outcome::kNotFound) result.outcome = S3Outcome::kOk;  // already gone
    done(result);
  });
  return id;
}

void S3Client::Cancel(RequestId id) {
  impl_->loop->Post([loop = impl_->loop.get(), id] { loop->CancelOperation(id); });
}

absl::StatusOr<S3Result> S3Client::Head(const std::string& key) {
  if (std::string bad = CheckKey(key); !bad.empty()) return absl::InvalidArgumentError("S3 HEAD: " + bad);
  absl::StatusOr<Impl::Answer> a = impl_->RunSync(impl_->Exchange("HEAD", impl_->ObjectPath(key)));
  if (!a.ok()) return a.status();
  if (absl::Status s = ToStatus(a->result, "S3 HEAD " + key); !s.ok()) return s;
  return a->result;
}

absl::StatusOr<std::vector<S3ListedObject>> S3Client::List(const std::string& prefix, size_t max_objects) {
  std::vector<S3ListedObject> objects;
  std::string token;
  const std::string what = "S3 list of prefix '" + prefix + "'";
  for (size_t pages = 0;; ++pages) {
    // Each page but the last brings an object, or S3 is going round in circles.
    if (pages >= 2 && pages - 2 > max_objects) return absl::DataLossError(what + ": the listing does not end");
    auto ex = impl_->Exchange("GET", impl_->BucketPath());
    ex->query = {{"list-type", "2"}, {"max-keys", std::to_string(impl_->options().list_page_size)}};
    if (!prefix.empty()) ex->query.emplace_back("prefix", prefix);
    if (!token.empty()) ex->query.emplace_back("continuation-token", token);
    ex->sink = S3Exchange::Sink::kString;
    ex->max_body = kMaxListPage;
    absl::StatusOr<Impl::Answer> a = impl_->RunSync(std::move(ex));
    if (!a.ok()) return a.status();
    if (absl::Status s = ToStatus(a->result, what); !s.ok()) return s;
    absl::StatusOr<S3ListPage> page = ParseListPage(a->body, max_objects - objects.size());
    if (!page.ok()) return absl::Status(page.status().code(), what + ": " + std::string(page.status().message()));
    for (S3ListedObject& o : page->objects) objects.push_back(std::move(o));
    if (!page->truncated) return objects;
    if (page->next_token == token) return absl::DataLossError(what + ": the same continuation token twice");
    token = std::move(page->next_token);
  }
}

absl::StatusOr<std::string> S3Client::GetObject(const std::string& key, size_t max_bytes) {
  if (std::string bad = CheckKey(key); !bad.empty()) return absl::InvalidArgumentError("S3 GET: " + bad);
  auto ex = impl_->Exchange("GET", impl_->ObjectPath(key));
  ex->sink = S3Exchange::Sink::kString;
  ex->max_body = max_bytes;
  absl::StatusOr<Impl::Answer> a = impl_->RunSync(std::move(ex));
  if (!a.ok()) return a.status();
  if (a->too_large) {
    return absl::ResourceExhaustedError(absl::StrCat("S3 GET ", key, ": larger than ", max_bytes, " bytes"));
  }
  if (absl::Status s = ToStatus(a->result, "S3 GET " + key); !s.ok()) return s;
  return std::move(a->body);
}

absl::Status S3Client::PutObject(const std::string& key, const std::string& data, S3PutOptions put) {
  if (impl_->loop->OnLoopThread()) {
    return absl::FailedPreconditionError("a synchronous S3Client call on the client's own thread (from a done)");
  }
  S3Result result;
  absl::Notification over;
  Put(key, data.data(), data.size(), std::move(put), [&](const S3Result& r) {
    result = r;
    over.Notify();
  });
  over.WaitForNotification();
  return ToStatus(result, "S3 PUT " + key);
}

absl::Status S3Client::DeleteObject(const std::string& key) {
  if (impl_->loop->OnLoopThread()) {
    return absl::FailedPreconditionError("a synchronous S3Client call on the client's own thread (from a done)");
  }
  S3Result result;
  absl::Notification over;
  Delete(key, [&](const S3Result& r) {
    result = r;
    over.Notify();
  });
  over.WaitForNotification();
  return ToStatus(result, "S3 DELETE " + key);
}

absl::Status S3Client::CheckBucket() {
  const S3ClientOptions& o = impl_->options();
  absl::StatusOr<Impl::Answer> a = impl_->RunSync(impl_->Exchange("HEAD", impl_->BucketPath()));
  if (!a.ok()) return a.status();
  const std::string what = "S3 bucket '" + o.bucket + "' at " + o.endpoint + " (region " + o.region + ")";
  switch (a->result.outcome) {
    case S3Outcome::kOk: return absl::OkStatus();
    case S3Outcome::kNotFound: return absl::NotFoundError(what + ": no such bucket");
    case S3Outcome::kDenied:
      return absl::PermissionDeniedError(what + ": access key " + o.credentials.access_key_id +
                                         " may not use it, or the secret key or the clock is wrong (HTTP " +
                                         std::to_string(a->result.http_status) + ")");
    default: return ToStatus(a->result, what);
  }
}

absl::Status S3Client::CreateBucket() {
  const S3ClientOptions& o = impl_->options();
  auto ex = impl_->Exchange("PUT", impl_->BucketPath());
  if (o.region != "us-east-1") {
    ex->owned_body = "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>" +
                     o.region + "</LocationConstraint></CreateBucketConfiguration>";
    ex->body = ex->owned_body.data();
    ex->body_size = ex->owned_body.size();
    ex->payload_sha256 = Sha256Hex(ex->body, ex->body_size);
  }
  absl::StatusOr<Impl::Answer> a = impl_->RunSync(std::move(ex));
  if (!a.ok()) return a.status();
  if (a->result.http_status == 409 && a->error_code == "BucketAlreadyOwnedByYou") {
    return absl::OkStatus();
  }
  return ToStatus(a->result, "S3 create bucket '" + o.bucket + "'");
}

uint64_t S3Client::requests() const { return impl_->loop->requests(); }
uint64_t S3Client::retries() const { return impl_->loop->retries(); }
uint64_t S3Client::in_flight() const { return impl_->loop->in_flight(); }
uint64_t S3Client::answers() const { return impl_->loop->answers(); }
uint64_t S3Client::connects() const { return impl_->loop->connects(); }

}  // namespace kvstream
