// `--format html`: one self-contained page (inline CSS and SVG, no script, nothing fetched) for
// estimate, plan and sweep, that a person opens in a browser or attaches to a pull request
// (issue 33 item 5; docs/html-report.md). The pages are drawn from the commands' JSON documents,
// so every number on them is the JSON output's; exact bytes ride along in data-bytes attributes.
// Every text that comes from input (model names, file names, keys) is escaped.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace memplan::report {

// Text for HTML element content and quoted attribute values: & < > " ' escaped, control characters
// other than tab and newline shown as U+FFFD.
std::string html_escape(std::string_view text);

// `doc` is `memplan estimate --format json`'s document (with "fit" when a GPU was given).
std::string estimate_html(const nlohmann::ordered_json& doc);
// `doc` is `memplan plan --format json`'s document, plus "estimate" (the breakdown at the
// recommended micro-batch, as --auto's JSON has it) and "sweep" (peak against micro-batch, as
// sweep's JSON has it) when they could be computed.
std::string plan_html(const nlohmann::ordered_json& doc);
// `doc` is `memplan sweep --format json`'s document.
std::string sweep_html(const nlohmann::ordered_json& doc);

}  // namespace memplan::report
