#include "report/plan_render.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "io/model/model_source.hpp"
#include "report/estimate_render.hpp"
#include "report/html.hpp"
#include "report/json.hpp"
#include "report/table.hpp"

namespace memplan::report {

using json = nlohmann::ordered_json;

namespace {

bool unbounded(Bytes b) { return b.count() == std::numeric_limits<std::int64_t>::max(); }

std::string gib(Bytes b) { return unbounded(b) ? "overflow" : format_gib(b); }

std::string pct(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }

std::string gpus(int n) { return n == 1 ? "1 GPU" : fmt::format("{} GPUs", n); }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string budget_line(const Budget& b) {
  // A unified device has no GPU memory of its own: name what the capacity is.
  // The colocated vLLM share is in the headroom: shown on its own, so every figure on the line is
  // one the notes name too.
  const Bytes vllm = b.vllm_reserve;
  const std::string vllm_part = vllm > Bytes::zero() ? fmt::format(" - {} vLLM share", gib(vllm)) : std::string();
  return fmt::format("budget: {} {} - {} safety margin - {} {}{} = {}", gib(b.capacity),
                     b.unified ? "system memory (shared by CPU and GPU)" : "GPU memory", gib(b.safety_margin),
                     gib(b.headroom - vllm), b.unified ? "OS reserve and headroom" : "headroom", vllm_part,
                     gib(b.budget()));
}

// "global batch 36 (target 32, +4)" / "global batch 36".
std::string global_text(const GlobalBatch& g) {
  if (!g.target) return fmt::format("global batch {}", g.global_batch);
  if (g.diff() == 0) return fmt::format("global batch {} (= target)", g.global_batch);
  return fmt::format("global batch {} (target {}, {:+d})", g.global_batch, *g.target, g.diff());
}

std::string limit_text(const Plan& p) {
  switch (p.limited_by) {
    case PlanLimit::kBudget:
      return p.search.next_peak ? fmt::format("micro-batch {} would need {}", p.max_micro_batch + 1, gib(*p.search.next_peak))
                                : fmt::format("micro-batch {} would overflow", p.max_micro_batch + 1);
    case PlanLimit::kMaxMicroBatch: return "the search stopped at --max-micro-batch";
    case PlanLimit::kTargetGlobalBatch: return "a larger micro-batch would overshoot the target global batch";
  }
  return {};
}

// The largest micro-batch that fits the budget, stated whatever the global-batch policy (issue 32).
std::string largest_text(const Plan& p) {
  const std::int64_t n = p.fits_largest;
  std::string next;
  if (p.limited_by == PlanLimit::kMaxMicroBatch && n == p.max_micro_batch)
    next = "the search stopped at --max-micro-batch";
  else if (p.fits_next_peak)
    next = fmt::format("micro-batch {} would need {}", n + 1, gib(*p.fits_next_peak));
  else
    next = fmt::format("micro-batch {} would overflow", n + 1);
  if (n <= p.max_micro_batch || p.limited_by != PlanLimit::kTargetGlobalBatch)
    return fmt::format("largest micro-batch that fits: {}; {}", std::max(n, p.max_micro_batch),
                       n > p.max_micro_batch ? next : limit_text(p));
  return fmt::format("largest micro-batch that fits: {}; {} (the target global batch keeps the recommendation at {})",
                     n, next, p.max_micro_batch);
}

// One line on the global batch the recommendation keeps, and how to change the policy.
std::string policy_text(const Plan& p, const GlobalBatch& g) {
  if (!g.target)
    return "global batch: free (no target: the largest micro-batch with the config's grad-accum); "
           "--target-global-batch N keeps one";
  const std::string from = p.target_source.empty() ? std::string() : " (" + p.target_source + ")";
  return fmt::format("global batch: keep {}{}; --target-global-batch N sets another, --target-global-batch free "
                     "drops it",
                     *g.target, from);
}

std::string violation_text(const std::optional<MonotoneViolation>& v, const char* what) {
  if (!v) return {};
  return fmt::format("warning: predicted peak is not monotone in {} ({} {}: {}, {} {}: {}); searched linearly\n",
                     what, what, v->lower_x, gib(v->lower_peak), what, v->higher_x, gib(v->higher_peak));
}

// The three tiers pick the same batch (or none fits): one line says so instead of a table.
bool tiers_coincide(const Plan& p) {
  for (const Tier& t : p.tiers)
    if (t.fits != p.tiers.front().fits || t.batch.micro_batch != p.tiers.front().batch.micro_batch ||
        t.batch.grad_accum != p.tiers.front().batch.grad_accum)
      return false;
  return true;
}

TextTable tiers_table(const std::vector<Tier>& tiers) {
  TextTable t({"tier", "limit", "micro-batch", "grad-accum", "global batch", "peak", "of GPU"},
              {Align::kLeft, Align::kLeft, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight});
  for (const Tier& tier : tiers) {
    const std::string limit = fmt::format("{:.0f}% of room ({})", 100 * tier.room_fraction, gib(tier.limit));
    if (!tier.fits) {
      t.add_row({tier.name, limit, "-", "-", "-", "does not fit", ""});
      continue;
    }
    t.add_row({tier.name, limit, std::to_string(tier.batch.micro_batch), std::to_string(tier.batch.grad_accum),
               std::to_string(tier.batch.global_batch), gib(tier.peak), pct(tier.utilization)});
  }
  return t;
}

TextTable suggestions_table(const std::vector<Suggestion>& s, const char* best_header) {
  TextTable t({"#", "change", "peak", "saves", "fits", best_header, "flags"},
              {Align::kRight, Align::kLeft, Align::kRight, Align::kRight, Align::kLeft, Align::kRight, Align::kLeft});
  int rank = 1;
  for (const Suggestion& sg : s)
    t.add_row({std::to_string(rank++), sg.description, gib(sg.peak), gib(sg.saved), sg.fits ? "yes" : "no",
               sg.fits ? std::to_string(sg.best) : "-", join(sg.flags, " ")});
  return t;
}

std::string combination_text(const std::optional<Combination>& c, const char* best_what) {
  if (!c) return {};
  std::string s = fmt::format("together: {} -> peak {}", join(c->flags, " "), gib(c->peak));
  s += c->fits ? fmt::format(", fits with {} {}\n", best_what, c->best) : ", still does not fit\n";
  return s;
}

std::string suggestions_text(const std::vector<Suggestion>& s, const std::optional<Combination>& c,
                             const std::string& point, const char* best_header, const char* best_what, bool markdown) {
  if (s.empty()) return "no single change memplan knows of lowers the predicted peak\n";
  std::string out = fmt::format("what to change, ranked by memory saved (predicted peak {} after each change):\n", point);
  if (markdown) out += "\n";
  const TextTable t = suggestions_table(s, best_header);
  out += markdown ? t.render_markdown() : t.render();
  if (c) out += (markdown ? "\n" : "") + combination_text(c, best_what);
  return out;
}

// Text lines as they are, or markdown bullets (markdown joins plain consecutive lines).
struct Lines {
  bool markdown = false;
  std::string out;
  void add(const std::string& s) { out += (markdown ? "- " : "") + s + "\n"; }
  void blank() { out += "\n"; }
  void raw(const std::string& s) { out += s; }
};

void header(const io::ResolvedInputs& in, const Budget& b, Lines& l) {
  l.raw(l.markdown ? "**" + describe_inputs(in) + "**\n\n" : describe_inputs(in) + "\n");
  for (const auto& a : in.assumptions) l.add("assumed: " + a);
  for (const auto& n : in.notes) l.add(n);
  l.add(budget_line(b));
  l.blank();
}

std::string code(const std::string& s, bool markdown) { return markdown ? "`" + s + "`" : s; }

bool is_grpo(const io::ResolvedInputs& in) { return in.config.method == Method::kGrpo; }

// "8 x 1024 tokens" / GRPO: "8 completions x (512 prompt + 256 completion) tokens".
std::string batch_shape(const io::ResolvedInputs& in, std::int64_t micro_batch, std::int64_t seq_len) {
  const TrainingConfig& c = in.config;
  if (c.method == Method::kGrpo)
    return fmt::format("{} completion{} x ({} prompt + {} completion) tokens", micro_batch, micro_batch == 1 ? "" : "s",
                       c.grpo.max_prompt_length, c.grpo.max_completion_length);
  return fmt::format("{} x {} tokens", micro_batch, seq_len);
}

// Why this micro-batch and not the largest that fits (docs/plan.md#global-batch).
std::string why_text(const io::ResolvedInputs& in, const Plan& p) {
  const Recommendation& r = p.recommendation;
  const GlobalBatch& g = r.batch;
  auto product = [](const GlobalBatch& b) {
    return b.data_parallel == 1 ? fmt::format("{} x {} = {}", b.micro_batch, b.grad_accum, b.global_batch)
                                : fmt::format("{} x {} x {} = {}", b.micro_batch, b.grad_accum, b.data_parallel,
                                              b.global_batch);
  };
  std::string s;
  switch (r.choice) {
    case BatchChoice::kLargest: break;
    case BatchChoice::kExact:
      if (!r.largest) break;
      s = fmt::format("why micro-batch {} and not {} (the largest that fits): {} is the target exactly, {} is not "
                      "(--global-batch-tolerance lets a near miss keep a larger micro-batch)",
                      g.micro_batch, r.largest->micro_batch, product(g), product(*r.largest));
      break;
    case BatchChoice::kWithinTolerance:
      s = fmt::format("why micro-batch {}: {} misses the target {} by {:+d}, within --global-batch-tolerance",
                      g.micro_batch, product(g), *g.target, g.diff());
      break;
    case BatchChoice::kNearest:
      s = fmt::format("why micro-batch {}: no micro-batch that fits reaches the target {} exactly; {} is the nearest",
                      g.micro_batch, *g.target, product(g));
      break;
    case BatchChoice::kGrpoDivisible:
    case BatchChoice::kNone: break;
  }
  if (is_grpo(in) && p.generation) {
    const GenerationBatch& gen = *p.generation;
    if (!s.empty()) s += "; ";
    s += fmt::format("TRL needs the generation batch (micro-batch x {} x steps_per_generation = grad-accum) "
                     "divisible by num_generations {}: {} x {} x {} = {} = {} prompt{} x {}",
                     gen.processes == 1 ? "1 GPU" : fmt::format("{} GPUs", gen.processes), gen.num_generations,
                     g.micro_batch, gen.processes, gen.steps_per_generation, gen.generation_batch, gen.prompts,
                     gen.prompts == 1 ? "" : "s", gen.num_generations);
    if (r.choice == BatchChoice::kGrpoDivisible && r.largest)
      s += fmt::format(" (micro-batch {} fits on its own, but TRL would need grad-accum {} with it, "
                       "which does not fit)",
                       r.largest->micro_batch, r.largest->grad_accum);
  }
  return s;
}

// Contrastive training (MultipleNegativesRankingLoss): each anchor's candidates are its
// micro-batch's other texts, so accumulation changes the loss, not only the step count. Empty
// when it does not apply: no accumulation, cached MNRL (it embeds the whole batch at once), or
// several GPUs (LLM2Vec's loss and sentence-transformers' gather_across_devices gather theirs).
std::string contrastive_text(const io::ResolvedInputs& in, const GlobalBatch& g) {
  const ContrastiveConfig& k = in.config.contrastive;
  if (!k.enabled() || k.cached || g.grad_accum <= 1 || g.data_parallel > 1) return {};
  const std::int64_t texts = k.texts_per_example;
  return fmt::format("in-batch negatives: each anchor is scored against its micro-batch's {} candidate texts ({} x {}), "
                     "not the global batch's {}; gradient accumulation adds no negatives, so a smaller micro-batch "
                     "changes the loss{}",
                     g.micro_batch * (texts - 1), g.micro_batch, texts - 1, g.global_batch * (texts - 1),
                     in.model.is_encoder() || in.model.embedding_library == EmbeddingLibrary::kSentenceTransformers
                         ? " (cached MNRL, --cached-mnrl, keeps them in one step)"
                         : "");
}

AllocatorConf expandable() {
  AllocatorConf c;
  c.expandable_segments = true;
  return c;
}

// Micro-batch 1 fits the GPU but not the safety margin: name the two ways to spend the margin.
std::string margin_only_text(const Plan& p) {
  const Recommendation& r = p.recommendation;
  const Bytes usable = p.budget.capacity - p.budget.headroom;
  return fmt::format("only the safety margin rejects it: micro-batch 1 needs {} of the {} the GPU leaves, and the "
                     "margin keeps {} free. With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the default margin is "
                     "1 GiB + 2% ({}); or set --safety-margin SIZE|PCT if this run has measured headroom",
                     gib(r.peak), gib(usable), gib(p.budget.safety_margin),
                     gib(safety_margin_for(p.budget.capacity, expandable())));
}

std::string render_plan_text(const io::ResolvedInputs& in, const Plan& p, bool markdown,
                             const Estimate* breakdown = nullptr) {
  const Recommendation& r = p.recommendation;
  Lines l{markdown, {}};
  header(in, p.budget, l);
  if (breakdown) {
    l.raw(fmt::format("{}memory at micro-batch {}{}:\n", markdown ? "**" : "",
                      batch_shape(in, r.fits ? r.batch.micro_batch : 1, r.seq_len), markdown ? "**" : ""));
    l.raw(markdown ? "\n```text\n" + breakdown_text(*breakdown) + "```\n\n" : breakdown_text(*breakdown) + "\n");
  }
  if (!r.fits) {
    l.add(fmt::format("does not fit: micro-batch {} needs {}, {} over the {} budget", batch_shape(in, 1, r.seq_len),
                      gib(r.peak), unbounded(r.peak) ? "far" : gib(r.peak - r.budget), gib(r.budget)));
    if (r.margin_only) l.add(margin_only_text(p));
    l.blank();
    l.raw(suggestions_text(p.suggestions, p.combination, "at micro-batch 1", "max micro-batch", "micro-batch",
                           markdown));
  } else {
    const GlobalBatch& g = r.batch;
    l.add(fmt::format("recommended: micro-batch {} x grad-accum {} x {} = {}{}", g.micro_batch, g.grad_accum,
                      gpus(g.data_parallel), global_text(g), is_grpo(in) ? " completions" : ""));
    l.add(fmt::format("predicted peak {} of the {} budget ({} of GPU memory)", gib(r.peak), gib(r.budget),
                      pct(r.utilization)));
    if (r.reserved)
      l.add(fmt::format("reserved by PyTorch's caching allocator (replayed): {}; about {} as nvidia-smi shows it "
                        "with the CUDA context",
                        gib(*r.reserved), gib(*r.reserved + Bytes::mib(768))));
    l.add(largest_text(p));
    l.add(policy_text(p, g));
    if (const std::string why = why_text(in, p); !why.empty()) l.add(why);
    if (const std::string neg = contrastive_text(in, g); !neg.empty()) l.add(neg);
    l.add("flags: " + code(fmt::format("--batch {} --grad-accum {}", g.micro_batch, g.grad_accum), markdown));
    l.blank();
    if (tiers_coincide(p) && !p.free_tiers.empty()) {
      l.add(fmt::format("tiers: safe, balanced and aggressive all keep micro-batch {}: no other micro-batch keeps "
                        "the global batch {} under their limits; without that target (--target-global-batch free) "
                        "the tiers are:",
                        p.tiers.front().batch.micro_batch, g.target ? *g.target : g.global_batch));
      if (markdown) l.blank();
      const TextTable t = tiers_table(p.free_tiers);
      l.raw(markdown ? t.render_markdown() : t.render());
    } else if (tiers_coincide(p)) {
      const Tier& first = p.tiers.front();
      const std::string why =
          p.limited_by == PlanLimit::kTargetGlobalBatch
              ? fmt::format("the target global batch {} allows no larger micro-batch", g.target ? *g.target : 0)
              : fmt::format("half of the {} of room above the {} that does not grow with the batch already holds "
                            "micro-batch {}, and all of it no larger one",
                            gib(r.budget > p.fixed ? r.budget - p.fixed : Bytes::zero()), gib(p.fixed),
                            first.batch.micro_batch);
      l.add(fmt::format("tiers: safe, balanced and aggressive are all micro-batch {} ({})", first.batch.micro_batch,
                        why));
    } else {
      l.add(fmt::format("tiers divide the {} of room above the {} that does not grow with the micro-batch:",
                        gib(r.budget > p.fixed ? r.budget - p.fixed : Bytes::zero()), gib(p.fixed)));
      if (markdown) l.blank();
      const TextTable t = tiers_table(p.tiers);
      l.raw(markdown ? t.render_markdown() : t.render());
      if (!p.free_tiers.empty()) {
        l.add(fmt::format("tiers on one micro-batch keep the global batch {}: no micro-batch in between keeps it; "
                          "without that target (--target-global-batch free) the tiers are:",
                          g.target ? *g.target : g.global_batch));
        if (markdown) l.blank();
        const TextTable f = tiers_table(p.free_tiers);
        l.raw(markdown ? f.render_markdown() : f.render());
      }
    }
  }
  l.raw(violation_text(p.search.violation, "micro-batch"));
  for (const auto& w : in.warnings) l.raw("warning: " + w + "\n");
  return l.out;
}

std::string render_seq_text(const io::ResolvedInputs& in, const SeqLenPlan& p, bool markdown) {
  Lines l{markdown, {}};
  header(in, p.budget, l);
  const Bytes budget = p.budget.budget();
  if (!p.fits) {
    l.add(fmt::format("does not fit: micro-batch {} needs {} even at 1 token, {} over the {} budget", p.micro_batch,
                      gib(p.peak), unbounded(p.peak) ? "far" : gib(p.peak - budget), gib(budget)));
    l.blank();
    l.raw(suggestions_text(p.suggestions, p.combination, fmt::format("at micro-batch {}, 1 token", p.micro_batch),
                           "max seq-len", "sequences up to", markdown));
  } else {
    l.add(fmt::format("longest sequence at micro-batch {}: {} tokens", p.micro_batch, p.seq_len));
    l.add(fmt::format("predicted peak {} of the {} budget ({} of GPU memory)", gib(p.peak), gib(budget),
                      pct(p.utilization)));
    if (p.search.hit_cap)
      l.add(fmt::format("the search stopped at {} tokens (max_position_embeddings or --max-seq-len)", p.cap));
    else if (p.search.next_peak)
      l.add(fmt::format("{} tokens would need {}", p.seq_len + 1, gib(*p.search.next_peak)));
    l.add("flags: " + code(fmt::format("--batch {} --seq-len {}", p.micro_batch, p.seq_len), markdown));
  }
  l.raw(violation_text(p.search.violation, "seq-len"));
  for (const auto& w : in.warnings) l.raw("warning: " + w + "\n");
  return l.out;
}

json violation_json(const std::optional<MonotoneViolation>& v) {
  if (!v) return nullptr;
  return {{"lower_x", v->lower_x},
          {"lower_peak_bytes", v->lower_peak.count()},
          {"higher_x", v->higher_x},
          {"higher_peak_bytes", v->higher_peak.count()}};
}

json search_json(const FitSearch& s) {
  return {{"evaluations", s.evaluations},
          {"grad_accum", s.grad_accum},
          {"monotone", !s.violation},
          {"violation", violation_json(s.violation)}};
}

json suggestions_json(const std::vector<Suggestion>& s, const char* best_key) {
  json arr = json::array();
  int rank = 1;
  for (const Suggestion& sg : s)
    arr.push_back({{"rank", rank++},
                   {"change", to_string(sg.kind)},
                   {"description", sg.description},
                   {"flags", sg.flags},
                   {"peak_bytes", sg.peak.count()},
                   {"saved_bytes", sg.saved.count()},
                   {"fits", sg.fits},
                   {best_key, sg.fits ? json(sg.best) : json(nullptr)}});
  return arr;
}

json combination_json(const std::optional<Combination>& c, const char* best_key) {
  if (!c) return nullptr;
  json kinds = json::array();
  for (ChangeKind k : c->kinds) kinds.push_back(to_string(k));
  return {{"changes", kinds},
          {"flags", c->flags},
          {"peak_bytes", c->peak.count()},
          {"fits", c->fits},
          {best_key, c->fits ? json(c->best) : json(nullptr)}};
}

json optional_bytes(const std::optional<Bytes>& b) { return b ? json(b->count()) : json(nullptr); }

}  // namespace

json budget_json(const Budget& b) {
  return {{"capacity_bytes", b.capacity.count()},
          {"safety_margin_bytes", b.safety_margin.count()},
          {"headroom_bytes", b.headroom.count()},
          {"budget_bytes", b.budget().count()}};
}

json plan_json(const Plan& p) {
  const Recommendation& r = p.recommendation;
  const GlobalBatch& g = r.batch;
  json rec = {{"fits", r.fits},
              {"micro_batch", g.micro_batch},
              {"grad_accum", g.grad_accum},
              {"data_parallel", g.data_parallel},
              {"global_batch", g.global_batch},
              {"target_global_batch", g.target ? json(*g.target) : json(nullptr)},
              {"global_batch_diff", g.target ? json(g.diff()) : json(nullptr)},
              {"seq_len", r.seq_len},
              {"peak_bytes", r.peak.count()},
              {"budget_bytes", r.budget.count()},
              {"capacity_bytes", p.budget.capacity.count()},
              {"utilization", r.utilization},
              {"max_micro_batch", p.max_micro_batch},
              {"next_peak_bytes", optional_bytes(p.search.next_peak)},
              {"limited_by", r.fits ? json(to_string(p.limited_by)) : json(nullptr)},
              {"choice", to_string(r.choice)},
              {"largest", r.largest ? json{{"micro_batch", r.largest->micro_batch},
                                           {"grad_accum", r.largest->grad_accum},
                                           {"global_batch", r.largest->global_batch}}
                                    : json(nullptr)},
              {"margin_only", r.margin_only},
              {"reserved_bytes", optional_bytes(r.reserved)}};
  json generation = nullptr;
  if (p.generation)
    generation = {{"num_generations", p.generation->num_generations},
                  {"processes", p.generation->processes},
                  {"steps_per_generation", p.generation->steps_per_generation},
                  {"generation_batch", p.generation->generation_batch},
                  {"prompts", p.generation->prompts},
                  {"valid", p.generation->valid()}};
  const auto tiers_json = [](const std::vector<Tier>& ts) {
    json tiers = json::array();
    for (const Tier& t : ts)
      tiers.push_back({{"name", t.name},
                       {"room_fraction", t.room_fraction},
                       {"limit_bytes", t.limit.count()},
                       {"fits", t.fits},
                       {"micro_batch", t.batch.micro_batch},
                       {"grad_accum", t.batch.grad_accum},
                       {"global_batch", t.batch.global_batch},
                       {"peak_bytes", t.peak.count()},
                       {"utilization", t.utilization}});
    return tiers;
  };
  rec["fits_largest"] = p.fits_largest;
  rec["fits_next_peak_bytes"] = optional_bytes(p.fits_next_peak);
  rec["target_source"] = p.target_source.empty() ? json(nullptr) : json(p.target_source);
  return {{"recommendation", rec},
          {"search", search_json(p.search)},
          {"generation", generation},
          {"fixed_bytes", p.fixed.count()},
          {"tiers", tiers_json(p.tiers)},
          {"free_tiers", tiers_json(p.free_tiers)},
          {"suggestions", suggestions_json(p.suggestions, "max_micro_batch")},
          {"combination", combination_json(p.combination, "max_micro_batch")}};
}

json seq_len_plan_json(const SeqLenPlan& p) {
  const Bytes budget = p.budget.budget();
  json rec = {{"fits", p.fits},
              {"micro_batch", p.micro_batch},
              {"grad_accum", p.grad_accum},
              {"data_parallel", p.data_parallel},
              {"global_batch", p.global_batch},
              {"seq_len", p.seq_len},
              {"peak_bytes", p.peak.count()},
              {"budget_bytes", budget.count()},
              {"capacity_bytes", p.budget.capacity.count()},
              {"utilization", p.utilization},
              {"max_seq_len", p.cap},
              {"next_peak_bytes", optional_bytes(p.search.next_peak)},
              {"limited_by", !p.fits ? json(nullptr) : p.search.hit_cap ? json("max_seq_len") : json("budget")}};
  return {{"recommendation", rec},
          {"search", search_json(p.search)},
          {"suggestions", suggestions_json(p.suggestions, "max_seq_len")},
          {"combination", combination_json(p.combination, "max_seq_len")}};
}

namespace {
// What the device has left at a point: its memory less the peak and less what a colocated vLLM
// holds for generation (seed 000's "headroom = 128GB - peak", with vLLM's share in use).
Bytes sweep_headroom(const Sweep& s, const SweepPoint& p) {
  return Bytes::of(s.budget.capacity.count() - s.budget.vllm_reserve.count() - p.peak.count());
}

}  // namespace

json sweep_json(const Sweep& s) {
  json points = json::array();
  for (const SweepPoint& p : s.points)
    points.push_back({{"micro_batch", p.micro_batch},
                      {"grad_accum", p.grad_accum},
                      {"seq_len", p.seq_len},
                      {"peak_bytes", p.peak.count()},
                      {"headroom_bytes", unbounded(p.peak) ? json(nullptr) : json(sweep_headroom(s, p).count())},
                      {"status", to_string(p.status)}});
  return {{"micro_batches", s.micro_batches}, {"seq_lens", s.seq_lens}, {"points", points}};
}

std::string render_plan(const io::ResolvedInputs& in, const Plan& p, Format f) {
  switch (f) {
    case Format::kJson:
    case Format::kHtml: {
      json j = {{"schema", kSchema}, {"command", "plan"}, {"solve", "batch"}, {"inputs", inputs_json(in)},
                {"budget", budget_json(p.budget)}};
      j.update(plan_json(p));
      j["warnings"] = in.warnings;
      if (f == Format::kHtml) return plan_html(j);
      return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    case Format::kMarkdown: return render_plan_text(in, p, true);
    case Format::kText:
    case Format::kGithub: return render_plan_text(in, p, false);
  }
  return {};
}

std::string render_plan_page(const io::ResolvedInputs& in, const Plan& p, const Estimate* breakdown,
                             const Sweep* curve) {
  json j = {{"schema", kSchema}, {"command", "plan"}, {"solve", "batch"}, {"inputs", inputs_json(in)},
            {"budget", budget_json(p.budget)}};
  j.update(plan_json(p));
  j["warnings"] = in.warnings;
  if (breakdown) j["estimate"] = to_json(*breakdown);
  if (curve) j["sweep"] = sweep_json(*curve);
  return plan_html(j);
}

std::string render_auto(const io::ResolvedInputs& in, const Plan& p, const Estimate& breakdown, Format f) {
  switch (f) {
    case Format::kHtml: return render_plan_page(in, p, &breakdown, nullptr);
    case Format::kJson: {
      json j = {{"schema", kSchema}, {"command", "auto"}, {"solve", "batch"}, {"inputs", inputs_json(in)},
                {"budget", budget_json(p.budget)}};
      j.update(plan_json(p));
      j["estimate"] = to_json(breakdown);
      j["warnings"] = in.warnings;
      return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    case Format::kMarkdown: return render_plan_text(in, p, true, &breakdown);
    case Format::kText:
    case Format::kGithub: return render_plan_text(in, p, false, &breakdown);
  }
  return {};
}

std::string render_seq_len_plan(const io::ResolvedInputs& in, const SeqLenPlan& p, Format f) {
  switch (f) {
    case Format::kJson: {
      json j = {{"schema", kSchema}, {"command", "plan"}, {"solve", "seq_len"}, {"inputs", inputs_json(in)},
                {"budget", budget_json(p.budget)}};
      j.update(seq_len_plan_json(p));
      j["warnings"] = in.warnings;
      return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    case Format::kMarkdown: return render_seq_text(in, p, true);
    case Format::kText:
    case Format::kGithub:
    case Format::kHtml: return render_seq_text(in, p, false);
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sweep

namespace {

std::string status_text(SweepStatus s) {
  switch (s) {
    case SweepStatus::kFits: return "fits";
    case SweepStatus::kOverBudget: return "over budget";
    case SweepStatus::kOom: return "OOM";
  }
  return "?";
}

// Seed 000's results table, plus (text only) the memory one more sample costs between
// neighbouring batch sizes: when it grows down the column, memory grows faster than linearly.
TextTable sweep_table(const Sweep& s, bool marginal) {
  std::vector<std::string> header = {"batch", "grad_accum", "seq_len", "peak_mem", "headroom", "status"};
  std::vector<Align> align = {Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kRight, Align::kLeft};
  if (marginal) {
    header.push_back("per extra sample");
    align.push_back(Align::kRight);
  }
  TextTable t(header, align);
  const std::size_t nb = s.micro_batches.size();
  for (std::size_t k = 0; k < s.points.size(); ++k) {
    const SweepPoint& p = s.points[k];
    std::vector<std::string> row = {std::to_string(p.micro_batch), std::to_string(p.grad_accum),
                                    std::to_string(p.seq_len),     gib(p.peak),
                                    unbounded(p.peak) ? "-" : gib(sweep_headroom(s, p)), status_text(p.status)};
    if (marginal) {
      std::string m;
      if (k % nb != 0 && !unbounded(p.peak) && !unbounded(s.points[k - 1].peak)) {
        const SweepPoint& q = s.points[k - 1];
        const double per = (p.peak - q.peak).as_gib() / static_cast<double>(p.micro_batch - q.micro_batch);
        m = fmt::format("{:.3f} GiB", per);
      }
      row.push_back(m);
    }
    if (marginal && nb > 1 && k % nb == 0 && k != 0) t.add_separator();
    t.add_row(std::move(row));
  }
  return t;
}

}  // namespace

std::string sweep_chart(const Sweep& s, int width, int height) {
  width = std::max(width, 8);
  height = std::max(height, 4);
  if (s.points.empty()) return {};
  const std::size_t nb = s.micro_batches.size();
  // At most 8 series, spread evenly over the sequence lengths.
  std::vector<std::size_t> series;
  const std::size_t ns = s.seq_lens.size();
  const std::size_t shown = std::min<std::size_t>(ns, 8);
  for (std::size_t i = 0; i < shown; ++i) series.push_back(shown == 1 ? 0 : i * (ns - 1) / (shown - 1));

  const double budget = s.budget.budget().as_gib();
  const double capacity = s.budget.capacity.as_gib();
  double top = 0;
  double low = budget;
  for (std::size_t si : series)
    for (std::size_t b = 0; b < nb; ++b) {
      const Bytes p = s.points[si * nb + b].peak;
      if (unbounded(p)) continue;
      top = std::max(top, p.as_gib());
      low = std::min(low, p.as_gib());
    }
  top = std::max(std::min(top, 2 * capacity), budget) * 1.05;
  // The y axis starts a little below the lowest point (it is labelled): fixed costs such as the
  // weights would otherwise flatten the part that changes.
  const double bottom = 0.9 * low;
  if (!(top > bottom)) top = bottom + 1;

  const auto xmin = static_cast<double>(s.micro_batches.front());
  const auto xmax = static_cast<double>(s.micro_batches.back());
  auto col = [&](double x) {
    return xmax > xmin ? static_cast<int>(std::lround((x - xmin) / (xmax - xmin) * (width - 1))) : 0;
  };
  auto row = [&](double y) {
    const double f = (std::clamp(y, bottom, top) - bottom) / (top - bottom);
    return static_cast<int>(std::lround(f * (height - 1)));
  };

  // grid[r][c], r = 0 at the bottom; one UTF-8 glyph per cell.
  std::vector<std::vector<std::string>> grid(static_cast<std::size_t>(height),
                                             std::vector<std::string>(static_cast<std::size_t>(width), " "));
  auto cell = [&](int r, int c) -> std::string& { return grid[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)]; };
  const int budget_row = row(budget);
  for (int c = 0; c < width; ++c) cell(budget_row, c) = "─";
  static const char* kGlyphs = "abcdefgh";
  for (std::size_t k = 0; k < series.size(); ++k) {
    const std::size_t base = series[k] * nb;
    // Straight segments between neighbouring points, then the points themselves on top.
    for (std::size_t b = 0; b + 1 < nb; ++b) {
      const SweepPoint& p = s.points[base + b];
      const SweepPoint& q = s.points[base + b + 1];
      if (unbounded(p.peak) || unbounded(q.peak)) continue;
      const int c0 = col(static_cast<double>(p.micro_batch));
      const int c1 = col(static_cast<double>(q.micro_batch));
      for (int c = c0 + 1; c < c1; ++c) {
        const double t = static_cast<double>(c - c0) / (c1 - c0);
        const double y = p.peak.as_gib() + t * (q.peak.as_gib() - p.peak.as_gib());
        if (y > top) continue;
        std::string& g = cell(row(y), c);
        if (g == " " || g == "─") g = "·";
      }
    }
    for (std::size_t b = 0; b < nb; ++b) {
      const SweepPoint& p = s.points[base + b];
      const bool above = unbounded(p.peak) || p.peak.as_gib() > top;
      cell(above ? height - 1 : row(p.peak.as_gib()), col(static_cast<double>(p.micro_batch))) =
          above ? "^" : std::string(1, kGlyphs[k]);
    }
  }

  std::string legend;
  for (std::size_t k = 0; k < series.size(); ++k)
    legend += fmt::format("{}{} = seq {}", k ? ", " : "", kGlyphs[k], s.seq_lens[series[k]]);
  std::string out = fmt::format("peak memory (GiB) vs micro-batch: {}; ─ budget {:.2f} GiB; ^ off the chart\n", legend,
                                budget);
  if (shown < ns) out += fmt::format("({} of {} sequence lengths drawn)\n", shown, ns);
  const std::string top_label = fmt::format("{:.1f}", top);
  const std::size_t label_w = std::max({top_label.size(), fmt::format("{:.1f}", budget).size(),
                                        fmt::format("{:.1f}", bottom).size()});
  for (int r = height - 1; r >= 0; --r) {
    std::string label;
    if (r == height - 1) label = top_label;
    else if (r == budget_row) label = fmt::format("{:.1f}", budget);
    else if (r == 0) label = fmt::format("{:.1f}", bottom);
    std::string line = std::string(label_w - label.size(), ' ') + label + " ┤";
    for (int c = 0; c < width; ++c) line += cell(r, c);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  out += std::string(label_w, ' ') + " └" + [&] {
    std::string axis;
    for (int c = 0; c < width; ++c) axis += "─";
    return axis;
  }() + "\n";
  const std::string lo = std::to_string(s.micro_batches.front());
  const std::string hi = std::to_string(s.micro_batches.back());
  std::string xl = std::string(label_w + 2, ' ') + lo;
  const std::size_t right = label_w + 2 + static_cast<std::size_t>(width);
  if (nb > 1 && right > xl.size() + hi.size()) xl += std::string(right - xl.size() - hi.size(), ' ') + hi;
  out += xl + "\n";
  const std::string name = "micro-batch";
  out += std::string(label_w + 2 + (static_cast<std::size_t>(width) - name.size()) / 2, ' ') + name + "\n";
  return out;
}

std::string render_sweep(const io::ResolvedInputs& in, const Sweep& s, Format f) {
  switch (f) {
    case Format::kJson:
    case Format::kHtml: {
      json j = {{"schema", kSchema}, {"command", "sweep"}, {"inputs", inputs_json(in)}, {"budget", budget_json(s.budget)}};
      j.update(sweep_json(s));
      j["warnings"] = in.warnings;
      if (f == Format::kHtml) return sweep_html(j);
      return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    case Format::kMarkdown: {
      std::string out = "**" + describe_inputs(in) + "**\n\n" + budget_line(s.budget) + "\n\n";
      out += sweep_table(s, false).render_markdown();
      out += "\n```text\n" + sweep_chart(s) + "```\n";
      return out;
    }
    case Format::kText:
    case Format::kGithub: {
      std::string out = describe_inputs(in) + "\n";
      for (const auto& a : in.assumptions) out += "assumed: " + a + "\n";
      for (const auto& n : in.notes) out += n + "\n";
      out += budget_line(s.budget) + "\n\n";
      out += sweep_table(s, true).render() + "\n" + sweep_chart(s);
      for (const auto& w : in.warnings) out += "warning: " + w + "\n";
      return out;
    }
  }
  return {};
}

}  // namespace memplan::report
