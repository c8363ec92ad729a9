#include <catch2/catch.hpp>

#include "core/optimizer_model.hpp"

using namespace memplan;

namespace {
// Two matrices and a vector: an embedding 8000x256, a projection 688x256, a norm of 256 (fp32).
std::vector<OptParam> params(int elem = 4) {
  return {{8000 * 256, elem, 8000, 256, 1}, {688 * 256, elem, 688, 256, 1}, {256, elem, 0, 0, 1}};
}
constexpr std::int64_t kNumel = 8000 * 256 + 688 * 256 + 256;
OptimizerConfig optim(OptimizerKind k, std::map<std::string, std::string> args = {}) { return {k, std::move(args)}; }
}  // namespace

TEST_CASE("torch AdamW: two states in the parameter dtype; temporaries by implementation") {
  // CPU (torch 1.13): single-tensor loop; sqrt() and the division hold two copies of the
  // largest parameter; one 4-byte step tensor per parameter.
  auto cpu = optimizer_footprint(optim(OptimizerKind::kAdamWTorch), Device::kCpu, params());
  CHECK(cpu.state_bytes == kNumel * 4 * 2 + 3 * 4);
  CHECK(cpu.temp_bytes == 8000 * 256 * 4 * 2);
  // CUDA (torch 2.x): foreach sqrt() of every exp_avg_sq at once; step tensors stay on the CPU.
  auto cuda = optimizer_footprint(optim(OptimizerKind::kAdamWTorch), Device::kCuda, params());
  CHECK(cuda.state_bytes == kNumel * 4 * 2);
  CHECK(cuda.temp_bytes == kNumel * 4);
  // fused: no temporaries, step on the device.
  auto fused = optimizer_footprint(optim(OptimizerKind::kAdamWTorchFused), Device::kCuda, params(2));
  CHECK(fused.state_bytes == kNumel * 2 * 2 + 3 * 4);
  CHECK(fused.temp_bytes == 0);
  // torch 1.13 foreach adds eps out of place: two full copies.
  auto fe = optimizer_footprint(optim(OptimizerKind::kAdamWTorch, {{"foreach", "true"}}), Device::kCpu, params());
  CHECK(fe.temp_bytes == kNumel * 4 * 2);
  auto ams = optimizer_footprint(optim(OptimizerKind::kAdamWTorch, {{"amsgrad", "true"}}), Device::kCuda, params());
  CHECK(ams.state_bytes == kNumel * 4 * 3);
}

TEST_CASE("bitsandbytes 8-bit states: a byte per value plus fp32 absmax per 256, fp32 under 4096 values") {
  auto f = optimizer_footprint(optim(OptimizerKind::kAdamW8bit), Device::kCuda, params(2));
  // 2,048,000 values = 8000 blocks of 256; 176,128 values = 688 blocks; 4-byte absmax each.
  const std::int64_t big = (8000 * 256 + 8000 * 4) * 2 + (688 * 256 + 688 * 4) * 2;
  const std::int64_t small = 256 * 4 * 2;
  CHECK(f.state_bytes == big + small);
  CHECK(f.temp_bytes == 0);
  CHECK_FALSE(f.paged);
  // Paged: the uint8 buffers of tensors with >= 1e5 values are cudaMallocManaged pages outside
  // the allocator (here both matrices); absmax and the small norm's fp32 states are not.
  auto paged = optimizer_footprint(optim(OptimizerKind::kPagedAdamW8bit), Device::kCuda, params(2));
  CHECK(paged.paged);
  CHECK(paged.paged_bytes == (8000 * 256 + 688 * 256) * 2);
  CHECK(paged.state_bytes == (8000 * 4 + 688 * 4) * 2 + small);
  CHECK(paged.state_bytes + paged.paged_bytes == f.state_bytes);
  // Lion keeps one state.
  auto lion = optimizer_footprint(optim(OptimizerKind::kLion8bit), Device::kCuda, params(2));
  CHECK(lion.state_bytes == big / 2 + small / 2);
  // 32-bit bitsandbytes states are fp32 even for bf16 parameters.
  CHECK(optimizer_footprint(optim(OptimizerKind::kLion32bit), Device::kCuda, params(2)).state_bytes == kNumel * 4);
  auto p32 = optimizer_footprint(optim(OptimizerKind::kPagedAdamW32bit), Device::kCuda, params(2));
  CHECK(p32.paged_bytes == (8000 * 256 + 688 * 256) * 4 * 2);
  CHECK(p32.state_bytes == 256 * 4 * 2);
}

TEST_CASE("SGD, Adagrad, RMSprop states follow their arguments") {
  CHECK(optimizer_footprint(optim(OptimizerKind::kSgd), Device::kCpu, params()).state_bytes == 0);
  CHECK(optimizer_footprint(optim(OptimizerKind::kSgd, {{"momentum", "0.9"}}), Device::kCpu, params()).state_bytes ==
        kNumel * 4);
  CHECK(optimizer_footprint(optim(OptimizerKind::kSgd, {{"momentum", "0.9"}, {"nesterov", "true"}}), Device::kCpu,
                            params())
            .temp_bytes == 8000 * 256 * 4);
  CHECK(optimizer_footprint(optim(OptimizerKind::kAdagrad), Device::kCpu, params()).state_bytes == kNumel * 4 + 12);
  auto rms = optimizer_footprint(optim(OptimizerKind::kRmsprop, {{"momentum", "0.9"}, {"centered", "true"}}),
                                 Device::kCpu, params());
  CHECK(rms.state_bytes == kNumel * 4 * 3 + 12);
  CHECK(rms.temp_bytes == 8000 * 256 * 4);
}

TEST_CASE("Adafactor factors matrices into row and column moments") {
  auto f = optimizer_footprint(optim(OptimizerKind::kAdafactor), Device::kCpu, params());
  // rows+cols per matrix, the full vector for the norm, and a 4-byte RMS per parameter.
  CHECK(f.state_bytes == (8000 + 256) * 4 + (688 + 256) * 4 + 256 * 4 + 3 * 4);
  CHECK(f.temp_bytes == 8000 * 256 * 4 * 2);
  // bf16 parameters: gradient and parameter fp32 copies on top.
  CHECK(optimizer_footprint(optim(OptimizerKind::kAdafactor), Device::kCpu, params(2)).temp_bytes ==
        8000 * 256 * 4 * 4);
}

TEST_CASE("unknown optimizer arguments are rejected with a suggestion") {
  auto s = validate_optim_args(optim(OptimizerKind::kRmsprop, {{"centred", "true"}}));
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().to_string() == "--optim-args: 'centred' is not an argument of rmsprop; did you mean 'centered'?");
}

TEST_CASE("torchao AdamW8bit/AdamW4bit: block-wise codes, an fp32 scale per block, dtype states for odd tensors") {
  // 8-bit, blocks of 256: 2,048,000 values = 8000 blocks; 176,128 = 688 blocks; each state also
  // holds a 256-entry fp32 code table. The 256-value norm (< 4096 values) gets zeros_like(p):
  // bf16, 2 bytes per value per state.
  auto a8 = optimizer_footprint(optim(OptimizerKind::kAdamWTorchao8bit), Device::kCuda, params(2));
  const std::int64_t q8 = (8000 * 256 + 8000 * 4 + 1024) + (688 * 256 + 688 * 4 + 1024);
  CHECK(a8.state_bytes == 2 * q8 + 2 * 256 * 2);
  // The step's functionalized copies for the largest parameter: a new state of each kind and a
  // new bf16 parameter.
  CHECK(a8.temp_bytes == 2 * (8000 * 256 + 8000 * 4 + 1024) + 8000 * 256 * 2);
  CHECK_FALSE(a8.paged);
  // 4-bit, blocks of 128: half a byte per value, 16000 and 1376 blocks, a 16-entry table.
  auto a4 = optimizer_footprint(optim(OptimizerKind::kAdamWTorchao4bit), Device::kCuda, params(2));
  const std::int64_t q4 = (8000 * 128 + 16000 * 4 + 64) + (688 * 128 + 1376 * 4 + 64);
  CHECK(a4.state_bytes == 2 * q4 + 2 * 256 * 2);
  // A tensor whose size is not a multiple of the block keeps dtype states: 4100 values (>= 4096).
  std::vector<OptParam> odd{{4100, 4, 41, 100, 1}};
  CHECK(optimizer_footprint(optim(OptimizerKind::kAdamWTorchao8bit), Device::kCuda, odd).state_bytes == 4100 * 4 * 2);
  // block_size and amsgrad from --optim-args: blocks of 2048 at 8 bits, a third state.
  auto big = optimizer_footprint(optim(OptimizerKind::kAdamWTorchao8bit, {{"block_size", "2048"}, {"amsgrad", "true"}}),
                                 Device::kCuda, params(2));
  const std::int64_t q2048 = (8000 * 256 + 1000 * 4 + 1024) + (688 * 256 + 86 * 4 + 1024);
  CHECK(big.state_bytes == 3 * q2048 + 3 * 256 * 2);
  auto bad = validate_optim_args(optim(OptimizerKind::kAdamWTorchao4bit, {{"block_size", "0"}}));
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().to_string().find("block_size") != std::string::npos);
}

TEST_CASE("fused expert Parameters: the single-tensor loop steps the 3-D tensor as one") {
  // 8 experts' gate_up_proj, 512 x 256 each (fp32), as per-expert matrices and as one
  // [8, 512, 256] Parameter (MiniMax-M2's toy, docs/models.md#fused-expert-parameters), next to
  // an embedding of 2048 x 256. Per-expert: the largest tensor is the embedding, 2 MiB, so
  // sqrt() and the division hold 4 MiB; fused: the 4 MiB Parameter, 8 MiB. One step tensor per
  // Parameter: 8 + 1 per-expert, 1 + 1 fused. States are the same bytes either way.
  const std::vector<OptParam> split = {{512 * 256, 4, 512, 256, 8}, {2048 * 256, 4, 2048, 256, 1}};
  std::vector<OptParam> fused = split;
  fused[0].fused = 8;
  const auto a = optimizer_footprint(optim(OptimizerKind::kAdamWTorch), Device::kCpu, split);
  const auto b = optimizer_footprint(optim(OptimizerKind::kAdamWTorch), Device::kCpu, fused);
  CHECK(a.temp_bytes == 2 * 2048 * 256 * 4);
  CHECK(b.temp_bytes == 2 * 8 * 512 * 256 * 4);
  CHECK(a.state_bytes == (8 * 512 * 256 + 2048 * 256) * 4 * 2 + 9 * 4);
  CHECK(b.state_bytes == (8 * 512 * 256 + 2048 * 256) * 4 * 2 + 2 * 4);
}
