#include "server/kafka_source.h"

#include <google/protobuf/util/json_util.h>
#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <map>

#include "common/thread_name.h"
#include "server/partition_merge.h"
#include "server/source_record.h"
#include "tlp/v1/tlp.pb.h"

namespace tlp::server {
namespace {

using Clock = std::chrono::steady_clock;

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* handle) const { rd_kafka_destroy(handle); }
};
using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;

struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* list) const {
    rd_kafka_topic_partition_list_destroy(list);
  }
};
using PartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter>;

// librdkafka's own log lines go through spdlog, at the matching level.
void LogFromKafka(const rd_kafka_t*, int level, const char* facility, const char* message) {
  if (level <= 3) {
    spdlog::error("kafka {}: {}", facility, message);
  } else if (level <= 4) {
    spdlog::warn("kafka {}: {}", facility, message);
  } else {
    spdlog::debug("kafka {}: {}", facility, message);
  }
}

// A librdkafka configuration with `settings` applied in order; INVALID_ARGUMENT naming the key.
Status MakeConfig(const std::vector<std::pair<std::string, std::string>>& settings,
                  rd_kafka_conf_t** config) {
  *config = rd_kafka_conf_new();
  rd_kafka_conf_set_log_cb(*config, LogFromKafka);
  char error[512];
  for (const auto& [key, value] : settings) {
    if (rd_kafka_conf_set(*config, key.c_str(), value.c_str(), error, sizeof(error)) !=
        RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(*config);
      *config = nullptr;
      return Status::InvalidArgument("Kafka setting '" + key + "': " + error);
    }
  }
  return Status::Ok();
}

Status ParseProperties(const std::vector<std::string>& properties,
                       std::vector<std::pair<std::string, std::string>>* settings) {
  for (const std::string& property : properties) {
    const size_t equals = property.find('=');
    if (equals == std::string::npos || equals == 0) {
      return Status::InvalidArgument("field 'kafka-property': expected key=value, got '" +
                                     property + "'");
    }
    settings->emplace_back(property.substr(0, equals), property.substr(equals + 1));
  }
  return Status::Ok();
}

// A record that goes to the dead-letter topic.
struct DeadLetter {
  int partition = 0;
  int64_t offset = 0;
  std::string reason;
  std::string value;
};

// The dead-letter value of an event that decoded but failed validation: the event as JSON.
std::string EventAsJson(const EventBatch& batch, size_t i) {
  tlp::v1::EdgeEvent event;
  event.set_src(batch.src[i]);
  event.set_dst(batch.dst[i]);
  event.set_ts(batch.ts[i]);
  for (float value : batch.FeaturesOf(i)) event.add_features(value);
  event.set_event_id(std::string(batch.EventIdOf(i)));
  if (batch.StateLabelOf(i) != EventBatch::kNoStateLabel) {
    event.set_state_label(static_cast<uint32_t>(batch.StateLabelOf(i)));
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(event, &json, options);
  return json;
}

}  // namespace

std::string KafkaSource::PartitionsCursor(const std::string& topic) {
  return "kafka/" + topic + "/partitions";
}

std::string KafkaSource::OffsetCursor(const std::string& topic, int partition) {
  return "kafka/" + topic + "/" + std::to_string(partition);
}

class KafkaSource::Impl {
 public:
  Impl(const KafkaSourceOptions& options, Engine& engine) : options_(options), engine_(engine) {
    if (options_.dead_letter_topic.empty())
      options_.dead_letter_topic = options_.topic + ".dead-letter";
  }
  ~Impl() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    if (consumer_) rd_kafka_consumer_close(consumer_.get());
  }

  Status Connect();
  void Launch() {
    thread_ = std::thread([this] {
      NameThisThread("tlpd-kafka");
      Run();
    });
  }
  KafkaSourceStats Stats() const;

 private:
  void Run();
  // Reads what the consumer has (waiting up to `wait` for the first message) into the merge.
  void Consume(std::chrono::milliseconds wait);
  // Pauses partitions holding too much, resumes drained ones.
  void Throttle();
  // Takes decided records off the merge into batch_ and dead_letters_; true when positions
  // moved (something to write).
  bool TakeBatch();
  // Dead-letters the events Screen rejects, keeping the rest in order.
  void ScreenBatch();
  // Produces and flushes dead_letters_; retries until delivered or stopping.
  bool SendDeadLetters();
  // Appends batch_ with the cursors; retries until durable or stopping.
  bool AppendDurably();
  void CommitOffsets();

  KafkaSourceOptions options_;
  Engine& engine_;
  KafkaHandle consumer_, producer_;
  int partitions_ = 0;
  std::unique_ptr<PartitionMerge> merge_;
  std::vector<int64_t> next_offset_;  // per partition: first offset not yet applied
  std::vector<uint8_t> paused_;
  std::vector<uint8_t> moved_;  // per partition: position moved in the batch being built
  EventBatch batch_;
  std::vector<std::pair<int, int64_t>> batch_origin_;  // per event: partition, offset
  std::vector<DeadLetter> dead_letters_;
  std::vector<Status> verdicts_;
  storage::AppendResult result_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  mutable std::mutex stats_mutex_;
  KafkaSourceStats stats_;
  std::vector<int64_t> durable_offset_;  // next_offset_ as of the last durable append
  std::atomic<uint64_t> delivery_failures_{0};
};

Status KafkaSource::Impl::Connect() {
  std::vector<std::pair<std::string, std::string>> settings = {
      {"bootstrap.servers", options_.brokers},
      {"group.id", options_.group_id},
      {"enable.auto.commit", "false"},
      {"enable.auto.offset.store", "false"},
      // A stored position the log no longer holds (retention) must stop the replica, not
      // silently skip to another offset.
      {"auto.offset.reset", "error"},
      {"enable.partition.eof", "false"},
  };
  if (Status status = ParseProperties(options_.properties, &settings); !status.ok()) return status;
  rd_kafka_conf_t* config = nullptr;
  if (Status status = MakeConfig(settings, &config); !status.ok()) return status;
  char error[512];
  consumer_.reset(rd_kafka_new(RD_KAFKA_CONSUMER, config, error, sizeof(error)));
  if (!consumer_) return Status::InvalidArgument(std::string("Kafka consumer: ") + error);
  rd_kafka_poll_set_consumer(consumer_.get());

  // The dead-letter producer: idempotent, so its own retries write each record once.
  std::vector<std::pair<std::string, std::string>> producer_settings = {
      {"bootstrap.servers", options_.brokers}, {"enable.idempotence", "true"}, {"linger.ms", "5"}};
  if (Status status = ParseProperties(options_.properties, &producer_settings); !status.ok()) {
    return status;
  }
  // Consumer-only settings would make the producer's configuration fail; keep those out.
  std::erase_if(producer_settings, [](const auto& setting) {
    return setting.first.starts_with("fetch.") || setting.first.starts_with("group.") ||
           setting.first.starts_with("auto.") || setting.first.starts_with("session.") ||
           setting.first.starts_with("max.poll") || setting.first.starts_with("enable.auto");
  });
  if (Status status = MakeConfig(producer_settings, &config); !status.ok()) return status;
  rd_kafka_conf_set_opaque(config, this);
  rd_kafka_conf_set_dr_msg_cb(
      config, [](rd_kafka_t*, const rd_kafka_message_t* message, void* opaque) {
        if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
          spdlog::error("dead-letter delivery failed: {}", rd_kafka_err2str(message->err));
          static_cast<Impl*>(opaque)->delivery_failures_.fetch_add(1);
        }
      });
  producer_.reset(rd_kafka_new(RD_KAFKA_PRODUCER, config, error, sizeof(error)));
  if (!producer_) return Status::InvalidArgument(std::string("Kafka producer: ") + error);

  // The partition count, once the topic exists.
  const auto deadline = Clock::now() + options_.wait_for_topic;
  rd_kafka_topic_t* topic = rd_kafka_topic_new(consumer_.get(), options_.topic.c_str(), nullptr);
  while (partitions_ == 0) {
    const rd_kafka_metadata_t* metadata = nullptr;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const int timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 100, 5000));
    const rd_kafka_resp_err_t status =
        rd_kafka_metadata(consumer_.get(), 0, topic, &metadata, timeout_ms);
    if (status == RD_KAFKA_RESP_ERR_NO_ERROR && metadata->topic_cnt == 1 &&
        metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      partitions_ = metadata->topics[0].partition_cnt;
    }
    if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
    if (partitions_ > 0) break;
    if (Clock::now() > deadline || stopping_) {
      rd_kafka_topic_destroy(topic);
      return Status::NotFound("Kafka topic '" + options_.topic + "' not found on " +
                              options_.brokers + " within " +
                              std::to_string(options_.wait_for_topic.count() / 1000) +
                              " s (field 'kafka-topic'; or the brokers are unreachable)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  rd_kafka_topic_destroy(topic);

  // The merge order depends on the partition count: a store follows one count for life.
  const storage::TemporalStore& store = engine_.store();
  std::string value;
  bool found = false;
  if (Status status = store.GetCursor(PartitionsCursor(options_.topic), &value, &found);
      !status.ok()) {
    return status;
  }
  if (found && value != std::to_string(partitions_)) {
    return Status::FailedPrecondition(
        "Kafka topic '" + options_.topic + "' has " + std::to_string(partitions_) +
        " partitions, this store followed it with " + value +
        "; the merged order would change (rebuild replicas from the topic in a fresh data dir)");
  }
  merge_ = std::make_unique<PartitionMerge>(partitions_);
  next_offset_.assign(static_cast<size_t>(partitions_), 0);
  paused_.assign(static_cast<size_t>(partitions_), 0);
  moved_.assign(static_cast<size_t>(partitions_), found ? 0 : 1);  // first append stores the count
  PartitionList assignment(rd_kafka_topic_partition_list_new(partitions_));
  for (int p = 0; p < partitions_; ++p) {
    if (Status status = store.GetCursor(OffsetCursor(options_.topic, p), &value, &found);
        !status.ok()) {
      return status;
    }
    next_offset_[static_cast<size_t>(p)] = found ? std::stoll(value) : 0;
    rd_kafka_topic_partition_list_add(assignment.get(), options_.topic.c_str(), p)->offset =
        found ? next_offset_[static_cast<size_t>(p)] : RD_KAFKA_OFFSET_BEGINNING;
  }
  if (const rd_kafka_resp_err_t status = rd_kafka_assign(consumer_.get(), assignment.get());
      status != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::Unavailable(std::string("Kafka assign failed: ") + rd_kafka_err2str(status));
  }
  batch_.feature_dim = store.feature_dim();
  durable_offset_ = next_offset_;
  std::string offsets;
  for (int64_t offset : next_offset_)
    offsets += (offsets.empty() ? "" : ", ") + std::to_string(offset);
  spdlog::info("Kafka source: topic {} ({} partitions) on {}, resuming at offsets {}",
               options_.topic, partitions_, options_.brokers, offsets);
  return Status::Ok();
}

void KafkaSource::Impl::Run() {
  auto waiting_since = Clock::now(), warned_at = Clock::time_point();
  while (!stopping_) {
    // No waiting while the merge has decided records left over from a full batch.
    const bool ready = merge_->held() > 0 && merge_->WaitingFor() < 0;
    Consume(std::chrono::milliseconds(ready ? 0 : 100));
    Throttle();
    const int waiting_for = merge_->WaitingFor();
    if (waiting_for < 0) {
      waiting_since = Clock::now();
    } else if (Clock::now() - waiting_since > std::chrono::seconds(10) &&
               Clock::now() - warned_at > std::chrono::seconds(60)) {
      warned_at = Clock::now();
      spdlog::warn(
          "Kafka source: {} records wait for partition {} of {}, which has been empty for 10 s; "
          "producers must send watermarks to idle partitions (README, Kafka source)",
          merge_->held(), waiting_for, options_.topic);
    }
    if (!TakeBatch()) continue;
    ScreenBatch();
    if (!SendDeadLetters() || !AppendDurably()) return;  // stopping
    CommitOffsets();
  }
}

void KafkaSource::Impl::Consume(std::chrono::milliseconds wait) {
  // Up to a batch's worth of messages per round, so appends stay large but regular.
  for (size_t taken = 0; taken < options_.max_batch_events && !stopping_; ++taken) {
    rd_kafka_message_t* message =
        rd_kafka_consumer_poll(consumer_.get(), taken == 0 ? static_cast<int>(wait.count()) : 0);
    if (message == nullptr) return;
    if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      spdlog::error("Kafka source: {}", rd_kafka_message_errstr(message));
      rd_kafka_message_destroy(message);
      continue;
    }
    const std::string_view value(static_cast<const char*>(message->payload), message->len);
    SourceRecord record = DecodeSourceRecord(value, message->offset, batch_.feature_dim);
    if (record.kind == SourceRecord::Kind::kRejected) record.payload.assign(value);
    merge_->Push(message->partition, std::move(record));
    rd_kafka_message_destroy(message);
  }
}

void KafkaSource::Impl::Throttle() {
  for (int p = 0; p < partitions_; ++p) {
    const size_t held = merge_->held(p);
    uint8_t& paused = paused_[static_cast<size_t>(p)];
    // Hysteresis: pause when full, resume only once half drained.
    const bool pause =
        paused ? held > options_.max_held_records / 2 : held >= options_.max_held_records;
    if (pause == static_cast<bool>(paused)) continue;
    PartitionList list(rd_kafka_topic_partition_list_new(1));
    rd_kafka_topic_partition_list_add(list.get(), options_.topic.c_str(), p);
    if (pause) {
      rd_kafka_pause_partitions(consumer_.get(), list.get());
    } else {
      rd_kafka_resume_partitions(consumer_.get(), list.get());
    }
    paused = pause ? 1 : 0;
  }
}

bool KafkaSource::Impl::TakeBatch() {
  bool moved = std::find(moved_.begin(), moved_.end(), 1) != moved_.end();
  SourceRecord record;
  int partition = 0;
  uint64_t watermarks = 0;
  while (batch_.size() < options_.max_batch_events && merge_->Pop(&record, &partition)) {
    next_offset_[static_cast<size_t>(partition)] = record.offset + 1;
    moved_[static_cast<size_t>(partition)] = 1;
    moved = true;
    switch (record.kind) {
      case SourceRecord::Kind::kEvent:
        batch_.Add(record.src, record.dst, record.ts, record.features, record.event_id,
                   record.state_label);
        batch_origin_.emplace_back(partition, record.offset);
        break;
      case SourceRecord::Kind::kWatermark:
        ++watermarks;
        break;
      case SourceRecord::Kind::kRejected:
        dead_letters_.push_back(
            {partition, record.offset, std::move(record.reason), std::move(record.payload)});
        break;
    }
  }
  std::lock_guard lock(stats_mutex_);
  stats_.watermarks += watermarks;
  stats_.held_records = merge_->held();
  return moved;
}

void KafkaSource::Impl::ScreenBatch() {
  engine_.Screen(batch_, &verdicts_);
  if (std::all_of(verdicts_.begin(), verdicts_.end(), [](const Status& s) { return s.ok(); })) {
    return;
  }
  EventBatch kept;
  kept.feature_dim = batch_.feature_dim;
  std::vector<std::pair<int, int64_t>> kept_origin;
  for (size_t i = 0; i < batch_.size(); ++i) {
    if (verdicts_[i].ok()) {
      kept.Add(batch_.src[i], batch_.dst[i], batch_.ts[i], batch_.FeaturesOf(i),
               batch_.EventIdOf(i));
      kept_origin.push_back(batch_origin_[i]);
      continue;
    }
    dead_letters_.push_back({batch_origin_[i].first, batch_origin_[i].second,
                             WithoutEventIndex(verdicts_[i].message()), EventAsJson(batch_, i)});
  }
  batch_ = std::move(kept);
  batch_origin_ = std::move(kept_origin);
}

bool KafkaSource::Impl::SendDeadLetters() {
  for (int attempt = 0; !dead_letters_.empty(); ++attempt) {
    if (stopping_) return false;
    const uint64_t failures_before = delivery_failures_.load();
    std::string produce_error;
    for (const DeadLetter& letter : dead_letters_) {
      const std::string key = options_.topic + "/" + std::to_string(letter.partition) + "/" +
                              std::to_string(letter.offset);
      const std::string partition = std::to_string(letter.partition);
      const std::string offset = std::to_string(letter.offset);
      const rd_kafka_resp_err_t status = rd_kafka_producev(
          producer_.get(), RD_KAFKA_V_TOPIC(options_.dead_letter_topic.c_str()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key.data(), key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(letter.value.data()), letter.value.size()),
          RD_KAFKA_V_HEADER("tlpd-reason", letter.reason.data(),
                            static_cast<ssize_t>(letter.reason.size())),
          RD_KAFKA_V_HEADER("tlpd-source-topic", options_.topic.data(),
                            static_cast<ssize_t>(options_.topic.size())),
          RD_KAFKA_V_HEADER("tlpd-source-partition", partition.data(),
                            static_cast<ssize_t>(partition.size())),
          RD_KAFKA_V_HEADER("tlpd-source-offset", offset.data(),
                            static_cast<ssize_t>(offset.size())),
          RD_KAFKA_V_END);
      if (status != RD_KAFKA_RESP_ERR_NO_ERROR) produce_error = rd_kafka_err2str(status);
    }
    const rd_kafka_resp_err_t flushed = rd_kafka_flush(producer_.get(), 10000);
    if (produce_error.empty() && flushed == RD_KAFKA_RESP_ERR_NO_ERROR &&
        delivery_failures_.load() == failures_before) {
      std::lock_guard lock(stats_mutex_);
      stats_.dead_letters += dead_letters_.size();
      dead_letters_.clear();
      return true;
    }
    const std::string error = "dead-letter topic '" + options_.dead_letter_topic +
                              "' not writable (" +
                              (produce_error.empty() ? "delivery failed" : produce_error) +
                              "); holding the stream until it is";
    if (attempt == 0) spdlog::error("Kafka source: {}", error);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return true;
}

bool KafkaSource::Impl::AppendDurably() {
  std::vector<storage::SourceCursor> cursors = {
      {PartitionsCursor(options_.topic), std::to_string(partitions_)}};
  for (int p = 0; p < partitions_; ++p) {
    if (moved_[static_cast<size_t>(p)]) {
      cursors.push_back(
          {OffsetCursor(options_.topic, p), std::to_string(next_offset_[static_cast<size_t>(p)])});
    }
  }
  for (int attempt = 0;; ++attempt) {
    const Status status = engine_.Ingest(batch_, &result_, cursors);
    if (status.ok()) break;
    // Screened events fail only when the store does (disk full, I/O): keep the batch and its
    // position, retry; nothing is skipped.
    if (attempt == 0) spdlog::error("Kafka source: append failed, retrying: {}", status.ToString());
    if (stopping_) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  {
    std::lock_guard lock(stats_mutex_);
    stats_.events_applied += result_.accepted;
    stats_.duplicates += result_.duplicates;
    durable_offset_ = next_offset_;
  }
  batch_.Clear();
  batch_origin_.clear();
  std::fill(moved_.begin(), moved_.end(), 0);
  return true;
}

void KafkaSource::Impl::CommitOffsets() {
  PartitionList offsets(rd_kafka_topic_partition_list_new(partitions_));
  for (int p = 0; p < partitions_; ++p) {
    rd_kafka_topic_partition_list_add(offsets.get(), options_.topic.c_str(), p)->offset =
        next_offset_[static_cast<size_t>(p)];
  }
  // Asynchronous: the group's offsets are for lag monitoring; the store holds the truth.
  rd_kafka_commit(consumer_.get(), offsets.get(), 1);
}

KafkaSourceStats KafkaSource::Impl::Stats() const {
  KafkaSourceStats stats;
  std::vector<int64_t> durable;
  {
    std::lock_guard lock(stats_mutex_);
    stats = stats_;
    durable = durable_offset_;
  }
  int64_t lag = 0;
  for (int p = 0; p < partitions_; ++p) {
    int64_t low = 0, high = 0;
    if (rd_kafka_get_watermark_offsets(consumer_.get(), options_.topic.c_str(), p, &low, &high) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        high < 0) {
      lag = -1;
      break;
    }
    lag += std::max<int64_t>(0, high - durable[static_cast<size_t>(p)]);
  }
  stats.lag_records = lag;
  return stats;
}

KafkaSource::KafkaSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KafkaSource::~KafkaSource() = default;

Status KafkaSource::Start(const KafkaSourceOptions& options, Engine& engine,
                          std::unique_ptr<KafkaSource>* source) {
  if (options.topic.empty()) {
    return Status::InvalidArgument("field 'kafka-topic' is required with --kafka-brokers");
  }
  auto impl = std::make_unique<Impl>(options, engine);
  if (Status status = impl->Connect(); !status.ok()) return status;
  impl->Launch();
  source->reset(new KafkaSource(std::move(impl)));
  return Status::Ok();
}

KafkaSourceStats KafkaSource::Stats() const { return impl_->Stats(); }

}  // namespace tlp::server
