// Option and mask checks shared by the optimisers: each throws ConfigError naming the optimiser,
// the option, its value and the allowed range.
#pragma once

#include <string>
#include <vector>

#include "memo/model/params.h"

namespace memo {

// decay must hold one flag per tensor of layout.
void check_decay_mask(const ParamLayout& layout, const std::vector<bool>& decay);

// Throws unless ok: "<optimizer> option <option> = <value> is outside <allowed>".
void check_option(bool ok, const std::string& optimizer, const std::string& option, double value,
                  const std::string& allowed);

}  // namespace memo
