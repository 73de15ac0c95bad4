// The CBC wrapper. See cbc_model.h. Every Cbc_* call in memo is in this file.
#include "memo/memory/plan/cbc_model.h"

#include <coin/Cbc_C_Interface.h>

#include "memo/core/error.h"

namespace memo::plan {

struct CbcModel::Impl {
  Cbc_Model* model = nullptr;
  int columns = 0;
  bool solved = false;
  ~Impl() {
    if (model) Cbc_deleteModel(model);
  }
};

CbcModel::CbcModel(bool verbose) : impl_(std::make_unique<Impl>()) {
  impl_->model = Cbc_newModel();
  if (!impl_->model) throw Error("CBC: Cbc_newModel failed");
  Cbc_setLogLevel(impl_->model, verbose ? 1 : 0);
  Cbc_setParameter(impl_->model, "log", verbose ? "1" : "0");
  Cbc_setParameter(impl_->model, "slog", verbose ? "1" : "0");
}

CbcModel::~CbcModel() = default;
CbcModel::CbcModel(CbcModel&&) noexcept = default;
CbcModel& CbcModel::operator=(CbcModel&&) noexcept = default;

int CbcModel::add_column(double lower, double upper, double objective, bool integer) {
  const std::string name = str("c", impl_->columns);
  Cbc_addCol(impl_->model, name.c_str(), lower, upper, objective, integer ? 1 : 0, 0, nullptr,
             nullptr);
  return impl_->columns++;
}

void CbcModel::add_row(const std::vector<int>& cols, const std::vector<double>& coefs, char sense,
                       double rhs) {
  MEMO_CHECK(cols.size() == coefs.size(), "CbcModel::add_row: ", cols.size(), " columns, ",
             coefs.size(), " coefs");
  Cbc_addRow(impl_->model, "", int(cols.size()), cols.data(), coefs.data(), sense, rhs);
}

void CbcModel::set_upper(int col, double upper) { Cbc_setColUpper(impl_->model, col, upper); }

void CbcModel::set_mip_start(const std::vector<int>& cols, const std::vector<double>& values) {
  MEMO_CHECK(cols.size() == values.size(), "CbcModel::set_mip_start: ", cols.size(), " vs ",
             values.size());
  Cbc_setMIPStartI(impl_->model, int(cols.size()), cols.data(), values.data());
}

void CbcModel::set_time_limit(double seconds) {
  // CBC counts CPU seconds unless told otherwise; on a shared machine that overruns the limit.
  Cbc_setParameter(impl_->model, "timeMode", "elapsed");
  Cbc_setMaximumSeconds(impl_->model, seconds);
}

void CbcModel::set_parameter(const std::string& name, const std::string& value) {
  Cbc_setParameter(impl_->model, name.c_str(), value.c_str());
}
void CbcModel::set_allowable_gap(double gap) { Cbc_setAllowableGap(impl_->model, gap); }
void CbcModel::set_allowable_fraction_gap(double fraction) {
  Cbc_setAllowableFractionGap(impl_->model, fraction);
}

void CbcModel::minimize() {
  Cbc_setObjSense(impl_->model, 1.0);
  Cbc_solve(impl_->model);
  impl_->solved = true;
}

bool CbcModel::has_solution() const {
  return impl_->solved && Cbc_bestSolution(impl_->model) != nullptr;
}

std::vector<double> CbcModel::solution() const {
  const double* x = Cbc_bestSolution(impl_->model);
  MEMO_CHECK(x != nullptr, "CbcModel::solution: CBC found no integer solution");
  return std::vector<double>(x, x + impl_->columns);
}

double CbcModel::objective() const { return Cbc_getObjValue(impl_->model); }
double CbcModel::best_bound() const { return Cbc_getBestPossibleObjValue(impl_->model); }
bool CbcModel::proven_optimal() const { return Cbc_isProvenOptimal(impl_->model) != 0; }
bool CbcModel::proven_infeasible() const { return Cbc_isProvenInfeasible(impl_->model) != 0; }
bool CbcModel::time_limit_reached() const { return Cbc_isSecondsLimitReached(impl_->model) != 0; }
long CbcModel::nodes() const { return Cbc_getNodeCount(impl_->model); }
long CbcModel::iterations() const { return Cbc_getIterationCount(impl_->model); }
int CbcModel::columns() const { return impl_->columns; }

}  // namespace memo::plan
