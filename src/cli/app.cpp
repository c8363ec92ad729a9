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
#include "io/hydra.hpp"
#include "memplan/text.hpp"

namespace memplan::cli {

namespace {
constexpr const char* kVersion = "memplan 0.1.0";

// Hydra overrides written bare after the config, as the trainers' command lines take them
// (`memplan plan --config conf/config.yaml data_loader.batch_size=8 text_curriculum=02_stage`),
// become `--override WORD` for the subcommands that read configs. A word right after an option
// that takes a value (`--keys batch=a.b`) is that option's.
void mark_overrides(CLI::App& app, std::vector<std::string>& argv) {
  CLI::App* sub = app.get_subcommand(argv[0]);
  if (sub == nullptr || sub->get_option_no_throw("--override") == nullptr) return;
  std::vector<std::string> out{argv[0]};
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    bool bare = !w.empty() && w[0] != '-' && io::is_override(w);
    if (bare && w.find('=') == std::string::npos) bare = false;  // `~a.b` only through --override
    const std::string& prev = out.back();
    if (bare && prev.size() > 1 && prev[0] == '-' && prev.find('=') == std::string::npos) {
      const CLI::Option* opt = sub->get_option_no_throw(prev);
      if (opt != nullptr && opt->get_type_size() != 0) bare = false;
    }
    if (bare) out.emplace_back("--override");
    out.push_back(w);
  }
  argv = std::move(out);
}
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Context ctx{out, err};
  try {
    CLI::App app{"memplan: will this training config fit on my GPU? Memory breakdowns and batch-size plans.",
                 "memplan"};
    app.set_version_flag("--version", kVersion);
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
    };
    const bool named = !argv.empty() && std::any_of(std::begin(kCommands), std::end(kCommands),
                                                    [&](const auto& c) { return argv[0] == c.first; });
    std::vector<Command> commands;
    for (const auto& [name, reg] : kCommands)
      if (!named || argv[0] == name) commands.push_back(reg(app));
    for (auto& c : commands) read_integers_as_decimal(*c.app);
    app.footer("Run `memplan --auto` (or `memplan auto`) before training: it detects the GPU, reads the training\n"
               "config (--config FILE, or train.yaml / config.yaml / conf/config.yaml here) and prints the\n"
               "memory breakdown with the recommended micro-batch and grad-accum; --apply writes them back.");

    if (named) mark_overrides(app, argv);
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
