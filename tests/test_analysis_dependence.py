"""Which locals depend on a value (agent/analysis/dependence.py), through data, control and loops."""

from __future__ import annotations

from cuda_agent.agent.analysis.dependence import dependent_locals
from cuda_agent.agent.parsing import parse_cuda
from tree_sitter import Node

BODY = """
    int row = blockIdx.x;                 // the same for the block
    int i = row * 256 + tid;              // data: from tid
    float v = x[i];
    float scale = 2.0f;
    float total = 0.0f;
    if (tid == 0) total = 1.0f;           // control: set under a condition on tid
    int steps = 0;
    for (int k = i; k < 256; k += 32) steps++;   // a loop whose header reads i
    float2 pair;
    pair.x = v;                           // through a member
    float later = 0.0f;
    while (row > 0) { later = total; row--; }    // from total, set under tid's condition
"""


def statements(body: str) -> list[Node]:
    root = parse_cuda(f"__global__ void k(const float* x, int tid) {{{body}}}".encode()).root_node
    (kernel,) = [n for n in root.named_children if n.type == "function_definition"]
    block = kernel.child_by_field_name("body")
    assert block is not None
    return list(block.named_children)


def test_locals_set_from_the_seed_under_it_or_in_its_loops_depend_on_it() -> None:
    found = dependent_locals(statements(BODY), {"tid"})
    assert found == {"tid", "i", "v", "total", "steps", "k", "pair", "later"}


def test_a_source_node_seeds_what_reads_it() -> None:
    def loads(node: Node) -> bool:
        return node.type == "subscript_expression"

    found = dependent_locals(statements(BODY), (), loads)
    assert found == {"v", "pair"}
