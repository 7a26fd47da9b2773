#include "onnx/proto.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

using namespace basalt;

TEST(Proto, EmptyBufferIsEmptyModel) {
  auto m = pb::parse_model(nullptr, 0);
  EXPECT_FALSE(m.has_graph);
}

TEST(Proto, TruncatedVarintIsError) {
  const uint8_t b[] = {0x08, 0xff};
  EXPECT_THROW(pb::parse_model(b, sizeof b), Error);
}

TEST(Proto, LengthPastEndIsError) {
  const uint8_t b[] = {0x3a, 0x10, 0x00};  // field 7 (graph), length 16, 1 byte present
  EXPECT_THROW(pb::parse_model(b, sizeof b), Error);
}

TEST(Proto, ParsesIrVersionAndOpset) {
  // ir_version=8, opset_import { domain "" version 13 }
  const uint8_t b[] = {0x08, 0x08, 0x42, 0x02, 0x10, 0x0d};
  auto m = pb::parse_model(b, sizeof b);
  EXPECT_EQ(m.ir_version, 8);
  ASSERT_EQ(m.opset_import.size(), 1u);
  EXPECT_EQ(m.opset_import[0].version, 13);
}
