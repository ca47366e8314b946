// Umbrella header.
#pragma once

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/linker.hpp"
#include "cucore/log.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
