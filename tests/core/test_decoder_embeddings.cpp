// Decoder embedding models through the engine (docs/formulas.md#decoder-embeddings): a decoder
// loaded as AutoModel, pooled, trained with MultipleNegativesRankingLoss over text columns.
#include <catch2/catch.hpp>

#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::component;
using memplan::testing::require_consistent;

namespace {

ModelSpec toy_embedder(PoolingMode pooling = PoolingMode::kLastToken) {
  ModelSpec m = memplan::testing::toy_llama(4);
  m.decoder_embedding = true;
  m.pooling = pooling;
  return m;
}

TrainingConfig cfg(std::int64_t b, std::int64_t s, int texts) {
  TrainingConfig c;
  c.micro_batch = b;
  c.seq_len = s;
  c.optim.kind = OptimizerKind::kSgd;
  c.contrastive.texts_per_example = texts;
  return c;
}

// With and without Dense modules of `n` parameters, full fine-tuning and LoRA, fp32 with SGD (no
// state): the Dense parameters are counted, trained, and at the optimizer step hold their
// weights and gradients, 4 bytes each.
void check_dense_trained(const ModelSpec& plain, const ModelSpec& dense, std::int64_t b, std::int64_t s,
                         std::int64_t n) {
  for (const bool lora : {false, true}) {
    INFO("lora " << lora);
    TrainingConfig c = cfg(b, s, 2);
    c.lora.enabled = lora;
    auto ea = Estimator::create(plain, c);
    auto eb = Estimator::create(dense, c);
    REQUIRE(ea.has_value());
    REQUIRE(eb.has_value());
    auto sa = ea->at_phase(b, s, Phase::kOptimizerStep);
    auto sb = eb->at_phase(b, s, Phase::kOptimizerStep);
    REQUIRE(sa.has_value());
    REQUIRE(sb.has_value());
    require_consistent(*sb);
    CHECK(sb->params.total - sa->params.total == n);
    CHECK(sb->params.trainable - sa->params.trainable == n);
    CHECK(component(*sb, "weights") - component(*sa, "weights") == 4 * n);
    CHECK(component(*sb, "gradients") - component(*sa, "gradients") == 4 * n);
  }
}

}  // namespace

TEST_CASE("an embedding decoder has no lm_head and no vocabulary-sized logits") {
  const ModelSpec lm = memplan::testing::toy_llama(4);
  const ModelSpec emb = toy_embedder();
  // AutoModel: the untied lm_head (8,000 x 256) is not loaded.
  CHECK(count_parameters(lm).total - count_parameters(emb).total == 8000 * 256);
  CHECK(count_parameters(emb).lm_head == 0);
  auto e = estimate(emb, cfg(4, 128, 3));
  REQUIRE(e.has_value());
  require_consistent(*e);
  CHECK(e->params.total == count_parameters(emb).total);
  // The loss term is MNRL's 4 x 8 similarity matrix and its copies, never b x s x V.
  CHECK(component(*e, "logits_and_loss") < 4 * 128 * 8000);
  CHECK(component(*e, "logits_and_loss") < 64 * 1024);
}

TEST_CASE("every text column is one more forward: each phase's peak grows by the same bytes per text") {
  // The first and the last columns are simulated, the ones between stand as one block; each
  // added text adds one column's saved activations and embedding (and, until the loss returns,
  // its token embeddings): once the same event is each phase's peak, the growth is linear.
  const ModelSpec m = toy_embedder();
  for (const Phase phase : {Phase::kForward, Phase::kBackward}) {
    auto at = [&](int texts) {
      auto est = Estimator::create(m, cfg(4, 128, texts));
      REQUIRE(est.has_value());
      auto e = est->at_phase(4, 128, phase);
      REQUIRE(e.has_value());
      require_consistent(*e);
      return e->peak.count();
    };
    const std::int64_t p4 = at(4), p5 = at(5), p6 = at(6), p9 = at(9);
    CHECK(p5 - p4 > 0);
    CHECK(p6 - p5 == p5 - p4);
    CHECK(p9 - p6 == 3 * (p5 - p4));
  }
}

TEST_CASE("pooling modes differ by what Pooling keeps for backward") {
  // Last-token pooling's gather keeps the whole (b, s, h) product; mean keeps only the mask, cls
  // neither: at a backward-phase peak lasttoken > mean > cls.
  auto peak = [](PoolingMode p) {
    auto e = estimate(toy_embedder(p), cfg(8, 256, 2));
    REQUIRE(e.has_value());
    return e->peak.count();
  };
  const std::int64_t last = peak(PoolingMode::kLastToken), mean = peak(PoolingMode::kMean), cls = peak(PoolingMode::kCls);
  CHECK(last > mean);
  CHECK(mean > cls);
}

TEST_CASE("an embedding decoder is simulated like every layer run in full") {
  TrainingConfig c = cfg(2, 64, 3);
  c.lora.enabled = true;
  c.gradient_checkpointing = true;
  memplan::testing::same_as_every_layer(toy_embedder(), c, {{1, 64}, {2, 64}, {3, 128}});
  memplan::testing::same_as_every_layer(toy_embedder(PoolingMode::kMean), cfg(2, 64, 2), {{1, 32}, {4, 64}});
}

TEST_CASE("what an embedding decoder does not model is an error that says so") {
  TrainingConfig dpo = cfg(2, 64, 0);
  dpo.method = Method::kDpo;
  auto d = estimate(toy_embedder(), dpo);
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().message == "dpo trains a causal LM head; toy is loaded as an embedding model (no LM head)");

  TrainingConfig cached = cfg(2, 64, 3);
  cached.contrastive.cached = true;
  ModelSpec llm2vec = toy_embedder(PoolingMode::kMean);
  llm2vec.embedding_library = EmbeddingLibrary::kLlm2Vec;
  auto c = estimate(llm2vec, cached);
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().code == ErrorCode::kUnsupported);
  CHECK(c.error().message == "cached MNRL (GradCache) is sentence-transformers' loss; LLM2Vec's trainer has none");

  TrainingConfig tp = cfg(2, 64, 3);
  tp.parallel.tensor_parallel = 2;
  tp.parallel.num_gpus = 2;
  auto t = estimate(toy_embedder(), tp);
  REQUIRE_FALSE(t.has_value());
  CHECK(t.error().code == ErrorCode::kUnsupported);
  CHECK(t.error().message ==
        "pipeline, tensor, context and expert parallelism are not modelled for embedding models "
        "(sentence-transformers trains with data parallelism, DeepSpeed or FSDP)");
}

TEST_CASE("cached MNRL on a decoder: the batch adds only its inputs, its embeddings and their cached gradients") {
  // GradCache embeds mini-batches of a fixed size (4 here), so the forwards and backwards are the
  // same at every b. At the peak (a mini-batch's backward in the loss's hook) what grows with b
  // is the batch's input_ids and attention_mask (2 x texts x s int64 per sequence), the detached
  // embeddings of every text and their cached gradients (2 x texts x hidden fp32 per sequence).
  const ModelSpec m = toy_embedder();  // hidden 256
  constexpr std::int64_t kSeq = 128, kTexts = 3;
  auto peak = [&](std::int64_t b) {
    TrainingConfig c = cfg(b, kSeq, static_cast<int>(kTexts));
    c.contrastive.cached = true;
    c.contrastive.mini_batch_size = 4;
    auto e = estimate(m, c);
    REQUIRE(e.has_value());
    require_consistent(*e);
    CHECK(e->peak_phase == Phase::kBackward);
    return e->peak.count();
  };
  const std::int64_t per_seq = kTexts * (2 * kSeq * 8 + 2 * 256 * 4);
  const std::int64_t p1 = peak(1), p2 = peak(2), p8 = peak(8), p16 = peak(16);
  CHECK(p2 - p1 == per_seq);
  CHECK(p16 - p8 == 8 * per_seq);
  // Uncached, the same 16 sequences keep every column's activations: several times more.
  auto uncached = estimate(m, cfg(16, kSeq, static_cast<int>(kTexts)));
  REQUIRE(uncached.has_value());
  CHECK(uncached->peak.count() - p16 > 3 * (p16 - p1));
}

TEST_CASE("cached MNRL on a decoder is simulated like every layer run in full") {
  TrainingConfig c = cfg(8, 64, 3);
  c.contrastive.cached = true;
  c.contrastive.mini_batch_size = 4;
  c.lora.enabled = true;
  c.gradient_checkpointing = true;
  memplan::testing::same_as_every_layer(toy_embedder(), c, {{1, 64}, {8, 64}, {12, 128}});
}

TEST_CASE("sentence-transformers Dense modules: trained parameters, counted and stepped like the model's") {
  // EmbeddingGemma's 2_Dense and 3_Dense at toy scale: 256 -> 1,024 -> 256, bias-free, Identity.
  // They sit outside the transformers model PEFT wraps, so LoRA leaves them trainable:
  // 2 x 256 x 1,024 = 524,288 parameters.
  ModelSpec plain = toy_embedder(PoolingMode::kMean);
  ModelSpec dense = plain;
  dense.st_dense = {DenseModule{256, 1024, false, false}, DenseModule{1024, 256, false, false}};
  const std::int64_t n = 2 * 256 * 1024;
  CHECK(count_parameters(dense).total - count_parameters(plain).total == n);
  CHECK(count_parameters(dense).lm_head == n);
  check_dense_trained(plain, dense, 4, 128, n);
}

TEST_CASE("a Dense module's output replaces the pooled embedding; Tanh's replaces the Linear's") {
  // Per text column: Linear(256 -> 1,024) saves the pooled (b, 256) input for its weight's
  // gradient (alive anyway, as the embedding MNRL would have kept) and its (b, 1,024) fp32 output
  // becomes the embedding. Tanh saves its output, which replaces the Linear's (saved by nothing,
  // freed): the same bytes once it returns.
  ModelSpec plain = toy_embedder(PoolingMode::kMean);
  ModelSpec identity = plain;
  identity.st_dense = {DenseModule{256, 1024, false, false}};
  ModelSpec tanh = identity;
  tanh.st_dense[0].tanh = true;
  auto fwd = [](const ModelSpec& m) {
    auto est = Estimator::create(m, cfg(4, 128, 2));
    REQUIRE(est.has_value());
    auto e = est->at_phase(4, 128, Phase::kForward);
    REQUIRE(e.has_value());
    return e->peak.count();
  };
  // The forward's peak is in the second column's layers: the first column's (b, 1,024)
  // embedding is alive there, and the Dense weight (256 x 1,024 fp32) always.
  CHECK(fwd(identity) - fwd(plain) == 4 * 256 * 1024 + 4 * 1024 * 4);
  CHECK(fwd(tanh) == fwd(identity));
}

TEST_CASE("an encoder's Dense modules (LaBSE's 768 -> 768 Tanh) are simulated and trained as a decoder's") {
  // BERT-base with one Dense(768, 768, bias, Tanh) after CLS pooling: 768 x 768 + 768 = 590,592
  // more parameters, trained under LoRA as well.
  ModelSpec plain = memplan::testing::bert_base_uncased();
  plain.pooling = PoolingMode::kCls;
  ModelSpec dense = plain;
  dense.st_dense = {DenseModule{768, 768, true, true}};
  const std::int64_t n = 768 * 768 + 768;
  CHECK(count_parameters(dense).total - count_parameters(plain).total == n);
  ModelSpec mlm = dense;  // the Dense modules belong to the pooling head only
  mlm.head = EncoderHead::kMaskedLm;
  ModelSpec mlm_plain = plain;
  mlm_plain.head = EncoderHead::kMaskedLm;
  CHECK(count_parameters(mlm).total == count_parameters(mlm_plain).total);
  check_dense_trained(plain, dense, 8, 128, n);
}
