// Every prim's meta rule, by family. Include this to infer metadata for any
// prim; include the family header when only one family is needed.
#pragma once

#include "prims/cat_meta.h"        // cat
#include "prims/factory_meta.h"    // full, iota, uniform, normal, bernoulli, extern
#include "prims/index_meta.h"      // gather, scatter, index_select, index_put
#include "prims/matmul_meta.h"     // matmul
#include "prims/pointwise_meta.h"  // unary, binary, where, convert_element_type, clone
#include "prims/reduction_meta.h"  // sum, prod, amax, amin, argmax, argmin, var_mean
#include "prims/view_meta.h"       // reshape, view, expand, permute, slice, squeeze, unsqueeze, as_strided
