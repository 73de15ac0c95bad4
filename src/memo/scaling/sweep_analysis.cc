#include "memo/scaling/sweep_analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "memo/core/error.h"
#include "memo/core/json_excerpt.h"

namespace memo::scaling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The run's loss under `metric` at the end, or on its curve nearest `at_tokens` (+inf when the
// curve has no point within 10% of it, or the run diverged before it).
double metric_value(const nlohmann::json& run, const std::string& metric,
                    std::optional<int64_t> at_tokens) {
  if (metric == "loss_reduction") {
    const double r = loss_field(run, "loss_reduction");
    return std::isfinite(r) ? -r : kInf;  // largest reduction wins
  }
  if (at_tokens) {
    double best = kInf, dist = kInf;
    for (const nlohmann::json& p : run.value("curve", nlohmann::json::array())) {
      const double d = std::abs(p.at(1).get<double>() - double(*at_tokens));
      if (d < dist) dist = d, best = p.at(2).is_number() ? p.at(2).get<double>() : kInf;
    }
    return dist <= 0.1 * double(*at_tokens) ? best : kInf;
  }
  return loss_field(run, metric);
}

std::string default_metric(const SweepFile& f) {
  bool target = false, val = false;
  for (const SweepLine& l : f.lines) {
    target = target || l.run.contains("target_loss");
    val = val || (l.run.contains("val_loss") && l.run.at("val_loss").is_number());
  }
  return target ? "loss_reduction" : val ? "val_loss" : "final_loss";
}

bool aicc_defined(const SweepAnalysis& a) {  // AICc needs n > p + 1 for some law
  for (const LawFit& f : a.laws.fits)
    if (std::isfinite(f.aicc)) return true;
  return false;
}

nlohmann::json opt(std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

// The level of a run's "targets" equal to `level` (the lowest when none is asked for), copied
// into the run's top-level target fields; throws FormatError naming the line when it lacks it.
void select_target_level(SweepLine& l, const std::string& path, std::optional<double> level) {
  nlohmann::json& run = l.run;
  if (!run.contains("targets") || !run.at("targets").is_array() || run.at("targets").empty()) {
    if (level)
      throw FormatError(str(path, " line ", l.line,
                            ": no \"targets\" levels to pick --target-loss ", *level,
                            " from (not a target-loss sweep, or written by an older memo)"));
    return;
  }
  const nlohmann::json* pick = &run.at("targets").back();
  if (level) {
    pick = nullptr;
    std::string have;
    for (const nlohmann::json& t : run.at("targets")) {
      const double v = t.at("loss").get<double>();
      if (std::abs(v - *level) <= 1e-9 * std::max(1.0, std::abs(v))) pick = &t;
      have += (have.empty() ? "" : ", ") + str(v);
    }
    if (!pick)
      throw FormatError(
          str(path, " line ", l.line, ": no target level ", *level, " (the run has ", have, ")"));
  }
  const nlohmann::json t = *pick;  // a copy: run is written below
  run["target_loss"] = t.at("loss");
  run["target_steps"] = t.at("steps");
  run["target_tokens"] = t.at("tokens");
  run["loss_reduction"] = t.at("loss_reduction");
  run["b_simple_at_target"] = t.value("b_simple", nlohmann::json());
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / double(v.size());
}

// The optimiser setting every run shares; throws FormatError naming the first line whose setup
// (kSetupFields: the model, data, optimiser, budget, schedule...) differs from the first line's.
std::string common_setting(const SweepFile& file, const std::string& path) {
  const SweepLine& first = file.lines.front();
  for (const SweepLine& l : file.lines) {
    const std::string field = differing_setup_field(l.run, first.run, true);
    if (field.empty()) continue;
    if (field == "optimizer" || field == "hyperparameters")
      throw FormatError(str(path, " line ", l.line, ": optimiser setting ", run_setting(l.run),
                            " differs from line ", first.line, "'s ", run_setting(first.run),
                            "; fit one file per setting"));
    auto value = [&](const nlohmann::json& run) {
      return run.contains(field) ? json_excerpt(run.at(field)) : std::string("nothing");
    };
    throw FormatError(str(path, " line ", l.line, ": '", field, "' = ", value(l.run),
                          " differs from line ", first.line, "'s ", value(first.run),
                          "; a fit compares runs that differ only in lr, batch_tokens and seed: ",
                          "fit each setup from its own file"));
  }
  return run_setting(first.run);
}

std::string checked_metric(const SweepFile& file, const std::string& asked) {
  const std::string metric = asked.empty() ? default_metric(file) : asked;
  if (metric != "val_loss" && metric != "final_loss" && metric != "best_loss" &&
      metric != "loss_reduction")
    throw FormatError(str("unknown metric '", metric,
                          "'; valid: val_loss, final_loss, best_loss, loss_reduction"));
  return metric;
}

// Fills a.grid with every run judged by a.metric; returns the seeds seen.
std::set<int64_t> fill_grid(SweepAnalysis& a, const SweepFile& file,
                            std::optional<int64_t> at_tokens) {
  std::set<int64_t> seeds;
  for (const SweepLine& l : file.lines) {
    a.grid.push_back({l.run.at("batch_tokens").get<double>(), l.run.at("lr").get<double>(),
                      metric_value(l.run, a.metric, at_tokens)});
    seeds.insert(l.run.value("seed", int64_t(0)));
  }
  return seeds;
}

// Names the level or the tokens judged at in the series and the metric.
void label_judged_point(SweepAnalysis& a, const SweepFile& file,
                        const SweepAnalysisOptions& options, bool by_target) {
  const nlohmann::json& front = file.lines.front().run;
  if (by_target && front.contains("target_loss") && front.at("target_loss").is_number()) {
    a.target_level = front.at("target_loss").get<double>();
    if (options.target_level) a.series += str(" at loss ", *a.target_level);
  }
  if (options.at_tokens && !by_target) {
    a.metric =
        str("smoothed training loss at ", *options.at_tokens, " tokens");  // a label only now
    a.series += str(" at ", *options.at_tokens, " tokens");
  }
}

// Each seed's own optimum per batch, for the spread (empty with one seed).
std::map<double, std::vector<double>> seed_optima(const SweepAnalysis& a, const SweepFile& file,
                                                  const std::set<int64_t>& seeds) {
  std::map<double, std::vector<double>> seed_lrs;
  if (a.seeds > 1)
    for (int64_t seed : seeds) {
      std::vector<SweepRun> one;
      for (size_t i = 0; i < a.grid.size(); ++i)
        if (file.lines[i].run.value("seed", int64_t(0)) == seed) one.push_back(a.grid[i]);
      for (const OptimalLr& p : optimal_lrs(one))
        if (std::isfinite(p.loss)) seed_lrs[p.batch].push_back(p.lr);
    }
  return seed_lrs;
}

// Mean B_simple over the batch's finite runs; sets a.b_simple_at_target when one recorded it.
std::optional<double> mean_b_simple(SweepAnalysis& a, const SweepFile& file, double batch,
                                    bool by_target) {
  std::vector<double> b_simple;
  for (size_t i = 0; i < a.grid.size(); ++i) {
    if (a.grid[i].batch != batch || !std::isfinite(a.grid[i].loss)) continue;
    const nlohmann::json& run = file.lines[i].run;
    // at the target when the run recorded it (memo sweep since several levels), else at the end
    const bool at_target = by_target && run.contains("b_simple_at_target");
    a.b_simple_at_target = a.b_simple_at_target || at_target;
    const char* key = at_target ? "b_simple_at_target" : "gns_b_simple";
    if (run.contains(key) && run.at(key).is_number()) b_simple.push_back(run.at(key).get<double>());
  }
  if (b_simple.empty()) return std::nullopt;
  return mean(b_simple);
}

// The grid indices of the batch's best lr, by its mean loss over seeds (none when no mean is
// finite).
std::vector<size_t> best_lr_runs(const std::vector<SweepRun>& grid, double batch) {
  std::map<double, std::vector<size_t>> by_lr;
  for (size_t i = 0; i < grid.size(); ++i)
    if (grid[i].batch == batch) by_lr[grid[i].lr].push_back(i);
  double best = kInf;
  const std::vector<size_t>* best_runs = nullptr;
  for (const auto& [lr, idx] : by_lr) {
    std::vector<double> losses;
    for (size_t i : idx) losses.push_back(grid[i].loss);
    const double m = mean(losses);
    if (m < best) best = m, best_runs = &idx;
  }
  return best_runs ? *best_runs : std::vector<size_t>();
}

// S and E = B S averaged over the runs that recorded reaching the target.
void set_target_steps(BatchSummary& b, const SweepFile& file, const std::vector<size_t>& runs) {
  std::vector<double> steps, tokens;
  for (size_t i : runs) {
    const nlohmann::json& run = file.lines[i].run;
    if (run.contains("target_steps") && run.at("target_steps").is_number()) {
      steps.push_back(run.at("target_steps").get<double>());
      tokens.push_back(run.at("target_tokens").get<double>());
    }
  }
  if (!steps.empty()) b.target_steps = mean(steps), b.target_tokens = mean(tokens);
}

BatchSummary summarise_batch(SweepAnalysis& a, const SweepFile& file, const OptimalLr& p,
                             const std::vector<double>& seed_lrs, bool by_target) {
  BatchSummary b;
  b.optimum = p;
  b.seed_lrs = seed_lrs;
  std::sort(b.seed_lrs.begin(), b.seed_lrs.end());
  b.b_simple = mean_b_simple(a, file, p.batch, by_target);
  set_target_steps(b, file, best_lr_runs(a.grid, p.batch));
  return b;
}

// The laws over the batches' optima; for target-loss sweeps, Eq. 22 over their (S, E) and
// Eq. 23 / 24 at its B_noise, or the reason there is no such fit.
void fit_batches(SweepAnalysis& a, double confidence, bool by_target) {
  std::vector<OptimalLr> points;
  for (const BatchSummary& b : a.batches) points.push_back(b.optimum);
  a.laws = fit_laws(points, confidence);
  std::vector<StepsToTarget> pairs;
  for (const BatchSummary& b : a.batches)
    if (b.target_steps) pairs.push_back({*b.target_steps, *b.target_tokens});
  if (!by_target) {
    a.target_note = "not a target-loss sweep";
  } else if (pairs.size() < 2) {
    a.target_note = str("only ", pairs.size(), " batch sizes reached the target; Eq. 22 needs 2");
  } else {
    try {
      a.target = fit_steps_to_target(pairs, confidence);
      a.eps_max_surge = eps_max_surge(points, a.target->b_noise);
      a.eps_max_sgd = eps_max_power(points, a.target->b_noise, 1.0);
    } catch (const ConfigError& e) {
      a.target_note = e.what();
    }
  }
}

}  // namespace

SweepAnalysis analyse_sweep(const SweepFile& input, const std::string& path,
                            const SweepAnalysisOptions& options) {
  SweepAnalysis a;
  a.path = path;
  a.series = std::filesystem::path(path).stem().string();
  if (input.lines.empty()) throw FormatError(str(path, " holds no runs"));
  SweepFile file = input;
  for (SweepLine& l : file.lines) select_target_level(l, path, options.target_level);
  a.setting = common_setting(file, path);
  a.metric = checked_metric(file, options.metric);
  a.runs = int64_t(file.lines.size());
  const std::set<int64_t> seeds = fill_grid(a, file, options.at_tokens);
  a.seeds = int(seeds.size());
  const bool by_target = a.metric == "loss_reduction";
  if (by_target && options.at_tokens)
    throw FormatError(str("--at-tokens ", *options.at_tokens, " judges the smoothed training loss ",
                          "at that many tokens, and ", path, " is judged by loss_reduction at its ",
                          "target loss; give --metric final_loss (or best_loss) with it"));
  label_judged_point(a, file, options, by_target);
  std::map<double, std::vector<double>> seed_lrs = seed_optima(a, file, seeds);
  for (const OptimalLr& p : optimal_lrs(a.grid)) {
    if (!std::isfinite(p.loss)) continue;  // every run at this batch diverged or has no value
    a.batches.push_back(summarise_batch(a, file, p, seed_lrs[p.batch], by_target));
  }
  if (a.batches.empty())
    throw FormatError(
        str(path, ": no batch size has a run with a finite ", a.metric, " (all diverged?)"));
  fit_batches(a, options.confidence, by_target);
  return a;
}

std::string fit_caveats(const SweepAnalysis& a, double b_noise) {
  std::vector<std::string> why;
  int edge = 0;
  double lo = kInf, hi = 0.0;
  for (const BatchSummary& b : a.batches) {
    edge += b.optimum.at_grid_edge ? 1 : 0;
    lo = std::min(lo, b.optimum.batch), hi = std::max(hi, b.optimum.batch);
  }
  if (edge > 0)
    why.push_back(str(edge, " of ", a.batches.size(),
                      " batch sizes have their best lr at the lr grid's edge (a bound, not an "
                      "optimum: widen --lrs)"));
  if (!(b_noise >= lo && b_noise <= hi))
    why.push_back(str("B_noise ", b_noise, " tokens lies outside the batches swept (", lo, " to ",
                      hi, " tokens): an extrapolation"));
  std::string out;
  for (const std::string& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

nlohmann::json to_json(const SweepAnalysis& a) {
  nlohmann::json batches = nlohmann::json::array();
  for (const BatchSummary& b : a.batches)
    batches.push_back({{"batch_tokens", b.optimum.batch},
                       {"lr_opt", b.optimum.lr},
                       {"loss", b.optimum.loss},
                       {"at_grid_edge", b.optimum.at_grid_edge},
                       {"lrs_tried", b.optimum.lrs_tried},
                       {"b_simple", opt(b.b_simple)},
                       {"seed_lrs", b.seed_lrs},
                       {"target_steps", opt(b.target_steps)},
                       {"target_tokens", opt(b.target_tokens)}});
  nlohmann::json laws = nlohmann::json::object();
  for (const LawFit& f : a.laws.fits)
    laws[law_name(f.law)] = {
        {"params", f.params},
        {"ci_low", f.ci_low},
        {"ci_high", f.ci_high},
        {"residuals", f.residuals},
        {"rss", f.rss},
        {"aic", f.aic},
        {"aicc", std::isfinite(f.aicc) ? nlohmann::json(f.aicc) : nlohmann::json()},
        {"peak_batch", opt(law_peak_batch(f.law, f.params))}};
  nlohmann::json j{{"path", a.path},
                   {"series", a.series},
                   {"setting", a.setting},
                   {"metric", a.metric},
                   {"target_level", opt(a.target_level)},
                   {"runs", a.runs},
                   {"seeds", a.seeds},
                   {"b_simple_at_target", a.b_simple_at_target},
                   {"batches", batches},
                   {"laws", laws},
                   {"best_law", aicc_defined(a) ? nlohmann::json(law_name(a.laws.best_by_aicc))
                                                : nlohmann::json()},
                   {"best_by_rss", law_name(a.laws.best_by_rss)}};
  if (a.target) {
    const TargetLossFit& t = *a.target;
    j["target"] = {{"b_noise", t.b_noise},
                   {"b_noise_ci", {t.b_noise_ci_low, t.b_noise_ci_high}},
                   {"s_min", t.s_min},
                   {"e_min", t.e_min},
                   {"residuals", t.residuals},
                   {"eps_max_surge", opt(a.eps_max_surge)},
                   {"eps_max_sgd", opt(a.eps_max_sgd)}};
  } else {
    j["target"] = nullptr;
    j["target_note"] = a.target_note;
  }
  return j;
}

std::string to_text(const SweepAnalysis& a) {
  const bool by_target = a.metric == "loss_reduction";
  std::string out =
      str(a.path, ": ", a.runs, " runs (", a.seeds, a.seeds == 1 ? " seed" : " seeds", "), ",
          a.setting, ", judged by ", a.metric,
          a.target_level ? str(" at target loss ", *a.target_level) : std::string(), "\n");
  char buf[240];
  std::snprintf(buf, sizeof buf, "%12s %11s %21s %9s %5s %11s %s\n", "batch_tok", "lr_opt",
                a.seeds > 1 ? "seeds' lr_opt range" : "", "loss", "lrs",
                a.b_simple_at_target ? "B_simple@S" : "B_simple", "");
  out += buf;
  for (const BatchSummary& b : a.batches) {
    std::string range;
    if (b.seed_lrs.size() > 1) {
      char r[64];
      std::snprintf(r, sizeof r, "%.3g-%.3g (%zu)", b.seed_lrs.front(), b.seed_lrs.back(),
                    b.seed_lrs.size());
      range = r;
    }
    std::snprintf(buf, sizeof buf, "%12.0f %11.4g %21s %9.4f %5d %11s %s\n", b.optimum.batch,
                  b.optimum.lr, range.c_str(), by_target ? -b.optimum.loss : b.optimum.loss,
                  b.optimum.lrs_tried, b.b_simple ? str(int64_t(*b.b_simple)).c_str() : "-",
                  b.optimum.at_grid_edge ? "(at the lr grid's edge: a bound)" : "");
    out += buf;
  }
  out += a.laws.summary();
  if (!out.empty() && out.back() != '\n') out += "\n";
  out += "residuals log(lr_opt) - log(law):";
  for (const LawFit& f : a.laws.fits) {
    out += "\n  " + law_name(f.law) + ":";
    for (double r : f.residuals) {
      std::snprintf(buf, sizeof buf, " %+.3f", r);
      out += buf;
    }
  }
  out += aicc_defined(a) ? "\nbest law (AICc): " + law_name(a.laws.best_by_aicc) + "\n"
                         : str("\nbest law: undetermined (AICc needs at least 4 batch sizes, have ",
                               a.batches.size(), ")\n");
  if (a.target) {
    const TargetLossFit& t = *a.target;
    // the interval is the slope's (t quantile x standard error): where it reaches 0 the points do
    // not bound B_noise from below, and a negative noise scale means nothing
    char low[32];
    std::snprintf(low, sizeof low, t.b_noise_ci_low > 0.0 ? "%.4g" : "<= 0", t.b_noise_ci_low);
    std::snprintf(
        buf, sizeof buf,
        "target loss (Eq. 22): B_noise %.4g tokens [%s, %.4g]%s, S_min %.4g steps, E_min "
        "%.4g tokens\n",
        t.b_noise, low, t.b_noise_ci_high,
        t.b_noise_ci_low > 0.0 ? "" : " (not bounded from below: more batch sizes or seeds)",
        t.s_min, t.e_min);
    out += buf;
    std::snprintf(buf, sizeof buf, "eps_max: surge (Eq. 23) %.4g, sgd (Eq. 24, alpha 1) %.4g\n",
                  *a.eps_max_surge, *a.eps_max_sgd);
    out += buf;
  } else {
    out += "target-loss fit: none (" + a.target_note + ")\n";
  }
  return out;
}

}  // namespace memo::scaling
