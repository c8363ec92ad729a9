// QLoRA / LLM.int8() preparation, transformers' loss variants and FSDP's root unit
// (docs/formulas.md#qlora, #llm-int8, #logits-and-loss, #fsdp-and-lora). Expected bytes are
// derived by hand from the parameter counts.
#include <catch2/catch.hpp>

#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::component;
using memplan::testing::llama31_8b;
using memplan::testing::require_consistent;
using memplan::testing::toy_llama;

namespace {

// Llama-3.1-8B: 8,030,261,248 parameters; embed_tokens and lm_head 128256 x 4096 = 525,336,576
// each; 65 RMSNorm weights of 4096 (266,240); the rest, 6,979,321,856, are layer Linears.
constexpr std::int64_t kTotal = 8'030'261'248LL;
constexpr std::int64_t kEmbed = 525'336'576LL;
constexpr std::int64_t kNorms = 266'240LL;
constexpr std::int64_t kLinear = kTotal - 2 * kEmbed - kNorms;
// 4-bit storage with an fp32 absmax per 64 values (every Linear is 64-divisible).
constexpr std::int64_t kQuant4 = kLinear / 2 + kLinear / 64 * 4;
// q_proj (4096 x 4096)+r x (4096 + 4096), v_proj (1024 x 4096)+r x (4096 + 1024), r = 16, 32 layers.
constexpr std::int64_t kLoraDefault = 6'815'744LL;

TrainingConfig qlora(QuantConfig::KbitPrepare prep) {
  TrainingConfig c;
  c.micro_batch = 1;
  c.seq_len = 256;
  c.torch_dtype = DType::kBFloat16;
  c.autocast = DType::kBFloat16;
  c.lora.enabled = true;
  c.quant.load_in_4bit = true;
  c.quant.kbit_prepare = prep;
  return c;
}

}  // namespace

TEST_CASE("k-bit preparation decides the dtype of the parameters bitsandbytes leaves alone") {
  using KP = QuantConfig::KbitPrepare;
  auto freeze = estimate(llama31_8b(), qlora(KP::kFreezeOnly));
  REQUIRE(freeze.has_value());
  require_consistent(*freeze);
  CHECK(component(*freeze, "weights") == kQuant4 + (2 * kEmbed + kNorms) * 2);
  CHECK(component(*freeze, "adapter_weights") == kLoraDefault * 2);  // current TRL: bf16 adapters

  // PEFT prepare_model_for_kbit_training: every non-Params4bit parameter to fp32; the adapters
  // keep get_peft_model's fp32.
  auto peft = estimate(llama31_8b(), qlora(KP::kPeftUpcast));
  REQUIRE(peft.has_value());
  require_consistent(*peft);
  CHECK(component(*peft, "weights") == kQuant4 + (2 * kEmbed + kNorms) * 4);
  CHECK(component(*peft, "adapter_weights") == kLoraDefault * 4);

  // TRL 0.13: then peft_module_casting_to_bf16 puts embed_tokens and lm_head back to bf16; the
  // norms stay fp32.
  auto trl = estimate(llama31_8b(), qlora(KP::kTrlLegacy));
  REQUIRE(trl.has_value());
  require_consistent(*trl);
  CHECK(component(*trl, "weights") == kQuant4 + 2 * kEmbed * 2 + kNorms * 4);
  CHECK(component(*trl, "adapter_weights") == kLoraDefault * 4);

  // An explicit adapter dtype wins.
  TrainingConfig c = qlora(KP::kFreezeOnly);
  c.lora.adapter_dtype = DType::kFloat32;
  auto fp32 = estimate(llama31_8b(), c);
  REQUIRE(fp32.has_value());
  CHECK(component(*fp32, "adapter_weights") == kLoraDefault * 4);
  CHECK(fp32->params.trainable == kLoraDefault);
}

TEST_CASE("LLM.int8() stores one byte per weight plus an fp32 scale per output row") {
  TrainingConfig c = qlora(QuantConfig::KbitPrepare::kFreezeOnly);
  c.quant.load_in_4bit = false;
  c.quant.load_in_8bit = true;
  auto e = estimate(llama31_8b(), c);
  REQUIRE(e.has_value());
  require_consistent(*e);
  // Output rows per layer: q 4096 + k 1024 + v 1024 + o 4096 + gate 14336 + up 14336 + down 4096.
  const std::int64_t rows = 32LL * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096);
  CHECK(rows == 1'376'256);
  CHECK(component(*e, "weights") == kLinear + rows * 4 + (2 * kEmbed + kNorms) * 2);
}

TEST_CASE("transformers <= 4.48 keeps a shifted fp32 copy of the logits in the loss") {
  // Tiny layers, large vocabulary, fp32 on the CPU with SGD (no state): the loss sets the peak.
  // ForCausalLMLoss (4.48): logits.float() is the fp32 logits themselves; the contiguous shifted
  // copy (b(s-1)V) and log_softmax's output (b(s-1)V) are alive with them at the end of the
  // forward: 4bsV + 8b(s-1)V bytes, more than backward's 12b(s-1)V. With padded labels (>= 4.49)
  // the end of the forward holds the logits and the log-probs, 8bsV, and backward's three
  // logit-sized fp32 tensors (12bsV) are the peak.
  ModelSpec m = toy_llama(1);
  m.vocab_size = 128256;
  const std::int64_t b = 4, s = 256, V = 128256;
  TrainingConfig c;
  c.micro_batch = b;
  c.seq_len = s;
  c.device = Device::kCpu;
  c.optim.kind = OptimizerKind::kSgd;
  c.loss_shift = TrainingConfig::LossShift::kShiftLogitsCopy;
  auto e = estimate(m, c);
  REQUIRE(e.has_value());
  require_consistent(*e);
  CHECK(e->peak_phase == Phase::kForward);
  const std::int64_t logit_bytes = component(*e, "logits_and_loss");
  CHECK(logit_bytes == Approx(static_cast<double>(4 * b * s * V + 8 * b * (s - 1) * V)).epsilon(1e-6));
  c.loss_shift = TrainingConfig::LossShift::kPadLabels;
  auto pad = estimate(m, c);
  REQUIRE(pad.has_value());
  CHECK(pad->peak_phase == Phase::kBackward);
  CHECK(component(*pad, "logits_and_loss") == 3 * b * s * V * 4 + 4);
  // fp32 logits: 12bsV - 8bV at the shifted forward against 12bsV in the padded backward; with
  // 16-bit logits .float() is one more copy and the shifted forward (14bsV - 8bV) is the larger.
  CHECK(pad->peak.count() - e->peak.count() > 7 * b * V);
}

TEST_CASE("FSDP FULL_SHARD keeps the root unit unsharded through forward and backward, not at the step") {
  // Root unit of Llama-3.1-8B: embed_tokens, lm_head, final norm in bf16 = (2 x 525,336,576 +
  // 4096) x 2 bytes; on 2 GPUs each holds half as its shard and the other half gathered.
  TrainingConfig c;
  c.micro_batch = 1;
  c.seq_len = 2048;
  c.torch_dtype = DType::kBFloat16;
  c.lora.enabled = true;
  c.gradient_checkpointing = true;
  c.parallel.num_gpus = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  auto est = Estimator::create(llama31_8b(), c);
  REQUIRE(est.has_value());
  const std::int64_t root = (2 * kEmbed + 4096) * 2;
  auto fwd = est->at_phase(1, 2048, Phase::kForward);
  REQUIRE(fwd.has_value());
  require_consistent(*fwd);
  // The forward peak is at the loss, where no decoder layer is gathered.
  CHECK(component(*fwd, "gathered_parameters") == root - root / 2);
  auto step = est->at_phase(1, 2048, Phase::kOptimizerStep);
  REQUIRE(step.has_value());
  CHECK(component(*step, "gathered_parameters") == 0);
  CHECK(component(*step, "weights") == (kTotal * 2 + 1) / 2);
}

TEST_CASE("FSDP-QLoRA: the quant state stays whole on every GPU; uint8 storage is an assumption") {
  // Llama-3.1-8B layer Linears, nf4 without nested quantization: absmax = 4 bytes per 64 values.
  TrainingConfig c = qlora(QuantConfig::KbitPrepare::kFreezeOnly);
  c.parallel.num_gpus = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  auto est = Estimator::create(llama31_8b(), c);
  REQUIRE(est.has_value());
  auto step = est->at_phase(1, 256, Phase::kOptimizerStep);
  REQUIRE(step.has_value());
  require_consistent(*step);
  const std::int64_t absmax = kLinear / 64 * 4;
  const std::int64_t shardable = kQuant4 - absmax + (2 * kEmbed + kNorms) * 2;
  CHECK(component(*step, "weights") == (shardable + 1) / 2 + absmax);
  // The FSDP note and the allocator replay's (docs/formulas.md#the-caching-allocator).
  REQUIRE(step->assumptions.size() == 2);
  CHECK(step->assumptions[0].rfind("FSDP cannot flatten bitsandbytes' uint8 4-bit storage", 0) == 0);
  CHECK(step->assumptions[1].rfind("reserved: the caching allocator replayed", 0) == 0);
  c.quant.quant_storage = DType::kBFloat16;
  auto bf16 = estimate(llama31_8b(), c);
  REQUIRE(bf16.has_value());
  CHECK(bf16->assumptions.size() == 1);  // the allocator replay's only
  CHECK(component(*bf16, "weights") > 0);
}

TEST_CASE("transformers <= 4.45 frees the 16-bit logits when the forward upcasts them") {
  // bf16 weights: 4.46-4.48's ForCausalLMLoss keeps the model's bf16 logits (2bsV) next to its
  // fp32 copy, the shifted copy and the log-probs; 4.45's `logits = logits.float()` in the
  // forward drops them. Both peak at the end of the forward, 2bsV bytes apart.
  ModelSpec m = toy_llama(1);
  m.vocab_size = 128256;
  const std::int64_t b = 2, s = 256, V = 128256;
  TrainingConfig c;
  c.micro_batch = b;
  c.seq_len = s;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCpu;
  c.optim.kind = OptimizerKind::kSgd;
  c.loss_shift = TrainingConfig::LossShift::kShiftLogitsCopy;
  auto copy = estimate(m, c);
  c.loss_shift = TrainingConfig::LossShift::kUpcastInModel;
  auto upcast = estimate(m, c);
  REQUIRE(copy.has_value());
  REQUIRE(upcast.has_value());
  require_consistent(*upcast);
  CHECK(copy->peak_phase == Phase::kForward);
  CHECK(upcast->peak_phase == Phase::kForward);
  CHECK(copy->peak.count() - upcast->peak.count() == 2 * b * s * V);
}

namespace {

// toy_llama (hidden 256, 4 heads of 64, 2 KV heads, intermediate 688) with a 512-token vocabulary
// (so that the layers, not the logits, set the backward peak), bf16, LoRA
// on the default q_proj/v_proj (r 16, fp32 adapters), checkpointing, FSDP FULL_SHARD on 2 GPUs.
ModelSpec small_vocab_toy() {
  ModelSpec m = toy_llama(4);
  m.vocab_size = 512;
  return m;
}

TrainingConfig fsdp_lora(bool reentrant) {
  TrainingConfig c;
  c.micro_batch = 2;
  c.seq_len = 512;
  c.torch_dtype = DType::kBFloat16;
  c.lora.enabled = true;
  c.gradient_checkpointing = true;
  c.checkpoint_reentrant = reentrant;
  c.parallel.num_gpus = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  return c;
}

// One decoder layer: q 256x256, k 256x128, v 256x128, o 256x256, gate/up/down 3 x 256x688 and two
// norms of 256 = 725,504 bf16 weights; adapters q 16x(256+256) + v 16x(256+128) = 14,336 fp32.
constexpr std::int64_t kToyLayerBytes = 725'504LL * 2 + 14'336LL * 4;
// Root unit: embed_tokens and lm_head 512x256 each and the final norm, bf16; each GPU gathers the
// half it does not hold.
constexpr std::int64_t kToyRoot = (2 * 512LL * 256 + 256) * 2;

}  // namespace

TEST_CASE("FSDP with reentrant checkpointing never prefetches a decoder layer in backward") {
  // torch 2.4 _get_handle_to_prefetch needs _needs_pre_backward_unshard, set only by a forward
  // that ran with grad; reentrant checkpointing runs the layers' forward without it
  // (docs/formulas.md#fsdp-reshard-only-hook). Non-reentrant checkpointing keeps BACKWARD_PRE's
  // second layer.
  auto re = Estimator::create(small_vocab_toy(), fsdp_lora(true));
  auto nr = Estimator::create(small_vocab_toy(), fsdp_lora(false));
  REQUIRE(re.has_value());
  REQUIRE(nr.has_value());
  auto bre = re->at_phase(2, 512, Phase::kBackward);
  auto bnr = nr->at_phase(2, 512, Phase::kBackward);
  REQUIRE(bre.has_value());
  REQUIRE(bnr.has_value());
  require_consistent(*bre);
  require_consistent(*bnr);
  CHECK(component(*bre, "gathered_parameters") == kToyLayerBytes + kToyRoot - kToyRoot / 2);
  CHECK(component(*bnr, "gathered_parameters") == 2 * kToyLayerBytes + kToyRoot - kToyRoot / 2);
}

TEST_CASE("FSDP frozen layer units keep every checkpointed input and its gradient to the end of backward") {
  // PEFT's wrap policy leaves each decoder layer a unit of frozen parameters; FSDP's reshard-only
  // hook on the recomputed layer's detached input holds that input (and so its .grad) until the
  // post-backward final callback. The backward peak is then at the first layer: all 4 layer
  // inputs (2 x 512 x 256 bf16 = 524,288 bytes each) are still checkpointed, and the inputs of
  // layers 1..3 have their gradients (same size) beside the one flowing into layer 0.
  const std::int64_t bsh2 = 2LL * 512 * 256 * 2;
  auto est = Estimator::create(small_vocab_toy(), fsdp_lora(true));
  REQUIRE(est.has_value());
  auto bwd = est->at_phase(2, 512, Phase::kBackward);
  REQUIRE(bwd.has_value());
  const std::int64_t ckpt = component(*bwd, "checkpointed_inputs");
  // Besides the inputs, only torch.utils.checkpoint's CPU RNG states (5,056 bytes per live node
  // and per recomputation) are counted there.
  CHECK(ckpt >= 4 * bsh2);
  CHECK(ckpt < 4 * bsh2 + 8 * 5056);
  // One more layer adds exactly one more retained input and one more retained gradient there,
  // and one more RNG state: reentrant checkpointing keeps it in ctx.fwd_cpu_state, which lives
  // with the graph until backward has finished.
  ModelSpec five = small_vocab_toy();
  five.num_layers = 5;
  auto est5 = Estimator::create(five, fsdp_lora(true));
  REQUIRE(est5.has_value());
  auto bwd5 = est5->at_phase(2, 512, Phase::kBackward);
  REQUIRE(bwd5.has_value());
  require_consistent(*bwd5);
  CHECK(component(*bwd5, "checkpointed_inputs") - ckpt == bsh2 + 5056);
  CHECK(component(*bwd5, "activation_gradients") - component(*bwd, "activation_gradients") == bsh2);
  CHECK(component(*bwd, "activation_gradients") >= 3 * bsh2);
}

TEST_CASE("FSDP2 (fully_shard): the previous all-gather output stays to the next copy-out; no FSDP1 hooks") {
  // _fsdp_param_group.py wait_for_unshard: in forward (implicit prefetch) a layer's all-gather
  // output is freed only after the next layer's all-gather, and the root's post-forward frees the
  // last one, so the head runs with one layer's output still referenced; a layer computes with
  // its unsharded parameters beside its own all-gather output. Backward frees the output right
  // after copy-out and prefetches the next layer, with or without reentrant checkpointing (no
  // _needs_pre_backward_unshard in FSDP2), and there is no reshard-only hook.
  TrainingConfig v2 = fsdp_lora(true);
  v2.parallel.fsdp_version = 2;
  auto e2 = Estimator::create(small_vocab_toy(), v2);
  REQUIRE(e2.has_value());
  auto b2 = e2->at_phase(2, 512, Phase::kBackward);
  REQUIRE(b2.has_value());
  require_consistent(*b2);
  CHECK(component(*b2, "gathered_parameters") == 2 * kToyLayerBytes + kToyRoot - kToyRoot / 2);
  auto f1 = Estimator::create(small_vocab_toy(), fsdp_lora(true))->at_phase(2, 512, Phase::kForward);
  auto f2 = e2->at_phase(2, 512, Phase::kForward);
  REQUIRE(f1.has_value());
  REQUIRE(f2.has_value());
  require_consistent(*f2);
  // The toy's forward peaks inside a decoder layer (its 512-entry vocabulary makes the loss small).
  CHECK(component(*f1, "gathered_parameters") == kToyLayerBytes + kToyRoot - kToyRoot / 2);
  CHECK(component(*f2, "gathered_parameters") == 2 * kToyLayerBytes + kToyRoot - kToyRoot / 2);
  CHECK(f2->peak.count() - f1->peak.count() == kToyLayerBytes);
  // Without FSDP1's reshard-only hook the checkpointed inputs are what they are without sharding
  // (activations are per GPU either way); FSDP1's hook moves the backward peak to the first layer
  // (the test above).
  TrainingConfig plain = fsdp_lora(true);
  plain.parallel.sharding = ShardingStrategy::kNone;
  auto bp = Estimator::create(small_vocab_toy(), plain)->at_phase(2, 512, Phase::kBackward);
  REQUIRE(bp.has_value());
  CHECK(component(*b2, "checkpointed_inputs") == component(*bp, "checkpointed_inputs"));
  CHECK(component(*b2, "activation_gradients") == component(*bp, "activation_gradients"));
}
