// Measured training steps (tools/measure/measure.py output) as engine inputs, for the accuracy
// report and its test.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan::io {

struct MeasuredCase {
  std::string id;
  ModelSpec model;
  TrainingConfig config;
  std::int64_t peak_bytes = 0;
  std::string peak_phase;
  std::map<std::string, std::int64_t> phase_peaks;
};

// Reads a JSON list of cases; errors name the file and the case.
Result<std::vector<MeasuredCase>> load_measurements(const std::string& path);

}  // namespace memplan::io
