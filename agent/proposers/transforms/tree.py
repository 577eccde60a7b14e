"""The tree-sitter view of one kernel that the transforms edit, and byte-exact edits on it.

Transforms change only the bytes they must: every edit is (start byte, end byte, new text) in the
user's file, applied back to front, so everything outside the edited ranges stays as written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.kernels import parse_cuda
from cuda_agent.agent.rewrite import with_launch
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget, load_targets
from tree_sitter import Node

Edit = tuple[int, int, str]  # replace bytes [start, end) with the text

# Names whose values differ between threads or blocks: a body that reads them cannot be moved into a
# loop over elements, or given more elements a thread, without changing what it computes.
THREAD_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})


@dataclass(frozen=True)
class KernelTree:
    target: KernelTarget
    data: bytes
    definition: Node  # the function_definition
    body: Node  # its compound_statement

    def text(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8")

    def indent_at(self, byte: int) -> str:
        """The whitespace that starts the line holding `byte`."""
        start = self.data.rfind(b"\n", 0, byte) + 1
        end = start
        while end < len(self.data) and self.data[end] in b" \t":
            end += 1
        return self.data[start:end].decode("utf-8")

    def starts_line(self, node: Node) -> bool:
        """Whether only whitespace precedes the node on its line (a `#pragma` can go above it)."""
        start = self.data.rfind(b"\n", 0, node.start_byte) + 1
        return self.data[start : node.start_byte].strip() == b""

    def indent_unit(self) -> str:
        """One level of the user's indentation: the first statement's indent beyond the function's."""
        outer = self.indent_at(self.definition.start_byte)
        for statement in self.body.named_children:
            if self.starts_line(statement):
                inner = self.indent_at(statement.start_byte)
                if inner.startswith(outer) and len(inner) > len(outer):
                    return inner[len(outer) :]
        return "    "

    def identifiers(self) -> set[str]:
        return {self.text(n) for n in walk(self.definition) if n.type == "identifier"}

    def apply(self, edits: Sequence[Edit]) -> str:
        data = self.data
        for start, end, new_text in sorted(edits, key=lambda e: e[0], reverse=True):
            data = data[:start] + new_text.encode("utf-8") + data[end:]
        return data.decode("utf-8")


def kernel_tree(target: KernelTarget) -> KernelTree | None:
    """The parsed kernel of `target`, or None when its body is missing or did not parse cleanly
    (a transform never edits code the parser had to recover from)."""
    if target.spec is None or target.kernel.has_errors:
        return None
    data = target.source.encode("utf-8")
    root = parse_cuda(data).root_node
    span = target.kernel.body_span
    body = root.descendant_for_byte_range(span.start_byte, span.end_byte)
    while body is not None and body.type != "compound_statement":
        body = body.parent
    if body is None or body.parent is None or body.parent.type != "function_definition":
        return None
    return KernelTree(target, data, body.parent, body)


def walk(node: Node) -> Iterator[Node]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def mentions(tree: KernelTree, node: Node, names: frozenset[str] | set[str]) -> bool:
    return any(n.type == "identifier" and tree.text(n) in names for n in walk(node))


def reindent(text: str, old_indent: str, new_indent: str) -> str:
    """A statement's text (its first line without indentation) moved from one depth to another."""
    lines = text.split("\n")
    moved = [new_indent + lines[0]]
    for line in lines[1:]:
        stripped = line[len(old_indent) :] if line.startswith(old_indent) else line.lstrip()
        moved.append(new_indent + stripped if stripped else "")
    return "\n".join(moved)


def candidate_from(
    target: KernelTarget,
    source: str,
    *,
    description: str,
    proposer: str,
    assumptions: tuple[str, ...] = (),
    launch: LaunchSpec | None = None,
    flags: tuple[str, ...] = (),
) -> Candidate:
    """A candidate whose launch, when it differs from the target's, is also written into the file's spec,
    so the file re-read (the next search round, or the user after applying it) runs the same launch."""
    assert target.spec is not None
    if launch is not None and launch != target.spec.launch:
        if target.spec.inferred:
            # Written out above the kernel as inferred from the original, not re-inferred from the
            # rewrite (whose shape the inference may read differently). Edits inside the kernel leave
            # its first byte where it was.
            source = with_launch(replace(target, source=source), launch)
        else:
            edited = load_targets(target.path, source).find(target.kernel.name)
            assert edited is not None and edited.spec is not None, "an edit lost the kernel's spec"
            source = with_launch(edited, launch)
    return Candidate(
        source=source,
        block=(launch or target.spec.launch).block,
        description=description,
        proposer=proposer,
        flags=flags,
        assumptions=assumptions,
        launch=launch if launch is not None and launch != target.spec.launch else None,
    )


def with_grid(launch: LaunchSpec, grid: str) -> LaunchSpec:
    return replace(launch, grid=(grid,))
