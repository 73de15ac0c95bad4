// A fixture of the layering check (CMakeLists.txt, LayeringCheck tests): a low layer that includes
// a header of the layer above it, which the check must refuse.
#pragma once

#include "memo/high/high.h"
