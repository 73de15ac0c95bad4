// The one owner of a COIN-OR CBC model (C API, Cbc_C_Interface.h). Nothing else in memo calls
// CBC. Move-only; the destructor frees the model. Columns and rows are added one at a time;
// indices are the order of addition. Internal to the planner (solve_mip builds its model here).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace memo::plan {

class CbcModel {
 public:
  explicit CbcModel(bool verbose);  // verbose = false silences CBC's log entirely
  ~CbcModel();
  CbcModel(CbcModel&&) noexcept;
  CbcModel& operator=(CbcModel&&) noexcept;
  CbcModel(const CbcModel&) = delete;
  CbcModel& operator=(const CbcModel&) = delete;

  // Adds a column with bounds [lower, upper] and objective coefficient; returns its index.
  int add_column(double lower, double upper, double objective, bool integer);
  // Adds the row  sum coefs[k] * x[cols[k]]  <= rhs  (sense 'L'), >= ('G') or = ('E').
  void add_row(const std::vector<int>& cols, const std::vector<double>& coefs, char sense,
               double rhs);
  void set_upper(int col, double upper);
  void set_mip_start(const std::vector<int>& cols, const std::vector<double>& values);
  void set_time_limit(double seconds);                                    // wall-clock seconds
  void set_parameter(const std::string& name, const std::string& value);  // "-name value" for CBC
  void set_allowable_gap(double gap);  // stop once incumbent - bound <= gap (objective units)
  void set_allowable_fraction_gap(double fraction);  // ... or <= fraction of the incumbent
  void minimize();                                   // solves; results below

  bool has_solution() const;
  std::vector<double> solution() const;  // best integer solution, one value per column
  double objective() const;              // of the best integer solution
  double best_bound() const;             // proven lower bound on the objective
  bool proven_optimal() const;
  bool proven_infeasible() const;
  bool time_limit_reached() const;
  long nodes() const;
  long iterations() const;
  int columns() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memo::plan
