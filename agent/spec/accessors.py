"""Kernels that take PyTorch packed accessors, read as pointer kernels for the inference alone.

A PyTorch extension's kernel often takes `torch::PackedTensorAccessor32<scalar_t, 2,
torch::RestrictPtrTraits> x` and reads `x[n][c]`, `x.size(1)`. The inference reads pointers, sizes and
flat indices, so the kernel is read as the pointer kernel it stands for: each accessor a pointer to its
element type, each of its dimensions a size (an `int` parameter added at the end), `x[n][c]` the flat
`x[(n) * x_size1 + (c)]` of a contiguous tensor, `x.size(1)` that size, `x.stride(0)` the product of the
sizes after it.

Dimensions indexed by the same expression are one size (`out[n][c] = x[n][c] * w[c]`: x's and out's
columns and w's length), so the pointer kernel has the sizes the accessors share, as a pointer kernel
would. An accessor promises its indices lie within its sizes; where the kernel leaves a thread index
unchecked on that promise (`const int n = blockIdx.y;` with the grid's y over the batch, as torch's
extension tutorial writes it), the reading states it (`if (n >= x_size0) return;`), so the launch is sized
by it. The spec the inference gives is mapped back (`to_accessors`): each accessor's shape is its sizes,
the added parameters are dropped. Accessors indexed in part (`auto row = x[n];`), handed on whole or
read any other way are refused with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from cuda_agent.agent.kernels import Accessor, Kernel, find_kernels, kernel_body
from cuda_agent.agent.parsing import parse_cuda, walk
from cuda_agent.agent.spec.model import KernelSpec
from tree_sitter import Node, Tree

_COMPARISONS = frozenset({"<", "<=", ">", ">="})
_THREAD_WORDS = re.compile(r"\b(?:blockIdx|threadIdx)\b")
_INTEGER = re.compile(r"\d+")


@dataclass(frozen=True)
class Flattened:
    source: str  # the file with the kernel read as a pointer kernel
    dims: dict[str, tuple[str, ...]]  # accessor -> each dimension's size: an added parameter or a number
    sizes: tuple[str, ...]  # the parameters added, in order


class _Refused(Exception):
    pass


def flattened(kernel: Kernel, source: str, body: Node) -> Flattened | str:
    """The file with `kernel` (whose body is `body`) read as a pointer kernel; why not, where it cannot be."""
    accessors = {p.name: p.accessor for p in kernel.parameters if p.accessor is not None}
    data = source.encode("utf-8")
    try:
        uses = _Uses(accessors, body, data)
    except _Refused as exc:
        return str(exc)
    dims = uses.sizes(kernel)
    added = tuple(dict.fromkeys(d for name in accessors for d in dims[name] if not d.isdigit()))
    text = _Text(data, uses, dims, _stated_bounds(uses, dims, body, data)).of(body)
    parameters = []
    for parameter in kernel.parameters:
        if parameter.accessor is None:
            parameter_text = parameter.text
        else:
            parameter_text = f"{'const ' if parameter.is_const else ''}{parameter.type}* {parameter.name}"
        parameters.append(parameter_text)
    parameters += [f"const int {name}" for name in added]
    first, last = kernel.parameters[0].span, kernel.parameters[-1].span
    rewritten = (
        data[: first.start_byte]
        + ", ".join(parameters).encode("utf-8")
        + data[last.end_byte : body.start_byte]
        + text.encode("utf-8")
        + data[body.end_byte :]
    )
    return Flattened(rewritten.decode("utf-8"), dims, added)


def pointer_kernel(kernel: Kernel, source: str, tree: Tree | None = None) -> tuple[Flattened, Kernel] | str:
    """The file read as a pointer kernel and that kernel in it (it starts where the accessor kernel does);
    why not, where it cannot be."""
    if kernel.has_errors:
        return "the kernel has syntax errors"
    body = kernel_body(kernel, tree or parse_cuda(source))
    if body is None:
        return "the kernel has no body"
    flat = flattened(kernel, source, body)
    if isinstance(flat, str):
        return flat
    found = next((k for k in find_kernels(flat.source) if k.start_byte == kernel.start_byte), None)
    if found is None:  # the reading did not parse as a kernel: the accessors' uses are not followed
        return "its accessors could not be read as pointers: write a spec"
    return flat, found


def to_accessors(spec: KernelSpec, kernel: Kernel, flat: Flattened) -> KernelSpec:
    """The pointer kernel's spec as the accessor kernel's: shapes from the sizes, added parameters gone."""
    by_name = {argument.name: argument for argument in spec.arguments}
    values = {name: by_name[name].value for name in flat.sizes if name in by_name}
    arguments = []
    for parameter in kernel.parameters:
        argument = by_name[parameter.name]
        if parameter.accessor is not None:
            shape = tuple(str(values.get(size, size)) for size in flat.dims[parameter.name])
            argument = replace(argument, shape=shape, accessor_bits=parameter.accessor.index_bits)
        arguments.append(argument)
    note = f"{spec.inference_note}; read with its accessors as pointers (x[i][j] as x[i * x_size1 + j])"
    return replace(spec, arguments=tuple(arguments), inference_note=note)


class _Uses:
    """Every use of the accessors in the body: full index chains, `.size(d)`, `.stride(d)`, `.data()`."""

    def __init__(self, accessors: dict[str, Accessor], body: Node, data: bytes) -> None:
        self.accessors, self.data = accessors, data
        self.chains: dict[int, tuple[str, list[Node]]] = {}  # the outermost subscript -> (accessor, indices)
        self.members: dict[int, tuple[str, str, int]] = {}  # the call -> (accessor, member, dimension)
        for node in walk(body):
            if node.type == "identifier" and self._text(node) in accessors:
                self._use(node)

    def _text(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")

    def _use(self, node: Node) -> None:
        name, parent = self._text(node), node.parent
        rank = self.accessors[name].rank
        if (
            parent is not None
            and parent.type == "subscript_expression"
            and parent.child_by_field_name("argument") == node
        ):
            indices, top = [], node
            while (
                top.parent is not None
                and top.parent.type == "subscript_expression"
                and top.parent.child_by_field_name("argument") == top
            ):
                top = top.parent
                argument_list = top.child_by_field_name("indices")
                index = (
                    argument_list.named_children[0]
                    if argument_list and argument_list.named_children
                    else None
                )
                if index is None:
                    raise _Refused(f"{name}[]: an index that is not one expression")
                indices.append(index)
            if len(indices) != rank:
                raise _Refused(
                    f"{self._text(top)}: {name} has {rank} dimension(s), indexed with {len(indices)} "
                    "(a part of an accessor taken as a TensorAccessor is not followed): write a spec"
                )
            self.chains[top.id] = (name, indices)
            return
        call = parent.parent if parent is not None and parent.type == "field_expression" else None
        field = parent.child_by_field_name("field") if parent is not None else None
        if call is not None and call.type == "call_expression" and field is not None:
            member = self._text(field)
            arguments = call.child_by_field_name("arguments")
            values = [self._text(a) for a in arguments.named_children] if arguments else []
            if member == "data" and not values:
                self.members[call.id] = (name, member, 0)
                return
            if member in ("size", "stride") and len(values) == 1 and _INTEGER.fullmatch(values[0]):
                if int(values[0]) >= rank:
                    raise _Refused(f"{self._text(call)}: {name} has {rank} dimension(s)")
                self.members[call.id] = (name, member, int(values[0]))
                return
        where = self._text(parent) if parent is not None else name
        raise _Refused(f"{where}: the accessor {name} is used as a whole, not indexed or sized: write a spec")

    def sizes(self, kernel: Kernel) -> dict[str, tuple[str, ...]]:
        """Each accessor's size per dimension: dimensions indexed by the same expression share one; a
        dimension only indexed by numbers is as long as the largest plus one; one never used, 1."""
        keys = [(name, d) for name, accessor in self.accessors.items() for d in range(accessor.rank)]
        parent = {key: key for key in keys}

        def root(key: tuple[str, int]) -> tuple[str, int]:
            while parent[key] != key:
                key = parent[key]
            return key

        named: set[tuple[str, int]] = set()  # indexed by something other than a number, or sized
        longest: dict[tuple[str, int], int] = {}
        first_with: dict[str, tuple[str, int]] = {}
        for name, indices in self.chains.values():
            for d, index in enumerate(indices):
                text = re.sub(r"\s+", "", self._text(index))
                if _INTEGER.fullmatch(text):
                    longest[(name, d)] = max(longest.get((name, d), 0), int(text) + 1)
                    continue
                named.add((name, d))
                other = first_with.setdefault(text, (name, d))
                a, b = root(other), root((name, d))
                if a != b:
                    parent[max(a, b, key=keys.index)] = min(a, b, key=keys.index)
        named |= {(name, d) for name, member, d in self.members.values() if member != "data"}
        named |= {(name, e) for name, member, d in self.members.values() if member == "stride"
                  for e in range(d + 1, self.accessors[name].rank)}  # fmt: skip
        taken = set(re.findall(r"[A-Za-z_]\w*", self.data[kernel.start_byte : kernel.end_byte].decode()))
        names: dict[tuple[str, int], str] = {}
        dims: dict[str, tuple[str, ...]] = {}
        for name, accessor in self.accessors.items():
            sized = []
            for d in range(accessor.rank):
                key = root((name, d))
                if not any(root(k) == key for k in named):
                    sized.append(str(max(longest.get(k, 1) for k in keys if root(k) == key)))
                    continue
                if key not in names:
                    names[key] = _fresh(f"{key[0]}_size{key[1]}", taken)
                sized.append(names[key])
            dims[name] = tuple(sized)
        return dims


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


class _Text:
    """A node's text with the accessors' uses read as pointer code."""

    def __init__(self, data: bytes, uses: _Uses, dims: dict[str, tuple[str, ...]], stated: _Stated) -> None:
        self.data, self.uses, self.dims = data, uses, dims
        self.after, self.around = stated.after, stated.around

    def of(self, node: Node) -> str:
        # a bounds check's condition gets the stated bounds inside its parentheses: (cond || n >= s)
        opened, closed = self.around.get(node.id, ("", ""))
        written = self._of(node)
        if (opened or closed) and written.startswith("(") and written.endswith(")"):  # `( cond )` of an if
            return f"({opened}{written[1:-1]}{closed})"
        return written + self.after.get(node.id, "")

    def _of(self, node: Node) -> str:
        if node.id in self.uses.chains:
            name, indices = self.uses.chains[node.id]
            flat = f"({self.of(indices[0])})"
            for d, index in enumerate(indices[1:], start=1):
                outer = flat if d == 1 else f"({flat})"  # ((n) * c_size + (c)) * h_size + (h)
                flat = f"{outer} * {self.dims[name][d]} + ({self.of(index)})"
            return f"{name}[{flat}]"
        if node.id in self.uses.members:
            name, member, d = self.uses.members[node.id]
            if member == "data":
                return name
            if member == "size":
                return self.dims[name][d]
            return "(" + " * ".join(("1", *self.dims[name][d + 1 :])) + ")"
        if not node.children:
            return self.data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")
        parts, at = [], node.start_byte
        for child in node.children:
            parts.append(self.data[at : child.start_byte].decode("utf-8", errors="replace"))
            parts.append(self.of(child))
            at = child.end_byte
        parts.append(self.data[at : node.end_byte].decode("utf-8", errors="replace"))
        return "".join(parts)


@dataclass
class _Stated:
    """Where the bounds unchecked indices rely on are written: text after a declaration, or inside the
    parentheses of the kernel's own bounds check (before, after), by node id."""

    after: dict[int, str] = field(default_factory=dict)
    around: dict[int, tuple[str, str]] = field(default_factory=dict)


def _stated_bounds(uses: _Uses, dims: dict[str, tuple[str, ...]], body: Node, data: bytes) -> _Stated:
    """The bound each unchecked thread index relies on (`const int n = blockIdx.y;` indexing x's dimension
    0: n < x_size0), added to the kernel's first bounds check where the index is declared before it
    (`if ((c >= x_size1) || n >= x_size0) return;`: the analysis reads one check), else an early return
    after its declaration. Indices the kernel compares with anything are left alone: it bounds them."""
    compared: set[str] = set()
    for node in walk(body):
        operator = node.child_by_field_name("operator") if node.type == "binary_expression" else None
        if operator is not None and operator.type in _COMPARISONS:
            compared |= {_node_text(n, data) for n in walk(node) if n.type == "identifier"}
    bounds: dict[str, list[str]] = {}
    for name, indices in uses.chains.values():
        for d, index in enumerate(indices):
            size, index_name = dims[name][d], _node_text(index, data)
            if index.type == "identifier" and not size.isdigit() and index_name not in compared:
                bounds.setdefault(index_name, [])
                if size not in bounds[index_name]:
                    bounds[index_name].append(size)
    statements = [s for s in body.named_children if s.type != "comment"]
    guard = next((s for s in statements if _a_guard(s, statements)), None)
    stated = _Stated()
    for statement in statements:
        if statement.type != "declaration":
            continue
        for declarator in statement.children_by_field_name("declarator"):
            name_node = declarator.child_by_field_name("declarator")
            value = declarator.child_by_field_name("value")
            if declarator.type != "init_declarator" or name_node is None or value is None:
                continue
            name = _node_text(name_node, data)
            if name not in bounds or not _THREAD_WORDS.search(_node_text(value, data)):
                continue
            condition = guard.child_by_field_name("condition") if guard is not None else None
            if condition is not None and statement.start_byte < guard.start_byte:  # type: ignore[union-attr]
                # the kernel's own bounds check gets it, so the analysis reads one check (its first)
                if _returns(guard):  # type: ignore[arg-type]
                    extra = "".join(f" || {name} >= {size}" for size in bounds[name])
                else:
                    extra = "".join(f" && {name} < {size}" for size in bounds[name])
                opened, closed = stated.around.get(condition.id, ("", ""))
                stated.around[condition.id] = (opened + "(", extra + ")" + closed)
                continue
            checks = " || ".join(f"{name} >= {size}" for size in bounds[name])
            stated.after[statement.id] = stated.after.get(statement.id, "") + f" if ({checks}) return;"
    return stated


def _a_guard(statement: Node, statements: list[Node]) -> bool:
    """A top-level bounds check: `if (...) return;` anywhere, or `if (...) { ... }` last, no else."""
    if statement.type != "if_statement" or statement.child_by_field_name("alternative") is not None:
        return False
    return _returns(statement) or statement == statements[-1]


def _returns(statement: Node) -> bool:
    consequence = statement.child_by_field_name("consequence")
    inner = [consequence] if consequence is not None and consequence.type != "compound_statement" else []
    if consequence is not None and consequence.type == "compound_statement":
        inner = [s for s in consequence.named_children if s.type != "comment"]
    return len(inner) == 1 and inner[0].type == "return_statement" and not inner[0].named_children


def _node_text(node: Node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")
