#include "core/pipeline.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace memplan {

Result<std::vector<PipelineRank>> pipeline_ranks(const ModelSpec& m, const ParallelConfig& p) {
  const int L = m.num_layers;
  const int pp = std::max(1, p.pipeline_parallel);
  const bool interleaved = p.pp_schedule == PipelineSchedule::kInterleaved1F1B;
  int v = interleaved ? std::max(1, p.virtual_stages) : 1;
  std::vector<PipelineRank> out;
  if (pp == 1) {
    out.push_back({0, 0, L, 1, true, true});
    return out;
  }
  // torchtitan / Automodel layers_per_stage: the embedding and the head weigh one layer each.
  const int lps = p.pp_layers_per_stage;
  if (lps > 0) {
    const std::int64_t stages = (static_cast<std::int64_t>(L) + 2 + lps - 1) / lps;
    // Multi-stage schedules round the stages per rank down (round_virtual_stages_to_pp_multiple).
    v = interleaved ? static_cast<int>(std::max<std::int64_t>(1, stages / pp)) : 1;
  }
  const std::int64_t chunks = static_cast<std::int64_t>(pp) * v;
  if (p.pp_first_stage_layers > 0 || p.pp_last_stage_layers > 0) {
    if (v > 1)
      return make_error(ErrorCode::kUnsupported,
                        "first/last pipeline stage layer counts with interleaved stages are not modelled",
                        "drop --pp-first-stage-layers/--pp-last-stage-layers or --virtual-stages");
    const std::int64_t given = static_cast<std::int64_t>(p.pp_first_stage_layers) + p.pp_last_stage_layers;
    const int middle_stages = pp - (p.pp_first_stage_layers > 0 ? 1 : 0) - (p.pp_last_stage_layers > 0 ? 1 : 0);
    const std::int64_t rest = L - given;
    if (rest < middle_stages || (middle_stages == 0 && rest != 0))
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("first/last pipeline stage layers ({} + {}) leave {} of the model's {} layers for {} "
                                    "other stage(s)",
                                    p.pp_first_stage_layers, p.pp_last_stage_layers, rest, L, middle_stages),
                        "every stage needs at least one decoder layer");
  } else if (chunks > L + (lps > 0 ? 2 : 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("pipeline-parallel x virtual-stages = {} model chunks for {} decoder layers", chunks, L),
                      "every model chunk needs at least one decoder layer");
  }
  // Layers per model chunk, in model order.
  std::vector<int> per_chunk(static_cast<std::size_t>(chunks), 0);
  int lo = 0, hi = static_cast<int>(chunks);
  int remaining = L;
  if (p.pp_first_stage_layers > 0) {
    per_chunk.front() = p.pp_first_stage_layers;
    remaining -= p.pp_first_stage_layers;
    lo = 1;
  }
  if (p.pp_last_stage_layers > 0) {
    per_chunk.back() = p.pp_last_stage_layers;
    remaining -= p.pp_last_stage_layers;
    hi -= 1;
  }
  const int n = hi - lo;
  // With layers_per_stage the embedding and the head take a layer's place in the split.
  const int weighted = lps > 0 ? remaining + 2 : remaining;
  for (int i = lo; i < hi; ++i) {
    // Even split; the remainder goes to the last chunks.
    const int k = i - lo;
    per_chunk[static_cast<std::size_t>(i)] = weighted / n + (k >= n - weighted % n ? 1 : 0);
  }
  if (lps > 0) {
    per_chunk.front() -= 1;
    per_chunk.back() -= 1;
  }
  // Only the embedding's or the head's chunk may hold no decoder layer (torchtitan allows it).
  for (std::size_t i = 0; i < per_chunk.size(); ++i)
    if (per_chunk[i] < (i == 0 || i + 1 == per_chunk.size() ? 0 : 1))
      return make_error(ErrorCode::kUnsupported,
                        fmt::format("a pipeline stage with no decoder layer between the embedding and the head "
                                    "({} layers over {} model chunks)",
                                    L, chunks),
                        "use fewer stages or more layers per stage");
  std::vector<int> chunk_first(static_cast<std::size_t>(chunks), 0);
  for (std::size_t i = 1; i < per_chunk.size(); ++i) chunk_first[i] = chunk_first[i - 1] + per_chunk[i - 1];
  for (int r = 0; r < pp; ++r) {
    PipelineRank rk;
    rk.rank = r;
    rk.chunks = v;
    rk.first_layer = chunk_first[static_cast<std::size_t>(r)];
    for (int c = 0; c < v; ++c) rk.layers += per_chunk[static_cast<std::size_t>(c * pp + r)];
    rk.embedding = r == 0;
    rk.head = r == pp - 1;
    out.push_back(rk);
  }
  return out;
}

std::int64_t in_flight_chunks(const ParallelConfig& p, int rank, int chunks, std::int64_t micro_batches) {
  const std::int64_t pp = std::max(1, p.pipeline_parallel);
  const std::int64_t m = std::max<std::int64_t>(1, micro_batches);
  if (pp == 1) return 1;
  switch (p.pp_schedule) {
    case PipelineSchedule::kGPipe: return m;
    case PipelineSchedule::k1F1B:
    case PipelineSchedule::kZeroBubble: return std::min(pp - rank, m);
    case PipelineSchedule::kInterleaved1F1B: {
      const std::int64_t v = std::max(1, chunks);
      return std::min(2 * (pp - rank - 1) + (v - 1) * pp + 1, m * v);
    }
  }
  return 1;
}

}  // namespace memplan
