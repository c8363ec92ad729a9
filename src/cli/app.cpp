#include "cli/app.hpp"

#include <algorithm>
#include <exception>
#include <iterator>
#include <utility>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/training_flags.hpp"
#include "cli/version.hpp"
#include "memplan/text.hpp"

namespace memplan::cli {

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run(args, out, err, nullptr);
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, std::optional<Error>* error) {
  Context ctx{out, err};
  try {
    CLI::App app{"memplan: will this training config fit on my GPU? Memory breakdowns and batch-size plans.",
                 "memplan"};
    app.set_version_flag("--version", version_line(), "The release, the build's commit, the data and library versions");
    app.require_subcommand(0, 1);
    std::vector<std::string> argv = args;
    if (is_top_level_auto(argv)) {
      std::erase(argv, std::string("--auto"));
      argv.insert(argv.begin(), "auto");
    }
    // Registering a subcommand builds all its options (CLI11 checks every name against every
    // other), a third of a short run's time; when the first argument names a subcommand, only
    // that one is needed. Help and errors without one see them all.
    using Register = Command (*)(CLI::App&);
    static constexpr std::pair<const char*, Register> kCommands[] = {
        {"estimate", register_estimate}, {"plan", register_plan},   {"sweep", register_sweep},
        {"check", register_check},       {"models", register_models}, {"gpus", register_gpus},
        {"preflight", register_preflight}, {"auto", register_auto},
        {"profile", register_profile},     {"calibrate", register_calibrate},
        {"completion", register_completion}, {"man", register_man},
        {"mcp", register_mcp},
    };
    const bool named = !argv.empty() && std::any_of(std::begin(kCommands), std::end(kCommands),
                                                    [&](const auto& c) { return argv[0] == c.first; });
    // completion and man describe every command, so they need all of them registered.
    const bool describes_all = named && (argv[0] == "completion" || argv[0] == "man");
    std::vector<Command> commands;
    for (const auto& [name, reg] : kCommands)
      if (!named || describes_all || argv[0] == name) commands.push_back(reg(app));
    for (auto& c : commands) read_integers_as_decimal(*c.app);
    app.footer("Run `memplan --auto` (or `memplan auto`) before training: it detects the GPU, reads the training\n"
               "config (--config FILE, or train.yaml / config.yaml / conf/config.yaml here) and prints the\n"
               "memory breakdown with the recommended micro-batch and grad-accum; --apply writes them back.");

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
      out << version_text();
      return kExitOk;
    } catch (const CLI::ParseError& e) {
      if (!named && !argv.empty() && !argv[0].empty() && argv[0][0] != '-') {
        // A first word that is no subcommand is most likely a misspelled one.
        std::vector<std::string> names;
        for (const auto& c : kCommands) names.emplace_back(c.first);
        const std::string hint = did_you_mean(argv[0], names);
        err << "memplan: error: unknown command '" << argv[0] << "'"
            << (hint.empty() ? fmt::format("; the commands are {}", fmt::join(names, ", ")) : "; " + hint) << "\n";
      } else {
        err << "memplan: error: " << escape_control(e.what()) << "\n";
      }
      err << "Run with --help for more information.\n";
      return e.get_exit_code();
    }
    for (auto& c : commands) {
      if (c.app->parsed()) {
        Result<int> r = c.action(ctx);
        if (!r) {
          err << "memplan: error: " << r.error().to_string() << "\n";
          if (error != nullptr) *error = r.error();
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
