#include "storage/node_state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <numeric>

#include "storage/temporal_store.h"

namespace tlp::storage {
namespace {

// Record: node (u64), last update ts (f64), memory (f32 x dim), CRC32 of the bytes before it
// (u32), zero padding to a multiple of 8 bytes.
constexpr size_t kRecordHeaderBytes = 16;
// Journal: header (magic, generation, rows, dim as u64), rows x (slot u64, record), then the
// CRC32 of everything before it (u64).
constexpr uint64_t kJournalMagic = 0x31304a534e504c54ULL;  // "TLPNSJ01"
constexpr size_t kJournalHeaderBytes = 32;
// Rows encoded per write while journalling or publishing: bounds the buffers (~3.5 MB at
// dim 100) whatever the size of a checkpoint.
constexpr size_t kRowsPerChunk = 8192;
// Most bytes of one write into the slots file. The page cache sizes a new folio by the write
// that creates it (Linux 6.x, ext4 with large folios), and every later write into a folio walks
// all of its buffer heads: scattered 424-byte rows cost ~5.7 us of CPU each in a 4.2 GB file
// written in 4 MiB pieces (2 MiB folios), ~1 us in one written in 64 KiB pieces (400k random
// pwrites, model-106 machine), and storage_bench's BM_NodeStateCheckpoint (400k rows into a
// 10M-slot file, fsync) went from 2.04 to 1.15 s of CPU per checkpoint with this bound. Appends
// of new nodes are as fast in 64 KiB pieces.
constexpr size_t kMaxSlotWriteBytes = 64 << 10;

std::string JournalName(uint64_t generation) { return "journal-" + std::to_string(generation % 2); }

Status Errno(const std::string& what) {
  return Status::IoError(what + ": " + std::strerror(errno));
}

uint32_t Crc(uint32_t crc, const char* data, size_t bytes) {
  // zlib's CRC32 rather than a hash of our own: a checksum that tools can recompute, and one of
  // the store's existing dependencies.
  while (bytes > 0) {
    const auto step = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(data), step));
    data += step;
    bytes -= step;
  }
  return crc;
}

Status WriteAll(int fd, const char* data, size_t bytes, uint64_t offset, const std::string& what) {
  while (bytes > 0) {
    const ssize_t written = ::pwrite(fd, data, bytes, static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      return Errno(what);
    }
    data += written;
    bytes -= static_cast<size_t>(written);
    offset += static_cast<uint64_t>(written);
  }
  return Status::Ok();
}

// Reads exactly `bytes`; false at end of file.
Status ReadAll(int fd, char* data, size_t bytes, uint64_t offset, const std::string& what,
               bool* complete) {
  *complete = true;
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, data, bytes, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Errno(what);
    }
    if (got == 0) {
      *complete = false;
      return Status::Ok();
    }
    data += got;
    bytes -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

Status Sync(int fd, const std::string& what) {
  return ::fdatasync(fd) == 0 ? Status::Ok() : Errno(what);
}

class FileCloser {
 public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

NodeStateFile::~NodeStateFile() {
  if (slots_fd_ >= 0) ::close(slots_fd_);
  if (index_fd_ >= 0) ::close(index_fd_);
}

size_t NodeStateFile::RecordBytes(uint32_t dim) {
  return (kRecordHeaderBytes + dim * sizeof(float) + sizeof(uint32_t) + 7) / 8 * 8;
}

Status NodeStateFile::Open(const std::string& directory, const NodeStateCommit& committed,
                           bool sync, std::unique_ptr<NodeStateFile>* file) {
  std::unique_ptr<NodeStateFile> result(new NodeStateFile());
  result->directory_ = directory;
  result->sync_ = sync;
  result->committed_ = committed;
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) return Status::IoError("cannot create '" + directory + "': " + error.message());
  result->slots_fd_ = ::open((directory + "/slots").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (result->slots_fd_ < 0) return Errno("cannot open '" + directory + "/slots'");
  result->index_fd_ = ::open((directory + "/index").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (result->index_fd_ < 0) return Errno("cannot open '" + directory + "/index'");

  // The index up to the committed count; a tail past it is from a generation never committed.
  std::vector<uint64_t> nodes(committed.slots);
  bool complete = true;
  Status status =
      ReadAll(result->index_fd_, reinterpret_cast<char*>(nodes.data()),
              nodes.size() * sizeof(uint64_t), 0, "cannot read the node state index", &complete);
  if (!status.ok()) return status;
  if (!complete) {
    return Status::Corruption("node state index '" + directory + "/index' holds fewer than the " +
                              std::to_string(committed.slots) + " committed slots");
  }
  if (::ftruncate(result->index_fd_, static_cast<off_t>(nodes.size() * sizeof(uint64_t))) != 0) {
    return Errno("cannot trim the node state index");
  }
  result->slot_of_.reserve(nodes.size());
  for (uint64_t slot = 0; slot < nodes.size(); ++slot) result->slot_of_[nodes[slot]] = slot;
  if (result->slot_of_.size() != nodes.size()) {
    return Status::Corruption("node state index '" + directory + "/index' repeats a node");
  }
  if (committed.generation > 0) {
    status = result->ReplayJournal();
    if (!status.ok()) return status;
  }
  struct stat info {};
  if (::fstat(result->slots_fd_, &info) != 0) return Errno("cannot stat the node state slots");
  if (static_cast<uint64_t>(info.st_size) < committed.slots * RecordBytes(committed.dim)) {
    return Status::Corruption("node state slots '" + directory + "/slots' end before slot " +
                              std::to_string(committed.slots));
  }
  *file = std::move(result);
  return Status::Ok();
}

void NodeStateFile::EncodeRecord(const NodeStates& states, size_t i, char* out) {
  const size_t bytes = RecordBytes(states.dim);
  std::memset(out, 0, bytes);
  std::memcpy(out, &states.nodes[i], sizeof(uint64_t));
  std::memcpy(out + 8, &states.last_update_ts[i], sizeof(double));
  const std::span<const float> memory = states.MemoryOf(i);
  std::memcpy(out + kRecordHeaderBytes, memory.data(), memory.size_bytes());
  const size_t covered = kRecordHeaderBytes + memory.size_bytes();
  const uint32_t crc = Crc(0, out, covered);
  std::memcpy(out + covered, &crc, sizeof(crc));
}

Status NodeStateFile::SyncSlots() const {
  return sync_ ? Sync(slots_fd_, "cannot sync the node state slots") : Status::Ok();
}

Status NodeStateFile::WriteJournal(uint64_t generation, uint32_t dim, size_t rows,
                                   const std::function<void(size_t, char*)>& fill) {
  // The file about to be overwritten holds generation - 2, whose rows must be in the slots for
  // good first (its successor's journal is the other file).
  Status status = SyncSlots();
  if (!status.ok()) return status;
  const std::string path = directory_ + "/" + JournalName(generation);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot open '" + path + "'");
  FileCloser closer(fd);
  const size_t entry_bytes = sizeof(uint64_t) + RecordBytes(dim);
  journal_buffer_.resize(
      std::max(kJournalHeaderBytes, std::min(rows, kRowsPerChunk) * entry_bytes));
  const uint64_t header[4] = {kJournalMagic, generation, rows, dim};
  std::memcpy(journal_buffer_.data(), header, sizeof(header));
  uint32_t crc = Crc(0, journal_buffer_.data(), kJournalHeaderBytes);
  status = WriteAll(fd, journal_buffer_.data(), kJournalHeaderBytes, 0, "cannot write " + path);
  uint64_t offset = kJournalHeaderBytes;
  for (size_t begin = 0; status.ok() && begin < rows; begin += kRowsPerChunk) {
    const size_t end = std::min(rows, begin + kRowsPerChunk);
    for (size_t i = begin; i < end; ++i)
      fill(i, journal_buffer_.data() + (i - begin) * entry_bytes);
    const size_t bytes = (end - begin) * entry_bytes;
    crc = Crc(crc, journal_buffer_.data(), bytes);
    status = WriteAll(fd, journal_buffer_.data(), bytes, offset, "cannot write " + path);
    offset += bytes;
  }
  const uint64_t trailer = crc;
  if (status.ok()) {
    status = WriteAll(fd, reinterpret_cast<const char*>(&trailer), sizeof(trailer), offset,
                      "cannot write " + path);
  }
  if (status.ok() && sync_) status = Sync(fd, "cannot sync " + path);
  return status;
}

Status NodeStateFile::Prepare(const NodeStates& states, NodeStateCommit* next) {
  if (failed_) return Status::IoError("node state file failed earlier; reopen the store");
  if (committed_.slots > 0 && states.dim != committed_.dim) {
    return Status::InvalidArgument("node states of width " + std::to_string(states.dim) +
                                   " for a store holding width " + std::to_string(committed_.dim));
  }
  *next = committed_;
  next->generation = committed_.generation + 1;
  next->dim = states.dim;
  // Slots: the node's own, or the next free one. Rows are journalled and published in slot
  // order, so that runs of new nodes are one write each.
  std::vector<uint64_t> new_nodes;
  absl::flat_hash_map<uint64_t, uint64_t> new_slots;
  prepared_slots_.resize(states.size());
  {
    std::shared_lock lock(mutex_);
    for (size_t i = 0; i < states.size(); ++i) {
      const uint64_t node = states.nodes[i];
      if (const auto it = slot_of_.find(node); it != slot_of_.end()) {
        prepared_slots_[i] = it->second;
      } else if (const auto [fresh, added] = new_slots.try_emplace(node, next->slots); added) {
        prepared_slots_[i] = next->slots++;
        new_nodes.push_back(node);
      } else {
        prepared_slots_[i] = fresh->second;  // a repeat: refused below
      }
    }
  }
  prepared_order_.resize(states.size());
  std::iota(prepared_order_.begin(), prepared_order_.end(), size_t{0});
  std::sort(prepared_order_.begin(), prepared_order_.end(),
            [this](size_t a, size_t b) { return prepared_slots_[a] < prepared_slots_[b]; });
  for (size_t k = 1; k < prepared_order_.size(); ++k) {
    if (prepared_slots_[prepared_order_[k]] == prepared_slots_[prepared_order_[k - 1]]) {
      return Status::InvalidArgument("node " + std::to_string(states.nodes[prepared_order_[k]]) +
                                     " appears twice in one checkpoint");
    }
  }
  Status status = WriteAll(index_fd_, reinterpret_cast<const char*>(new_nodes.data()),
                           new_nodes.size() * sizeof(uint64_t), committed_.slots * sizeof(uint64_t),
                           "cannot extend the node state index");
  if (!status.ok()) return status;
  if (sync_ && !new_nodes.empty()) {
    status = Sync(index_fd_, "cannot sync the node state index");
    if (!status.ok()) return status;
  }
  return WriteJournal(next->generation, states.dim, states.size(), [&](size_t k, char* out) {
    const size_t i = prepared_order_[k];
    std::memcpy(out, &prepared_slots_[i], sizeof(uint64_t));
    EncodeRecord(states, i, out + sizeof(uint64_t));
  });
}

Status NodeStateFile::Publish(const NodeStates& states, const NodeStateCommit& next) {
  // New nodes become readable only once their slots are written; rows of known nodes are
  // replaced slot by slot, each under the exclusive lock.
  {
    std::unique_lock lock(mutex_);
    committed_.dim = next.dim;
  }
  const size_t record_bytes = RecordBytes(next.dim);
  std::vector<char> records(std::min(states.size(), kRowsPerChunk) * record_bytes);
  std::vector<uint64_t> slots;
  for (size_t begin = 0; begin < states.size(); begin += kRowsPerChunk) {
    const size_t end = std::min(states.size(), begin + kRowsPerChunk);
    slots.clear();
    for (size_t k = begin; k < end; ++k) {
      const size_t i = prepared_order_[k];
      slots.push_back(prepared_slots_[i]);
      EncodeRecord(states, i, records.data() + (k - begin) * record_bytes);
    }
    Status status = WriteSlots(slots, records.data(), record_bytes);
    if (!status.ok()) {
      std::unique_lock lock(mutex_);
      failed_ = true;
      return status;
    }
  }
  std::unique_lock lock(mutex_);
  for (size_t i = 0; i < states.size(); ++i) {
    if (prepared_slots_[i] >= committed_.slots) slot_of_[states.nodes[i]] = prepared_slots_[i];
  }
  committed_ = next;
  return Status::Ok();
}

Status NodeStateFile::WriteSlots(std::span<const uint64_t> slots, const char* records,
                                 size_t record_bytes) {
  const size_t max_rows = std::max<size_t>(1, kMaxSlotWriteBytes / record_bytes);
  const std::string what = "cannot write node state slots";
  for (size_t begin = 0; begin < slots.size();) {
    size_t end = begin + 1;
    while (end < slots.size() && end - begin < max_rows && slots[end] == slots[end - 1] + 1) {
      ++end;
    }
    std::unique_lock lock(mutex_);
    Status status = WriteAll(slots_fd_, records + begin * record_bytes,
                             (end - begin) * record_bytes, slots[begin] * record_bytes, what);
    if (!status.ok()) return status;
    begin = end;
  }
  return Status::Ok();
}

Status NodeStateFile::ReplayJournal() {
  const std::string path = directory_ + "/" + JournalName(committed_.generation);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Errno("cannot open '" + path + "' (generation " + std::to_string(committed_.generation) +
                 " is committed)");
  FileCloser closer(fd);
  uint64_t header[4] = {};
  bool complete = true;
  Status status = ReadAll(fd, reinterpret_cast<char*>(header), sizeof(header), 0,
                          "cannot read " + path, &complete);
  if (!status.ok()) return status;
  if (!complete || header[0] != kJournalMagic || header[1] != committed_.generation ||
      (header[2] > 0 && header[3] != committed_.dim)) {
    return Status::Corruption(path + " is not the journal of committed generation " +
                              std::to_string(committed_.generation));
  }
  const size_t rows = header[2];
  const size_t record_bytes = RecordBytes(committed_.dim);
  const size_t entry_bytes = sizeof(uint64_t) + record_bytes;
  uint32_t crc = Crc(0, reinterpret_cast<const char*>(header), sizeof(header));
  std::vector<char> entries(std::min(rows, kRowsPerChunk) * entry_bytes);
  std::vector<char> records(std::min(rows, kRowsPerChunk) * record_bytes);
  std::vector<uint64_t> slots;
  uint64_t offset = kJournalHeaderBytes;
  for (size_t begin = 0; begin < rows; begin += kRowsPerChunk) {
    const size_t count = std::min(rows, begin + kRowsPerChunk) - begin;
    status =
        ReadAll(fd, entries.data(), count * entry_bytes, offset, "cannot read " + path, &complete);
    if (!status.ok()) return status;
    if (!complete) return Status::Corruption(path + " ends early");
    crc = Crc(crc, entries.data(), count * entry_bytes);
    offset += count * entry_bytes;
    slots.resize(count);
    for (size_t k = 0; k < count; ++k) {
      std::memcpy(&slots[k], entries.data() + k * entry_bytes, sizeof(uint64_t));
      if (slots[k] >= committed_.slots)
        return Status::Corruption(path + " names a slot past the index");
      std::memcpy(records.data() + k * record_bytes, entries.data() + k * entry_bytes + 8,
                  record_bytes);
    }
    status = WriteSlots(slots, records.data(), record_bytes);
    if (!status.ok()) return status;
  }
  uint64_t trailer = 0;
  status = ReadAll(fd, reinterpret_cast<char*>(&trailer), sizeof(trailer), offset,
                   "cannot read " + path, &complete);
  if (!status.ok()) return status;
  if (!complete || trailer != crc) return Status::Corruption(path + " fails its checksum");
  return SyncSlots();
}

Status NodeStateFile::PrepareClear(NodeStateCommit* next) {
  if (failed_) return Status::IoError("node state file failed earlier; reopen the store");
  *next = NodeStateCommit{committed_.generation + 1, 0, 0};
  return WriteJournal(next->generation, 0, 0, [](size_t, char*) {});
}

Status NodeStateFile::PublishClear(const NodeStateCommit& next) {
  std::unique_lock lock(mutex_);
  slot_of_.clear();
  committed_ = next;
  if (::ftruncate(index_fd_, 0) != 0 || ::ftruncate(slots_fd_, 0) != 0) {
    failed_ = true;
    return Errno("cannot empty the node state files");
  }
  return Status::Ok();
}

Status NodeStateFile::Read(std::span<const uint64_t> nodes, NodeStates* states) const {
  const size_t count = nodes.size();
  const size_t dim = states->dim;
  states->nodes.assign(nodes.begin(), nodes.end());
  states->last_update_ts.assign(count, 0.0);
  states->memory.assign(count * dim, 0.0f);
  states->found.assign(count, 0);
  if (count == 0) return Status::Ok();
  std::shared_lock lock(mutex_);
  if (failed_) return Status::IoError("node state file failed earlier; reopen the store");
  if (committed_.slots == 0) return Status::Ok();
  if (dim != committed_.dim) {
    return Status::Corruption("node states are stored with width " +
                              std::to_string(committed_.dim) + ", read with width " +
                              std::to_string(dim));
  }
  const size_t record_bytes = RecordBytes(dim);
  const size_t covered = kRecordHeaderBytes + dim * sizeof(float);
  std::vector<char> record(record_bytes);
  for (size_t i = 0; i < count; ++i) {
    const auto it = slot_of_.find(nodes[i]);
    if (it == slot_of_.end()) continue;
    bool complete = true;
    Status status = ReadAll(slots_fd_, record.data(), record_bytes, it->second * record_bytes,
                            "cannot read node state slots", &complete);
    if (!status.ok()) return status;
    uint64_t node = 0;
    uint32_t crc = 0;
    std::memcpy(&node, record.data(), sizeof(node));
    std::memcpy(&crc, record.data() + covered, sizeof(crc));
    if (!complete || node != nodes[i] || crc != Crc(0, record.data(), covered)) {
      return Status::Corruption("node state slot " + std::to_string(it->second) + " of node " +
                                std::to_string(nodes[i]) + " is damaged");
    }
    std::memcpy(&states->last_update_ts[i], record.data() + 8, sizeof(double));
    std::memcpy(states->memory.data() + i * dim, record.data() + kRecordHeaderBytes,
                dim * sizeof(float));
    states->found[i] = 1;
  }
  return Status::Ok();
}

Status NodeStateFile::CopyTo(const std::string& directory) const {
  std::shared_lock lock(mutex_);
  if (failed_) return Status::IoError("node state file failed earlier; reopen the store");
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  for (const char* name : {"slots", "index", "journal-0", "journal-1"}) {
    const std::filesystem::path from = std::filesystem::path(directory_) / name;
    if (!error && std::filesystem::exists(from)) {
      std::filesystem::copy_file(from, std::filesystem::path(directory) / name, error);
    }
  }
  if (error) {
    return Status::IoError("cannot copy node states to '" + directory + "': " + error.message());
  }
  return Status::Ok();
}

uint64_t NodeStateFile::disk_bytes() const {
  uint64_t bytes = 0;
  for (const char* name : {"slots", "index", "journal-0", "journal-1"}) {
    struct stat info {};
    if (::stat((directory_ + "/" + name).c_str(), &info) == 0) {
      bytes += static_cast<uint64_t>(info.st_size);
    }
  }
  return bytes;
}

uint64_t NodeStateFile::stored_nodes() const {
  std::shared_lock lock(mutex_);
  return committed_.slots;
}

}  // namespace tlp::storage
