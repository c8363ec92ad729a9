// Every subcommand, one registration function each (one file each under src/cli/).
#pragma once

#include <string>
#include <vector>

#include "cli/app.hpp"

namespace memplan::cli {

Command register_estimate(CLI::App& root);
Command register_plan(CLI::App& root);
Command register_sweep(CLI::App& root);
Command register_check(CLI::App& root);
Command register_models(CLI::App& root);
Command register_gpus(CLI::App& root);
Command register_preflight(CLI::App& root);
Command register_auto(CLI::App& root);
Command register_profile(CLI::App& root);
Command register_calibrate(CLI::App& root);
Command register_completion(CLI::App& root);
Command register_man(CLI::App& root);
Command register_mcp(CLI::App& root);

// `memplan --auto ...` without a subcommand runs `memplan auto ...`.
bool is_top_level_auto(const std::vector<std::string>& args);

}  // namespace memplan::cli
