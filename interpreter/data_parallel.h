// What torch's DistributedDataParallel asks of a graph compiled while its
// forward runs (Note [Gradient buckets] in prims/stages.cpp).
#pragma once

#include <cstdint>

namespace kiln::interpreter {

// The gradient bucket size in bytes (bucket_bytes_cap) of the
// DistributedDataParallel module whose forward is running in this thread's
// call, or 0 when none is (or torch.distributed was never imported).
int64_t active_ddp_bucket_bytes();

}  // namespace kiln::interpreter
