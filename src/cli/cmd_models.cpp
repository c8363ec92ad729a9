// memplan models: the built-in catalog, for finding the name to pass to --model.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "io/model/model_source.hpp"
#include "memplan/text.hpp"
#include "report/format.hpp"
#include "report/json.hpp"
#include "report/table.hpp"

namespace memplan::cli {

namespace {

struct ModelsOptions {
  std::string filter;
  std::string format = "text";
};

// Substring of any name the entry answers to, or of its model_type, ignoring case.
bool matches_filter(const io::CatalogEntry& c, const std::string& filter) {
  if (filter.empty()) return true;
  const std::string f = to_lower(filter);
  auto has = [&](const std::string& s) { return to_lower(s).find(f) != std::string::npos; };
  if (has(c.id) || has(c.short_name) || has(c.spec.model_type) || has(c.spec.vision.model_type)) return true;
  for (const auto& a : c.aliases)
    if (has(a)) return true;
  return false;
}

std::string render_json(const std::vector<const io::CatalogEntry*>& entries) {
  nlohmann::ordered_json models = nlohmann::ordered_json::array();
  for (const auto* c : entries) {
    const auto counts = count_parameters(c->spec);
    models.push_back({{"short_name", c->short_name},
                      {"id", c->id},
                      {"aliases", c->aliases},
                      {"model_type", c->spec.vision.enabled() ? c->spec.vision.model_type : c->spec.model_type},
                      {"parameters", counts.total},
                      {"active_parameters", c->spec.moe.enabled() ? nlohmann::ordered_json(counts.active_per_token)
                                                                  : nlohmann::ordered_json(nullptr)},
                      {"params_source", c->params_source},
                      {"architecture", report::to_json(c->spec)}});
  }
  nlohmann::ordered_json out = {{"schema", report::kSchema}, {"models", models}};
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string render_table(const std::vector<const io::CatalogEntry*>& entries, report::Format format) {
  report::TextTable t({"name", "Hugging Face id", "type", "parameters", "active (MoE)"},
                      {report::Align::kLeft, report::Align::kLeft, report::Align::kLeft, report::Align::kRight,
                       report::Align::kRight});
  for (const auto* c : entries) {
    const auto counts = count_parameters(c->spec);
    // A vision-language model shows its multimodal model_type (qwen2_5_vl), not its text model's.
    const std::string& type = c->spec.vision.enabled() ? c->spec.vision.model_type : c->spec.model_type;
    t.add_row({c->short_name, c->id, type, io::group_digits(counts.total),
               c->spec.moe.enabled() ? io::group_digits(counts.active_per_token) : ""});
  }
  if (format == report::Format::kText) {
    return t.render() + fmt::format("{} model{}. Pass a name, id or alias to --model; their mirrors and re-uploads "
                                    "(NousResearch/..., unsloth/...-bnb-4bit, TheBloke/...-GPTQ) and -Instruct, -it, "
                                    "-chat and -Base variants are recognised too. --format json lists the aliases "
                                    "and where each count comes from.\n",
                                    entries.size(), entries.size() == 1 ? "" : "s");
  }
  return t.render_markdown();
}

}  // namespace

Command register_models(CLI::App& root) {
  auto opts = std::make_shared<ModelsOptions>();
  CLI::App* sub = root.add_subcommand("models", "List the built-in model catalog (names for --model)");
  sub->add_option("filter", opts->filter, "Show only models whose name, id, alias or type contains this text");
  sub->add_option("--format", opts->format, "text (default), json, markdown");
  return {sub, [opts](Context& ctx) -> Result<int> {
            MEMPLAN_TRY(auto format, report::parse_format(opts->format));
            MEMPLAN_TRY(const auto& catalog, io::load_catalog());
            std::vector<const io::CatalogEntry*> shown;
            for (const auto& c : catalog)
              if (matches_filter(c, opts->filter)) shown.push_back(&c);
            // A re-upload or variant of a catalog model ("unsloth/llama-3-8b-bnb-4bit") lists the
            // entry it resolves to, and says why.
            std::string via;
            if (shown.empty() && !opts->filter.empty()) {
              MEMPLAN_TRY(auto ruled, io::resolve_by_name_rules(opts->filter));
              if (ruled) {
                if (const auto* c = io::find_catalog_entry(catalog, ruled->spec.name)) {
                  shown.push_back(c);
                  via = ruled->via;
                }
              }
            }
            if (shown.empty()) {
              std::vector<std::string> names;
              for (const auto& c : catalog) names.push_back(c.short_name);
              std::string hint = did_you_mean(opts->filter, names);
              return make_error(ErrorCode::kUnknownName,
                                fmt::format("no catalog model matches '{}'", opts->filter),
                                hint.empty() ? "run 'memplan models' for the whole catalog, or pass a config.json "
                                               "or --model-params to estimate"
                                             : hint);
            }
            ctx.out << (format == report::Format::kJson ? render_json(shown) : render_table(shown, format));
            if (!via.empty() && format == report::Format::kText) ctx.out << "note: " << via << "\n";
            return kExitOk;
          }};
}

}  // namespace memplan::cli
