// memplan-accuracy: compares the engine's predictions with measured training steps.
//
//   memplan-accuracy [--max-median PCT] [--max-error PCT] [--verbose] FILE.json...
//
// Each FILE holds a list of cases written by tools/measure/measure.py. Prints one line per case
// (predicted vs measured peak, relative error, phase) and a summary with the median and maximum
// relative error; exits 1 when a threshold is exceeded, so ctest can hold the engine to them.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/measurement.hpp"
#include "memplan/engine.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Compare memplan's predictions with measured peaks"};
  std::vector<std::string> files;
  double max_median = 100.0, max_error = 100.0;
  bool verbose = false;
  app.add_option("files", files, "measurement JSON files")->required();
  app.add_option("--max-median", max_median, "fail if the median |error| exceeds this percentage");
  app.add_option("--max-error", max_error, "fail if any |error| exceeds this percentage");
  app.add_flag("--verbose", verbose, "print per-phase errors");
  CLI11_PARSE(app, argc, argv);

  std::vector<double> errors;
  int failures = 0;
  for (const auto& path : files) {
    auto cases = memplan::io::load_measurements(path);
    if (!cases) {
      std::cerr << "memplan-accuracy: error: " << cases.error().to_string() << "\n";
      return 2;
    }
    for (const auto& c : *cases) {
      auto est = memplan::estimate(c.model, c.config);  // GRPO: prompt + completion tokens
      if (!est) {
        std::cerr << fmt::format("{}: engine error: {}\n", c.id, est.error().to_string());
        ++failures;
        continue;
      }
      const double pred = static_cast<double>(est->peak.count());
      const double meas = static_cast<double>(c.peak_bytes);
      const double err = 100.0 * (pred - meas) / meas;
      errors.push_back(std::fabs(err));
      std::cout << fmt::format("{:<44} measured {:>9.1f} MiB  predicted {:>9.1f} MiB  {:>+6.2f}% ({:+} B)  {}/{}\n",
                               c.id, meas / 1048576.0, pred / 1048576.0, err, est->peak.count() - c.peak_bytes,
                               c.peak_phase, memplan::to_string(est->peak_phase));
      if (verbose) {
        for (const auto& comp : est->components)
          std::cout << fmt::format("    {:<24} {:>10.2f} MiB\n", comp.name, comp.bytes.as_mib());
        for (const auto& [phase, bytes] : c.phase_peaks) {
          for (const auto& p : est->phases) {
            if (memplan::to_string(p.phase) != phase) continue;
            std::cout << fmt::format("    {:<16} measured {:>9.1f}  predicted {:>9.1f}  {:>+6.2f}%\n", phase,
                                     static_cast<double>(bytes) / 1048576.0, p.peak.as_mib(),
                                     100.0 * (static_cast<double>(p.peak.count()) - static_cast<double>(bytes)) /
                                         static_cast<double>(bytes));
          }
        }
      }
    }
  }
  if (errors.empty()) {
    std::cerr << "memplan-accuracy: no cases\n";
    return 2;
  }
  std::vector<double> sorted = errors;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  const double worst = sorted.back();
  std::cout << fmt::format("\n{} cases: median |error| {:.2f}%, max |error| {:.2f}%  (limits {:.1f}% / {:.1f}%)\n", n,
                           median, worst, max_median, max_error);
  if (failures > 0 || median > max_median || worst > max_error) return 1;
  return 0;
}
