// alibaba/ROLL (`python examples/start_rlvr_pipeline.py --config_name rlvr_config`): one section per
// worker role (actor_train / sft_train, actor_infer, reference, critic, rewards), each with
// model_args, training_args (TrainingArguments' names), strategy_args (strategy_name
// fsdp2_train | megatron_train | deepspeed_train | vllm | sglang, strategy_config) and
// device_mapping (`list(range(0,16))`: the GPUs of that role). The keys are the ones the reading by
// meaning knows (frameworks/inferred.cpp: actor_infer is the rollout engine, reference a side
// model, device_mapping the trained model's GPUs); what ROLL means by default is added here:
// - ModelArguments.disable_gradient_checkpointing defaults to False: ROLL checkpoints unless a
//   file switches it off (roll/configs/model_args.py).
// - the synchronous pipeline (async_pipeline: false, the default) offloads the rollout engine
//   after generating (rlvr_pipeline.py: actor_infer.offload_states()), so vLLM's share of a GPU
//   it shares with actor_train is not held during the training step.
// docs/configs.md#roll.
#include "io/config/dialects_map.hpp"

namespace memplan::io {

Status map_roll(Mapper& m) {
  MEMPLAN_IO_CHECK(read_by_meaning(m, "ROLL", {}));
  TrainingConfig& c = m.config();
  if (!m.has_origin("gradient_checkpointing")) {
    c.gradient_checkpointing = true;
    m.from_default("gradient_checkpointing", "ROLL model_args.disable_gradient_checkpointing = false");
  }
  if (c.grpo.vllm == VllmMode::kColocate) {
    MEMPLAN_TRY(auto async, m.boolean("async_pipeline"));
    if (!async.value_or(false)) {
      c.grpo.vllm = VllmMode::kNone;
      m.derived("use_vllm", "ROLL's synchronous pipeline offloads actor_infer (offload_states) before the "
                            "training step");
    }
  }
  return Ok{};
}

}  // namespace memplan::io
