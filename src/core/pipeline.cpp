#include "core/pipeline.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace memplan {

Result<std::vector<PipelineRank>> pipeline_ranks(const ModelSpec& m, const ParallelConfig& p) {
  const int L = m.num_layers;
  const int pp = std::max(1, p.pipeline_parallel);
  const int v = p.pp_schedule == PipelineSchedule::kInterleaved1F1B ? std::max(1, p.virtual_stages) : 1;
  std::vector<PipelineRank> out;
  if (pp == 1) {
    out.push_back({0, 0, L, 1, true, true});
    return out;
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
  } else if (chunks > L) {
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
  for (int i = lo; i < hi; ++i) {
    // Even split; the remainder goes to the last chunks.
    const int k = i - lo;
    per_chunk[static_cast<std::size_t>(i)] = remaining / n + (k >= n - remaining % n ? 1 : 0);
  }
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

std::int64_t in_flight_chunks(const ParallelConfig& p, int rank, std::int64_t micro_batches) {
  const std::int64_t pp = std::max(1, p.pipeline_parallel);
  const std::int64_t m = std::max<std::int64_t>(1, micro_batches);
  if (pp == 1) return 1;
  switch (p.pp_schedule) {
    case PipelineSchedule::kGPipe: return m;
    case PipelineSchedule::k1F1B:
    case PipelineSchedule::kZeroBubble: return std::min(pp - rank, m);
    case PipelineSchedule::kInterleaved1F1B: {
      const std::int64_t v = std::max(1, p.virtual_stages);
      return std::min(2 * (pp - rank - 1) + (v - 1) * pp + 1, m * v);
    }
  }
  return 1;
}

}  // namespace memplan
