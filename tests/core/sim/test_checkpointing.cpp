// torch.utils.checkpoint as transformers calls it (docs/formulas.md#gradient-checkpointing):
// what each checkpointed layer keeps, and for how long.
#include <catch2/catch.hpp>

#include "core/sim/program.hpp"
#include "support/models.hpp"

using namespace memplan;
using namespace memplan::sim;

namespace {

ProgramSpec checkpointed(int layers, bool reentrant) {
  ProgramSpec sp;
  sp.model = memplan::testing::toy_llama(layers);
  for (int l = 0; l < layers; ++l) sp.model_layers.push_back(l);
  sp.weight_dt = sp.embed_dt = sp.norm_dt = sp.compute_dt = DT::kBF16;
  sp.attn = AttnImpl::kSdpa;
  sp.ops.cuda = true;
  sp.ops.inplace_accumulation = true;
  sp.full_finetune = true;
  sp.gradient_checkpointing = true;
  sp.checkpoint_reentrant = reentrant;
  return sp;
}

// The checkpoint category at the run's last event: the embedding's backward, after every layer.
std::int64_t checkpoints_at_end(const ProgramResult& r) {
  REQUIRE(!r.events.empty());
  return r.cats.at(r.events.back(), Cat::kCheckpoints).eval(2, 128);
}

}  // namespace

TEST_CASE("reentrant checkpointing keeps every layer's RNG state until backward has finished") {
  // CheckpointFunction.forward stores torch.get_rng_state() (5,056 bytes on the CPU generator) in
  // ctx.fwd_cpu_state: an attribute of the backward node, which the graph keeps until backward
  // returns, not a saved tensor released when the node runs. When the embedding's gradient is
  // made, after every layer, all of them are still alive. Non-reentrant checkpointing keeps its
  // RNG state in the region's closure, freed once the region's nodes have run: none is left.
  for (const int layers : {4, 5}) {
    INFO("layers " << layers);
    CHECK(checkpoints_at_end(run_step(checkpointed(layers, true))) == layers * 5056);
    CHECK(checkpoints_at_end(run_step(checkpointed(layers, false))) == 0);
  }
}
