#include "memplan/estimate.hpp"

#include <fmt/format.h>

namespace memplan {

std::string to_string(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizerStep: return "optimizer_step";
    case Phase::kReferenceForward: return "reference_forward";
    case Phase::kGeneration: return "generation";
  }
  return "?";
}

std::string to_string(Placement p) {
  switch (p) {
    case Placement::kReplicated: return "replicated";
    case Placement::kSharded: return "sharded";
    case Placement::kOffloaded: return "offloaded";
    case Placement::kPerDevice: return "per_device";
  }
  return "?";
}

Status check_invariants(const Estimate& e) {
  Bytes sum;
  for (const auto& c : e.components) {
    if (c.bytes < Bytes::zero())
      return make_error(ErrorCode::kInvalidArgument, fmt::format("component '{}' is negative", c.name));
    sum += c.bytes;
  }
  if (sum != e.peak)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("components sum to {} bytes but peak is {} bytes", sum.count(), e.peak.count()));
  if (e.reserved < e.peak)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("reserved ({}) is below peak ({})", e.reserved.count(), e.peak.count()));
  Bytes total = e.reserved;
  for (const auto& o : e.overhead) {
    if (o.bytes < Bytes::zero())
      return make_error(ErrorCode::kInvalidArgument, fmt::format("overhead '{}' is negative", o.name));
    total += o.bytes;
  }
  if (total != e.total)
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("total ({}) != reserved + overhead ({})", e.total.count(), total.count()));
  bool peak_phase_seen = false;
  for (const auto& p : e.phases) {
    if (p.peak > e.peak)
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("phase '{}' peak exceeds the overall peak", to_string(p.phase)));
    if (p.phase == e.peak_phase && p.peak == e.peak) peak_phase_seen = true;
  }
  if (!e.phases.empty() && !peak_phase_seen)
    return make_error(ErrorCode::kInvalidArgument, "peak_phase does not match any phase's peak");
  return Ok{};
}

}  // namespace memplan
