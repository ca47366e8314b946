// cucore.ObjectCode, Program, make_program_cache_key, explain_program_cache_key and
// wait_for_verification (program.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace cucore::python {

void bind_object_code(nanobind::module_& m);
void bind_program(nanobind::module_& m);

}  // namespace cucore::python
