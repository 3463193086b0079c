// The linear layers on a rank's threads (SetGemmThreads, which sets ComputeThreads):
// Forward and Backward of a column- then row-parallel pair, tp = 1 and 2, give the
// same bits at 1, 2 and 3 threads per rank (products cut by shape alone, bias
// gradients summed per column by one thread), with shapes large enough that every
// pass is split.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/column_parallel_linear.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/tp_testing.h"
#include "tensor_parallel/layers/row_parallel_linear.h"

namespace loom {
namespace {

using tp_layers_testing::ExpectAllOk;
using tp_layers_testing::RandomTensor;
using tp_layers_testing::RunTp;

constexpr int64_t kRows = 256, kHidden = 128, kFfn = 512;

// Every value a rank computes, in order: y, dx, then each weight and bias gradient.
using Bits = std::vector<std::vector<uint32_t>>;

void Append(Bits& out, const Tensor& t) {
  const std::vector<float> v = t.ToF32();
  std::vector<uint32_t> bits(v.size());
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  out.push_back(std::move(bits));
}

// RunPair runs the MLP pair forward and backward on tp ranks and returns each rank's bits.
std::vector<Bits> RunPair(int tp) {
  std::vector<Bits> bits(static_cast<size_t>(tp));
  const Tensor fc_w = RandomTensor({kFfn, kHidden}, 1), fc_b = RandomTensor({kFfn}, 2);
  const Tensor proj_w = RandomTensor({kHidden, kFfn}, 3), proj_b = RandomTensor({kHidden}, 4);
  const Tensor x = RandomTensor({kRows, kHidden}, 5), dy = RandomTensor({kRows, kHidden}, 6);
  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear fc,
                          ColumnParallelLinear::Create(fc_w, &fc_b, comm, {}));
    LOOM_ASSIGN_OR_RETURN(RowParallelLinear proj,
                          RowParallelLinear::Create(proj_w, &proj_b, comm, {}));
    LOOM_ASSIGN_OR_RETURN(Tensor h, fc.Forward(x));
    LOOM_ASSIGN_OR_RETURN(Tensor y, proj.Forward(h));
    LOOM_ASSIGN_OR_RETURN(Tensor dh, proj.Backward(dy));
    LOOM_ASSIGN_OR_RETURN(Tensor dx, fc.Backward(dh));
    Bits& mine = bits[static_cast<size_t>(comm.rank())];
    Append(mine, y);
    Append(mine, dx);
    Append(mine, fc.weight_grad());
    Append(mine, fc.bias_grad());
    Append(mine, proj.weight_grad());
    Append(mine, proj.bias_grad());
    return absl::OkStatus();
  }));
  return bits;
}

TEST(LayerThreadsTest, ThreadsPerRankDoNotChangeTheBits) {
  const int before = GemmThreads();
  for (const int tp : {1, 2}) {
    LOOM_ASSERT_OK(SetGemmThreads(1));
    const std::vector<Bits> one = RunPair(tp);
    for (const int threads : {2, 3}) {
      LOOM_ASSERT_OK(SetGemmThreads(threads));
      const std::vector<Bits> many = RunPair(tp);
      ASSERT_EQ(many.size(), one.size());
      for (size_t rank = 0; rank < one.size(); ++rank) {
        ASSERT_EQ(many[rank].size(), 6u) << "tp " << tp << " rank " << rank;
        for (size_t k = 0; k < one[rank].size(); ++k) {
          EXPECT_FALSE(one[rank][k].empty());
          EXPECT_EQ(many[rank][k], one[rank][k]) << "tp " << tp << " rank " << rank << " value "
                                                 << k << " at " << threads << " threads";
        }
      }
    }
  }
  LOOM_ASSERT_OK(SetGemmThreads(before));
}

}  // namespace
}  // namespace loom
