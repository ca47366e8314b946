// cucore.ProgramCache and its kinds, open_program_cache and default_cache_dir (caches.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace cucore::python {

void bind_caches(nanobind::module_& m);

}  // namespace cucore::python
