// NeMo 1.x / NeMo-Framework-Launcher Megatron configs (megatron_gpt_config.yaml and the
// launcher's conf/training/*/*.yaml): trainer.{devices,num_nodes,precision} and a `model:`
// section that is both the Megatron-Core arguments and the architecture (num_layers,
// hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups). micro_batch_size is the
// per-GPU micro-batch; global_batch_size / (micro_batch_size x data-parallel size) the number of
// micro-batches per step. docs/configs.md#nemo-megatron.
#include <functional>

#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "io/model/model_source.hpp"
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

TokenizerModel tokenizer_model(Mapper& m, const std::string& key) {
  TokenizerModel out;
  auto tok = m.text(key);
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

// Where a Megatron argument is written in a layout: NeMo's `model.<name>`, Megatron-LM's
// `ARGS.<name>`, ... (MegatronArgs below).
using ArgPath = std::function<std::string(std::string_view)>;

// The parallel layout every Megatron layout spells with Megatron's argument names: tensor,
// pipeline (virtual stages: interleaved 1F1B; uneven first/last stages), context, expert and
// expert-tensor sizes, sequence parallelism, the padded expert capacity.
Status read_parallel_layout(Mapper& m, const ArgPath& arg) {
  ParallelConfig& par = m.config().parallel;
  MEMPLAN_IO_CHECK(m.read_degree(arg("tensor_model_parallel_size"), "tensor_parallel", par.tensor_parallel));
  MEMPLAN_IO_CHECK(m.read_degree(arg("pipeline_model_parallel_size"), "pipeline_parallel", par.pipeline_parallel));
  MEMPLAN_IO_CHECK(m.read_degree(arg("context_parallel_size"), "context_parallel", par.context_parallel));
  MEMPLAN_IO_CHECK(m.read_degree(arg("expert_model_parallel_size"), "expert_parallel", par.expert_parallel));
  MEMPLAN_IO_CHECK(m.read_degree(arg("expert_tensor_parallel_size"), "expert_tensor_parallel", par.expert_tensor_parallel));
  // Virtual stages: NeMo writes the size; Megatron-LM derives it from the layers per virtual stage
  // (layers / pp / that) or takes num_virtual_stages_per_pipeline_rank (arguments.py).
  std::string vkey = arg("virtual_pipeline_model_parallel_size");
  MEMPLAN_TRY(auto vpp, m.integer(vkey));
  if (!vpp) {
    vkey = arg("num_virtual_stages_per_pipeline_rank");
    MEMPLAN_TRY(vpp, m.integer(vkey));
  }
  // account_for_embedding/loss_in_pipeline_split: the embedding and the loss each take a decoder
  // layer's place in the split (both: torchtitan's layers_per_stage rule, which memplan has).
  MEMPLAN_TRY(auto acc_emb, m.boolean(arg("account_for_embedding_in_pipeline_split")));
  MEMPLAN_TRY(auto acc_loss, m.boolean(arg("account_for_loss_in_pipeline_split")));
  const int weighted = (acc_emb.value_or(false) ? 1 : 0) + (acc_loss.value_or(false) ? 1 : 0);
  MEMPLAN_TRY(auto layers, m.integer(arg("num_layers")));
  const std::string per = arg("num_layers_per_virtual_pipeline_stage");
  MEMPLAN_TRY(auto layers_per, m.integer(per));
  if (!vpp && layers_per && layers && par.pipeline_parallel > 1) {
    const std::int64_t split = *layers + weighted;
    const std::int64_t per_stage = split / par.pipeline_parallel;
    if (split % par.pipeline_parallel != 0 || per_stage % *layers_per != 0)
      return m.error_at(*m.node(per), ErrorCode::kInvalidConfig,
                        fmt::format("num_layers_per_virtual_pipeline_stage = {} does not divide the {} layers of each "
                                    "of the {} pipeline stages",
                                    *layers_per, per_stage, par.pipeline_parallel),
                        "Megatron-LM asserts the same (arguments.py)");
    vpp = per_stage / *layers_per;
    vkey = per;
  }
  if (weighted > 0 && layers && par.pipeline_parallel > 1) {
    const std::string key = arg(acc_emb.value_or(false) ? "account_for_embedding_in_pipeline_split"
                                                        : "account_for_loss_in_pipeline_split");
    if (weighted == 2 && (*layers + 2) % par.pipeline_parallel == 0) {
      par.pp_layers_per_stage =
          static_cast<int>(layers_per ? *layers_per : (*layers + 2) / par.pipeline_parallel);
      m.from_file("pp_layers_per_stage", *m.node(key),
                  "account_for_embedding/loss_in_pipeline_split (the embedding and the loss each weigh a layer)");
    } else {
      m.warn_at(*m.node(key), fmt::format("{} alone is not modelled: memplan splits the decoder layers evenly", key));
    }
  }
  if (vpp && *vpp > 1 && par.pipeline_parallel > 1) {
    par.virtual_stages = static_cast<int>(std::min<std::int64_t>(*vpp, 65536));
    par.pp_schedule = PipelineSchedule::kInterleaved1F1B;
    m.from_file("virtual_stages", *m.node(vkey), vkey);
    m.from_file("pp_schedule", *m.node(vkey), vkey + " (interleaved 1F1B)");
  }
  MEMPLAN_IO_CHECK(m.read_degree(arg("decoder_first_pipeline_num_layers"), "pp_first_stage_layers",
                                 par.pp_first_stage_layers));
  MEMPLAN_IO_CHECK(m.read_degree(arg("decoder_last_pipeline_num_layers"), "pp_last_stage_layers",
                                 par.pp_last_stage_layers));
  MEMPLAN_IO_CHECK(m.read(arg("sequence_parallel"), "sequence_parallel", par.sequence_parallel));
  MEMPLAN_TRY(auto cf, m.number(arg("moe_expert_capacity_factor")));
  if (cf && *cf > 0) {
    MEMPLAN_TRY(auto pad, m.boolean(arg("moe_pad_expert_input_to_capacity")));
    if (pad.value_or(false)) {
      par.moe_capacity_factor = *cf;
      m.from_file("moe_capacity_factor", *m.node(arg("moe_expert_capacity_factor")), arg("moe_expert_capacity_factor"));
    }
  }
  return Ok{};
}

// micro_batch_size, and the accumulation Megatron derives from global_batch_size: global /
// (micro-batch x data-parallel size), once the GPU count is known (ResolvedInputs::global_batch).
Status read_megatron_batch(Mapper& m, const ArgPath& arg) {
  TrainingConfig& c = m.config();
  const std::string mbs = arg("micro_batch_size");
  MEMPLAN_IO_CHECK(m.read_or(mbs, "batch", c.micro_batch, 1, mbs + " not set: 1"));
  m.site(Knob::kBatch, mbs);
  const std::string gkey = arg("global_batch_size");
  MEMPLAN_TRY(auto gbs, m.integer(gkey));
  if (gbs) {
    const YamlNode& g = *m.node(gkey);
    m.out().inputs.global_batch = ResolvedInputs::GlobalBatch{*gbs, gkey, m.where(g), {}};
    // --apply keeps global_batch_size = micro_batch_size x accumulation x data-parallel (the
    // data-parallel size in use: see cli::load_inputs).
    const ParallelConfig& par = c.parallel;
    const std::int64_t world = static_cast<std::int64_t>(std::max(1, par.num_gpus)) * std::max(1, par.nodes);
    const std::int64_t mp = par.model_parallel_size();
    m.mirror_site(Knob::kGlobalBatch, gkey, world % mp == 0 ? std::max<std::int64_t>(1, world / mp) : 1);
  }
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

  // Model-parallel layout and batch.
  const ArgPath arg = [](std::string_view name) { return "model." + std::string(name); };
  MEMPLAN_IO_CHECK(read_parallel_layout(m, arg));
  MEMPLAN_IO_CHECK(read_megatron_batch(m, arg));
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
  const TokenizerModel tm = tokenizer_model(m, "model.tokenizer.type");
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

namespace memplan::io {

namespace {

// Megatron-LM's arguments (megatron/training/arguments.py) written as YAML, in any of three
// layouts: a recipe's `ARGS:` (examples/moe_recipes: argparse's dests, `tensor_model_parallel_size`),
// the model zoo's and functional tests' `MODEL_ARGS:` (the command line's spelling,
// `--tensor-model-parallel-size`), or the names at the top level (--yaml-cfg files, whose
// `language_model:` and `model_parallel:` sections Megatron flattens into the arguments).
class MegatronArgs {
 public:
  explicit MegatronArgs(const YamlNode& root) : root_(root) {
    if (const YamlNode* a = root.get("ARGS"); a != nullptr && a->is_map()) section_ = "ARGS";
    else if (const YamlNode* b = root.get("MODEL_ARGS"); b != nullptr && b->is_map()) section_ = "MODEL_ARGS";
  }
  // Where argument `name` is written, or where it would be.
  std::string operator()(std::string_view name) const {
    for (const std::string& p : candidates(name))
      if (root_.at(split_key_path(p)) != nullptr) return p;
    return candidates(name).front();
  }
  const std::string& section() const { return section_; }

 private:
  std::vector<std::string> candidates(std::string_view name) const {
    const std::string n(name);
    if (section_ == "ARGS") return {"ARGS." + n};
    if (section_ == "MODEL_ARGS") {
      std::string dashed = "--" + n;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      return {"MODEL_ARGS." + dashed, "MODEL_ARGS." + n};
    }
    return {n, "language_model." + n, "model_parallel." + n};
  }
  const YamlNode& root_;
  std::string section_;
};

// The shape the arguments describe (arguments.py's defaults: ffn_hidden_size 4h, or 4h x 2/3
// rounded down to a multiple of 64 with swiglu; kv_channels h / heads; tied embeddings unless
// untie_embeddings_and_output_weights; one K/V head per query head without group_query_attention).
Status read_megatron_shape(Mapper& m, const MegatronArgs& arg, const std::optional<ModelSpec>& tokenizer) {
  MEMPLAN_TRY(auto layers, m.integer(arg("num_layers")));
  MEMPLAN_TRY(auto hidden, m.integer(arg("hidden_size")));
  if (!layers || !hidden) return Ok{};
  CustomModel cm;
  cm.num_layers = layers;
  cm.hidden_size = hidden;
  MEMPLAN_TRY(cm.num_heads, m.integer(arg("num_attention_heads")));
  MEMPLAN_TRY(auto gqa, m.boolean(arg("group_query_attention")));
  if (gqa.value_or(false)) {
    MEMPLAN_TRY(cm.num_kv_heads, m.integer(arg("num_query_groups")));
  }
  MEMPLAN_TRY(auto swiglu, m.boolean(arg("swiglu")));
  MEMPLAN_TRY(cm.intermediate_size, m.integer(arg("ffn_hidden_size")));
  if (!cm.intermediate_size)
    cm.intermediate_size = swiglu.value_or(false) ? (4 * *hidden * 2 / 3) / 64 * 64 : 4 * *hidden;
  MEMPLAN_TRY(cm.head_dim, m.integer(arg("kv_channels")));
  MEMPLAN_TRY(cm.max_position_embeddings, m.integer(arg("max_position_embeddings")));
  for (const char* k : {"padded_vocab_size", "vocab_size"}) {
    MEMPLAN_TRY(auto v, m.integer(arg(k)));
    if (v) {
      cm.vocab_size = v;
      break;
    }
  }
  if (!cm.vocab_size && tokenizer) cm.vocab_size = tokenizer->vocab_size;
  MEMPLAN_TRY(auto untie, m.boolean(arg("untie_embeddings_and_output_weights")));
  cm.tie_word_embeddings = !untie.value_or(false);
  // Without swiglu Megatron's MLP is fc1 -> GeLU -> fc2, the MPT shape memplan has.
  cm.family = swiglu.value_or(false) ? "llama" : "mpt";
  const YamlNode& at = *m.node(arg("num_layers"));
  cm.name = fmt::format("custom model ({})", m.where_text(at));
  m.out().inputs.custom_model = cm;
  m.from_file("model", at, arg("num_layers"));
  for (const char* k : {"num_experts", "multi_latent_attention"}) {
    const YamlNode* n = m.node(arg(k));
    if (n == nullptr || n->is_null() || n->value == "false" || n->value == "False" || n->value == "1") continue;
    m.warn_at(*n, fmt::format("{} is not built from a Megatron-LM config: memplan estimates a dense model of this "
                              "shape; set tokenizer_model to the Hugging Face id of the architecture (or pass --model)",
                              k == std::string("num_experts") ? "the mixture-of-experts layout" : "multi-latent attention"));
  }
  return Ok{};
}

// Arguments memplan reads as a warning only: what they change is not in the estimate.
struct Unmodelled {
  const char* name;
  const char* why;
};
constexpr Unmodelled kUnmodelled[] = {
    {"mtp_num_layers",
     "multi-token prediction is not modelled: the last pipeline stage also runs {} MTP layer(s) (a transformer "
     "layer, a 2h x h projection and another pass through the output layer and the loss), not in the estimate"},
    {"fp8", "FP8 training is not modelled: memplan estimates bf16 activations and no FP8 weight copies"},
    {"fp8_format", "FP8 training is not modelled: memplan estimates bf16 activations and no FP8 weight copies"},
    {"fp4", "FP4 training is not modelled: memplan estimates bf16 activations"},
    {"pipeline_model_parallel_layout",
     "a custom pipeline layout is not modelled: memplan splits the layers evenly over the stages"},
    {"cpu_offloading", "activation offloading is not modelled: memplan keeps every activation on the GPU"},
    {"fine_grained_activation_offloading",
     "activation offloading is not modelled: memplan keeps every activation on the GPU"},
};

}  // namespace

Status map_megatron_lm(Mapper& m) {
  TrainingConfig& c = m.config();
  ParallelConfig& par = c.parallel;
  const MegatronArgs marg(m.root());
  const ArgPath arg = [&marg](std::string_view name) { return marg(name); };
  par.megatron_core = true;  // the trainer is Megatron's
  m.derived("megatron_core", "a Megatron-LM config");

  MEMPLAN_IO_CHECK(read_parallel_layout(m, arg));
  MEMPLAN_IO_CHECK(read_megatron_batch(m, arg));
  MEMPLAN_TRY(bool seq, m.read(arg("seq_length"), "seq_len", c.seq_len));
  if (!seq) {
    MEMPLAN_TRY(seq, m.read(arg("encoder_seq_length"), "seq_len", c.seq_len));
    if (!seq) m.from_default("seq_len", fmt::format("{} not set: memplan's default {}", arg("seq_length"), c.seq_len));
  }
  m.site(Knob::kSeqLen, m.node(arg("encoder_seq_length")) != nullptr && m.node(arg("seq_length")) == nullptr
                            ? arg("encoder_seq_length")
                            : arg("seq_length"));

  // Precision: --bf16 / --fp16 keep the parameters in 16 bits (Float16Module) with fp32 main
  // parameters in the optimizer; neither: fp32 parameters.
  MEMPLAN_TRY(auto bf16, m.boolean(arg("bf16")));
  MEMPLAN_TRY(auto fp16, m.boolean(arg("fp16")));
  if (bf16.value_or(false) || fp16.value_or(false)) {
    const DType half = bf16.value_or(false) ? DType::kBFloat16 : DType::kFloat16;
    const std::string key = arg(bf16.value_or(false) ? "bf16" : "fp16");
    c.torch_dtype = half;
    c.autocast = half;
    m.from_file("torch_dtype", *m.node(key), key + " (16-bit parameters, fp32 main parameters in the optimizer)");
    m.from_file("autocast", *m.node(key), key);
  } else {
    c.torch_dtype = DType::kFloat32;
    c.autocast.reset();
    m.from_default("torch_dtype", "neither bf16 nor fp16: fp32 parameters");
  }
  // The optimizer: Adam (Megatron's default, decoupled weight decay) with the distributed
  // optimizer as ZeRO-1; Megatron FSDP / torch FSDP2 shard parameters, gradients and states.
  MEMPLAN_TRY(auto opt, m.text(arg("optimizer")));
  c.optim.kind = OptimizerKind::kAdamWTorch;
  if (opt && to_lower(*opt) != "adam")
    m.warn_at(*m.node(arg("optimizer")),
              fmt::format("optimizer '{}' is not modelled; estimated as Adam (two fp32 states)", *opt));
  MEMPLAN_TRY(auto dist, m.boolean(arg("use_distributed_optimizer")));
  MEMPLAN_TRY(auto mfsdp, m.boolean(arg("use_megatron_fsdp")));
  MEMPLAN_TRY(auto tfsdp, m.boolean(arg("use_torch_fsdp2")));
  if (mfsdp.value_or(false) || tfsdp.value_or(false)) {
    const std::string key = arg(mfsdp.value_or(false) ? "use_megatron_fsdp" : "use_torch_fsdp2");
    par.sharding = ShardingStrategy::kFsdpFullShard;
    par.fsdp_version = 2;
    m.from_file("sharding", *m.node(key), key + " (parameters, gradients and optimizer states sharded)");
  } else if (dist.value_or(false)) {
    par.sharding = ShardingStrategy::kZero1;
    m.from_file("sharding", *m.node(arg("use_distributed_optimizer")),
                arg("use_distributed_optimizer") + " (Megatron's distributed optimizer: ZeRO-1)");
  }
  MEMPLAN_TRY(auto offload, m.boolean(arg("optimizer_cpu_offload")));
  if (offload.value_or(false)) {
    par.offload_optimizer = true;
    m.from_file("offload_optimizer", *m.node(arg("optimizer_cpu_offload")), arg("optimizer_cpu_offload"));
  }
  // Recomputation: full with one layer per checkpoint is every layer checkpointed; more layers per
  // checkpoint (uniform) or only some layers (block) are estimated as every layer, a warning;
  // selective recomputes the attention core, which fused attention never stores.
  MEMPLAN_TRY(auto gran, m.text(arg("recompute_granularity")));
  if (gran) {
    const std::string g = to_lower(*gran);
    const YamlNode& n = *m.node(arg("recompute_granularity"));
    if (g == "full") {
      c.gradient_checkpointing = true;
      c.checkpoint_reentrant = true;  // tensor_parallel.checkpoint: a torch.autograd.Function
      m.from_file("gradient_checkpointing", n, arg("recompute_granularity"));
      MEMPLAN_TRY(auto method, m.text(arg("recompute_method")));
      MEMPLAN_TRY(auto per, m.integer(arg("recompute_num_layers")));
      const std::string meth = method ? to_lower(*method) : "";
      if (meth == "block" || (per && *per > 1))
        m.warn_at(per ? *m.node(arg("recompute_num_layers")) : n,
                  fmt::format("recompute_method {} with recompute_num_layers {} is estimated as every layer "
                              "checkpointed on its own (a lower bound: {})",
                              method.value_or("uniform"), per.value_or(1),
                              meth == "block" ? "the layers past recompute_num_layers keep their activations"
                                              : "a chunk of layers is recomputed at once"));
    } else if (g == "selective") {
      m.warn_at(n, "recompute_granularity = selective is estimated as no recomputation (an upper bound): it "
                   "recomputes the attention core, which fused attention never stores, or the recompute_modules");
    }
  }
  // Attention: FlashAttention with use_flash_attn (or attention_backend flash), the unfused
  // softmax with attention_backend unfused; otherwise Transformer Engine's fused attention,
  // estimated as SDPA.
  MEMPLAN_TRY(auto flash, m.boolean(arg("use_flash_attn")));
  MEMPLAN_TRY(auto backend, m.text(arg("attention_backend")));
  MEMPLAN_TRY(auto impl, m.text(arg("transformer_impl")));
  std::string be = backend ? to_lower(*backend) : "";
  // transformer_impl local: Megatron-Core's own DotProductAttention, which materializes the scores.
  if (be.empty() && impl && to_lower(*impl) == "local") be = "local";
  if (flash.value_or(false) || be == "flash") {
    c.attn = AttnImpl::kFlashAttention2;
    const std::string key = arg(flash.value_or(false) ? "use_flash_attn" : "attention_backend");
    m.from_file("attn_implementation", *m.node(key), key);
  } else if (be == "unfused" || be == "local") {
    c.attn = AttnImpl::kEager;
    const std::string key = arg(backend ? "attention_backend" : "transformer_impl");
    m.from_file("attn_implementation", *m.node(key), key + " (unfused softmax: the scores are stored)");
  } else {
    c.attn = AttnImpl::kSdpa;
    m.from_default("attn_implementation", "fused attention (Transformer Engine): estimated as sdpa");
  }
  for (const auto& u : kUnmodelled) {
    const YamlNode* n = m.node(arg(u.name));
    if (n == nullptr || n->is_null() || !n->is_scalar()) continue;
    const std::string v = to_lower(n->value);
    if (v == "false" || v == "0" || v == "none" || v == "null" || v.empty()) continue;
    m.warn_at(*n, fmt::format("{} = {}: {}", u.name, n->value, fmt::format(fmt::runtime(u.why), n->value)));
  }

  // The architecture: the tokenizer's Hugging Face model when it has the arguments' shape (exact
  // parameters, MoE and MLA included), else the shape the arguments write.
  MEMPLAN_TRY(auto layers, m.integer(arg("num_layers")));
  MEMPLAN_TRY(auto hidden, m.integer(arg("hidden_size")));
  MEMPLAN_TRY(auto experts, m.integer(arg("num_experts")));
  const TokenizerModel tm = tokenizer_model(m, arg("tokenizer_model"));
  const std::optional<ModelSpec>& tok = tm.spec;
  const bool same = tok && (!layers || tok->num_layers == *layers) && (!hidden || tok->hidden_size == *hidden) &&
                    (!experts || *experts <= 1 || tok->moe.num_experts == *experts) && (layers || hidden);
  if (same) {
    m.out().inputs.model_name = tm.id;
    m.from_file("model", *m.node(arg("tokenizer_model")),
                arg("tokenizer_model") + " (its shape is num_layers / hidden_size)");
    for (const char* k : {"ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
                          "moe_ffn_hidden_size", "moe_layer_freq", "moe_shared_expert_intermediate_size", "q_lora_rank",
                          "kv_lora_rank"})
      (void)m.node(arg(k));
  } else {
    MEMPLAN_IO_CHECK(read_megatron_shape(m, marg, tok));
    if (!m.out().inputs.custom_model) {
      if (tok) {
        m.out().inputs.model_name = tm.id;
        m.from_file("model", *m.node(arg("tokenizer_model")), arg("tokenizer_model"));
      } else {
        m.out().inputs.model_hint = "the Megatron-LM config names no Hugging Face tokenizer_model and no num_layers / "
                                    "hidden_size; give --model ID|PATH";
      }
    }
  }
  // No unknown-key check: Megatron-LM has hundreds of arguments, and its own parser refuses a
  // misspelled one.
  return Ok{};
}

}  // namespace memplan::io
