// RocksDB's status as tlpd's: the one mapping of storage errors, so that every caller of the
// storage library sees NOT_FOUND, CORRUPTION or IO_ERROR with what it was doing in the message.
#pragma once

#include <rocksdb/status.h>

#include <string>

#include "common/status.h"

namespace tlp::storage {

inline Status FromRocks(const rocksdb::Status& status, const std::string& what) {
  if (status.ok()) return Status::Ok();
  if (status.IsCorruption()) return Status::Corruption(what + ": " + status.ToString());
  if (status.IsNotFound()) return Status::NotFound(what + ": " + status.ToString());
  return Status::IoError(what + ": " + status.ToString());
}

}  // namespace tlp::storage
