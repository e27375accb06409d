#pragma once
// The standard process_* metrics of Prometheus client libraries, read from /proc:
// CPU seconds, resident and virtual memory, open and maximum descriptors, start time.
#include <ostream>

namespace idemproxy::ops {

/// Writes the process_* families; on a system without /proc, writes nothing.
void render_process_metrics(std::ostream& out);

}  // namespace idemproxy::ops
