#include "memo/scaling/sweep_analysis.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "memo/core/error.h"

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
      if (d < dist) dist = d, best = p.at(2).get<double>();
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

}  // namespace

SweepAnalysis analyse_sweep(const SweepFile& file, const std::string& path,
                            const SweepAnalysisOptions& options) {
  SweepAnalysis a;
  a.path = path;
  if (file.lines.empty()) throw FormatError(str(path, " holds no runs"));
  a.setting = run_setting(file.lines.front().run);
  for (const SweepLine& l : file.lines)
    if (run_setting(l.run) != a.setting)
      throw FormatError(str(path, " line ", l.line, ": optimiser setting ", run_setting(l.run),
                            " differs from line ", file.lines.front().line, "'s ", a.setting,
                            "; fit one file per setting"));
  a.metric = options.metric.empty() ? default_metric(file) : options.metric;
  if (a.metric != "val_loss" && a.metric != "final_loss" && a.metric != "best_loss" &&
      a.metric != "loss_reduction")
    throw FormatError(str("unknown metric '", a.metric,
                          "'; valid: val_loss, final_loss, best_loss, loss_reduction"));
  a.runs = int64_t(file.lines.size());
  for (const SweepLine& l : file.lines)
    a.grid.push_back({l.run.at("batch_tokens").get<double>(), l.run.at("lr").get<double>(),
                      metric_value(l.run, a.metric, options.at_tokens)});
  if (options.at_tokens && a.metric != "loss_reduction")
    a.metric =
        str("smoothed training loss at ", *options.at_tokens, " tokens");  // a label only now
  for (const OptimalLr& p : optimal_lrs(a.grid)) {
    if (!std::isfinite(p.loss)) continue;  // every run at this batch diverged or has no value
    BatchSummary b;
    b.optimum = p;
    double sum = 0.0, best = kInf;
    int n = 0;
    const nlohmann::json* best_run = nullptr;
    for (size_t i = 0; i < a.grid.size(); ++i) {
      if (a.grid[i].batch != p.batch || !std::isfinite(a.grid[i].loss)) continue;
      const nlohmann::json& run = file.lines[i].run;
      if (run.contains("gns_b_simple") && run.at("gns_b_simple").is_number())
        sum += run.at("gns_b_simple").get<double>(), ++n;
      if (a.grid[i].loss < best) best = a.grid[i].loss, best_run = &run;
    }
    if (n > 0) b.b_simple = sum / n;
    if (best_run && best_run->contains("target_steps") &&
        best_run->at("target_steps").is_number()) {
      b.target_steps = best_run->at("target_steps").get<int64_t>();
      b.target_tokens = best_run->at("target_tokens").get<int64_t>();
    }
    a.batches.push_back(b);
  }
  if (a.batches.empty())
    throw FormatError(
        str(path, ": no batch size has a run with a finite ", a.metric, " (all diverged?)"));
  std::vector<OptimalLr> points;
  for (const BatchSummary& b : a.batches) points.push_back(b.optimum);
  a.laws = fit_laws(points, options.confidence);
  std::vector<StepsToTarget> pairs;
  for (const BatchSummary& b : a.batches)
    if (b.target_steps) pairs.push_back({double(*b.target_steps), double(*b.target_tokens)});
  if (a.metric != "loss_reduction") {
    a.target_note = "not a target-loss sweep";
  } else if (pairs.size() < 2) {
    a.target_note = str("only ", pairs.size(), " batch sizes reached the target; Eq. 22 needs 2");
  } else {
    try {
      a.target = fit_steps_to_target(pairs, options.confidence);
      a.eps_max_surge = eps_max_surge(points, a.target->b_noise);
      a.eps_max_sgd = eps_max_power(points, a.target->b_noise, 1.0);
    } catch (const ConfigError& e) {
      a.target_note = e.what();
    }
  }
  return a;
}

nlohmann::json to_json(const SweepAnalysis& a) {
  nlohmann::json batches = nlohmann::json::array();
  for (const BatchSummary& b : a.batches)
    batches.push_back(
        {{"batch_tokens", b.optimum.batch},
         {"lr_opt", b.optimum.lr},
         {"loss", b.optimum.loss},
         {"at_grid_edge", b.optimum.at_grid_edge},
         {"lrs_tried", b.optimum.lrs_tried},
         {"b_simple", opt(b.b_simple)},
         {"target_steps", b.target_steps ? nlohmann::json(*b.target_steps) : nlohmann::json()},
         {"target_tokens", b.target_tokens ? nlohmann::json(*b.target_tokens) : nlohmann::json()}});
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
                   {"setting", a.setting},
                   {"metric", a.metric},
                   {"runs", a.runs},
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
  std::string out = str(a.path, ": ", a.runs, " runs, ", a.setting, ", judged by ", a.metric, "\n");
  char buf[200];
  std::snprintf(buf, sizeof buf, "%12s %11s %9s %5s %11s %s\n", "batch_tok", "lr_opt", "loss",
                "lrs", "B_simple", "");
  out += buf;
  for (const BatchSummary& b : a.batches) {
    std::snprintf(buf, sizeof buf, "%12.0f %11.4g %9.4f %5d %11s %s\n", b.optimum.batch,
                  b.optimum.lr, a.metric == "loss_reduction" ? -b.optimum.loss : b.optimum.loss,
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
    std::snprintf(buf, sizeof buf,
                  "target loss (Eq. 22): B_noise %.4g tokens [%.4g, %.4g], S_min %.4g steps, E_min "
                  "%.4g tokens\n",
                  t.b_noise, t.b_noise_ci_low, t.b_noise_ci_high, t.s_min, t.e_min);
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
