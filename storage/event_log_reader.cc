#include "storage/event_log_reader.h"

#include <rocksdb/db.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "storage/event_codec.h"
#include "storage/key_encoding.h"
#include "storage/rocksdb_options.h"
#include "storage/rocksdb_status.h"
#include "storage/store_schema.h"

namespace tlp::storage {
namespace {

// A temporary directory for the secondary instance's own files, removed when it goes.
class ScratchDirectory {
 public:
  Status Create() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tlpd-event-log-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return Status::IoError("cannot create a temporary directory for the secondary instance");
    }
    path_ = pattern;
    return Status::Ok();
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The secondary instance and its column family handles, closed in the right order.
struct SecondaryStore {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::unique_ptr<rocksdb::DB> db;
  ~SecondaryStore() {
    for (rocksdb::ColumnFamilyHandle* handle : handles) db->DestroyColumnFamilyHandle(handle);
  }
};

}  // namespace

Status ReadEventLog(const std::string& store_path, const EventLogWindow& window, EventBatch* events,
                    EventLogRead* read) {
  events->Clear();
  if (!std::filesystem::exists(std::filesystem::path(store_path) / "CURRENT")) {
    return Status::NotFound("no store at '" + store_path + "'");
  }
  ScratchDirectory scratch;
  Status status = scratch.Create();
  if (!status.ok()) return status;
  rocksdb::Options options = DatabaseOptions(size_t{64} << 20);
  options.max_open_files = -1;  // required of a secondary instance
  std::vector<std::string> families;
  status = FromRocks(rocksdb::DB::ListColumnFamilies(options, store_path, &families),
                     "cannot read the column families of '" + store_path + "'");
  if (!status.ok()) return status;
  for (const char* name : {kEventsFamily, kMetaFamily}) {
    if (std::find(families.begin(), families.end(), name) == families.end()) {
      return Status::Corruption("'" + store_path + "' lacks column family '" + name +
                                "' (not a tlpd data dir, or damaged)");
    }
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName,
                           rocksdb::ColumnFamilyOptions(options));
  descriptors.emplace_back(kEventsFamily, FamilyOptions(options, kEventsFamily));
  descriptors.emplace_back(kMetaFamily, FamilyOptions(options, kMetaFamily));
  SecondaryStore store;
  rocksdb::DB* db = nullptr;
  status = FromRocks(rocksdb::DB::OpenAsSecondary(options, store_path, scratch.path(), descriptors,
                                                  &store.handles, &db),
                     "cannot read the event log of '" + store_path + "'");
  if (!status.ok()) return status;
  store.db.reset(db);
  rocksdb::ColumnFamilyHandle* events_family = store.handles[1];
  rocksdb::ColumnFamilyHandle* meta_family = store.handles[2];

  std::string value;
  if (!store.db->Get(rocksdb::ReadOptions(), meta_family, kFeatureDimKey, &value).ok() ||
      value.size() != 8) {
    return Status::Corruption("'" + store_path + "' has no feature_dim (not a tlpd data dir?)");
  }
  EventBatch stored;
  stored.feature_dim = static_cast<uint32_t>(GetBigEndian<uint64_t>(value.data()));
  events->feature_dim = stored.feature_dim;

  std::unique_ptr<rocksdb::Iterator> it(
      store.db->NewIterator(rocksdb::ReadOptions(), events_family));
  it->SeekToLast();
  if (!it->Valid()) {  // an empty store, or a failed read
    if (read != nullptr) *read = EventLogRead{};
    return FromRocks(it->status(), "cannot read the event log of '" + store_path + "'");
  }
  const uint64_t last_sequence = GetBigEndian<uint64_t>(it->key().data());
  const uint64_t first_sequence = window.last_events > 0 && window.last_events < last_sequence
                                      ? last_sequence - window.last_events + 1
                                      : 1;
  std::vector<float> features;
  uint64_t late = 0;
  double newest = -std::numeric_limits<double>::infinity();
  for (it->Seek(SequenceKey(first_sequence).view()); it->Valid(); it->Next()) {
    DecodedEvent event;
    status =
        DecodeEvent(std::string_view(it->value().data(), it->value().size()), &features, &event);
    if (!status.ok()) return status;
    if (event.features.size() != stored.feature_dim) {
      return Status::Corruption("event " +
                                std::to_string(GetBigEndian<uint64_t>(it->key().data())) + " has " +
                                std::to_string(event.features.size()) + " features, the store " +
                                std::to_string(stored.feature_dim));
    }
    if (window.since_ts && event.ts < *window.since_ts) continue;
    late += event.ts < newest;
    newest = std::max(newest, event.ts);
    stored.Add(event.src, event.dst, event.ts, event.features, event.event_id, event.state_label);
  }
  status = FromRocks(it->status(), "cannot read the event log of '" + store_path + "'");
  if (!status.ok()) return status;

  if (late == 0) {
    *events = std::move(stored);
  } else {
    std::vector<size_t> order(stored.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return stored.ts[a] < stored.ts[b]; });
    for (size_t i : order) {
      events->Add(stored.src[i], stored.dst[i], stored.ts[i], stored.FeaturesOf(i),
                  stored.EventIdOf(i), stored.StateLabelOf(i));
    }
  }
  if (read != nullptr) *read = EventLogRead{last_sequence, late};
  return Status::Ok();
}

}  // namespace tlp::storage
