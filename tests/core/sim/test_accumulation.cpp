// A later micro-batch of a gradient-accumulation step, simulated directly (every .grad
// allocated before the forward) against the rule the engine applies to the first micro-batch's
// timeline instead (docs/formulas.md#gradient-accumulation): at every event, the gradients
// accumulated so far are replaced by all of them.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/sim/program.hpp"
#include "support/models.hpp"

using namespace memplan;
using namespace memplan::sim;

namespace {

ProgramSpec spec(bool lora, bool checkpointing) {
  ProgramSpec sp;
  sp.model = memplan::testing::toy_llama(3);
  sp.model_layers = {0, 1, 2};
  sp.weight_dt = DT::kBF16;
  sp.embed_dt = sp.norm_dt = DT::kBF16;
  sp.compute_dt = DT::kBF16;
  sp.full_finetune = !lora;
  if (lora) {
    sp.lora.enabled = true;
    sp.lora.r = 8;
    sp.lora.targets = {"q_proj", "v_proj"};
  }
  sp.gradient_checkpointing = checkpointing;
  sp.attn = AttnImpl::kSdpa;
  sp.ops.cuda = true;
  sp.ops.inplace_accumulation = true;
  return sp;
}

}  // namespace

TEST_CASE("a later micro-batch's peak is the first's with all gradients in place of those so far") {
  for (const bool lora : {false, true}) {
    for (const bool gc : {false, true}) {
      INFO("lora " << lora << " checkpointing " << gc);
      ProgramSpec sp = spec(lora, gc);
      const ProgramResult first = run_step(sp);
      sp.grads_accumulated = true;
      const ProgramResult later = run_step(sp);
      std::int64_t all_grads = 0;
      for (const auto& p : first.params)
        if (p.trainable) all_grads += p.numel * esize(p.dt);
      for (const auto& [b, s] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 16}, {4, 128}, {2, 1000}}) {
        std::int64_t direct = 0, derived = 0;
        for (const auto& e : later.events) direct = std::max(direct, e.total.eval(b, s));
        for (const auto& e : first.events) {
          const std::int64_t g = first.cats.at(e, Cat::kGradients).eval(b, s);
          derived = std::max(derived, e.total.eval(b, s) - g + all_grads);
        }
        CHECK(direct == derived);
      }
    }
  }
}
