// cucore.export_pack, import_pack and verify_pack (pack.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace cucore::python {

void bind_packs(nanobind::module_& m);

}  // namespace cucore::python
