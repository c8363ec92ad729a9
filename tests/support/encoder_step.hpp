// Helpers for the encoder step tests (tests/core/sim/test_*_step.cpp): a program with every layer
// simulated, what the forward left saved as backward begins, and the parameters a step trains.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <optional>

#include "core/sim/program.hpp"

namespace memplan::testing {

// Every layer of `m` simulated, weights in `weights`; `cuda` picks torch 2.x on CUDA (else torch
// 1.13 on the CPU, the measured configuration).
inline sim::ProgramSpec every_layer_program(const ModelSpec& m, sim::DT weights, bool cuda,
                                            AttnImpl attn = AttnImpl::kEager,
                                            std::optional<sim::DT> autocast = std::nullopt) {
  sim::ProgramSpec sp;
  sp.model = m;
  for (int l = 0; l < m.num_layers; ++l) sp.model_layers.push_back(l);
  sp.weight_dt = sp.embed_dt = sp.norm_dt = sp.compute_dt = weights;
  sp.autocast = autocast;
  sp.attn = attn;
  sp.ops.cuda = cuda;
  sp.ops.inplace_accumulation = cuda;
  sp.ops.trivial_slices_are_ops = !cuda;
  sp.ops.mean_saves_input = !cuda;
  return sp;
}

// Bytes of category `cat` alive as backward begins (the head's backward): what the forward saved.
inline std::int64_t at_backward_start(const sim::ProgramSpec& sp, sim::Cat cat, std::int64_t b, std::int64_t s) {
  const sim::ProgramResult r = sim::run_step(sp);
  REQUIRE(r.leaked.empty());
  for (const auto& e : r.events)
    if (e.segment == sim::kSegHeadBwd) return r.cats.at(e, cat).eval(b, s);
  FAIL("no backward event");
  return 0;
}

// The parameters the step created, as sum(p.numel()) over them.
inline std::int64_t simulated_parameters(const sim::ProgramResult& r) {
  return std::accumulate(r.params.begin(), r.params.end(), std::int64_t{0},
                         [](std::int64_t a, const sim::ParamRec& p) { return a + p.numel; });
}

}  // namespace memplan::testing
