#include "common/event_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tlp {
namespace {

std::string TempFile(const std::string& name, const std::string& content) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << content;
  return path.string();
}

std::string DataPath(const std::string& name) {
  const char* root = std::getenv("TLP_SOURCE_DIR");
  return std::string(root ? root : ".") + "/data/" + name;
}

TEST(EventReader, ReadsBundledWikipediaGzip) {
  EventBatch batch;
  const Status status = EventReader::ReadAll(DataPath("wikipedia.csv.gz"), &batch);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(batch.size(), 157474u);
  EXPECT_EQ(batch.feature_dim, 0u);
  EXPECT_EQ(batch.ts.front(), 0.0);
  EXPECT_EQ(batch.ts.back(), 2678373.0);
  EXPECT_GE(batch.dst.front(), 8227u);  // pages are ids 8227..9226
  // Its label column: 217 edits after which the user was banned.
  ASSERT_EQ(batch.state_labels.size(), batch.size());
  EXPECT_EQ(std::count(batch.state_labels.begin(), batch.state_labels.end(), 1), 217);
}

TEST(EventReader, ReadsBundledCollegeMsg) {
  EventBatch batch;
  ASSERT_TRUE(EventReader::ReadAll(DataPath("collegemsg.txt.gz"), &batch).ok());
  EXPECT_EQ(batch.size(), 59835u);
  EXPECT_GT(batch.ts.front(), 1.08e9);
}

TEST(EventReader, ReadsOwnFormatWithIdsAndFeatures) {
  const std::string path =
      TempFile("tlp_own.csv", "src,dst,ts,event_id,f0,f1\n1,2,0.5,a,0.1,0.2\n3,4,1.5,b,1,2\n");
  EventBatch batch;
  ASSERT_TRUE(EventReader::ReadAll(path, &batch).ok());
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch.feature_dim, 2u);
  EXPECT_EQ(batch.EventIdOf(1), "b");
  EXPECT_FLOAT_EQ(batch.FeaturesOf(1)[1], 2.0f);
}

TEST(EventReader, GarbageLineIsAnErrorWithItsLineNumber) {
  const std::string path = TempFile("tlp_bad.csv", "u,i,ts,label\n1,2,3,0\n4,x,5,0\n");
  EventBatch batch;
  const Status status = EventReader::ReadAll(path, &batch);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find(":3:"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("'dst'"), std::string::npos) << status.message();
  const Status truncated =
      EventReader::ReadAll(TempFile("tlp_short.csv", "src dst time\n1 2\n"), &batch);
  EXPECT_NE(truncated.message().find("expected 3 fields"), std::string::npos);
  EXPECT_EQ(EventReader::ReadAll(TempFile("tlp_hdr.csv", "a,b\n"), &batch).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(EventReader::ReadAll("/nonexistent/file.csv", &batch).code(), Status::Code::kNotFound);
}

TEST(EventReader, JodieLabelsBecomeStateLabels) {
  EventBatch batch;
  ASSERT_TRUE(
      EventReader::ReadAll(TempFile("tlp_labels.csv", "u,i,ts,label\n1,2,3,0\n1,4,5,1\n"), &batch)
          .ok());
  ASSERT_EQ(batch.state_labels.size(), 2u);
  EXPECT_EQ(batch.StateLabelOf(0), 0);
  EXPECT_EQ(batch.StateLabelOf(1), 1);
  const Status bad =
      EventReader::ReadAll(TempFile("tlp_bad_label.csv", "u,i,ts,label\n1,2,3,0.5\n"), &batch);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("'label'"), std::string::npos) << bad.message();
  // Other formats carry no labels.
  ASSERT_TRUE(EventReader::ReadAll(TempFile("tlp_plain.csv", "src,dst,ts\n1,2,3\n"), &batch).ok());
  EXPECT_TRUE(batch.state_labels.empty());
}

}  // namespace
}  // namespace tlp
