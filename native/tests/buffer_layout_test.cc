// BufferLayout: a batch of tensors as one virtual buffer, pieces adjacent on both sides merged into runs, and
// gather / scatter / reduce over any byte range of it.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "algorithms/buffer_layout.h"

namespace hvdlite {
namespace {

std::vector<int64_t> RunSizes(const BufferLayout &layout, int64_t total) {
  std::vector<int64_t> sizes;
  layout.ForEachRun(0, total, [&](size_t, int64_t, int64_t bytes) { sizes.push_back(bytes); });
  return sizes;
}

TEST(BufferLayout, PiecesAdjacentOnBothSidesAreOneRun) {
  std::vector<uint8_t> in(100), out(100);
  // Views: [0,10) [10,30) adjacent on both sides; [30,40) input adjacent but output 5 bytes further on.
  std::vector<BufferPiece> pieces = {{in.data(), out.data(), 10},
                                     {in.data() + 10, out.data() + 10, 20},
                                     {in.data() + 30, out.data() + 35, 10}};
  BufferLayout layout;
  layout.Reset(pieces);
  EXPECT_EQ(RunSizes(layout, 40), (std::vector<int64_t>{30, 10}));
  EXPECT_EQ(layout.InOnePiece(5, 20, true), in.data() + 5);   // inside the first run
  EXPECT_EQ(layout.InOnePiece(25, 10, true), nullptr);        // crosses into the second
}

TEST(BufferLayout, GatherAndScatterAnyRangeAcrossPieces) {
  std::vector<uint8_t> a(7), b(5), c(9), out_a(7), out_b(5), out_c(9);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 100);
  std::iota(c.begin(), c.end(), 200);
  BufferLayout layout;
  layout.Reset({{a.data(), out_a.data(), 7}, {b.data(), out_b.data(), 5}, {c.data(), out_c.data(), 9}});
  std::vector<uint8_t> gathered(8);
  layout.Gather(5, 8, true, gathered.data());  // a[5..6], b[0..4], c[0]
  EXPECT_EQ(gathered, (std::vector<uint8_t>{5, 6, 100, 101, 102, 103, 104, 200}));
  layout.Scatter(5, 8, gathered.data());
  EXPECT_EQ(out_a[5], 5);
  EXPECT_EQ(out_b, b);
  EXPECT_EQ(out_c[0], 200);
  EXPECT_EQ(out_c[1], 0);  // outside the range: untouched
}

TEST(BufferLayout, ReduceAddsWhatWasReceivedIntoTheOutputs) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20}, out_a(3), out_b(2);
  BufferLayout layout;
  layout.Reset({{reinterpret_cast<uint8_t *>(a.data()), reinterpret_cast<uint8_t *>(out_a.data()), 12},
                {reinterpret_cast<uint8_t *>(b.data()), reinterpret_cast<uint8_t *>(out_b.data()), 8}});
  std::vector<float> received = {0.5f, 0.5f, 0.5f};  // elements 2..4 of the virtual buffer
  layout.Reduce(8, 12, reinterpret_cast<const uint8_t *>(received.data()), false, DataType::kFloat32,
                ReduceOp::kSum);
  EXPECT_EQ(out_a[2], 3.5f);
  EXPECT_EQ(out_b[0], 10.5f);
  EXPECT_EQ(out_b[1], 20.5f);
  EXPECT_EQ(out_a[0], 0.0f);  // outside the range
}

TEST(BufferLayout, EmptyPiecesAreSkipped) {
  std::vector<uint8_t> a(4, 1), b(4, 2), out(8);
  BufferLayout layout;
  layout.Reset({{a.data(), out.data(), 4}, {nullptr, nullptr, 0}, {b.data(), out.data() + 16, 4}});
  std::vector<uint8_t> gathered(8);
  layout.Gather(0, 8, true, gathered.data());
  EXPECT_EQ(gathered, (std::vector<uint8_t>{1, 1, 1, 1, 2, 2, 2, 2}));
}

}  // namespace
}  // namespace hvdlite
