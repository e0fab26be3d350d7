// reduce_support.hpp: a collNet's reduceSupport answers, asked for every type and op and said in one line, as
// nccl-net-info shows them and nccl-net-check's collNet rules report them.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nccl_net/net.h>

#include "nns/coll/reduce.hpp"

namespace nns::tools {

struct ReducePair {
  int type;  // ncclDataType_t
  int op;    // ncclRedOp_t
};

// Asks `ask(type, op, &supported)` for each of NCCL's types and ops (not the user-created ones), in NCCL's order.
// The pairs answered 1, or the first call that failed (`failedType`, `failedOp` and its result set).
inline ncclResult_t supportedPairs(const std::function<ncclResult_t(ncclDataType_t, ncclRedOp_t, int*)>& ask,
                                   std::vector<ReducePair>* pairs, int* failedType, int* failedOp) {
  pairs->clear();
  for (int type = 0; type < ncclNumTypes; ++type)
    for (int op = 0; op < ncclNumOps; ++op) {
      int supported = 0;
      if (ncclResult_t result = ask(static_cast<ncclDataType_t>(type), static_cast<ncclRedOp_t>(op), &supported);
          result != ncclSuccess) {
        *failedType = type;
        *failedOp = op;
        return result;
      }
      if (supported != 0) pairs->push_back({type, op});
    }
  return ncclSuccess;
}

// "sum/prod/max/min of int8, uint8, int32; sum of float": the types grouped by the ops taken for them, named as
// nccl-net-bench names them (nns/coll/reduce.hpp); "none" for no pair.
inline std::string reducePairsText(const std::vector<ReducePair>& pairs) {
  std::vector<std::pair<unsigned, std::string>> groups;  // op mask -> types
  for (int type = 0; type < ncclNumTypes; ++type) {
    unsigned mask = 0;
    for (const auto& p : pairs)
      if (p.type == type) mask |= 1u << p.op;
    if (mask == 0) continue;
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == mask; });
    if (group == groups.end()) group = groups.insert(groups.end(), {mask, ""});
    group->second += std::string(group->second.empty() ? "" : ", ") + coll::typeName(static_cast<ncclDataType_t>(type));
  }
  std::string text;
  for (const auto& [mask, types] : groups) {
    std::string ops;
    for (int op = 0; op < ncclNumOps; ++op)
      if ((mask & (1u << op)) != 0)
        ops += std::string(ops.empty() ? "" : "/") + coll::opName(static_cast<ncclRedOp_t>(op));
    text += std::string(text.empty() ? "" : "; ") + ops + " of " + types;
  }
  return text.empty() ? "none" : text;
}

}  // namespace nns::tools
