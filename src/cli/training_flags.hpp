// The flags every estimating command shares (estimate, plan, sweep, check): model, method,
// batch, precision, optimizer, PEFT, quantization, DPO/GRPO and multi-GPU settings. Names follow
// Hugging Face TrainingArguments / TRL / PEFT. Values are kept as given and parsed by the engine's
// parsers so errors quote them and suggest near matches.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "io/config/config_loader.hpp"
#include "io/fs.hpp"
#include "io/inputs.hpp"
#include "memplan/result.hpp"
#include "report/format.hpp"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace memplan::cli {

struct TrainingFlags {
  std::string model;
  std::string model_params;
  // A custom architecture, named like a Hugging Face config.json (0: not given).
  std::int64_t hidden_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t head_dim = 0;
  std::string method;
  std::int64_t batch = 0;
  std::int64_t seq_len = 0;
  std::int64_t grad_accum = 0;
  std::string length_histogram;   // --length-histogram LEN:WEIGHT,...
  std::int64_t length_steps = 0;  // --length-steps N
  std::int64_t pad_to_multiple_of = 0;
  std::int64_t empty_cache_steps = 0;
  std::string torch_dtype;
  bool bf16 = false;
  bool fp16 = false;
  std::string optim;
  std::vector<std::string> optim_args;
  bool gradient_checkpointing = false;
  std::string use_reentrant;  // true|false: torch.utils.checkpoint use_reentrant
  int checkpoint_every = 1;   // --checkpoint-every N: only every N-th layer checkpointed
  std::string checkpoint_policy;  // --checkpoint-policy full|op
  std::string loss_dtype;     // --loss-dtype float32|logits
  std::string attn;
  bool use_peft = false;
  int lora_r = 0;
  double lora_alpha = 0;
  double lora_dropout = -1;
  std::vector<std::string> lora_targets;
  std::vector<std::string> modules_to_save;
  bool load_in_4bit = false;
  bool load_in_8bit = false;
  std::string bnb_quant_type;
  bool double_quant = false;
  std::string quant_storage;     // --bnb-4bit-quant-storage uint8|bfloat16|float16|float32
  std::string kbit_prepare;      // --kbit-prepare freeze_only|peft_upcast|trl_legacy
  std::string adapter_dtype;     // --adapter-dtype float32|bfloat16|float16
  std::string stack;             // --stack transformers==4.48.1,trl==0.13.0
  std::string python;            // --python PATH: the environment whose libraries are read
  std::vector<std::string> launch;  // --launch FILE: launch scripts / .env files of the run
  std::string device;
  // DPO / GRPO
  std::string ref_model;
  bool precompute_ref = false;
  bool dpo_two_passes = false;
  int num_generations = 0;
  std::int64_t max_prompt_length = 0;
  std::int64_t max_completion_length = 0;
  double beta = -1;
  double temperature = 0;
  bool use_vllm = false;
  std::string vllm_mode;
  double vllm_util = 0;
  // multi-GPU
  int num_gpus = 0;
  int nodes = 0;
  int zero_stage = -1;
  std::string fsdp;
  int fsdp_version = 1;
  bool offload_optimizer = false;
  bool offload_params = false;
  int tensor_parallel = 0;
  int pipeline_parallel = 0;
  std::string pp_schedule;
  int virtual_stages = 0;
  int pp_first_stage_layers = 0;
  int pp_last_stage_layers = 0;
  int pp_layers_per_stage = 0;
  int context_parallel = 0;
  int expert_parallel = 0;
  int expert_tensor_parallel = 0;
  double moe_capacity_factor = 0;
  bool sequence_parallel = false;
  bool megatron_core = false;
  bool fsdp_mixed_precision = false;
  std::string fsdp_reshard_after_forward;  // --fsdp-reshard-after-forward true|false
  bool loss_parallel = false;
  int dp_replicate = 0;
  // Loss kernels, encoders and contrastive training (docs/formulas.md#fused-cross-entropy, #encoders)
  std::string model_code;        // --model-code transformers|torchtune
  std::string loss_kernel;       // --loss-kernel eager|liger|chunked|cce
  bool liger = false;            // --liger / --use-liger-kernel: Liger FLCE + RMSNorm/SwiGLU/RoPE
  bool fused_ce = false;         // --fused-ce: Liger's fused linear cross-entropy only
  std::string head;              // --head pooling|mlm|classification (encoders; decoders: pooling)
  std::string pooling;           // --pooling mean|cls|lasttoken (sentence-transformers' Pooling)
  int num_labels = 0;            // --num-labels (classification head)
  int texts_per_example = 0;     // --texts-per-example N (contrastive: anchor + positives + negatives)
  int images = 0;                // --images N (vision-language models: images per sequence)
  std::string image_size;        // --image-size WxH or N (pixels, before the processor resizes)
  bool train_vision_tower = false;
  bool train_projector = false;
  bool cached_mnrl = false;      // --cached-mnrl: CachedMultipleNegativesRankingLoss (GradCache)
  int mini_batch_size = 0;       // --mini-batch-size (cached MNRL, default 32)
  // Config files (docs/configs.md)
  std::vector<std::string> configs;  // --config FILE, repeatable: later files override earlier ones
  std::string dialect;               // --dialect NAME; empty: detected from the keys
  std::string keys;                  // --keys INPUT=KEY.PATH,... or a mapping file
  std::vector<std::string> overrides;  // --override / bare `a.b=1` after the config: Hydra overrides
  bool show_config = false;          // --show-config: print every input and its source, then stop

  CLI::App* app = nullptr;  // the subcommand the flags were added to
};

// Adds the flags to `app`; `flags` must outlive parsing.
void add_training_flags(CLI::App& app, TrainingFlags& flags);

// Applies the flags that were given on top of `base` (defaults or values read from config
// files), recording each flag's origin. The model is resolved last.
// --length-histogram: LEN:WEIGHT pairs, sorted by length.
Result<std::vector<std::pair<std::int64_t, double>>> parse_length_histogram(std::string_view text);

Result<io::ResolvedInputs> apply_training_flags(const TrainingFlags& flags, io::ResolvedInputs base);

// Makes every integer option of `app` and its subcommands read decimal only, the way people
// write counts: `--batch 010` is 10 and `--batch 08` is 8 (CLI11 alone reads 010 as octal and
// refuses 08); 0x10, 1e3 and 10.0 are refused.
void read_integers_as_decimal(CLI::App& app);

// Whether a named flag ("--batch") was given on the command line.
bool flag_given(const TrainingFlags& flags, const std::string& name);

// What a command evaluates: the --config files (then `more_files`, layered on top) read with
// --dialect and --keys, and the flags applied over them.
struct Inputs {
  std::optional<io::LoadedConfig> loaded;  // absent without config files
  io::ResolvedInputs resolved;
};
Result<Inputs> load_inputs(const TrainingFlags& flags, const std::vector<std::string>& more_files = {},
                           io::FileSystem& fs = io::real_file_system());

// The inputs a command line of training flags describes ("--model", "llama-3.1-8b", "--batch",
// "4", ..., "--stack", "transformers==4.48.1"), resolved as `memplan estimate` resolves them: for
// tools that replay recorded runs through the same door a user has (memplan-accuracy).
Result<io::ResolvedInputs> resolve_training_args(const std::vector<std::string>& args);

// --show-config: prints every input with its value and source. When the flags cannot be applied
// (no model yet), prints what the files say and returns the error.
Result<int> show_config(std::ostream& out, const TrainingFlags& flags, report::Format format,
                        const std::vector<std::string>& more_files = {});

}  // namespace memplan::cli
