// The vision tower in the training step (src/core/sim/program.cpp, docs/formulas.md#vision-language-models):
// what a trained tower saves for backward, counted by hand from transformers' Qwen2.5-VL modules,
// and what a frozen one costs (its input only).
#include <algorithm>

#include <catch2/catch.hpp>

#include "core/sim/program.hpp"
#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::component;
using memplan::testing::require_consistent;
using memplan::testing::tiny_qwen25_vl;

namespace {

TrainingConfig cfg() {
  TrainingConfig c;
  c.micro_batch = 2;
  c.seq_len = 64;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  c.attn = AttnImpl::kSdpa;
  c.optim.kind = OptimizerKind::kSgd;
  c.vision.images = 1;
  c.vision.image_height = c.vision.image_width = 112;  // 8 x 8 patches, 16 image tokens
  return c;
}

std::int64_t forward_peak(const Estimate& e) {
  for (const auto& p : e.phases)
    if (p.phase == Phase::kForward) return p.peak.count();
  FAIL("no forward phase");
  return 0;
}

}  // namespace

TEST_CASE("a trained Qwen2.5-VL tower keeps every block's saved tensors until backward") {
  const ModelSpec m = tiny_qwen25_vl();
  TrainingConfig frozen = cfg();
  TrainingConfig trained = cfg();
  trained.vision.train_vision_tower = true;
  auto ef = estimate(m, frozen);
  auto et = estimate(m, trained);
  REQUIRE(ef.has_value());
  REQUIRE(et.has_value());
  require_consistent(*ef);
  require_consistent(*et);
  // Per patch and block, in bf16 (h = 64, I = 96, heads 4; transformers' Qwen2_5_VLVisionBlock):
  //   norm1 (Qwen2RMSNorm): the fp32 input 4h, rsqrt 4, the bf16 normalized 2h     6h + 4
  //   qkv's input 2h; the rotated q and k (bf16) 4h; v, a view keeping qkv's 6h     12h
  //   SDPA's output 2h and logsumexp 4 x heads; torch.cat's copy (proj's input) 2h  4h + 16
  //   norm2                                                                          6h + 4
  //   MLP: input 2h; silu's input (gate) 2I, its output 2I, up 2I, down's input 2I  2h + 8I
  // = 30h + 8I + 24 = 2,712 bytes. Outside the blocks, per patch: the bf16 pixel copy the
  // Conv3d saves (2 x 1176); the fp32 rotary cos and sin the rotations keep (2 x 4 x head_dim
  // 16 = 128); and the frozen merger's share: its weights need no gradient, so ln_q keeps only
  // the fp32 input and rsqrt (4h + 4) and the two Linears keep no input, while GELU keeps its
  // input (2h per patch): 6h + 4. (masked_scatter's mask is saved in both runs: the embedding
  // is trained.)
  const std::int64_t patches = 2 * 64;  // b x 8 x 8
  const std::int64_t per_patch = 3 * 2'712 + 2'352 + 128 + (6 * 64 + 4);
  CHECK(forward_peak(*et) - forward_peak(*ef) == patches * per_patch);
  // The tower's parameters become trainable: the Conv3d 1176 x 64 and three blocks of 35,456.
  CHECK(et->params.trainable - ef->params.trainable == 1176 * 64 + 3 * 35'456);

  // Training the merger too: ln_q's bf16 normalized input (2h) and the inputs of its two
  // Linears (2h per patch each) are saved for the weights' gradients.
  TrainingConfig both = trained;
  both.vision.train_projector = true;
  auto eb = estimate(m, both);
  REQUIRE(eb.has_value());
  CHECK(forward_peak(*eb) - forward_peak(*et) == patches * 6 * 64);
}

TEST_CASE("a frozen tower saves nothing: the images cost their pixel_values only") {
  const ModelSpec m = tiny_qwen25_vl();
  TrainingConfig with = cfg();
  with.lora.enabled = true;
  with.lora.target_modules = {"q_proj", "v_proj"};
  TrainingConfig without = with;
  without.vision.images = 0;
  auto a = estimate(m, with);
  auto b = estimate(m, without);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  // pixel_values: fp32 (patches, 3 x 2 x 14 x 14), alive for the step.
  CHECK(forward_peak(*a) - forward_peak(*b) == 2 * 64 * 1176 * 4);
  CHECK(component(*a, "activations") == component(*b, "activations"));
}

TEST_CASE("image tokens must fit in the sequence") {
  TrainingConfig c = cfg();
  c.seq_len = 15;  // 16 image tokens
  const auto e = estimate(tiny_qwen25_vl(), c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message == "a sequence of 15 tokens cannot hold 1 image(s) of 112x112: 16 image tokens");
}

TEST_CASE("images asked of a text-only model are an error; the other vision settings a warning") {
  ModelSpec m = tiny_qwen25_vl();
  m.vision = VisionSpec{};
  TrainingConfig c = cfg();
  const auto e = estimate(m, c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message == "images need a vision-language model; tiny-qwen2.5-vl has no vision tower");
  c.vision.images = -1;  // not asked: a LLaMA-Factory file's image_max_pixels and freeze switches
  c.vision.train_vision_tower = true;
  const auto w = estimate(m, c);
  REQUIRE(w.has_value());
  CHECK(std::find(w->warnings.begin(), w->warnings.end(),
                  "the image size and vision-tower settings are ignored: the model has no vision tower") !=
        w->warnings.end());
}

TEST_CASE("simulating the first and last vision block of each kind gives every block's maximum") {
  // 9 blocks, full attention in 1, 4 and 7: the blocks between are one node per run whose saved
  // bytes and gradients stand for theirs. Direct simulation of all 9 must give the same peak at
  // every (b, s), for full fine-tuning and LoRA in the tower, with and without checkpointing,
  // eager and SDPA, and the same persistent state after the step.
  for (const bool lora : {false, true})
    for (const bool gc : {false, true})
      for (const AttnImpl attn : {AttnImpl::kEager, AttnImpl::kSdpa}) {
        INFO("lora " << lora << " checkpointing " << gc << " eager " << (attn == AttnImpl::kEager));
        sim::ProgramSpec sp;
        sp.model = tiny_qwen25_vl();
        sp.model.vision.depth = 9;
        sp.model.vision.fullatt_blocks = {1, 4, 7};
        sp.model_layers = {0, 1};
        sp.weight_dt = sp.embed_dt = sp.norm_dt = sp.compute_dt = sim::DT::kBF16;
        sp.full_finetune = !lora;
        if (lora) {
          sp.lora.enabled = true;
          sp.lora.r = 4;
          sp.lora.targets = {"q_proj", "v_proj", "qkv", "gate_proj"};
        }
        sp.gradient_checkpointing = gc;
        sp.attn = attn;
        sp.ops.cuda = true;
        sp.ops.inplace_accumulation = true;
        sp.images = 1;
        sp.image_patches = 256;
        sp.image_rows = sp.image_cols = 16;
        sp.image_tokens = 64;
        sp.train_vision_tower = true;
        const sim::ProgramResult reduced = sim::run_step(sp);
        sp.vision_all_blocks = true;
        const sim::ProgramResult all = sim::run_step(sp);
        CHECK(reduced.leaked.empty());
        for (const auto& [b, s] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 64}, {3, 128}, {8, 256}}) {
          std::int64_t r = 0, a = 0;
          for (const auto& e : reduced.events) r = std::max(r, e.total.eval(b, s));
          for (const auto& e : all.events) a = std::max(a, e.total.eval(b, s));
          CHECK(r == a);
          std::int64_t re = 0, ae = 0;
          for (const auto& p : reduced.end_of_step) re += p.eval(b, s);
          for (const auto& p : all.end_of_step) ae += p.eval(b, s);
          CHECK(re == ae);
        }
      }
}

TEST_CASE("Pixtral: every block's output stays in the hidden_states tuple get_image_features asks for") {
  // A tiny Mistral 3 (docs/formulas.md#pixtral): Pixtral blocks of width 64, MLP 128, 4 heads,
  // patch 14; two 280 x 280 images (20 x 20 patches each) in one sequence of N = 800 patches
  // through the frozen tower with eager attention, whose N x N scores make the tower the peak.
  ModelSpec m = tiny_qwen25_vl();
  m.model_type = "mistral";
  m.qkv_bias = false;
  VisionSpec& v = m.vision;
  v = VisionSpec{};
  v.kind = VisionKind::kPixtral;
  v.model_type = "mistral3";
  v.hidden_size = 64;
  v.intermediate_size = 128;
  v.num_heads = 4;
  v.patch_size = 14;
  v.image_size = 280;
  v.spatial_merge_size = 2;
  v.projector_input_dim = 64;
  TrainingConfig c = cfg();
  c.attn = AttnImpl::kEager;
  c.seq_len = 128;  // 10 x 10 [IMG] + 10 [IMG_BREAK] / [IMG_END] = 110 tokens
  c.vision.image_height = c.vision.image_width = 280;
  v.depth = 2;
  auto two = estimate(m, c);
  v.depth = 3;
  auto three = estimate(m, c);
  REQUIRE(two.has_value());
  REQUIRE(three.has_value());
  require_consistent(*three);
  // One block more: one more (N, h) bf16 hidden state alive at the last block's scores
  // (800 x 64 x 2 = 102,400 bytes) and the block's frozen bf16 weights: q/k/v/o 4 x 64^2,
  // gate/up/down 3 x 64 x 128, two RMSNorms 2 x 64 = 41,088 parameters, 82,176 bytes.
  CHECK(forward_peak(*three) - forward_peak(*two) == 102'400 + 82'176);
}
