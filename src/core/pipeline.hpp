// Pipeline parallelism (docs/formulas.md#pipeline-parallelism): which decoder layers each GPU of
// a pipeline holds, and how many micro-batches' activations its schedule keeps alive at once.
#pragma once

#include <cstdint>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan {

// The layers one pipeline rank holds. With interleaving (v model chunks per rank) the rank's
// chunks are not contiguous; `layers` counts all of them and `first_layer` is its first chunk's.
struct PipelineRank {
  int rank = 0;
  int first_layer = 0;
  int layers = 0;          // decoder layers on this rank, all chunks together
  int chunks = 1;          // model chunks (virtual stages) on this rank
  bool embedding = false;  // holds the input embedding (rank 0)
  bool head = false;       // holds the final norm, the output layer and the loss (last rank)

  bool operator==(const PipelineRank&) const = default;
};

// Splits the model's decoder layers over the pipeline. p = 1 gives one rank with everything.
// Even split by default (Megatron requires num_layers divisible by p x v; memplan gives any
// remainder to the last ranks, which hold fewer micro-batches in flight); explicit first/last
// stage counts as Megatron's decoder_first/last_pipeline_num_layers; torchtitan's
// layers_per_stage (pp_layers_per_stage) counts the embedding and the head as one layer each
// and sets the number of stages, ceil((L + 2) / layers_per_stage).
Result<std::vector<PipelineRank>> pipeline_ranks(const ModelSpec& m, const ParallelConfig& p);

// Model-chunk micro-batches whose activations a rank holds at its peak with `micro_batches`
// micro-batches per step (gradient accumulation): GPipe m; 1F1B and ZB-H1 min(p - rank, m);
// interleaved 1F1B min(2 (p - rank - 1) + (v - 1) p + 1, m v) (Megatron-Core's warmup + 1).
// `chunks` is the rank's model chunks (PipelineRank::chunks).
std::int64_t in_flight_chunks(const ParallelConfig& p, int rank, int chunks, std::int64_t micro_batches);

}  // namespace memplan
