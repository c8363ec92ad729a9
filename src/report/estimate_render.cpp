#include "report/estimate_render.hpp"

#include <fmt/format.h>

#include "io/model_source.hpp"
#include "report/json.hpp"
#include "report/table.hpp"

namespace memplan::report {

std::string component_label(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (c == '_') c = ' ';
  return s;
}

std::string describe_inputs(const io::ResolvedInputs& in) {
  const TrainingConfig& c = in.config;
  std::string precision = to_string(c.torch_dtype) + " weights";
  if (c.autocast) precision += fmt::format(", {} autocast", *c.autocast == DType::kBFloat16 ? "bf16" : "fp16");
  std::string s = fmt::format("{} · {} · batch {} × {} tokens · {} · {}", in.model.name, to_string(c.method),
                              c.micro_batch, c.seq_len, precision, to_string(c.optim.kind));
  if (c.lora.enabled) s += fmt::format(" · {}LoRA r={}", c.quant.load_in_4bit ? "Q" : "", c.lora.r);
  if (c.gradient_checkpointing) s += " · gradient checkpointing";
  s += fmt::format(" · {} attention · {}", to_string(c.attn_impl()), to_string(c.device));
  if (c.parallel.world_size() > 1) s += fmt::format(" · {} GPUs", c.parallel.world_size());
  return s;
}

namespace {

std::string render_text(const io::ResolvedInputs& in, const Estimate& e) {
  std::string out = describe_inputs(in) + "\n";
  if (in.model_from_param_count) out += "model shape assumed: " + io::describe_shape(in.model) + "\n";
  out += "\n";
  TextTable t({"component", "GiB", "%", ""}, {Align::kLeft, Align::kRight, Align::kRight, Align::kLeft});
  const double peak = static_cast<double>(e.peak.count());
  for (const auto& c : e.components) {
    const double frac = peak > 0 ? static_cast<double>(c.bytes.count()) / peak : 0;
    t.add_row({component_label(c.name), fmt::format("{:.2f}", c.bytes.as_gib()), fmt::format("{:.1f}%", 100 * frac),
               bar(frac, 24)});
  }
  t.add_separator();
  t.add_row({fmt::format("peak live tensors ({})", to_string(e.peak_phase)), fmt::format("{:.2f}", e.peak.as_gib()),
             "100.0%", ""});
  if (e.reserved > e.peak)
    t.add_row({"allocator reserve", fmt::format("+{:.2f}", (e.reserved - e.peak).as_gib()), "", ""});
  for (const auto& o : e.overhead) t.add_row({component_label(o.name), fmt::format("+{:.2f}", o.bytes.as_gib()), "", ""});
  t.add_row({"total (as nvidia-smi shows)", fmt::format("{:.2f}", e.total.as_gib()), "", ""});
  out += t.render();
  if (!e.phases.empty()) {
    out += "\nphase peaks:";
    for (const auto& p : e.phases) out += fmt::format("  {} {:.2f} GiB", to_string(p.phase), p.peak.as_gib());
    out += "\n";
  }
  out += fmt::format("parameters: {:.3f}B total, {:.3f}B trainable\n", static_cast<double>(e.params.total) / 1e9,
                     static_cast<double>(e.params.trainable) / 1e9);
  for (const auto& a : e.assumptions) out += "assumption: " + a + "\n";
  for (const auto& w : in.warnings) out += "warning: " + w + "\n";
  for (const auto& w : e.warnings) out += "warning: " + w + "\n";
  return out;
}

std::string render_markdown(const io::ResolvedInputs& in, const Estimate& e) {
  std::string out = "**" + describe_inputs(in) + "**\n\n";
  TextTable t({"component", "GiB", "%"}, {Align::kLeft, Align::kRight, Align::kRight});
  const double peak = static_cast<double>(e.peak.count());
  for (const auto& c : e.components)
    t.add_row({component_label(c.name), fmt::format("{:.2f}", c.bytes.as_gib()),
               fmt::format("{:.1f}%", peak > 0 ? 100.0 * static_cast<double>(c.bytes.count()) / peak : 0.0)});
  t.add_row({fmt::format("**peak** ({})", to_string(e.peak_phase)), fmt::format("**{:.2f}**", e.peak.as_gib()), "100.0%"});
  t.add_row({"reserved (allocator)", fmt::format("{:.2f}", e.reserved.as_gib()), ""});
  t.add_row({"total (nvidia-smi)", fmt::format("{:.2f}", e.total.as_gib()), ""});
  out += t.render_markdown();
  for (const auto& a : e.assumptions) out += "\n- assumption: " + a;
  for (const auto& w : in.warnings) out += "\n- warning: " + w;
  for (const auto& w : e.warnings) out += "\n- warning: " + w;
  if (!e.assumptions.empty() || !e.warnings.empty() || !in.warnings.empty()) out += "\n";
  return out;
}

}  // namespace

std::string render_estimate(const io::ResolvedInputs& in, const Estimate& e, Format f) {
  switch (f) {
    case Format::kJson: {
      nlohmann::ordered_json j = {{"schema", kSchema}, {"command", "estimate"}, {"inputs", inputs_json(in)},
                          {"estimate", to_json(e)}};
      return j.dump(2) + "\n";
    }
    case Format::kMarkdown: return render_markdown(in, e);
    case Format::kText:
    case Format::kGithub: return render_text(in, e);
  }
  return {};
}

}  // namespace memplan::report
