// NVIDIA NeMo-RL (`uv run examples/run_grpo_math.py --config examples/configs/grpo_math_1B.yaml`):
// sections grpo:/sft:/dpo:/ppo:, policy: (model_name, train_micro_batch_size,
// train_global_batch_size, max_total_sequence_length, precision, dtensor_cfg or megatron_cfg with
// `enabled:`, lora_cfg, generation.vllm_cfg.gpu_memory_utilization, generation.colocated),
// cluster: (gpus_per_node, num_nodes), and `defaults: ../../x.yaml` inheritance (config/hydra.cpp).
// The keys are the ones the reading by meaning knows (frameworks/inferred.cpp); what NeMo-RL
// means differently is corrected here:
// - policy.precision: the DTensor worker loads the weights in float32 ("to keep master weights in
//   float32", nemo_rl/models/policy/workers/dtensor_policy_worker.py) and FSDP2's
//   MixedPrecisionPolicy computes in `precision`: fp32 weights with 16-bit compute.
// - colocated generation (the default) sleeps while the policy trains (vLLM sleep level 1):
//   its memory share is not held during the training step;
// - generation.colocated.enabled: false puts vLLM on its own nodes/GPUs
//   (colocated.resources), which the training then does not have.
// docs/configs.md#nemo-rl.
#include <fmt/format.h>

#include "io/config/dialects_map.hpp"
#include "memplan/text.hpp"

namespace memplan::io {

Status map_nemo_rl(Mapper& m) {
  MEMPLAN_IO_CHECK(read_by_meaning(m, "NeMo-RL", {}));
  TrainingConfig& c = m.config();
  MEMPLAN_TRY(auto precision, m.text("policy.precision"));
  if (precision) {
    const std::string p = to_lower(trim(*precision));
    const YamlNode& n = *m.node("policy.precision");
    if (p == "bfloat16" || p == "float16") {
      c.torch_dtype = DType::kFloat32;
      c.autocast = p == "bfloat16" ? DType::kBFloat16 : DType::kFloat16;
      m.from_file("torch_dtype", n, "policy.precision (NeMo-RL keeps float32 master weights)");
      m.from_file("autocast", n, "policy.precision");
    } else if (p == "float32") {
      c.torch_dtype = DType::kFloat32;
      c.autocast.reset();
      m.from_file("torch_dtype", n, "policy.precision");
    }
  }
  // Generation on its own resources: the training keeps the rest of the cluster.
  MEMPLAN_TRY(auto colocated, m.boolean("policy.generation.colocated.enabled"));
  // Colocated (the default), vLLM sleeps while the policy trains: finish_generation() calls
  // vllm_worker.sleep(), LLM.sleep(level=1) (weights to the CPU, KV cache freed), so its share
  // is not held during the training step.
  if (colocated.value_or(true) && c.grpo.vllm == VllmMode::kColocate) {
    c.grpo.vllm = VllmMode::kNone;
    m.derived("use_vllm", "NeMo-RL colocated generation: vLLM sleeps (level 1) during the policy's update");
  }
  if (colocated && !*colocated && c.grpo.vllm != VllmMode::kNone) {
    c.grpo.vllm = VllmMode::kServer;
    MEMPLAN_TRY(auto gen_nodes, m.integer("policy.generation.colocated.resources.num_nodes"));
    MEMPLAN_TRY(auto gen_gpus, m.integer("policy.generation.colocated.resources.gpus_per_node"));
    const YamlNode& at = *m.node("policy.generation.colocated.enabled");
    if (c.parallel.nodes > 1 && gen_nodes && *gen_nodes < c.parallel.nodes) {
      c.parallel.nodes -= static_cast<int>(*gen_nodes);
      m.derived("nodes", fmt::format("cluster.num_nodes less the {} node(s) generation takes "
                                     "(policy.generation.colocated.resources.num_nodes)",
                                     *gen_nodes));
    } else if (c.parallel.nodes == 1 && gen_gpus && *gen_gpus < c.parallel.num_gpus) {
      c.parallel.num_gpus -= static_cast<int>(*gen_gpus);
      m.derived("num_gpus", fmt::format("cluster.gpus_per_node less the {} GPU(s) generation takes "
                                        "(policy.generation.colocated.resources.gpus_per_node)",
                                        *gen_gpus));
    }
    m.from_file("use_vllm", at, "policy.generation.colocated.enabled (vLLM on its own GPUs)");
  }
  return Ok{};
}

}  // namespace memplan::io
