// poprithms' shift scheduler on one graph, for benchmarks/poprithms.py.
//
// stdin:  "n m", then per op "k p_1 .. p_k" (its predecessors), then per alloc
//         "size k u_1 .. u_k" (its users); ops and allocs are 0-based indices.
// stdout: the seconds poprithms took (building its ScheduledGraph: start order and shift
//         search, with its default settings), then the schedule (op indices, in order).
#include <chrono>
#include <iostream>
#include <poprithms/schedule/shift/graph.hpp>
#include <poprithms/schedule/shift/scheduledgraph.hpp>
#include <poprithms/schedule/shift/settings.hpp>

using namespace poprithms::schedule::shift;

int main() {
  int n = 0, m = 0;
  std::cin >> n >> m;
  Graph g;
  for (int i = 0; i < n; ++i) {
    g.insertOp("op" + std::to_string(i));
  }
  for (int i = 0; i < n; ++i) {
    int k = 0;
    std::cin >> k;
    for (int j = 0; j < k; ++j) {
      int p = 0;
      std::cin >> p;
      g.insertConstraint(p, i);
    }
  }
  for (int a = 0; a < m; ++a) {
    double size = 0;
    int k = 0;
    std::cin >> size >> k;
    auto alloc = g.insertAlloc(size);
    for (int j = 0; j < k; ++j) {
      int u = 0;
      std::cin >> u;
      g.insertOpAlloc(u, alloc);
    }
  }
  if (!std::cin) {
    std::cerr << "malformed graph on stdin\n";
    return 2;
  }
  auto began = std::chrono::steady_clock::now();
  ScheduledGraph scheduled(std::move(g), Settings());
  auto ended = std::chrono::steady_clock::now();
  std::cout << std::chrono::duration<double>(ended - began).count() << "\n";
  for (int i = 0; i < n; ++i) {
    std::cout << scheduled.scheduleToOp(i) << (i + 1 < n ? " " : "");
  }
  std::cout << "\n";
  return 0;
}
