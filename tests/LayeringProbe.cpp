// Must NOT compile: built only by the layering_enforced test as a target of the model/ folder,
// which may include util/ (found) but not run/ (above it). docs/developer/architecture.md.
#include "util/Job.h"
#include "run/QuantizeRun.h"
