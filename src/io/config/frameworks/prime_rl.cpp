// PrimeIntellect-ai/prime-rl (`uv run rl @ rl.toml`, `uv run sft @ sft.toml`): TOML with [model]
// (name, impl, optimization_dtype, [model.lora] rank, [model.ac] freq), [data] (SFT: seq_len,
// batch_size, micro_batch_size), [orchestrator] (RL: batch_size rollouts per step, group_size,
// [orchestrator.train.sampling] max_completion_tokens), [trainer.*] (RL: the same model/optim
// tables), [deployment] (num_train_gpus, num_infer_gpus, num_train_nodes). The keys are read by
// meaning (frameworks/inferred.cpp); what prime-rl means differently (packages/prime-rl-configs,
// 559b4477) is said here:
// - an [orchestrator] table makes the run RL, whatever keys it holds;
// - SFT's data.batch_size is the step's batch, data.micro_batch_size (default 1) the forward pass's;
// - FSDP2's MixedPrecisionPolicy computes in bf16 (param_dtype bfloat16) over master weights in
//   model.optimization_dtype, float32 unless the file says bfloat16.
// docs/configs.md#prime-rl.
#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

Status map_prime_rl(Mapper& m) {
  ReadingHints hints;
  hints.rl = m.node("orchestrator") != nullptr;
  hints.generic_batch_is_global = !hints.rl;
  MEMPLAN_IO_CHECK(read_by_meaning(m, "prime-rl", {}, hints));
  TrainingConfig& c = m.config();
  const char* opt_key = m.node("trainer.model.optimization_dtype") != nullptr ? "trainer.model.optimization_dtype"
                                                                               : "model.optimization_dtype";
  MEMPLAN_TRY(auto opt, m.text(opt_key));
  if (!opt || to_lower(trim(*opt)) == "float32") {
    c.torch_dtype = DType::kFloat32;
    c.autocast = DType::kBFloat16;
    if (opt) {
      m.from_file("torch_dtype", *m.node(opt_key), std::string(opt_key) + " (master weights; bf16 compute)");
    } else {
      m.from_default("torch_dtype", "prime-rl model.optimization_dtype = float32 (master weights)");
    }
    m.from_default("autocast", "prime-rl computes in bf16 (FSDP2 MixedPrecisionPolicy param_dtype bfloat16)");
  }
  return Ok{};
}

}  // namespace memplan::io
