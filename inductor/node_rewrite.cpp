#include "inductor/node_rewrite.h"

#include <utility>

#include "prims/prim_error.h"
#include "prims/subgraph.h"

namespace kiln::inductor {

bool rewrite_nodes(const prims::PrimGraph& graph, const std::function<NodeAction(size_t n)>& action,
                   const NodeReplacement& replace, prims::PrimGraph* out) {
  prims::PrimGraph result;
  try {
    std::vector<int> map = prims::copy_inputs(result, graph);
    prims::PrimBuilder b(result);
    for (size_t n = 0; n < graph.nodes().size(); ++n) {
      const prims::PrimNode& node = graph.node(n);
      switch (action(n)) {
        case NodeAction::Copy:
          prims::copy_node_mapped(result, graph, node, map);
          break;
        case NodeAction::Drop:
          break;
        case NodeAction::Replace: {
          const int made = replace(b, n, map);
          if (made < 0) return false;
          map[node.outputs[0]] = made;
          break;
        }
      }
    }
    prims::copy_outputs(result, graph, map);
  } catch (const prims::PrimError&) {
    return false;  // a view the meta rules refuse: the graph is kept as it is
  }
  *out = std::move(result);
  return true;
}

}  // namespace kiln::inductor
