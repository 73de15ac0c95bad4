#include "memo/optim/optimizer.h"

#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

std::vector<bool> decay_matrices_only(const ParamLayout& layout) {
  std::vector<bool> decay;
  for (const ParamInfo& p : layout.params()) decay.push_back(p.is_matrix());
  return decay;
}

void check_decay_mask(const ParamLayout& layout, const std::vector<bool>& decay) {
  if (decay.size() != layout.params().size())
    throw ConfigError(str("weight-decay mask has ", decay.size(), " entries but the model has ",
                          layout.params().size(),
                          " parameter tensors; pass one flag per tensor "
                          "(decay_matrices_only(layout) gives the usual mask)"));
}

void check_step_tensors(const ParamLayout& layout, ConstTensor params, ConstTensor grads) {
  for (const ConstTensor& t : {params, grads})
    MEMO_CHECK(t.dtype() == DType::kF32 && t.contiguous() && t.numel() == layout.total_numel(),
               "optimizer step: ", t.shape(), " ", dtype_name(t.dtype()), " is not the flat f32 ",
               "buffer of ", layout.total_numel(), " elements its layout describes");
}

void check_option(bool ok, const std::string& optimizer, const std::string& option, double value,
                  const std::string& allowed) {
  // every range is of finite numbers ("[0, inf)" excludes inf: a decay or eps of inf is no setting)
  if (!ok || !std::isfinite(value))
    throw ConfigError(str(optimizer, " option ", option, " = ", value, " is outside ", allowed));
}

}  // namespace memo
