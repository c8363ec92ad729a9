#include "cli/app.hpp"

#include <exception>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"

namespace memplan::cli {

namespace {
constexpr const char* kVersion = "memplan 0.1.0";
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Context ctx{out, err};
  try {
    CLI::App app{"memplan: will this training config fit on my GPU? Memory breakdowns and batch-size plans.",
                 "memplan"};
    app.set_version_flag("--version", kVersion);
    app.require_subcommand(0, 1);
    std::vector<Command> commands;
    commands.push_back(register_estimate(app));
    commands.push_back(register_plan(app));
    commands.push_back(register_sweep(app));
    commands.push_back(register_check(app));
    commands.push_back(register_models(app));
    commands.push_back(register_gpus(app));
    commands.push_back(register_preflight(app));
    commands.push_back(register_auto(app));
    app.footer("Run `memplan --auto` (or `memplan auto`) before training: it detects the GPU, reads the training\n"
               "config (--config FILE, or train.yaml / config.yaml / conf/config.yaml here) and prints the\n"
               "memory breakdown with the recommended micro-batch and grad-accum; --apply writes them back.");

    std::vector<std::string> argv = args;
    if (is_top_level_auto(argv)) {
      std::erase(argv, std::string("--auto"));
      argv.insert(argv.begin(), "auto");
    }
    std::vector<std::string> reversed(argv.rbegin(), argv.rend());  // CLI11 consumes from the back
    try {
      app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
      out << app.help();
      return kExitOk;
    } catch (const CLI::CallForAllHelp&) {
      out << app.help("", CLI::AppFormatMode::All);
      return kExitOk;
    } catch (const CLI::CallForVersion&) {
      out << kVersion << "\n";
      return kExitOk;
    } catch (const CLI::ParseError& e) {
      err << "memplan: error: " << e.what() << "\n";
      err << "Run with --help for more information.\n";
      return e.get_exit_code();
    }
    for (auto& c : commands) {
      if (c.app->parsed()) {
        Result<int> r = c.action(ctx);
        if (!r) {
          err << "memplan: error: " << r.error().to_string() << "\n";
          return exit_code_for(r.error());
        }
        return *r;
      }
    }
    out << app.help();
    return kExitInvalidInput;
  } catch (const std::exception& e) {
    err << "memplan: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}

}  // namespace memplan::cli
