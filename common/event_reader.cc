#include "common/event_reader.h"

#include <zlib.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

namespace tlp {
namespace {

constexpr int kReadChunk = 1 << 16;

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  return text;
}

// Splits `line` on `separator` (or on runs of blanks when separator is ' ') into `fields`.
void Split(std::string_view line, char separator, std::vector<std::string_view>* fields) {
  fields->clear();
  if (separator == ' ') {
    size_t pos = 0;
    while (pos < line.size()) {
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
      if (pos >= line.size()) break;
      size_t end = pos;
      while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
      fields->push_back(line.substr(pos, end - pos));
      pos = end;
    }
    return;
  }
  size_t pos = 0;
  while (true) {
    size_t end = line.find(separator, pos);
    if (end == std::string_view::npos) {
      fields->push_back(Trim(line.substr(pos)));
      return;
    }
    fields->push_back(Trim(line.substr(pos, end - pos)));
    pos = end + 1;
  }
}

template <typename T>
bool ParseNumber(std::string_view text, T* value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

const char* FormatName(EventFormat format) {
  switch (format) {
    case EventFormat::kJodie:
      return "jodie";
    case EventFormat::kSnap:
      return "snap";
    case EventFormat::kTlpd:
      return "tlpd";
  }
  return "unknown";
}

EventReader::~EventReader() {
  if (gz_file_ != nullptr) gzclose(static_cast<gzFile>(gz_file_));
}

Status EventReader::Open(const std::string& path, std::unique_ptr<EventReader>* reader) {
  std::unique_ptr<EventReader> result(new EventReader());
  result->path_ = path;
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files transparently too
  if (file == nullptr) {
    return Status::NotFound("cannot open event file '" + path + "': " + std::strerror(errno));
  }
  gzbuffer(file, kReadChunk);
  result->gz_file_ = file;

  std::string header;
  char chunk[kReadChunk];
  if (gzgets(file, chunk, sizeof(chunk)) == nullptr) {
    return Status::InvalidArgument(path + ": empty file, expected a header line");
  }
  header = Trim(chunk);
  result->line_number_ = 1;

  std::vector<std::string_view> columns;
  if (header.find(',') != std::string::npos) {
    Split(header, ',', &columns);
    if (columns.size() >= 4 && columns[0] == "u" && columns[1] == "i" && columns[2] == "ts" &&
        columns[3] == "label") {
      result->format_ = EventFormat::kJodie;
      // JODIE's published files carry the feature vector after the label without naming it in
      // the header; the width is taken from the first data line (see ParseLine).
      result->feature_dim_ = static_cast<uint32_t>(columns.size() - 4);
    } else if (columns.size() >= 3 && columns[0] == "src" && columns[1] == "dst" &&
               columns[2] == "ts") {
      result->format_ = EventFormat::kTlpd;
      size_t next = 3;
      if (columns.size() > 3 && columns[3] == "event_id") {
        result->has_event_id_ = true;
        next = 4;
      }
      result->feature_dim_ = static_cast<uint32_t>(columns.size() - next);
    } else {
      return Status::InvalidArgument(path + ":1: unknown CSV header '" + header +
                                     "' (expected 'u,i,ts,label' or 'src,dst,ts[,event_id]...')");
    }
  } else {
    Split(header, ' ', &columns);
    if (columns.size() == 3 && columns[0] == "src" && columns[1] == "dst" && columns[2] == "time") {
      result->format_ = EventFormat::kSnap;
    } else {
      return Status::InvalidArgument(path + ":1: unknown header '" + header +
                                     "' (expected 'src dst time' for SNAP text)");
    }
  }
  *reader = std::move(result);
  return Status::Ok();
}

Status EventReader::ParseLine(const char* raw_line, EventBatch* batch) {
  std::string_view line = Trim(raw_line);
  if (line.empty()) return Status::Ok();
  thread_local std::vector<std::string_view> fields;
  Split(line, format_ == EventFormat::kSnap ? ' ' : ',', &fields);
  auto error = [&](const std::string& what) {
    return Status::InvalidArgument(path_ + ":" + std::to_string(line_number_) + ": " + what +
                                   " in line '" + std::string(line.substr(0, 120)) + "'");
  };

  size_t first_feature = 3;
  if (format_ == EventFormat::kJodie) {
    first_feature = 4;
    if (line_number_ == 2 && fields.size() > 4 && feature_dim_ == 0) {
      feature_dim_ = static_cast<uint32_t>(fields.size() - 4);
      batch->feature_dim = feature_dim_;
    }
  } else if (format_ == EventFormat::kTlpd && has_event_id_) {
    first_feature = 4;
  }
  size_t expected = first_feature + feature_dim_;
  if (fields.size() != expected) {
    return error("expected " + std::to_string(expected) + " fields, found " +
                 std::to_string(fields.size()));
  }
  uint64_t src = 0, dst = 0;
  double ts = 0;
  if (!ParseNumber(fields[0], &src)) return error("field 'src' is not an unsigned integer");
  if (!ParseNumber(fields[1], &dst)) return error("field 'dst' is not an unsigned integer");
  if (!ParseNumber(fields[2], &ts) || !std::isfinite(ts))
    return error("field 'ts' is not a number");
  int8_t state_label = EventBatch::kNoStateLabel;
  if (format_ == EventFormat::kJodie) {
    double label = 0;
    if (!ParseNumber(fields[3], &label) || (label != 0 && label != 1)) {
      return error("field 'label' is not 0 or 1");
    }
    state_label = static_cast<int8_t>(label);
  }
  row_features_.resize(feature_dim_);
  for (uint32_t f = 0; f < feature_dim_; ++f) {
    if (!ParseNumber(fields[first_feature + f], &row_features_[f]) ||
        !std::isfinite(row_features_[f])) {
      return error("feature " + std::to_string(f) + " is not a finite number");
    }
  }
  std::string_view event_id = has_event_id_ ? fields[3] : std::string_view();
  batch->Add(src, dst, ts, row_features_, event_id, state_label);
  return Status::Ok();
}

Status EventReader::Next(size_t max_events, EventBatch* batch) {
  batch->Clear();
  batch->feature_dim = feature_dim_;
  gzFile file = static_cast<gzFile>(gz_file_);
  while (batch->size() < max_events) {
    line_.clear();
    // A line longer than one chunk (wide feature vectors) arrives in pieces.
    char chunk[kReadChunk];
    bool got_any = false;
    while (gzgets(file, chunk, sizeof(chunk)) != nullptr) {
      got_any = true;
      line_ += chunk;
      if (!line_.empty() && line_.back() == '\n') break;
    }
    if (!got_any) {
      int gz_error = 0;
      const char* message = gzerror(file, &gz_error);
      if (gz_error != Z_OK && gz_error != Z_STREAM_END) {
        return Status::IoError(path_ + ": read failed after line " + std::to_string(line_number_) +
                               ": " + message);
      }
      break;
    }
    ++line_number_;
    Status status = ParseLine(line_.c_str(), batch);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status EventReader::ReadAll(const std::string& path, EventBatch* batch) {
  std::unique_ptr<EventReader> reader;
  Status status = Open(path, &reader);
  if (!status.ok()) return status;
  EventBatch chunk;
  batch->Clear();
  while (true) {
    status = reader->Next(1 << 16, &chunk);
    if (!status.ok()) return status;
    if (chunk.empty()) break;
    batch->feature_dim = chunk.feature_dim;
    batch->Append(chunk);
  }
  batch->feature_dim = reader->feature_dim();
  return Status::Ok();
}

}  // namespace tlp
