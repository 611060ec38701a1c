// EventReader: streams edge events out of the file formats tlpd understands, gzip or plain.
//
// Formats, recognised from the header line:
//   * JODIE   `u,i,ts,label[,f1,...]`  (Kumar et al. 2019; Wikipedia, Reddit, ...); `label`
//     (0 or 1) is the source's state after the event and fills EventBatch::state_labels
//   * SNAP    `src dst time`           (whitespace separated, e.g. CollegeMsg)
//   * tlpd    `src,dst,ts[,event_id][,f1,...]` (our own CSV; the header names the columns)
// A line that cannot be parsed is an INVALID_ARGUMENT error naming the file and line number.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/event_batch.h"
#include "common/status.h"

namespace tlp {

enum class EventFormat { kJodie, kSnap, kTlpd };
const char* FormatName(EventFormat format);

class EventReader {
 public:
  // Opens `path` (gzip-compressed or plain text) and reads its header.
  static Status Open(const std::string& path, std::unique_ptr<EventReader>* reader);
  ~EventReader();
  EventReader(const EventReader&) = delete;
  EventReader& operator=(const EventReader&) = delete;

  EventFormat format() const { return format_; }
  uint32_t feature_dim() const { return feature_dim_; }
  // Line number of the last line read (1 = the header).
  uint64_t line_number() const { return line_number_; }

  // Clears `batch` and fills it with up to `max_events` events; an empty batch means the end of
  // the file. On a parse error returns it and leaves the events before the bad line in `batch`.
  Status Next(size_t max_events, EventBatch* batch);

  // Reads the whole file into `batch`.
  static Status ReadAll(const std::string& path, EventBatch* batch);

 private:
  EventReader() = default;
  Status ParseLine(const char* line, EventBatch* batch);

  void* gz_file_ = nullptr;  // gzFile; void* keeps zlib out of this header
  std::string path_;
  EventFormat format_ = EventFormat::kTlpd;
  uint32_t feature_dim_ = 0;
  bool has_event_id_ = false;
  uint64_t line_number_ = 0;
  std::string line_;
  std::vector<float> row_features_;
};

}  // namespace tlp
