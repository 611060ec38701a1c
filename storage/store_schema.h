// Names in a tlpd store that more than one reader of it needs: the column families that
// hold the event log and the metadata, and the metadata key of the edge feature width
// (temporal_store.h describes each family's contents).
#pragma once

namespace tlp::storage {

inline constexpr const char* kEventsFamily = "events";
inline constexpr const char* kMetaFamily = "meta";
inline constexpr const char* kFeatureDimKey = "feature_dim";

}  // namespace tlp::storage
