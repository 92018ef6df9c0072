// SQLite engine: the one instantiation of the operations every engine
// shares, over SQLite's dialect (dialect.h).

#include "engines/shared/sql_batches.h"
#include "engines/shared/sql_deps.h"
#include "engines/shared/sql_limits.h"
#include "engines/shared/sql_queue.h"
#include "engines/shared/sql_results.h"
#include "engines/shared/sql_ring.h"
#include "engines/shared/sql_rotation.h"
#include "engines/shared/sql_schedules.h"
#include "engines/shared/sql_topics.h"
#include "engines/sqlite/dialect.h"

template class sqlq::engines::shared::SqlEngine<sqlq::engines::sqlite::Dialect>;
