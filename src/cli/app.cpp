#include "cli/app.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <cerrno>
#include <cstring>
#include <optional>
#include <streambuf>
#include <exception>
#include <iterator>
#include <optional>
#include <utility>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/training_flags.hpp"
#include "io/config/hydra.hpp"
#include "cli/version.hpp"
#include "memplan/text.hpp"
#include "report/json.hpp"

namespace memplan::cli {

namespace {

// `--per_device_train_batch_size 4`, `--num_gpus=8`: the spellings of Hugging Face's argument
// parsers and of Python scripts name memplan's own flags with '_' for '-'.
void dashes_for_underscores(std::vector<std::string>& argv) {
  for (auto& a : argv) {
    if (a == "--") break;  // what follows is another program's command line (memplan profile)
    if (a.size() < 3 || a.rfind("--", 0) != 0) continue;
    const std::size_t eq = a.find('=');
    std::replace(a.begin() + 2, eq == std::string::npos ? a.end() : a.begin() + static_cast<std::ptrdiff_t>(eq), '_',
                 '-');
  }
}

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

// The long option names an app (and, without a subcommand, every command) takes.
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options())
    for (const auto& n : o->get_lnames()) out.push_back("--" + n);
  return out;
}

// Flags of other memory calculators and of training scripts, and the memplan flag that says the
// same thing (a did-you-mean that edit distance cannot find).
std::string foreign_flag_hint(const std::string& flag) {
  static const std::pair<const char*, const char*> kSynonyms[] = {
      {"--model-size-gb", "--model ID|PATH, or --model-params N (a parameter count such as 7B)"},
      {"--model-size", "--model-params N (a parameter count such as 7B)"},
      {"--gpu-memory-gb", "--gpu-memory 80 (a card's label) or --gpu-memory 80GB"},
      {"--optimizer", "--optim adamw_torch (Hugging Face's optim names)"},
      {"--batch-size", "--batch N (per-device micro-batch)"},
      {"--micro-batch-size", "--batch N"},
      {"--accumulate-grad-batches", "--grad-accum N"},
      {"--max-seq-len", "--seq-len N"},
      {"--precision", "--bf16 or --fp16 (autocast) and --torch-dtype"},
      {"--devices", "--num-gpus N"},
      {"--nproc-per-node", "--num-gpus N"},
  };
  for (const auto& [from, to] : kSynonyms)
    if (flag == from) return fmt::format("use {}", to);
  return {};
}

// The first `--flag` in argv (before any `--` separator) that `app` does not take, when there is one.
std::optional<std::string> first_unknown_flag(const std::vector<std::string>& argv, const std::vector<std::string>& known) {
  for (const auto& a : argv) {
    if (a == "--") break;
    if (a.size() < 3 || a.rfind("--", 0) != 0) continue;
    const std::string name = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), name) == known.end()) return name;
  }
  return std::nullopt;
}
// A stream buffer that passes everything to another and keeps a count (stdout), or also a copy
// (stderr), so that run() knows afterwards whether a command printed its result.
class TeeBuf : public std::streambuf {
 public:
  TeeBuf(std::streambuf* to, bool keep) : to_(to), keep_(keep) {}
  std::size_t count = 0;
  std::string kept;

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    count += static_cast<std::size_t>(n);
    if (keep_ && kept.size() < (1u << 20)) kept.append(s, static_cast<std::size_t>(n));
    return to_ ? to_->sputn(s, n) : n;
  }
  int sync() override { return to_ ? to_->pubsync() : 0; }

 private:
  std::streambuf* to_;
  bool keep_;
};

bool wants_json(const std::vector<std::string>& argv) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--format=json") return true;
    if (argv[i] == "--format" && i + 1 < argv.size() && argv[i + 1] == "json") return true;
  }
  return false;
}

// What --format json prints on stdout when a command fails before printing its result: the error
// as an object (issue 34), the same text as on stderr.
std::string json_error(const std::optional<Error>& e, const std::string& stderr_text, int code) {
  using json = nlohmann::ordered_json;
  json err = json::object();
  if (e) {
    err["message"] = e->message;
    err["suggestion"] = e->suggestion.empty() ? json(nullptr) : json(e->suggestion);
    err["file"] = e->where && !e->where->file.empty() ? json(e->where->file) : json(nullptr);
    err["line"] = e->where && e->where->line > 0 ? json(e->where->line) : json(nullptr);
  } else {
    // The first "memplan: error: " line of stderr.
    std::string msg = stderr_text;
    const auto at = msg.find("error: ");
    if (at != std::string::npos) msg = msg.substr(at + 7);
    msg = msg.substr(0, msg.find('\n'));
    err["message"] = msg;
  }
  json j = {{"schema", report::kSchema}, {"error", err}, {"exit_code", code}};
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                std::optional<Error>& failed, bool err_is_terminal) {
  Context ctx{out, err, err_is_terminal};
  try {
    CLI::App app{"memplan: will this training config fit on my GPU? Memory breakdowns and batch-size plans.",
                 "memplan"};
    app.set_version_flag("--version", version_line(), "The release, the build's commit, the data and library versions");
    app.require_subcommand(0, 1);
    std::vector<std::string> argv = args;
    dashes_for_underscores(argv);
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
      out << version_text();
      return kExitOk;
    } catch (const CLI::ParseError& e) {
      // An unknown flag: named as the user wrote it, with the flag that does what it asks.
      std::vector<std::string> known = long_names(app);
      for (const auto& c : commands) {
        const auto more = long_names(*c.app);
        known.insert(known.end(), more.begin(), more.end());
      }
      const std::vector<std::string> scanned(argv.begin() + (named ? 1 : 0), argv.end());
      if (const auto unknown = first_unknown_flag(scanned, known)) {
        std::string hint = foreign_flag_hint(*unknown);
        if (hint.empty()) hint = did_you_mean(*unknown, known);
        err << "memplan: error: unknown flag '" << escape_control(*unknown) << "'"
            << (named ? fmt::format(" for memplan {}", argv[0]) : std::string()) << (hint.empty() ? "" : "; " + hint)
            << "\n";
        if (!named) err << "memplan takes a command first: memplan estimate|plan|check|... FLAGS (memplan --help)\n";
        else err << "Run with --help for more information.\n";
        return kExitInvalidInput;
      }
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
      return kExitInvalidInput;  // CLI11's own 1xx codes are never shown (STYLE.md habit 4)
    }
    for (auto& c : commands) {
      if (c.app->parsed()) {
        Result<int> r = c.action(ctx);
        if (!r) {
          failed = r.error();
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

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run(args, out, err, nullptr);
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, std::optional<Error>* error) {
  TeeBuf out_buf(out.rdbuf(), false), err_buf(err.rdbuf(), true);
  std::ostream counted_out(&out_buf), kept_err(&err_buf);
  std::optional<Error> failed;
  const bool tty = &err == &std::cerr && ::isatty(STDERR_FILENO) == 1;
  int code = run_command(args, counted_out, kept_err, failed, tty);
  if (error != nullptr) *error = failed;
  if (code != kExitOk && out_buf.count == 0 && wants_json(args)) counted_out << json_error(failed, err_buf.kept, code);
  // A result that could not be written (a full disk, a closed pipe) is a failure, not exit 0.
  errno = 0;
  counted_out.flush();
  if (!counted_out || !out) {
    const int e = errno;
    err << "memplan: error: cannot write the output to stdout" << (e ? std::string(": ") + std::strerror(e) : "")
        << "\n";
    return kExitIoError;
  }
  return code;
}

}  // namespace memplan::cli
