// NeMo 1.x / NeMo-Framework-Launcher Megatron configs (megatron_gpt_config.yaml and the
// launcher's conf/training/*/*.yaml): trainer.{devices,num_nodes,precision} and a `model:`
// section that is both the Megatron-Core arguments and the architecture (num_layers,
// hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups). micro_batch_size is the
// per-GPU micro-batch; global_batch_size / (micro_batch_size x data-parallel size) the number of
// micro-batches per step. docs/configs.md#nemo-megatron.
#include <fmt/format.h>

#include "io/dialects_map.hpp"
#include "io/model_source.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

namespace {

// The catalog model the tokenizer names, when its shape is the config's: then the estimate uses
// its exact vocabulary and layout (MoE included). Megatron pads the vocabulary to a multiple of
// make_vocab_size_divisible_by x TP; the catalog's HF size is used.
struct TokenizerModel {
  std::string id;
  std::optional<ModelSpec> spec;
};

TokenizerModel tokenizer_model(Mapper& m) {
  TokenizerModel out;
  auto tok = m.text("model.tokenizer.type");
  if (!tok || !*tok) return out;
  out.id = **tok;
  if (auto e = find_catalog_entry_fast(out.id)) out.spec = e->spec;
  if (!out.spec) {
    auto r = resolve_by_name_rules(out.id);
    if (r && *r) out.spec = (*r)->spec;
  }
  return out;
}

// NeMo's Megatron BERT (megatron_bert_config.yaml, the embedding recipe
// megatron_bert_embedding_config.yaml): an encoder, not a GPT. Without the LM head
// (add_lm_head: False) it is an embedding model trained contrastively with
// data.hard_negatives_to_train negatives per query and one positive.
Status read_megatron_bert(Mapper& m, CustomModel& cm) {
  MEMPLAN_TRY(auto mcore_bert, m.boolean("model.mcore_bert"));
  MEMPLAN_TRY(auto name, m.text("name"));
  const YamlNode* binary = m.node("model.bert_binary_head");
  // mcore_bert: False is still a BERT (Megatron's legacy implementation): the key names it.
  const bool bert = mcore_bert.has_value() || (name && to_lower(*name).find("bert") != std::string::npos) ||
                    binary != nullptr;
  if (!bert) return Ok{};
  cm.family = "bert";
  MEMPLAN_TRY(auto lm_head, m.boolean("model.add_lm_head"));
  ResolvedInputs& in = m.out().inputs;
  if (lm_head && !*lm_head) {
    in.encoder_head = EncoderHead::kPooling;
    m.from_file("head", *m.node("model.add_lm_head"), "model.add_lm_head: False (an embedding model)");
  } else {
    in.encoder_head = EncoderHead::kMaskedLm;
    m.from_file("head", lm_head ? *m.node("model.add_lm_head") : *m.node("model"), "Megatron BERT pretraining (LM head)");
  }
  MEMPLAN_TRY(auto negatives, m.integer("model.data.hard_negatives_to_train", 0));
  if (negatives && in.encoder_head == EncoderHead::kPooling) {
    if (*negatives > (1 << 20) - 2)
      return m.error_at(*m.node("model.data.hard_negatives_to_train"), ErrorCode::kInvalidConfig,
                        fmt::format("hard_negatives_to_train = {} is out of range (0 to 1048574)", *negatives));
    m.config().contrastive.texts_per_example = static_cast<int>(2 + *negatives);
    m.from_file("texts_per_example", *m.node("model.data.hard_negatives_to_train"),
                "1 query + 1 positive + model.data.hard_negatives_to_train");
  }
  (void)m.node("model.add_pooler");
  return Ok{};
}

}  // namespace

Status map_megatron(Mapper& m) {
  TrainingConfig& c = m.config();
  ParallelConfig& par = c.parallel;
  par.megatron_core = true;  // the trainer is Megatron's
  if (const YamlNode* mdl = m.node("model")) m.from_file("megatron_core", *mdl, "model (a Megatron config)");

  // GPUs: trainer.devices x trainer.num_nodes.
  MEMPLAN_IO_CHECK(m.read("trainer.devices", "num_gpus", par.num_gpus));
  MEMPLAN_IO_CHECK(m.read("trainer.num_nodes", "nodes", par.nodes));

  // Model-parallel layout.
  MEMPLAN_IO_CHECK(m.read("model.tensor_model_parallel_size", "tensor_parallel", par.tensor_parallel));
  MEMPLAN_IO_CHECK(m.read("model.pipeline_model_parallel_size", "pipeline_parallel", par.pipeline_parallel));
  MEMPLAN_IO_CHECK(m.read("model.context_parallel_size", "context_parallel", par.context_parallel));
  MEMPLAN_IO_CHECK(m.read("model.expert_model_parallel_size", "expert_parallel", par.expert_parallel));
  MEMPLAN_TRY(auto vpp, m.integer("model.virtual_pipeline_model_parallel_size"));
  if (vpp && *vpp > 1 && par.pipeline_parallel > 1) {
    par.virtual_stages = static_cast<int>(std::min<std::int64_t>(*vpp, 65536));
    par.pp_schedule = PipelineSchedule::kInterleaved1F1B;
    m.from_file("virtual_stages", *m.node("model.virtual_pipeline_model_parallel_size"),
                "model.virtual_pipeline_model_parallel_size");
    m.from_file("pp_schedule", *m.node("model.virtual_pipeline_model_parallel_size"),
                "model.virtual_pipeline_model_parallel_size (interleaved 1F1B)");
  }
  MEMPLAN_IO_CHECK(m.read("model.sequence_parallel", "sequence_parallel", par.sequence_parallel));
  MEMPLAN_TRY(auto cf, m.number("model.moe_expert_capacity_factor"));
  if (cf && *cf > 0) {
    MEMPLAN_TRY(auto pad, m.boolean("model.moe_pad_expert_input_to_capacity"));
    if (pad.value_or(false)) {
      par.moe_capacity_factor = *cf;
      m.from_file("moe_capacity_factor", *m.node("model.moe_expert_capacity_factor"), "model.moe_expert_capacity_factor");
    }
  }

  // Batch: micro_batch_size; the accumulation from global_batch_size over the data-parallel size.
  MEMPLAN_IO_CHECK(m.read_or("model.micro_batch_size", "batch", c.micro_batch, 1, "model.micro_batch_size not set: 1"));
  m.site(Knob::kBatch, "model.micro_batch_size");
  MEMPLAN_TRY(auto gbs, m.integer("model.global_batch_size"));
  if (gbs) {
    const std::int64_t mp = static_cast<std::int64_t>(std::max(1, par.tensor_parallel)) * std::max(1, par.pipeline_parallel) *
                            std::max(1, par.context_parallel);
    const std::int64_t world = static_cast<std::int64_t>(std::max(1, par.num_gpus)) * std::max(1, par.nodes);
    const std::int64_t dp = world % mp == 0 ? world / mp : 0;
    const YamlNode& g = *m.node("model.global_batch_size");
    // --apply keeps global_batch_size = micro_batch_size x accumulation x data-parallel.
    if (dp > 0) m.mirror_site(Knob::kGlobalBatch, "model.global_batch_size", dp);
    if (dp > 0 && *gbs % (c.micro_batch * dp) == 0) {
      c.grad_accum = *gbs / (c.micro_batch * dp);
      m.derived("grad_accum", fmt::format("global_batch_size {} at {} / (micro_batch_size {} x data-parallel {})", *gbs,
                                          m.where_text(g), c.micro_batch, dp));
    } else {
      m.warn_at(g, fmt::format("global_batch_size {} is not a multiple of micro_batch_size x data-parallel size; "
                               "memplan estimates {} micro-batch(es) per step",
                               *gbs, c.grad_accum));
    }
  }
  MEMPLAN_TRY(bool seq, m.read("model.encoder_seq_length", "seq_len", c.seq_len));
  if (!seq) MEMPLAN_IO_CHECK(m.read("model.data.seq_length", "seq_len", c.seq_len));
  m.site(Knob::kSeqLen, "model.encoder_seq_length");

  // Precision. megatron_amp_O2 keeps the parameters in bf16/fp16 with fp32 main copies in the
  // optimizer; without it the parameters are fp32 under autocast.
  MEMPLAN_TRY(auto precision, m.text("trainer.precision"));
  MEMPLAN_TRY(auto o2, m.boolean("model.megatron_amp_O2"));
  if (precision) {
    const std::string p = to_lower(*precision);
    const YamlNode& n = *m.node("trainer.precision");
    std::optional<DType> half;
    if (p == "bf16" || p == "bf16-mixed") half = DType::kBFloat16;
    else if (p == "16" || p == "16-mixed" || p == "fp16") half = DType::kFloat16;
    else if (p != "32" && p != "32-true" && p != "fp32")
      return m.error_at(n, ErrorCode::kUnknownName, fmt::format("unknown precision '{}'", *precision),
                        did_you_mean(p, {"bf16", "bf16-mixed", "16", "16-mixed", "32"}));
    c.autocast = half;
    c.torch_dtype = half && o2.value_or(false) ? *half : DType::kFloat32;
    m.from_file("torch_dtype", n, "trainer.precision");
    m.from_file("autocast", n, "trainer.precision");
  }
  // Megatron's distributed optimizer shards fp32 main parameters and Adam states over the
  // data-parallel group, like ZeRO-1.
  MEMPLAN_TRY(auto opt, m.text("model.optim.name"));
  if (opt) {
    const std::string o = to_lower(*opt);
    const YamlNode& n = *m.node("model.optim.name");
    c.optim.kind = OptimizerKind::kAdamWTorch;
    if (o == "distributed_fused_adam" || o == "mcore_distributed_optim") {
      par.sharding = ShardingStrategy::kZero1;
      m.from_file("sharding", n, "model.optim.name (Megatron's distributed optimizer: ZeRO-1)");
    } else if (o != "fused_adam" && o != "adam" && o != "adamw") {
      m.warn_at(n, fmt::format("optimizer '{}' is not modelled; estimated as adamw_torch (two fp32 states)", *opt));
    }
    m.from_file("optim", n, "model.optim.name");
  }
  // Recomputation: full recomputes whole layers; selective only the attention core, which fused
  // attention never stores.
  MEMPLAN_TRY(auto gran, m.text("model.activations_checkpoint_granularity"));
  if (gran) {
    const std::string g = to_lower(*gran);
    if (g == "full") {
      c.gradient_checkpointing = true;
      m.from_file("gradient_checkpointing", *m.node("model.activations_checkpoint_granularity"),
                  "model.activations_checkpoint_granularity");
    } else if (g == "selective") {
      m.warn_at(*m.node("model.activations_checkpoint_granularity"),
                "selective recomputation is estimated as none: it recomputes the attention core, which fused "
                "attention never stores");
    }
  }
  MEMPLAN_TRY(auto flash, m.boolean("model.use_flash_attention"));
  c.attn = flash.value_or(false) ? AttnImpl::kFlashAttention2 : AttnImpl::kSdpa;
  if (flash) m.from_file("attn_implementation", *m.node("model.use_flash_attention"), "model.use_flash_attention");
  else m.from_default("attn_implementation", "fused attention (Transformer Engine): estimated as sdpa");

  // The architecture: the tokenizer's catalog model when it has the config's shape, else the
  // shape written in `model:` (dense; the vocabulary from the tokenizer's model when known).
  MEMPLAN_TRY(auto layers, m.integer("model.num_layers"));
  MEMPLAN_TRY(auto hidden, m.integer("model.hidden_size"));
  const TokenizerModel tm = tokenizer_model(m);
  const std::optional<ModelSpec>& tok = tm.spec;
  if (tok && layers && hidden && tok->num_layers == *layers && tok->hidden_size == *hidden) {
    m.out().inputs.model_name = tm.id;
    m.from_file("model", *m.node("model.tokenizer.type"), "model.tokenizer.type (its shape is model.num_layers/hidden_size)");
    (void)m.node("model.ffn_hidden_size");
    (void)m.node("model.num_attention_heads");
    (void)m.node("model.num_query_groups");
  } else {
    MEMPLAN_IO_CHECK(read_custom_model(m, "model"));
    if (m.out().inputs.custom_model) {
      CustomModel& cm = *m.out().inputs.custom_model;
      MEMPLAN_IO_CHECK(read_megatron_bert(m, cm));
      if (!cm.vocab_size && tok) cm.vocab_size = tok->vocab_size;
      MEMPLAN_TRY(auto share, m.boolean("model.share_embeddings_and_output_weights"));
      if (share) cm.tie_word_embeddings = *share;
      MEMPLAN_TRY(auto experts, m.integer("model.num_moe_experts"));
      if (experts && *experts > 1)
        m.warn_at(*m.node("model.num_moe_experts"),
                  "the mixture-of-experts layout is not built from a Megatron config: memplan estimates a dense model "
                  "of this shape; pass --model with the Hugging Face id for the MoE layout");
    } else if (const YamlNode* model = m.node("model")) {
      m.out().inputs.model_hint = fmt::format("{}: no num_layers/hidden_size; give --model ID|PATH", m.where_text(*model));
    }
  }
  m.check_unknown("", {}, /*strict=*/false);
  return Ok{};
}

}  // namespace memplan::io
