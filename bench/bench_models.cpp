// Cost of finding a model's architecture (src/io/model/model_source.cpp), which every command pays once
// at start-up: the exact-name fast path (parses only the entries whose text holds the name), a
// name that needs the name rules (parses the whole catalog, once per process), and that
// whole-catalog parse itself. docs/models.md#lookup-cost records the numbers.
//
//   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DMEMPLAN_BUILD_BENCH=ON
//   cmake --build build-bench --target memplan_bench_models && build-bench/bench/memplan_bench_models
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "io/embedded.hpp"
#include "io/model/model_source.hpp"

namespace {

using namespace memplan;

void BM_ResolveCatalogId(benchmark::State& state) {
  const io::ModelSearchEnv env;
  for (auto _ : state) {
    auto m = io::resolve_model_source("meta-llama/Llama-3.1-8B", env);
    if (!m) std::abort();
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_ResolveCatalogId)->Unit(benchmark::kMicrosecond);

// After the first call the catalog and the rule index are built; this is the steady state.
void BM_ResolveByNameRules(benchmark::State& state) {
  const io::ModelSearchEnv env;
  for (auto _ : state) {
    auto m = io::resolve_model_source("unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit", env);
    if (!m) std::abort();
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_ResolveByNameRules)->Unit(benchmark::kMicrosecond);

// What load_catalog() does the first time a process needs the whole catalog (a rule-resolved name,
// an unknown name, `memplan models`).
void BM_ParseWholeCatalog(benchmark::State& state) {
  for (auto _ : state) {
    int n = 0;
    for (const auto& f : io::embedded_files()) {
      if (f.path.rfind("models/", 0) != 0) continue;
      auto e = io::parse_catalog_entry(f.content, std::string(f.path));
      if (!e) std::abort();
      ++n;
    }
    benchmark::DoNotOptimize(n);
  }
}
BENCHMARK(BM_ParseWholeCatalog)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
