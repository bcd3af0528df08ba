#include "s3/s3_multipart.h"

#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "s3/s3_xml.h"
#include "s3/sigv4.h"

namespace kvstream {
namespace {

constexpr size_t kMaxXmlAnswer = 1 << 20;

class MultipartPut : public std::enable_shared_from_this<MultipartPut> {
 public:
  MultipartPut(S3Loop* loop, uint64_t id, MultipartPutSpec spec, S3Client::Done done)
      : loop_(loop),
        id_(id),
        spec_(std::move(spec)),
        done_(std::move(done)),
        parts_(static_cast<uint32_t>(spec_.part_sha256.size())),
        etags_(parts_) {}

  void Begin() {
    loop_->AddOperation(id_, [self = shared_from_this()] { self->Cancel(); });
    auto ex = Exchange("POST", {{"uploads", ""}});
    ex->headers = spec_.create_headers;
    ex->sink = S3Exchange::Sink::kString;
    ex->max_body = kMaxXmlAnswer;
    ex->done = [self = shared_from_this()](S3Exchange& e) { self->OnCreated(e); };
    loop_->Start(std::move(ex));
  }

 private:
  enum class Phase : uint8_t { kCreating, kParts, kCompleting, kAborting, kOver };

  std::unique_ptr<S3Exchange> Exchange(const char* method, std::vector<std::pair<std::string, std::string>> query) {
    auto ex = std::make_unique<S3Exchange>();
    ex->method = method;
    ex->path = spec_.path;
    ex->query = std::move(query);
    return ex;
  }

  void OnCreated(S3Exchange& ex) {
    attempts_ += ex.result.attempts;
    absl::StatusOr<std::string> upload_id =
        ex.result.ok() ? ParseUploadId(ex.body_in) : absl::StatusOr<std::string>(absl::UnknownError(""));
    if (cancelled_) {  // the caller was told; what was made is undone
      if (upload_id.ok()) {
        upload_id_ = *upload_id;
        Abort(nullptr);
      }
      return;
    }
    if (!ex.result.ok()) return Finish(Failure(ex.result, "CreateMultipartUpload"));
    if (!upload_id.ok()) {
      S3Result bad = ex.result;
      bad.outcome = S3Outcome::kBadResponse;
      bad.message = std::string(upload_id.status().message());
      return Finish(Failure(bad, "CreateMultipartUpload"));
    }
    upload_id_ = *upload_id;
    phase_ = Phase::kParts;
    Pump();
  }

  void Pump() {
    const uint32_t limit = std::max<uint32_t>(1, loop_->options().multipart_parts_in_flight);
    while (in_flight_ < limit && next_part_ < parts_) {
      const uint32_t index = next_part_++;
      const size_t offset = static_cast<size_t>(index) * spec_.part_size;
      auto ex = Exchange("PUT", {{"partNumber", std::to_string(index + 1)}, {"uploadId", upload_id_}});
      ex->body = spec_.data + offset;
      ex->body_size = std::min(spec_.part_size, spec_.size - offset);
      ex->payload_sha256 = spec_.part_sha256[index];
      ex->done = [self = shared_from_this(), index](S3Exchange& e) { self->OnPart(index, e); };
      live_.insert(loop_->next_seq());
      ++in_flight_;
      loop_->Start(std::move(ex));
    }
  }

  void OnPart(uint32_t index, S3Exchange& ex) {
    live_.erase(ex.seq);
    --in_flight_;
    attempts_ += ex.result.attempts;
    if (phase_ != Phase::kParts) return;  // failed or cancelled already
    if (!ex.result.ok()) return Fail(Failure(ex.result, absl::StrCat("UploadPart ", index + 1)));
    if (ex.result.etag.empty()) {
      S3Result bad = ex.result;
      bad.outcome = S3Outcome::kBadResponse;
      bad.message = "no ETag";
      return Fail(Failure(bad, absl::StrCat("UploadPart ", index + 1)));
    }
    etags_[index] = ex.result.etag;
    if (++parts_done_ < parts_) return Pump();

    phase_ = Phase::kCompleting;
    auto complete = Exchange("POST", {{"uploadId", upload_id_}});
    complete->owned_body = CompleteMultipartBody(etags_);
    complete->body = complete->owned_body.data();
    complete->body_size = complete->owned_body.size();
    complete->payload_sha256 = Sha256Hex(complete->body, complete->body_size);
    complete->headers.emplace_back("content-type", "application/xml");
    if (spec_.if_none_match) complete->headers.emplace_back("if-none-match", "*");
    complete->error_in_ok_body = true;
    complete->sink = S3Exchange::Sink::kString;
    complete->max_body = kMaxXmlAnswer;
    complete->done = [self = shared_from_this()](S3Exchange& e) { self->OnCompleted(e); };
    loop_->Start(std::move(complete));
  }

  void OnCompleted(S3Exchange& ex) {
    attempts_ += ex.result.attempts;
    if (cancelled_) {
      if (!ex.result.ok()) Abort(nullptr);
      return;
    }
    if (!ex.result.ok()) return Fail(Failure(ex.result, "CompleteMultipartUpload"));
    S3Result ok = ex.result;
    absl::StatusOr<std::string> etag = ParseCompleteEtag(ex.body_in);
    if (!etag.ok()) {
      ok.outcome = S3Outcome::kBadResponse;
      ok.message = absl::StrCat("CompleteMultipartUpload: ", etag.status().message());
    } else if (!etag->empty()) {
      ok.etag = *etag;
    }
    ok.bytes = spec_.size;
    phase_ = Phase::kOver;
    Finish(std::move(ok));
  }

  // The parts still in flight are stopped, the upload aborted, then `done`.
  void Fail(S3Result failure) {
    phase_ = Phase::kAborting;
    StopParts();
    Abort([self = shared_from_this(), failure = std::move(failure)](S3Exchange& e) mutable {
      absl::StrAppend(&failure.message,
                      e.result.ok() || e.result.outcome == S3Outcome::kNotFound
                          ? " (the upload was aborted)"
                          : absl::StrCat(" (aborting the upload failed too: ", e.result.message, ")"));
      self->Finish(std::move(failure));
    });
  }

  void Cancel() {
    cancelled_ = true;
    S3Result cancelled;
    cancelled.outcome = S3Outcome::kCancelled;
    cancelled.message = "cancelled";
    Finish(std::move(cancelled));
    if (phase_ == Phase::kParts) {
      phase_ = Phase::kAborting;
      StopParts();
      Abort(nullptr);
    }
    // kCreating and kCompleting: their answer decides (OnCreated, OnCompleted).
  }

  void StopParts() {
    const std::vector<uint64_t> live(live_.begin(), live_.end());
    for (uint64_t seq : live) loop_->Cancel(seq);
  }

  void Abort(absl::AnyInvocable<void(S3Exchange&)> then) {
    auto ex = Exchange("DELETE", {{"uploadId", upload_id_}});
    ex->internal = true;  // goes on while the client stops
    ex->done = [self = shared_from_this(), then = std::move(then)](S3Exchange& e) mutable {
      if (then) then(e);
    };
    loop_->Start(std::move(ex));
  }

  static S3Result Failure(S3Result result, const std::string& step) {
    result.message = step + ": " + result.message;
    return result;
  }

  void Finish(S3Result result) {
    if (finished_) return;
    finished_ = true;
    loop_->RemoveOperation(id_);
    result.attempts = attempts_;
    S3Client::Done done = std::move(done_);
    done(result);
  }

  S3Loop* const loop_;
  const uint64_t id_;
  const MultipartPutSpec spec_;
  S3Client::Done done_;
  const uint32_t parts_;
  Phase phase_ = Phase::kCreating;
  std::string upload_id_;
  std::vector<std::string> etags_;
  absl::flat_hash_set<uint64_t> live_;  // the parts in flight, by exchange
  uint32_t next_part_ = 0, in_flight_ = 0, parts_done_ = 0;
  uint32_t attempts_ = 0;
  bool cancelled_ = false, finished_ = false;
};

}  // namespace

void StartMultipartPut(S3Loop* loop, uint64_t id, MultipartPutSpec spec, S3Client::Done done) {
  std::make_shared<MultipartPut>(loop, id, std::move(spec), std::move(done))->Begin();
}

}  // namespace kvstream
