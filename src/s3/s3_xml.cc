#include "s3/s3_xml.h"

#include <expat.h>

#include <functional>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvstream {
namespace {

constexpr size_t kMaxDepth = 16;
constexpr size_t kMaxText = 4096;

// Walks a document: `on_end(path, text)` for each element as it closes, with its path from the
// root ("ListBucketResult/Contents/Key") and its text. An error stops the walk.
class XmlWalk {
 public:
  using OnEnd = std::function<absl::Status(const std::string& path, const std::string& text)>;

  static absl::Status Run(std::string_view body, OnEnd on_end) {
    XmlWalk walk(std::move(on_end));
    XML_Parser parser = XML_ParserCreate("UTF-8");
    if (parser == nullptr) return absl::ResourceExhaustedError("expat: out of memory");
    walk.parser_ = parser;
    XML_SetUserData(parser, &walk);
    XML_SetElementHandler(parser, &XmlWalk::Start, &XmlWalk::End);
    XML_SetCharacterDataHandler(parser, &XmlWalk::Text);
    XML_SetStartDoctypeDeclHandler(parser, &XmlWalk::Doctype);
    const bool parsed = body.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
                        XML_Parse(parser, body.data(), static_cast<int>(body.size()), XML_TRUE) == XML_STATUS_OK;
    absl::Status status = walk.status_;
    if (!parsed && status.ok()) {
      status = absl::DataLossError(absl::StrCat("XML: ", XML_ErrorString(XML_GetErrorCode(parser)), " at line ",
                                                XML_GetCurrentLineNumber(parser)));
    }
    XML_ParserFree(parser);
    return status;
  }

 private:
  explicit XmlWalk(OnEnd on_end) : on_end_(std::move(on_end)) {}

  void Fail(absl::Status status) {
    if (status_.ok()) status_ = std::move(status);
    XML_StopParser(parser_, XML_FALSE);
  }

  static void Start(void* data, const XML_Char* name, const XML_Char** /*attributes*/) {
    auto* w = static_cast<XmlWalk*>(data);
    if (!w->status_.ok()) return;
    if (w->depth_ == kMaxDepth) return w->Fail(absl::DataLossError("XML: elements nested too deep"));
    w->lengths_[w->depth_++] = w->path_.size();
    if (!w->path_.empty()) w->path_.push_back('/');
    w->path_ += name;
    w->text_.clear();
  }

  static void End(void* data, const XML_Char* /*name*/) {
    auto* w = static_cast<XmlWalk*>(data);
    if (!w->status_.ok()) return;
    if (absl::Status s = w->on_end_(w->path_, w->text_); !s.ok()) return w->Fail(std::move(s));
    w->path_.resize(w->lengths_[--w->depth_]);
    w->text_.clear();
  }

  static void Text(void* data, const XML_Char* text, int size) {
    auto* w = static_cast<XmlWalk*>(data);
    if (!w->status_.ok()) return;
    if (w->text_.size() + static_cast<size_t>(size) > kMaxText) {
      return w->Fail(absl::DataLossError(absl::StrCat("XML: text of ", w->path_, " longer than ", kMaxText)));
    }
    w->text_.append(text, static_cast<size_t>(size));
  }

  static void Doctype(void* data, const XML_Char*, const XML_Char*, const XML_Char*, int) {
    static_cast<XmlWalk*>(data)->Fail(absl::DataLossError("XML: a document type declaration"));
  }

  XML_Parser parser_ = nullptr;
  OnEnd on_end_;
  absl::Status status_;
  std::string path_, text_;
  size_t lengths_[kMaxDepth] = {};
  size_t depth_ = 0;
};

void AppendEscaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out.push_back(c);
    }
  }
}

}  // namespace

std::optional<uint64_t> ParseDecimal(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::optional<S3ErrorXml> ParseS3Error(std::string_view body) {
  S3ErrorXml error;
  bool is_error = false;
  const absl::Status s = XmlWalk::Run(body, [&](const std::string& path, const std::string& text) {
    if (path == "Error") is_error = true;
    if (path == "Error/Code") error.code = text;
    if (path == "Error/Message") error.message = text;
    return absl::OkStatus();
  });
  if (!s.ok() || !is_error) return std::nullopt;
  return error;
}

absl::StatusOr<std::string> ParseUploadId(std::string_view body) {
  std::string upload_id;
  absl::Status s = XmlWalk::Run(body, [&](const std::string& path, const std::string& text) {
    if (path == "InitiateMultipartUploadResult/UploadId") upload_id = text;
    return absl::OkStatus();
  });
  if (s.ok() && upload_id.empty()) s = absl::DataLossError("InitiateMultipartUploadResult without an UploadId");
  if (!s.ok()) return s;
  return upload_id;
}

absl::StatusOr<std::string> ParseCompleteEtag(std::string_view body) {
  // AWS's root is CompleteMultipartUploadResult, moto's CompleteMultipartUploadResponse: the ETag
  // is taken under either (an <Error> root was ruled out before).
  std::string etag;
  absl::Status s = XmlWalk::Run(body, [&](const std::string& path, const std::string& text) {
    if (path == "CompleteMultipartUploadResult/ETag" || path == "CompleteMultipartUploadResponse/ETag") etag = text;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return etag;
}

std::string CompleteMultipartBody(const std::vector<std::string>& etags) {
  std::string out = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (size_t i = 0; i < etags.size(); ++i) {
    absl::StrAppend(&out, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>");
    AppendEscaped(out, etags[i]);
    out += "</ETag></Part>";
  }
  out += "</CompleteMultipartUpload>";
  return out;
}

absl::StatusOr<S3ListPage> ParseListPage(std::string_view body, size_t max_objects) {
  S3ListPage page;
  S3ListedObject object;
  bool has_key = false, has_size = false, is_listing = false;
  absl::Status s = XmlWalk::Run(body, [&](const std::string& path, const std::string& text) -> absl::Status {
    if (path == "ListBucketResult") {
      is_listing = true;
    } else if (path == "ListBucketResult/Contents/Key") {
      if (text.empty() || text.size() > kS3MaxKeyBytes) {
        return absl::DataLossError(absl::StrCat("a listed key of ", text.size(), " bytes"));
      }
      object.key = text;
      has_key = true;
    } else if (path == "ListBucketResult/Contents/Size") {
      const std::optional<uint64_t> size = ParseDecimal(text);
      if (!size) return absl::DataLossError(absl::StrCat("a listed size that is not a 64-bit count: ", text.substr(0, 40)));
      object.size = *size;
      has_size = true;
    } else if (path == "ListBucketResult/Contents/ETag") {
      object.etag = text;
    } else if (path == "ListBucketResult/Contents") {
      if (!has_key || !has_size) return absl::DataLossError("a listed object without its Key or Size");
      if (page.objects.size() == max_objects) {
        return absl::ResourceExhaustedError(absl::StrCat("more than ", max_objects, " objects listed"));
      }
      page.objects.push_back(std::move(object));
      object = S3ListedObject{};
      has_key = has_size = false;
    } else if (path == "ListBucketResult/IsTruncated") {
      if (text != "true" && text != "false") return absl::DataLossError("IsTruncated neither true nor false");
      page.truncated = text == "true";
    } else if (path == "ListBucketResult/NextContinuationToken") {
      page.next_token = text;
    }
    return absl::OkStatus();
  });
  if (s.ok() && !is_listing) s = absl::DataLossError("not a ListBucketResult");
  if (s.ok() && page.truncated && page.next_token.empty()) {
    s = absl::DataLossError("a truncated listing without a NextContinuationToken");
  }
  if (!s.ok()) return s;
  return page;
}

}  // namespace kvstream
