// The allocation and compaction policy's postconditions (SPEC.md sections 4, 4.1, 4.2), checked
// on one step of a pool from its tables before and after and its answer: the queue-front virtual
// pages, bound to the pages the policy names; compaction moves ascending, each page moved once,
// across the new watermark, carrying its virtual id; a lazy free moving nothing.
//
// Apart from RapidCheck (model_property.cpp), so that the seeded fuzzer, and the Python module
// that binds it (a shared object, which Debian's non-PIC librapidcheck.a cannot go into), use it
// without linking RapidCheck.
#pragma once

#include <string>

#include "core/backend.h"
#include "core/op.h"
#include "core/pool_config.h"

namespace kvtwin::props {

// What is wrong with one step of the policy, or an empty string.
std::string policy_violation(const Op& op, const PoolTables& before, const PoolTables& after, const OpResult& result,
                             CompactionMode mode);

}  // namespace kvtwin::props
