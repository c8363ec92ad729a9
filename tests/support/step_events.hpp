// The step simulator seen from the tests of one mechanism (sliding windows, torchtune's
// attention): a bf16 CUDA program over every layer of a model, and the categories alive as
// backward begins.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>

#include "core/sim/program.hpp"

namespace memplan::testing {

inline sim::ProgramSpec bf16_program(const ModelSpec& m) {
  sim::ProgramSpec sp;
  sp.model = m;
  for (int l = 0; l < m.num_layers; ++l) sp.model_layers.push_back(l);
  sp.weight_dt = sp.embed_dt = sp.norm_dt = sp.compute_dt = sim::DT::kBF16;
  sp.attn = AttnImpl::kSdpa;
  sp.ops.cuda = true;
  sp.ops.inplace_accumulation = true;
  return sp;
}

// The categories alive as backward begins (the loss's gradient starts it).
inline sim::CatVec at_backward_start(const sim::ProgramResult& r) {
  for (const auto& e : r.events)
    if (e.segment == sim::kSegHeadBwd) return r.cats.all(e);
  FAIL("no backward event");
  return {};
}

inline std::int64_t at(const sim::CatVec& v, sim::Cat c, std::int64_t b, std::int64_t s) {
  return v[static_cast<std::size_t>(c)].eval(b, s);
}

}  // namespace memplan::testing
