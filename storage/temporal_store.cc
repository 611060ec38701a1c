#include "storage/temporal_store.h"

#include <pthread.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "storage/event_codec.h"
#include "storage/key_encoding.h"
#include "storage/rocksdb_options.h"
#include "storage/rocksdb_status.h"
#include "storage/store_schema.h"

namespace tlp::storage {
namespace {

constexpr const char* kFamilies[] = {kEventsFamily, "adjacency", "node_state", "event_ids",
                                     kMetaFamily};
constexpr const char* kSchemaKey = "schema_version";
constexpr const char* kEpochBitsKey = "adjacency_epoch_bits";
constexpr const char* kMaxTsKey = "max_ts";
constexpr const char* kWatermarkKey = "watermark";
constexpr const char* kCursorPrefix = "cursor/";
constexpr const char* kNodeStateCommitKey = "node_state_commit";
constexpr const char* kNodeStateDirectory = "/node_states";
// Where sealed epochs' table files are written before RocksDB takes them in.
constexpr const char* kAdjacencyImportDirectory = "/adjacency_import";

// generation, slots, dim: three big-endian u64.
std::string EncodeNodeStateCommit(const NodeStateCommit& commit) {
  std::string out(24, '\0');
  PutBigEndian<uint64_t>(commit.generation, out.data());
  PutBigEndian<uint64_t>(commit.slots, out.data() + 8);
  PutBigEndian<uint64_t>(commit.dim, out.data() + 16);
  return out;
}

std::string EncodeU64(uint64_t value) {
  std::string out(8, '\0');
  PutBigEndian<uint64_t>(value, out.data());
  return out;
}

std::string EncodeDouble(double value) {
  std::string out(sizeof(double), '\0');
  std::memcpy(out.data(), &value, sizeof(double));
  return out;
}

std::string EventPrefix(size_t index) { return "event " + std::to_string(index) + ": "; }

}  // namespace

TemporalStore::~TemporalStore() {
  if (sealer_.joinable()) {
    {
      std::lock_guard lock(sealer_mutex_);
      stopping_ = true;
    }
    sealer_wake_.notify_one();
    sealer_.join();
  }
  if (db_ && neighbors_) {
    // The open epoch is sealed as far as it goes, so that the next open has no rows to rebuild
    // from the event log. Whatever fails to seal is rebuilt from the log then.
    neighbors_->CloseOpenEpoch();
    for (bool sealed = true; sealed;) {
      if (!SealOldestEpoch(&sealed).ok()) break;
    }
  }
  if (db_) {
    // Flushing the memtables on a clean close means the next open has no write-ahead log to
    // replay: restart time then no longer grows with what was written since the last flush
    // (157k Wikipedia events: ~2 s of WAL recovery saved). A failure is harmless: the WAL holds
    // the same data and the next open replays it.
    rocksdb::FlushOptions flush;
    flush.allow_write_stall = true;
    db_->Flush(flush, handles_).PermitUncheckedError();
    for (rocksdb::ColumnFamilyHandle* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
    db_->Close();
  }
}

Status TemporalStore::Open(const std::string& path, const StoreOptions& options,
                           std::unique_ptr<TemporalStore>* store) {
  if (options.adjacency_epoch_bits < 2 || options.adjacency_epoch_bits > 40) {
    return Status::InvalidArgument("adjacency_epoch_bits must be in [2, 40], not " +
                                   std::to_string(options.adjacency_epoch_bits));
  }
  std::unique_ptr<TemporalStore> result(new TemporalStore());
  result->path_ = path;
  result->options_ = options;
  rocksdb::Options db_options = DatabaseOptions(options.block_cache_bytes);
  const bool exists = std::filesystem::exists(std::filesystem::path(path) / "CURRENT");
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  if (!exists) {
    if (!options.create_if_missing) return Status::NotFound("no store at '" + path + "'");
    std::error_code error;
    std::filesystem::create_directories(path, error);
    if (error) return Status::IoError("cannot create '" + path + "': " + error.message());
    db_options.create_if_missing = true;
    db_options.create_missing_column_families = true;
    descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName,
                             rocksdb::ColumnFamilyOptions(db_options));
    for (const char* name : kFamilies) {
      descriptors.emplace_back(name, FamilyOptions(db_options, name));
    }
  } else {
    std::vector<std::string> names;
    Status status = FromRocks(rocksdb::DB::ListColumnFamilies(db_options, path, &names),
                              "cannot read the column families of '" + path + "'");
    if (!status.ok()) return status;
    for (const char* name : kFamilies) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        return Status::Corruption("store '" + path + "' lacks column family '" + name +
                                  "' (not a tlpd data dir, or damaged)");
      }
    }
    for (const std::string& name : names) {
      descriptors.emplace_back(name, FamilyOptions(db_options, name));
    }
  }
  rocksdb::DB* db = nullptr;
  Status status =
      FromRocks(rocksdb::DB::Open(db_options, path, descriptors, &result->handles_, &db),
                "cannot open store '" + path + "'");
  if (!status.ok()) return status;
  result->db_.reset(db);
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const std::string& name = descriptors[i].name;
    rocksdb::ColumnFamilyHandle* handle = result->handles_[i];
    if (name == kEventsFamily) result->events_ = handle;
    if (name == "adjacency") result->adjacency_ = handle;
    if (name == "node_state") result->node_state_ = handle;
    if (name == "event_ids") result->event_ids_ = handle;
    if (name == kMetaFamily) result->meta_ = handle;
  }
  if (!exists) {
    rocksdb::WriteBatch batch;
    batch.Put(result->meta_, kSchemaKey, EncodeU64(kSchemaVersion));
    batch.Put(result->meta_, kFeatureDimKey, EncodeU64(options.feature_dim.value_or(0)));
    batch.Put(result->meta_, kEpochBitsKey, EncodeU64(options.adjacency_epoch_bits));
    rocksdb::WriteOptions write_options;
    write_options.sync = true;
    status = FromRocks(result->db_->Write(write_options, &batch), "cannot initialise store");
    if (!status.ok()) return status;
  }
  status = result->Initialize();
  if (!status.ok()) return status;
  *store = std::move(result);
  return Status::Ok();
}

Status TemporalStore::Initialize() {
  std::string value;
  rocksdb::Status rocks = db_->Get(rocksdb::ReadOptions(), meta_, kSchemaKey, &value);
  if (rocks.IsNotFound() || value.size() != 8) {
    return Status::Corruption("store '" + path_ + "' has no schema version");
  }
  const uint64_t version = GetBigEndian<uint64_t>(value.data());
  if (version != kSchemaVersion && version != kSchemaVersionNodeStateFamily &&
      version != kSchemaVersionNodeFirstAdjacency) {
    return Status::FailedPrecondition("store '" + path_ + "' has schema version " +
                                      std::to_string(version) + ", this build reads version " +
                                      std::to_string(kSchemaVersion) +
                                      "; it is left untouched (migrate or use another data dir)");
  }
  rocks = db_->Get(rocksdb::ReadOptions(), meta_, kFeatureDimKey, &value);
  if (!rocks.ok() || value.size() != 8) return Status::Corruption("store has no feature_dim");
  feature_dim_ = static_cast<uint32_t>(GetBigEndian<uint64_t>(value.data()));
  if (options_.feature_dim && *options_.feature_dim != feature_dim_) {
    return Status::FailedPrecondition("store '" + path_ + "' holds events with " +
                                      std::to_string(feature_dim_) + " features, asked for " +
                                      std::to_string(*options_.feature_dim));
  }
  if (version == kSchemaVersionNodeFirstAdjacency) {
    adjacency_epoch_bits_ = options_.adjacency_epoch_bits;
  } else {
    rocks = db_->Get(rocksdb::ReadOptions(), meta_, kEpochBitsKey, &value);
    if (!rocks.ok() || value.size() != 8)
      return Status::Corruption("store has no adjacency epochs");
    adjacency_epoch_bits_ = static_cast<uint32_t>(GetBigEndian<uint64_t>(value.data()));
  }
  if (db_->Get(rocksdb::ReadOptions(), meta_, kMaxTsKey, &value).ok() && value.size() == 8) {
    double ts = 0;
    std::memcpy(&ts, value.data(), sizeof(ts));
    max_ts_ = ts;
  }
  if (db_->Get(rocksdb::ReadOptions(), meta_, kWatermarkKey, &value).ok() && value.size() == 8) {
    watermark_ = GetBigEndian<uint64_t>(value.data());
  }
  NodeStateCommit committed;
  rocks = db_->Get(rocksdb::ReadOptions(), meta_, kNodeStateCommitKey, &value);
  if (rocks.ok() && value.size() == 24) {
    committed.generation = GetBigEndian<uint64_t>(value.data());
    committed.slots = GetBigEndian<uint64_t>(value.data() + 8);
    committed.dim = static_cast<uint32_t>(GetBigEndian<uint64_t>(value.data() + 16));
  } else if (!rocks.IsNotFound()) {
    return Status::Corruption("store '" + path_ + "' has a damaged node state commit");
  }
  Status opened =
      NodeStateFile::Open(path_ + kNodeStateDirectory, committed, options_.sync, &node_states_);
  if (!opened.ok()) return opened;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), events_));
  it->SeekToLast();
  if (it->Valid()) last_sequence_ = GetBigEndian<uint64_t>(it->key().data());
  neighbors_ = std::make_unique<NeighborIndex>(
      db_.get(), adjacency_, events_, options_.cached_neighbors, feature_dim_,
      options_.neighbor_cache_bytes /
          NeighborIndex::SlotBytes(options_.cached_neighbors, feature_dim_),
      adjacency_epoch_bits_);
  if (version == kSchemaVersionNodeFirstAdjacency) {
    Status migrated = MigrateAdjacency();
    if (!migrated.ok()) return migrated;
  }
  if (version <= kSchemaVersionNodeStateFamily) {
    Status migrated = MigrateNodeStates();
    if (!migrated.ok()) return migrated;
  }
  if (version != kSchemaVersion) {
    // Older versions wrote every adjacency row through RocksDB (or none, after the version 1
    // migration): all the rows there are, and the rest follow from the log as after a crash.
    rocksdb::WriteOptions write_options;
    write_options.sync = true;
    Status status = FromRocks(db_->Put(write_options, meta_, kSchemaKey, EncodeU64(kSchemaVersion)),
                              "cannot move the store to this version");
    if (!status.ok()) return status;
  }
  std::error_code error;
  std::filesystem::remove_all(path_ + kAdjacencyImportDirectory, error);  // a crash's leftovers
  std::filesystem::create_directories(path_ + kAdjacencyImportDirectory, error);
  if (error) return Status::IoError("cannot create '" + path_ + kAdjacencyImportDirectory + "'");
  // The adjacency family holds the rows of every sequence up to the newest it holds (epochs are
  // sealed in order, each up to its last row), so that is where the log takes over: no record
  // of it could lag behind an ingest that a crash cut short.
  uint64_t sealed_through = 0;
  Status status = neighbors_->Rebuild(&sealed_through);
  if (!status.ok()) return status;
  status = RebuildUnsealedEpochs(sealed_through);
  if (!status.ok()) return status;
  sealer_ = std::thread([this] { SealLoop(); });
  return Status::Ok();
}

Status TemporalStore::RebuildUnsealedEpochs(uint64_t sealed_through) {
  // The rows of these events were in memory only when the process stopped (a crash, or a
  // failed seal): the log has them. Epochs that close on the way are sealed at once, so that
  // memory holds no more than when ingesting.
  return ReplayAfter(sealed_through, 10000, [this](const EventBatch& batch, uint64_t first) {
    for (size_t i = 0; i < batch.size(); ++i) {
      neighbors_->Add(batch.src[i], batch.dst[i], batch.ts[i], first + i, batch.FeaturesOf(i));
    }
    for (bool sealed = true; sealed;) {
      Status status = SealOldestEpoch(&sealed);
      if (!status.ok()) return status;
    }
    return Status::Ok();
  });
}

void TemporalStore::SealLoop() {
  pthread_setname_np(pthread_self(), "tlpd-seal");
  std::unique_lock lock(sealer_mutex_);
  while (!stopping_) {
    sealer_wake_.wait(lock, [this] { return stopping_ || seal_requested_; });
    seal_requested_ = false;
    for (bool sealed = true; sealed && !stopping_;) {
      lock.unlock();
      Status status = SealOldestEpoch(&sealed);
      lock.lock();
      if (!status.ok()) {
        // The rows stay in memory and lookups keep reading them there; retried in a while.
        seal_error_ = status.message();
        ++seal_failures_;
        seal_requested_ = true;
        sealer_wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; });
        break;
      }
    }
  }
}

Status TemporalStore::SealOldestEpoch(bool* sealed) {
  *sealed = false;
  const std::shared_ptr<const EpochRows> rows = neighbors_->OldestClosedEpoch();
  if (!rows) return Status::Ok();
  const std::string file = path_ + kAdjacencyImportDirectory + "/epoch-" +
                           std::to_string(rows->epoch()) + "-" +
                           std::to_string(rows->first_sequence()) + ".sst";
  Status status = rows->WriteTable(db_->GetOptions(adjacency_), file);
  if (status.ok()) {
    // Moved, not copied, and placed in the lowest level its key range fits: the last one, as no
    // other epoch's keys overlap it (unless this epoch was partly sealed before a restart).
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;
    status = FromRocks(db_->IngestExternalFile(adjacency_, {file}, ingest),
                       "cannot ingest adjacency epoch " + std::to_string(rows->epoch()));
  }
  if (!status.ok()) {
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    return status;
  }
  neighbors_->DropSealedEpoch(rows.get());
  *sealed = true;
  return Status::Ok();
}

Status TemporalStore::MigrateNodeStates() {
  // Each batch is one checkpoint generation at the unchanged watermark, so the states stay one
  // cut throughout; the column family is emptied and the schema version moves only after the
  // last batch, so a crash part way migrates again on the next open (rewriting the same rows).
  constexpr size_t kStatesPerCheckpoint = 100000;
  NodeStates states;
  auto save = [&]() {
    if (states.size() == 0) return Status::Ok();
    Status saved = SaveNodeStates(states, watermark_.load());
    states.Clear(states.dim);
    return saved;
  };
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), node_state_));
  size_t migrated = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key(), value = it->value();
    if (key.size() != 8 || value.size() < sizeof(double) ||
        (value.size() - sizeof(double)) % sizeof(float) != 0) {
      return Status::Corruption("node_state row of " + std::to_string(key.size()) + "/" +
                                std::to_string(value.size()) + " bytes");
    }
    const auto dim = static_cast<uint32_t>((value.size() - sizeof(double)) / sizeof(float));
    if (states.size() > 0 && dim != states.dim) {
      return Status::Corruption("node_state rows of widths " + std::to_string(states.dim) +
                                " and " + std::to_string(dim));
    }
    states.dim = dim;
    states.nodes.push_back(GetBigEndian<uint64_t>(key.data()));
    double ts = 0;
    std::memcpy(&ts, value.data(), sizeof(ts));
    states.last_update_ts.push_back(ts);
    const auto* memory = reinterpret_cast<const float*>(value.data() + sizeof(double));
    states.memory.insert(states.memory.end(), memory, memory + dim);
    ++migrated;
    if (states.size() == kStatesPerCheckpoint) {
      Status status = save();
      if (!status.ok()) return status;
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), "node state migration failed");
  Status status = save();
  if (!status.ok()) return status;
  rocksdb::WriteBatch batch;
  // Keys are 8-byte big-endian node ids: [0^8, FF^8] spans them all but the last, done apart.
  const std::string last(8, '\xff');
  batch.DeleteRange(node_state_, std::string(8, '\0'), last);
  batch.Delete(node_state_, last);
  batch.Put(meta_, kSchemaKey, EncodeU64(kSchemaVersionNodeStateFile));
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  status = FromRocks(db_->Write(write_options, &batch), "cannot finish the node state migration");
  if (status.ok() && migrated > 0) {
    // The emptied family's files go now rather than at some later compaction.
    rocksdb::CompactRangeOptions compact;
    status = FromRocks(db_->CompactRange(compact, node_state_, nullptr, nullptr),
                       "cannot compact the emptied node_state family");
  }
  return status;
}

Status TemporalStore::MigrateAdjacency() {
  // Every adjacency row follows from an event of the log, so the old rows are dropped and the
  // new ones rebuilt from the log as after a crash (RebuildUnsealedEpochs): none is sealed.
  const std::string end(kAdjacencyKeySize + 1, '\xff');
  Status status = FromRocks(db_->DeleteRange(rocksdb::WriteOptions(), adjacency_, "", end),
                            "cannot drop the old adjacency rows");
  if (!status.ok()) return status;
  rocksdb::WriteBatch batch;
  // Node memory is still in the node_state family: MigrateNodeStates moves it.
  batch.Put(meta_, kSchemaKey, EncodeU64(kSchemaVersionNodeStateFamily));
  batch.Put(meta_, kEpochBitsKey, EncodeU64(adjacency_epoch_bits_));
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return FromRocks(db_->Write(write_options, &batch), "cannot finish the migration");
}

Status TemporalStore::Validate(const EventBatch& batch,
                               const std::vector<uint8_t>* skip_lateness) const {
  if (batch.feature_dim != feature_dim_ && !batch.empty()) {
    return Status::InvalidArgument("field 'features': events carry " +
                                   std::to_string(batch.feature_dim) + " features, the store " +
                                   std::to_string(feature_dim_));
  }
  if (batch.features.size() != batch.size() * batch.feature_dim ||
      (!batch.event_ids.empty() && batch.event_ids.size() != batch.size()) ||
      (!batch.state_labels.empty() && batch.state_labels.size() != batch.size())) {
    return Status::Internal("malformed EventBatch (column sizes differ)");
  }
  double newest = max_ts_.load();
  for (size_t i = 0; i < batch.size(); ++i) {
    const bool exempt = skip_lateness != nullptr && (*skip_lateness)[i];
    Status status = CheckEvent(batch, i, exempt, &newest);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status TemporalStore::CheckEvent(const EventBatch& batch, size_t i, bool lateness_exempt,
                                 double* newest) const {
  const double ts = batch.ts[i];
  if (!std::isfinite(ts) || ts < 0) {
    return Status::InvalidArgument(EventPrefix(i) + "field 'ts' must be finite and >= 0, got " +
                                   std::to_string(ts));
  }
  if (options_.max_future_seconds > 0) {
    // Streams in Unix time are bounded by the clock too, so that one idle for longer than the
    // bound (a weekend) resumes; a stream with another epoch (seconds since its start) only by
    // its own newest ts, and a gap longer than the bound needs a larger one.
    constexpr double kUnixTimeFloor = 946684800.0;  // 2000-01-01: a stream past it is Unix time
    const bool unix_time = *newest >= kUnixTimeFloor || *newest <= 0;
    const double clock =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double base = unix_time ? std::max(*newest, clock) : *newest;
    if (ts > base + options_.max_future_seconds) {
      char bound[320];
      std::snprintf(bound, sizeof(bound),
                    "field 'ts' = %.17g is more than %g s ahead of the %s (%.17g); a ts in "
                    "milliseconds? (bound: --max-future-seconds)",
                    ts, options_.max_future_seconds,
                    base == *newest ? "newest ts" : "clock, in Unix seconds", base);
      return Status::InvalidArgument(EventPrefix(i) + bound);
    }
  }
  // Lateness is measured against the newest ts including earlier events of this batch.
  const double oldest_allowed = *newest - options_.lateness_seconds;
  if (!lateness_exempt && ts < oldest_allowed) {
    return Status::OutOfRange(EventPrefix(i) + "field 'ts' = " + std::to_string(ts) +
                              " is older than the lateness window (newest ts " +
                              std::to_string(*newest) + ", window " +
                              std::to_string(options_.lateness_seconds) + " s)");
  }
  for (float value : batch.FeaturesOf(i)) {
    if (!std::isfinite(value)) {
      return Status::InvalidArgument(EventPrefix(i) + "field 'features' holds a non-finite value");
    }
  }
  if (batch.EventIdOf(i).size() > kMaxEventIdBytes) {
    return Status::InvalidArgument(EventPrefix(i) + "field 'event_id' is longer than " +
                                   std::to_string(kMaxEventIdBytes) + " bytes");
  }
  if (!lateness_exempt) *newest = std::max(*newest, ts);
  return Status::Ok();
}

Status TemporalStore::Append(const EventBatch& batch, AppendResult* result,
                             std::span<const SourceCursor> cursors) {
  std::lock_guard lock(writer_mutex_);
  result->sequences.assign(batch.size(), 0);
  result->duplicate.assign(batch.size(), 0);
  result->accepted = 0;
  result->duplicates = 0;
  if (batch.empty() && cursors.empty()) return Validate(batch);
  if (batch.features.size() != batch.size() * batch.feature_dim ||
      (!batch.event_ids.empty() && batch.event_ids.size() != batch.size()) ||
      (!batch.state_labels.empty() && batch.state_labels.size() != batch.size())) {
    return Status::Internal("malformed EventBatch (column sizes differ)");
  }

  // Duplicates: ids already stored (one batched MultiGet), then repeats inside this batch.
  first_in_batch_.clear();
  if (!batch.event_ids.empty()) {
    id_keys_.clear();
    id_positions_.clear();
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch.event_ids[i].empty()) {
        id_keys_.emplace_back(batch.event_ids[i]);
        id_positions_.push_back(i);
      }
    }
    // The batched form: keys are probed file by file (one bloom filter and block lookup per
    // file for all of them) instead of one full lookup each, and values are pinned, not copied.
    id_values_.resize(id_keys_.size());
    id_statuses_.resize(id_keys_.size());
    db_->MultiGet(rocksdb::ReadOptions(), event_ids_, id_keys_.size(), id_keys_.data(),
                  id_values_.data(), id_statuses_.data());
    Status failed;
    for (size_t j = 0; j < id_keys_.size() && failed.ok(); ++j) {
      const size_t i = id_positions_[j];
      if (id_statuses_[j].ok() && id_values_[j].size() == 8) {
        result->duplicate[i] = 1;
        result->sequences[i] = GetBigEndian<uint64_t>(id_values_[j].data());
      } else if (!id_statuses_[j].IsNotFound()) {
        failed = FromRocks(id_statuses_[j], "event_id lookup failed");
      } else if (!first_in_batch_.try_emplace(batch.event_ids[i], 0).second) {
        result->duplicate[i] = 1;  // sequence filled in below, once the first one has its own
      }
    }
    // Pinned values hold the memtables and files they point into: release them now.
    for (rocksdb::PinnableSlice& value : id_values_) value.Reset();
    if (!failed.ok()) return failed;
  }

  Status status = Validate(batch, &result->duplicate);
  if (!status.ok()) return status;

  rocksdb::WriteBatch write;
  uint64_t sequence = last_sequence_.load();
  const uint64_t previous_last = sequence;
  double newest = max_ts_.load();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (result->duplicate[i]) continue;
    ++sequence;
    result->sequences[i] = sequence;
    const SequenceKey key(sequence);
    encode_buffer_.clear();
    EncodeEvent(batch.src[i], batch.dst[i], batch.ts[i], batch.FeaturesOf(i), batch.EventIdOf(i),
                batch.StateLabelOf(i), &encode_buffer_);
    write.Put(events_, key.view(), encode_buffer_);
    if (!batch.EventIdOf(i).empty()) {
      write.Put(event_ids_, batch.EventIdOf(i), key.view());
      first_in_batch_[batch.EventIdOf(i)] = sequence;
    }
    newest = std::max(newest, batch.ts[i]);
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (result->duplicate[i] && result->sequences[i] == 0) {
      result->sequences[i] = first_in_batch_[batch.EventIdOf(i)];
    }
  }
  write.Put(meta_, kMaxTsKey, EncodeDouble(newest));
  for (const SourceCursor& cursor : cursors) {
    write.Put(meta_, kCursorPrefix + cursor.name, cursor.value);
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = options_.sync;
  status = FromRocks(db_->Write(write_options, &write), "append failed");
  if (!status.ok()) return status;  // nothing of the batch is stored

  for (size_t i = 0; i < batch.size(); ++i) {
    if (result->duplicate[i]) {
      ++result->duplicates;
      continue;
    }
    ++result->accepted;
    neighbors_->Add(batch.src[i], batch.dst[i], batch.ts[i], result->sequences[i],
                    batch.FeaturesOf(i));
  }
  last_sequence_ = sequence;
  max_ts_ = newest;
  if (neighbors_->EpochOf(sequence) != neighbors_->EpochOf(previous_last)) {
    {
      std::lock_guard sealer_lock(sealer_mutex_);
      seal_requested_ = true;
    }
    sealer_wake_.notify_one();
  }
  return Status::Ok();
}

Status TemporalStore::SaveNodeStates(const NodeStates& states, uint64_t watermark,
                                     std::span<const SourceCursor> cursors) {
  // Not under writer_mutex_: nothing here is what Append writes, and a checkpoint of many
  // states must not stall ingest while it is written.
  std::lock_guard lock(node_state_mutex_);
  NodeStateCommit next;
  Status status = node_states_->Prepare(states, &next);
  if (!status.ok()) return status;
  status = CommitNodeStates(next, watermark, cursors);
  if (!status.ok()) return status;  // the previous generation stays in force
  watermark_ = watermark;
  return node_states_->Publish(states, next);
}

Status TemporalStore::CommitNodeStates(const NodeStateCommit& next, uint64_t watermark,
                                       std::span<const SourceCursor> cursors) {
  rocksdb::WriteBatch write;
  write.Put(meta_, kNodeStateCommitKey, EncodeNodeStateCommit(next));
  for (const SourceCursor& cursor : cursors) {
    write.Put(meta_, kCursorPrefix + cursor.name, cursor.value);
  }
  write.Put(meta_, kWatermarkKey, EncodeU64(watermark));
  rocksdb::WriteOptions write_options;
  write_options.sync = options_.sync;
  return FromRocks(db_->Write(write_options, &write), "node state checkpoint failed");
}

Status TemporalStore::GetNodeStates(std::span<const uint64_t> nodes, NodeStates* states) const {
  return node_states_->Read(nodes, states);
}

Status TemporalStore::ClearNodeStates() {
  std::lock_guard lock(node_state_mutex_);
  NodeStateCommit next;
  Status status = node_states_->PrepareClear(&next);
  if (!status.ok()) return status;
  status = CommitNodeStates(next, 0, {});
  if (!status.ok()) return status;
  watermark_ = 0;
  return node_states_->PublishClear(next);
}

uint64_t TemporalStore::watermark() const { return watermark_.load(); }

Status TemporalStore::GetCursor(std::string_view name, std::string* value, bool* found) const {
  const rocksdb::Status status = db_->Get(rocksdb::ReadOptions(), meta_,
                                          std::string(kCursorPrefix) + std::string(name), value);
  *found = status.ok();
  if (status.IsNotFound()) return Status::Ok();
  return FromRocks(status, "cursor lookup failed");
}

Status TemporalStore::ForEachCursor(
    std::string_view prefix,
    const std::function<Status(std::string_view, std::string_view)>& visit) const {
  const std::string start = std::string(kCursorPrefix) + std::string(prefix);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->Seek(start); it->Valid() && it->key().starts_with(start); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    Status status = visit(key.substr(std::string_view(kCursorPrefix).size()),
                          std::string_view(it->value().data(), it->value().size()));
    if (!status.ok()) return status;
  }
  return FromRocks(it->status(), "cursor scan failed");
}

Status TemporalStore::ReplayAfter(
    uint64_t after, size_t batch_size,
    const std::function<Status(const EventBatch&, uint64_t)>& visit) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), events_));
  EventBatch batch;
  batch.feature_dim = feature_dim_;
  std::vector<float> features;
  uint64_t first_sequence = 0;
  for (it->Seek(SequenceKey(after + 1).view()); it->Valid(); it->Next()) {
    DecodedEvent event;
    Status status =
        DecodeEvent(std::string_view(it->value().data(), it->value().size()), &features, &event);
    if (!status.ok()) return status;
    if (batch.empty()) first_sequence = GetBigEndian<uint64_t>(it->key().data());
    batch.Add(event.src, event.dst, event.ts, event.features, event.event_id, event.state_label);
    if (batch.size() >= batch_size) {
      status = visit(batch, first_sequence);
      if (!status.ok()) return status;
      batch.Clear();
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), "replay failed");
  if (!batch.empty()) return visit(batch, first_sequence);
  return Status::Ok();
}

Status TemporalStore::Checkpoint(const std::string& directory) const {
  // No node state checkpoint may commit between the copy of meta and that of the node states.
  std::lock_guard lock(node_state_mutex_);
  rocksdb::Checkpoint* checkpoint = nullptr;
  Status status = FromRocks(rocksdb::Checkpoint::Create(db_.get(), &checkpoint),
                            "cannot create checkpoint object");
  if (!status.ok()) return status;
  std::unique_ptr<rocksdb::Checkpoint> owner(checkpoint);
  status = FromRocks(checkpoint->CreateCheckpoint(directory),
                     "checkpoint to '" + directory + "' failed");
  if (!status.ok()) return status;
  return node_states_->CopyTo(directory + kNodeStateDirectory);
}

uint64_t TemporalStore::last_sequence() const { return last_sequence_.load(); }
double TemporalStore::max_ts() const { return max_ts_.load(); }

StoreStats TemporalStore::Stats() const {
  StoreStats stats;
  stats.events = last_sequence_.load();
  stats.nodes = neighbors_->node_count();
  for (rocksdb::ColumnFamilyHandle* handle : handles_) {
    uint64_t value = 0;
    if (db_->GetIntProperty(handle, "rocksdb.live-sst-files-size", &value))
      stats.live_sst_bytes += value;
    if (db_->GetIntProperty(handle, "rocksdb.estimate-pending-compaction-bytes", &value)) {
      stats.pending_compaction_bytes += value;
    }
    if (db_->GetIntProperty(handle, "rocksdb.cur-size-all-mem-tables", &value))
      stats.memtable_bytes += value;
  }
  // Shared by all families: read once, not summed.
  db_->GetIntProperty(events_, "rocksdb.block-cache-usage", &stats.block_cache_bytes);
  db_->GetIntProperty(events_, "rocksdb.block-cache-capacity", &stats.block_cache_capacity_bytes);
  stats.node_state_bytes = node_states_->disk_bytes();
  stats.unsealed_adjacency_bytes = neighbors_->UnsealedBytes();
  {
    std::lock_guard lock(sealer_mutex_);
    stats.adjacency_seal_failures = seal_failures_;
    stats.last_adjacency_seal_error = seal_error_;
  }
  return stats;
}

}  // namespace tlp::storage
