// A fixture of the layering check: a high layer including the low one, which is allowed.
#pragma once

#include "memo/low/low.h"
