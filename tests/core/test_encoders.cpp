// The encoder step through the engine (docs/formulas.md#encoders): heads, contrastive batches,
// cached MNRL, and the errors for what is not modelled.
#include <catch2/catch.hpp>

#include "core/sim/program.hpp"
#include "memplan/engine.hpp"
#include "support/encoder_step.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::component;
using memplan::testing::require_consistent;

namespace {

ModelSpec toy_bert(int layers = 2, std::int64_t vocab = 30522) {
  ModelSpec m;
  m.name = "toy-bert";
  m.model_type = "bert";
  m.encoder = true;
  m.vocab_size = vocab;
  m.hidden_size = 64;
  m.num_layers = layers;
  m.num_heads = m.num_kv_heads = 4;
  m.head_dim = 16;
  m.intermediate_size = 256;
  m.max_position_embeddings = 512;
  m.type_vocab_size = 2;
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = true;
  m.pooler = true;
  m.activation = Activation::kGelu;
  m.gated_mlp = false;
  return m;
}

TrainingConfig cfg(std::int64_t b, std::int64_t s, Device dev = Device::kCuda) {
  TrainingConfig c;
  c.micro_batch = b;
  c.seq_len = s;
  c.device = dev;
  c.optim.kind = OptimizerKind::kSgd;
  return c;
}

}  // namespace

TEST_CASE("masked LM: cross-entropy backward holds log-probs and two vocabulary-sized gradients") {
  // As for decoders (test_engine.cpp): tiny layers, a 128K vocabulary, fp32 on the CPU; BERT's
  // loss is CrossEntropyLoss on the (b*s, V) scores without a shift or an upcast.
  ModelSpec m = toy_bert(1, 128256);
  m.head = EncoderHead::kMaskedLm;
  const std::int64_t b = 4, s = 256;
  auto e = estimate(m, cfg(b, s, Device::kCpu));
  REQUIRE(e.has_value());
  require_consistent(*e);
  CHECK(e->peak_phase == Phase::kBackward);
  CHECK(component(*e, "logits_and_loss") == 3 * b * s * 128256 * 4 + 4);
}

TEST_CASE("a sentence-embedding encoder has no vocabulary-sized logits term") {
  // Seed 002's shape of training: LoRA on a 110M-class encoder, 1 + 32 + 24 texts per anchor.
  ModelSpec m = toy_bert(2, 128256);  // a vocabulary that would dominate if logits existed
  TrainingConfig c = cfg(45, 128);
  c.lora.enabled = true;
  c.autocast = DType::kBFloat16;
  c.contrastive.texts_per_example = 57;
  auto e = estimate(m, c);
  REQUIRE(e.has_value());
  require_consistent(*e);
  // The similarity matrix is 45 anchors x 45 * 56 candidates = 113,400 scores: bf16 product and
  // scaled copy, fp32 upcast and log-probs (and their gradients in backward), never b*s*V.
  const std::int64_t sim = 45 * 45 * 56;
  CHECK(component(*e, "logits_and_loss") <= 4 * sim * 4 + 2 * sim * 2 + 64 * 1024);
  CHECK(component(*e, "logits_and_loss") < 45 * 57 * 128 * 4);
}

TEST_CASE("the similarity matrix grows as b x b: a b^2 term in the peak") {
  // One layer, one token per text and thousands of anchors: the forward peaks in the loss, where
  // the scaled fp32 scores (b x b, one candidate per anchor) and their log-probs are both live.
  ModelSpec m = toy_bert(1);
  TrainingConfig c = cfg(1, 1);
  c.contrastive.texts_per_example = 2;
  auto est = Estimator::create(m, c);
  REQUIRE(est.has_value());
  for (std::int64_t b : {4096, 8192}) {
    auto e = est->at_phase(b, 1, Phase::kForward);
    REQUIRE(e.has_value());
    CHECK(component(*e, "logits_and_loss") >= 2 * b * b * 4);
    CHECK(component(*e, "logits_and_loss") <= 2 * b * b * 4 + b * 64 * 4 * 4);
  }
}

TEST_CASE("cached MNRL: activations of one mini-batch, whatever the batch") {
  ModelSpec m = toy_bert(4);
  TrainingConfig c = cfg(64, 256);
  c.contrastive.texts_per_example = 8;
  auto plain = estimate(m, c);
  c.contrastive.cached = true;
  c.contrastive.mini_batch_size = 32;
  auto est = Estimator::create(m, c);
  REQUIRE(plain.has_value());
  REQUIRE(est.has_value());
  auto cached = est->at(64, 256);
  REQUIRE(cached.has_value());
  require_consistent(*cached);
  // Every column's saved activations (8 forwards of 64 sequences) vs 32 sequences at a time.
  CHECK(cached->peak.count() * 4 < plain->peak.count());
  const std::int64_t a64 = component(*cached, "activations");
  const std::int64_t a128 = component(*est->at(128, 256), "activations");
  // Only the kept embeddings (b x texts x hidden, fp32) grow with b.
  CHECK(a128 - a64 <= 2 * 64 * 8 * 64 * 4);
}

// Whether a one-sequence batch changes the simulated step: the engine simulates b == 1 as a
// program of its own only where it does (Estimator::build, batch_one_differs).
bool batch_one_changes(const sim::ProgramSpec& spec) {
  sim::ProgramSpec one = spec;
  one.batch_one = true;
  const sim::ProgramResult a = sim::run_step(spec), b = sim::run_step(one);
  if (a.events.size() != b.events.size()) return true;
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    if (!(a.events[i].total == b.events[i].total)) return true;
    for (int c = 0; c < sim::kNumCats; ++c)
      if (!(a.cats.at(a.events[i], static_cast<sim::Cat>(c)) == b.cats.at(b.events[i], static_cast<sim::Cat>(c))))
        return true;
  }
  return false;
}

TEST_CASE("a one-sequence batch is simulated apart only where it changes the step") {
  using memplan::testing::every_layer_program;
  // BERT's eager attention folds (b, heads) into bmm's batch: views at b == 1, copies otherwise.
  sim::ProgramSpec bert = every_layer_program(toy_bert(2), sim::DT::kF32, true);
  CHECK(batch_one_changes(bert));
  // GradCache's forwards take mini_batch_size sequences whatever b is.
  bert.contrastive.texts_per_example = 3;
  bert.contrastive.cached = true;
  CHECK_FALSE(batch_one_changes(bert));
  // DeBERTa's transpose_for_scores copies with .contiguous() at every batch size.
  for (bool gc : {false, true}) {
    sim::ProgramSpec deberta = every_layer_program(memplan::testing::deberta_v3_base(2, 1000), sim::DT::kF32, true);
    deberta.gradient_checkpointing = gc;
    deberta.contrastive.texts_per_example = gc ? 3 : 0;
    CHECK_FALSE(batch_one_changes(deberta));
  }
}

TEST_CASE("every encoder head and attention satisfies the invariants and grows with b and s") {
  for (auto head : {EncoderHead::kPooling, EncoderHead::kMaskedLm, EncoderHead::kSequenceClassification}) {
    for (auto attn : {AttnImpl::kEager, AttnImpl::kSdpa}) {
      for (bool gc : {false, true}) {
        ModelSpec m = toy_bert(5);
        m.head = head;
        TrainingConfig c = cfg(1, 64);
        c.attn = attn;
        c.gradient_checkpointing = gc;
        c.checkpoint_reentrant = head == EncoderHead::kMaskedLm;
        INFO("head " << to_string(head) << ", attention " << to_string(attn) << ", checkpointing " << gc);
        auto est = Estimator::create(m, c);
        REQUIRE(est.has_value());
        std::int64_t prev = 0;
        for (std::int64_t b = 1; b <= 32; b *= 2) {
          auto e = est->at(b, 128);
          REQUIRE(e.has_value());
          require_consistent(*e);
          CHECK(e->peak.count() >= prev);
          prev = e->peak.count();
        }
        CHECK(est->at(4, 32)->params.total == count_parameters(m).total);
      }
    }
  }
}

TEST_CASE("encoder LoRA: PEFT's default query/value, suffix targets like 'dense'") {
  ModelSpec m = toy_bert(3);
  TrainingConfig c = cfg(2, 32);
  c.lora.enabled = true;
  c.lora.r = 8;
  auto e = estimate(m, c);
  REQUIRE(e.has_value());
  // query and value, 64 -> 64: 8 x 64 + 64 x 8 each, 3 layers
  CHECK(e->params.trainable == 3 * 2 * (8 * 64 + 64 * 8));
  c.lora.target_modules = {"dense"};  // attention.output.dense, intermediate.dense, output.dense
  e = estimate(m, c);
  REQUIRE(e.has_value());
  CHECK(e->params.trainable == 3 * (8 * (64 + 64) + 8 * (64 + 256) + 8 * (256 + 64)));
  c.lora.target_modules = {"querry"};
  e = estimate(m, c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message == "LoRA target module 'querry' matches no Linear module of this bert model");
  CHECK(e.error().suggestion == "did you mean 'query'?");
}

TEST_CASE("what encoders do not model is an error that says so") {
  TrainingConfig c = cfg(2, 32);
  c.method = Method::kDpo;
  auto e = estimate(toy_bert(), c);
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message == "dpo is a decoder method; bert is an encoder");

  TrainingConfig k = cfg(2, 32);
  k.contrastive.texts_per_example = 3;
  auto d = estimate(memplan::testing::toy_llama(2), k);
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().message ==
        "texts-per-example (contrastive training) needs an embedding model; llama is a decoder with its LM head");

  k.contrastive.texts_per_example = 1;
  auto one = estimate(toy_bert(), k);
  REQUIRE_FALSE(one.has_value());
  CHECK(one.error().message.rfind("texts-per-example = 1 is out of range", 0) == 0);

  ModelSpec mlm = toy_bert();
  mlm.head = EncoderHead::kMaskedLm;
  k.contrastive.texts_per_example = 3;
  auto conflict = estimate(mlm, k);
  REQUIRE_FALSE(conflict.has_value());
  CHECK(conflict.error().message == "texts-per-example needs the pooling head (sentence embeddings)");

  ModelSpec modern = memplan::testing::modernbert_base(2, 1000);
  TrainingConfig q = cfg(2, 32);
  q.quant.load_in_4bit = true;
  q.lora.enabled = true;  // QLoRA on an encoder
  auto mb = estimate(modern, q);
  REQUIRE_FALSE(mb.has_value());
  CHECK(mb.error().code == ErrorCode::kUnsupported);
  CHECK(mb.error().message == "4/8-bit weights, tensor parallelism and modules_to_save are not modelled for encoders");
}

TEST_CASE("encoder LoRA with gradient checkpointing: the embeddings' leaf gradient dies with the graph") {
  // enable_input_require_grads makes the embeddings' output a leaf that requires grad; backward
  // gives it a .grad (b x s x h), which the step used to leave alive ("internal: step simulation
  // left tensors alive" for every head of BERT and ModernBERT).
  for (const ModelSpec& base : {toy_bert(3), memplan::testing::modernbert_base(4, 1000)})
    for (const EncoderHead head : {EncoderHead::kPooling, EncoderHead::kMaskedLm, EncoderHead::kSequenceClassification})
      for (const bool reentrant : {true, false})
        for (const bool cached : {false, true}) {
          if (cached && head != EncoderHead::kPooling) continue;
          ModelSpec m = base;
          m.head = head;
          TrainingConfig c = cfg(2, 64);
          c.lora.enabled = true;
          // PEFT has no default for modernbert (docs/formulas.md#peft-default-targets): named.
          if (m.is_modernbert()) c.lora.target_modules = {"Wqkv"};
          c.gradient_checkpointing = true;
          c.checkpoint_reentrant = reentrant;
          if (head == EncoderHead::kPooling) {
            c.contrastive.texts_per_example = 3;
            c.contrastive.cached = cached;
            c.contrastive.mini_batch_size = 4;
          }
          INFO(m.model_type << " " << to_string(head) << " reentrant " << reentrant << " cached " << cached);
          auto e = estimate(m, c);
          REQUIRE(e.has_value());
          require_consistent(*e);
          // Checkpointing keeps only layer inputs: less than the same step without it.
          c.gradient_checkpointing = false;
          auto plain = estimate(m, c);
          REQUIRE(plain.has_value());
          CHECK(e->peak < plain->peak);
        }
}

TEST_CASE("loss kernels: eager > chunked > liger/cce for a large vocabulary; Liger needs CUDA") {
  ModelSpec m = memplan::testing::toy_llama(1);
  m.vocab_size = 128256;
  TrainingConfig c = cfg(4, 512);
  c.torch_dtype = DType::kBFloat16;
  std::int64_t prev = INT64_MAX;
  for (auto k : {LossKernel::kEager, LossKernel::kChunked, LossKernel::kLiger}) {
    c.loss_kernel = k;
    auto e = estimate(m, c);
    REQUIRE(e.has_value());
    require_consistent(*e);
    CHECK(e->peak.count() < prev);
    prev = e->peak.count();
  }
  c.liger_kernels = true;
  c.device = Device::kCpu;
  auto cpu = estimate(m, c);
  REQUIRE_FALSE(cpu.has_value());
  CHECK(cpu.error().message == "loss kernel 'liger' is a Triton GPU kernel; it does not run with --device cpu");
}

TEST_CASE("Liger's RMSNorm, SwiGLU and RoPE save less than the eager modules") {
  TrainingConfig c = cfg(4, 512);
  c.torch_dtype = DType::kBFloat16;
  c.loss_kernel = LossKernel::kLiger;
  auto fused = estimate(memplan::testing::toy_llama(4), c);
  c.liger_kernels = true;
  auto all = estimate(memplan::testing::toy_llama(4), c);
  REQUIRE(fused.has_value());
  REQUIRE(all.has_value());
  require_consistent(*all);
  CHECK(all->peak.count() < fused->peak.count());
}
