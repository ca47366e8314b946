// Umbrella header.
#pragma once

#include "cucore/error.hpp"
#include "cucore/linker.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
