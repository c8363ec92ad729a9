// Llama 3.2 Vision in the training step (src/core/sim/program.cpp, docs/formulas.md#llama-32-vision):
// the collator's inputs and the tower's masks counted by hand from transformers' mllama modules,
// what a text-only batch trains, and the configurations memplan refuses.
#include <algorithm>

#include <catch2/catch.hpp>

#include "core/sim/program.hpp"
#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::require_consistent;
using memplan::testing::tiny_mllama;

namespace {

TrainingConfig lora_cfg(int images) {
  TrainingConfig c;
  c.micro_batch = 2;
  c.seq_len = 64;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  c.attn = AttnImpl::kSdpa;
  c.vision.images = images;
  c.lora.enabled = true;
  c.lora.r = 8;
  c.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return c;
}

}  // namespace

TEST_CASE("mllama inputs: pixel tiles, the collator's masks and the tower's aspect-ratio mask") {
  // b = 1, s = 16, 4 images of 4 tiles of 56 x 56 (4 x 4 patches + the class token = 17
  // positions, padded to 24: n = 96 per image). The largest inputs_and_masks of the step is
  // while the tower builds its (images, 1, n, n) mask: m @ m^T and its product with finfo.min.
  //   input_ids, attention_mask, labels: 3 x 16 x 8                          384
  //   pixel_values fp32: 4 images x 4 tiles x 3 x 56 x 56 x 4             602,112
  //   cross_attention_mask (b, s, images, tiles) int64: 16 x 16 x 8         2,048
  //   aspect_ratio_ids and aspect_ratio_mask int64: 4 x (1 + 4) x 8           160
  //   two (4, 96, 96) bf16 masks: 2 x 73,728                              147,456
  // The text side's cross-attention mask transients (int64 + fp32 + bf16 over s x M, M = 4 x 4 x
  // 17 = 272: 14 x 4,352 = 60,928) come after the tower's masks are gone.
  sim::ProgramSpec sp;
  sp.model = tiny_mllama();
  sp.model_layers = {0, 1, 2, 3, 4};
  sp.weight_dt = sp.embed_dt = sp.norm_dt = sp.compute_dt = sim::DT::kBF16;
  sp.full_finetune = false;
  sp.lora.enabled = true;
  sp.lora.r = 8;
  sp.lora.targets = {"q_proj", "v_proj"};
  sp.attn = AttnImpl::kSdpa;
  sp.ops.cuda = true;
  sp.ops.inplace_accumulation = true;
  sp.images = 4;
  sp.image_patches = 96;
  sp.image_tokens = 1;
  const sim::ProgramResult r = sim::run_step(sp);
  CHECK(r.leaked.empty());
  std::int64_t inputs = 0;
  for (const auto& e : r.events)
    inputs = std::max(inputs, r.cats.at(e, sim::Cat::kInputs).eval(1, 16));
  CHECK(inputs == 384 + 602'112 + 2'048 + 160 + 147'456);
}

TEST_CASE("a text-only mllama batch skips the cross-attention layers: their adapters get no gradient") {
  // LoRA r = 8 on every Linear of a layer (h 128, kv 64, MLP 256): q 8 x (128 + 128), k and v
  // 8 x (128 + 64), o 8 x 256, gate and up 8 x (128 + 256), down 8 x (256 + 128) = 16,384. With
  // images, all 5 layers train; without, the 2 cross-attention layers are skipped (MllamaTextModel)
  // and AdamW never sees a gradient for their adapters.
  auto with = estimate(tiny_mllama(), lora_cfg(1));
  auto without = estimate(tiny_mllama(), lora_cfg(0));
  REQUIRE(with.has_value());
  REQUIRE(without.has_value());
  require_consistent(*with);
  require_consistent(*without);
  CHECK(with->params.trainable == 5 * 16'384);
  CHECK(without->params.trainable == 3 * 16'384);
  CHECK(without->params.total == with->params.total);
}

TEST_CASE("mllama configurations memplan refuses, and the one PyTorch refuses") {
  TrainingConfig c = lora_cfg(1);
  c.vision.train_vision_tower = true;
  auto tower = estimate(tiny_mllama(), c);
  REQUIRE_FALSE(tower.has_value());
  CHECK(tower.error().message.find("training the Llama 3.2 Vision tower is not modelled") != std::string::npos);

  c = lora_cfg(1);
  c.attn = AttnImpl::kFlashAttention2;
  auto fa2 = estimate(tiny_mllama(), c);
  REQUIRE_FALSE(fa2.has_value());
  CHECK(fa2.error().suggestion.find("sdpa") != std::string::npos);

  c = lora_cfg(1);
  c.parallel.num_gpus = 2;
  c.parallel.tensor_parallel = 2;
  auto tp = estimate(tiny_mllama(), c);
  REQUIRE_FALSE(tp.has_value());
  CHECK(tp.error().message.find("tensor, pipeline, context or sequence parallelism") != std::string::npos);

  // A trained projector under reentrant checkpointing: every cross-attention layer's
  // recomputation backpropagates into the projector's output a second time.
  c = lora_cfg(1);
  c.vision.train_projector = true;
  c.gradient_checkpointing = true;
  c.checkpoint_reentrant = true;
  auto e = estimate(tiny_mllama(), c);
  REQUIRE(e.has_value());
  CHECK(std::any_of(e->warnings.begin(), e->warnings.end(),
                    [](const std::string& w) { return w.find("backward through the graph a second time") != std::string::npos; }));
  c.checkpoint_reentrant = false;
  auto ok = estimate(tiny_mllama(), c);
  REQUIRE(ok.has_value());
  CHECK(ok->warnings.empty());
  // Every image is packed as max_num_tiles tiles: a resolution changes nothing, and says so.
  c.vision.image_height = c.vision.image_width = 1024;
  auto sized = estimate(tiny_mllama(), c);
  REQUIRE(sized.has_value());
  CHECK(sized->warnings == std::vector<std::string>{
                               "the image size has no effect on Llama 3.2 Vision: every image is packed as 4 tiles "
                               "of 56x56"});
  CHECK(sized->peak.count() == ok->peak.count());
}

TEST_CASE("periodic cross-attention layers: one period extrapolated gives every layer's simulation") {
  // 30 layers, cross-attention at 2, 5, ..., 26: layers 0-1 first, units [2, 5) ... [23, 26)
  // repeating, 26-29 last. The reduced models simulate one and two units (9 and 12 layers); the
  // engine must give the same peak as simulating all 30, at every (b, s) and with accumulation.
  // (With fewer layers than the two reduced models hold together, every layer is simulated.)
  ModelSpec m = tiny_mllama();
  m.num_layers = 30;
  m.cross_attention_layers = {2, 5, 8, 11, 14, 17, 20, 23, 26};
  for (const bool lora : {false, true})
    for (const bool gc : {false, true})
      for (const bool reentrant : {false, true})
        for (const AttnImpl attn : {AttnImpl::kEager, AttnImpl::kSdpa}) {
          if (!gc && reentrant) continue;
          INFO("lora " << lora << " checkpointing " << gc << " reentrant " << reentrant << " eager "
                       << (attn == AttnImpl::kEager));
          TrainingConfig c = lora_cfg(1);
          c.lora.enabled = lora;
          c.gradient_checkpointing = gc;
          c.checkpoint_reentrant = reentrant;
          c.attn = attn;
          c.grad_accum = 2;
          const auto [reduced, full] = memplan::testing::same_as_every_layer(m, c, {{1, 16}, {2, 64}, {5, 300}});
          auto er = reduced.at(2, 64);
          auto ef = full.at(2, 64);
          REQUIRE(er.has_value());
          REQUIRE(ef.has_value());
          CHECK(er->params.trainable == ef->params.trainable);
          // The reduced models were used (no fallback to simulating every layer): 9 + 12 layers.
          CHECK(std::any_of(er->assumptions.begin(), er->assumptions.end(), [](const std::string& a) {
            return a.find("21 layers simulated, the repeating cross-attention period extrapolated to 30") !=
                   std::string::npos;
          }));
          CHECK(std::any_of(ef->assumptions.begin(), ef->assumptions.end(), [](const std::string& a) {
            return a.find("every layer simulated") != std::string::npos;
          }));
        }
}
