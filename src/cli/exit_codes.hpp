// memplan's exit codes (ninja's exit_status.h). Usage errors found by CLI11 keep CLI11's own
// codes (>= 100; see docs/cli.md).
#pragma once

#include "memplan/result.hpp"

namespace memplan::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitDoesNotFit = 1,    // check/plan/preflight: a config does not fit, or too little memory is free
  kExitInvalidInput = 2,  // a bad value, unknown name, or invalid config file
  kExitIoError = 3,       // a file could not be read or written
  kExitNoGpu = 4,         // --auto / detection found no GPU
  kExitUsage = 64,        // a usage error found after parsing: check with no GPU memory to compare with (EX_USAGE)
  kExitInternal = 70,     // a bug in memplan (EX_SOFTWARE)
};

inline int exit_code_for(const Error& e) {
  switch (e.code) {
    case ErrorCode::kIoError: return kExitIoError;
    case ErrorCode::kNoGpu: return kExitNoGpu;
    default: return kExitInvalidInput;
  }
}

}  // namespace memplan::cli
