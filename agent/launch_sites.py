"""Host `kernel<<<grid, block, shared, stream>>>(...)` launches written for a new launch configuration.

A rewrite verified with a new launch (another block, a warp per row, a capped grid) is only correct in the
user's program if the host launches it that way, and a user reads the edit in their own terms: where the
block comes from a constant (`const int threads = 128;`, `dim3 block(16, 16)`, `#define BLOCK 256`, an
argv default) that constant changes, and the grid and shared memory are rewritten only where they would
not follow by themselves, written with the user's names (`(rows + threads - 1) / threads`). The edited
file is read again and every launch must give, at its own sizes, the block, grid and shared memory that
were measured; a launch that does not (or that the host code does not let us read) is left as it was, and
a note says why.

Where the host code around a launch cannot be read (its values come from elsewhere), the older way
applies: the spec's expressions written in the call's terms, a size that a scalar parameter carries
(`n = { role = "scalar", value = "n" }`) written as that call's argument; a size the call does not carry
leaves the site as it was.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from cuda_agent.agent.kernels import Kernel, LaunchSite, find_kernels, find_launch_sites
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.spec import KernelSpec, LaunchSpec
from cuda_agent.agent.spec.checks import block_values
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from cuda_agent.agent.spec.model import SpecResolveError
from cuda_agent.agent.spec.program import (
    NotFollowed,
    ProgramHost,
    ProgramPoint,
    _contexts,
    _Scope,
    _template_arguments,
    _template_types,
    read_launch,
)
from cuda_agent.agent.spec.program_sites import (
    Holder,
    constant_holder,
    launch_block_holders,
    read_site_holders,
)
from cuda_agent.agent.spec.resolve import complete_sizes, instantiation
from cuda_agent.agent.spec.validate import split_template_arguments
from tree_sitter import Node


class NotExpressible(Exception):
    """The expression uses something the launch site cannot state (an unknown size, an operation)."""


def site_config(spec: KernelSpec, kernel: Kernel, launch: LaunchSpec, site: LaunchSite) -> str | None:
    """The new text between `<<<` and `>>>` for `site` (its stream kept), or None when the launch cannot
    be written in the site's terms."""
    sizes = _sizes_at(spec, kernel, site.arguments)
    block = {name: str(value) for name, value in block_values(launch.block).items()}
    try:
        grid = [_bare(_cpp(dim, sizes, block)) for dim in launch.grid]
        written = str(launch.shared_bytes).strip()
        shared = _bare(_cpp(written, sizes, block)) if written != "0" else ""
    except NotExpressible:
        return None
    parts = [_dims(grid), _dims([str(b) for b in launch.block])]
    stream = site.config[3].strip() if len(site.config) > 3 else ""
    if shared or stream:
        parts.append(shared or "0")
    if stream:
        parts.append(stream)
    return ", ".join(parts)


def _bare(text: str) -> str:
    """Without enclosing parentheses, except around a conditional (`<` and `>` next to `<<<` read badly)."""
    return text[1:-1] if _enclosed(text) and "?" not in text else text


def _dims(values: list[str]) -> str:
    return values[0] if len(values) == 1 else f"dim3({', '.join(values)})"


def _sizes_at(spec: KernelSpec, kernel: Kernel, arguments: tuple[str, ...]) -> dict[str, str]:
    """Size name → the launch's expression for it (`arguments`: the call's, as written), from the scalar
    parameters that carry a size."""
    if len(arguments) != len(kernel.parameters):
        return {}
    carried: dict[str, str] = {}
    for index, parameter in enumerate(kernel.parameters):
        argument = spec.argument(parameter.name)
        value = str(argument.value).strip() if argument is not None and argument.value is not None else ""
        if argument is not None and argument.role == "scalar" and value in spec.sizes:
            carried.setdefault(value, _operand(arguments[index].strip()))
    # Sizes written as expressions of carried ones ("total = rows * cols") follow; a plain number is the
    # spec's benchmark value, not the program's, so it is not carried.
    for name, expression in spec.size_expressions.items():
        names = {n.id for n in ast.walk(_parsed(str(expression))) if isinstance(n, ast.Name)}
        names = names if name not in carried else set()
        if names and names <= carried.keys():
            carried[name] = _operand(_cpp(str(expression), carried, {}))
    return carried


def _operand(text: str) -> str:
    """`text` as an operand: a name or a number as it is, anything else in parentheses."""
    return text if text.isidentifier() or text.isdigit() or _enclosed(text) else f"({text})"


def _enclosed(text: str) -> bool:
    """Whether one pair of parentheses encloses the whole text."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and index < len(text) - 1:
            return False
    return True


def _parsed(expression: str) -> ast.AST:
    try:
        return ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return ast.parse("0", mode="eval")


def _cpp(expression: str, sizes: Mapping[str, str], block: Mapping[str, str]) -> str:
    """A spec expression (Python syntax: `ceil_div(n, block.x)`, `//`, `min`) as C++ integer code."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise NotExpressible(expression) from exc
    return _render(tree, sizes, block)


_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%",
              ast.LShift: "<<", ast.RShift: ">>"}  # fmt: skip
_FOLD = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
         ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
         ast.RShift: operator.rshift}  # fmt: skip


# Operators of one level associate left to right: a left operand of the same level needs no parentheses.
_LEVEL = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.FloorDiv: 2, ast.Mod: 2}


def _render(node: ast.expr, sizes: Mapping[str, str], block: Mapping[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return str(node.value)
    if isinstance(node, ast.Name) and node.id in sizes:
        return sizes[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        key = f"{node.value.id}.{node.attr}"
        if key in block:
            return block[key]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _render(node.left, sizes, block), _render(node.right, sizes, block)
        fold = _FOLD[type(node.op)]
        if (
            left.isdigit()
            and right.isdigit()
            and (right != "0" or fold not in (operator.floordiv, operator.mod))
        ):
            return str(fold(int(left), int(right)))  # 256 // 32 is written 8, as a person would
        if _LEVEL.get(type(node.op)) == _LEVEL.get(
            type(node.left.op) if isinstance(node.left, ast.BinOp) else None
        ):
            left = _bare(left)  # left to right: `(n + 255) - 1` is `n + 255 - 1`
        return f"({left} {_OPERATORS[type(node.op)]} {right})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return f"(-{_render(node.operand, sizes, block)})"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and len(node.args) == 2
        and not node.keywords
    ):
        a, b = (_render(arg, sizes, block) for arg in node.args)
        if node.func.id == "ceil_div":
            return f"(({a} + {b} - 1) / {b})"
        if node.func.id in ("min", "max"):
            # Not std::min: a .cu file need not include <algorithm>, and host code has no ::min for int.
            return f"({a} {'<' if node.func.id == 'min' else '>'} {b} ? {a} : {b})"
    raise NotExpressible(ast.unparse(node))


# -- writing every launch of a kernel in the user's terms --------------------------------------------------


@dataclass(frozen=True)
class SitesWritten:
    text: str  # the file with the kernel's launches written for the new launch
    notes: tuple[str, ...]  # one sentence per launch left as it was, with the reason
    launches: int = 0  # how many launches of the kernel the file holds


@dataclass(frozen=True)
class _Evaluated:
    block: tuple[int, ...]
    grid: tuple[int, ...]
    shared: int


Edits = dict[tuple[int, int], str]


def write_launch_sites(text: str, spec: KernelSpec, kernel_name: str, launch: LaunchSpec) -> SitesWritten:
    """`text` with every launch of `kernel_name` set to run `launch` (the spec's expressions, at each
    launch's own sizes), in the user's terms where the host code shows them."""
    reading = _Reading(text, kernel_name, spec)
    if reading.kernel is None or not reading.calls:
        return SitesWritten(text, ())
    launches = len(reading.calls)
    notes: list[str] = []
    planned: list[Edits] = []
    checked: set[int] = set()
    for index, (call, readings) in enumerate(zip(reading.calls, reading.points, strict=True)):
        line = call.start_point[0] + 1
        first = readings[0][1]
        own_block = replace(spec.launch, block=first.block) if not isinstance(first, str) else spec.launch
        if not isinstance(first, str) and not _runs(spec, reading.kernel, own_block, first):
            # Another workload of the same kernel (a second pass over the partial sums, grid 1), not the
            # spec's launch at its own sizes and block: what was measured says nothing about its launch.
            notes.append(f"the launch at line {line} runs it another way and was left as written")
            continue
        blocks = {point.block for _, point in readings if not isinstance(point, str)}
        if len(blocks) > 1:
            # `for (int block_size : block_sizes)` around the launch: the program tries blocks itself.
            tried = ", ".join("×".join(map(str, b)) for b in sorted(blocks))
            notes.append(
                f"the launch at line {line} was left as written: the program tries several blocks itself "
                f"({tried}); {'×'.join(map(str, launch.block))} was the fastest measured"
            )
            continue
        checked.add(index)
        # A launcher called from two places is one launch with two sets of values: both must work.
        remarks: list[str] = []
        plans = [_plan(spec, launch, reading, call, scope, point, remarks) for scope, point in readings]
        why = next((p for p in plans if isinstance(p, str)), None)
        if why is not None:
            notes.append(f"the launch at line {line} was left as written: {why}")
        else:
            merged: Edits = {}
            for plan in plans:
                merged.update(plan)  # type: ignore[arg-type]
            planned.append(merged)
            notes += dict.fromkeys(remarks)
    # Sites that share a holder (two launches using `threads`) must agree on its new text.
    chosen: Edits = {}
    for plan in planned:
        if any(chosen.get(span, new) != new for span, new in plan.items()):
            notes.append(
                "two launches would need different values in the same place; one was left as written"
            )
            continue
        chosen.update(plan)
    if not chosen:
        return SitesWritten(text, tuple(notes), launches)
    edited = _apply(text, chosen)
    wrong = _check(edited, spec, kernel_name, launch, checked)
    if wrong:
        return SitesWritten(text, (*notes, *wrong), launches)
    return SitesWritten(edited, tuple(notes), launches)


class _Reading:
    """The file's parse, host facts, the kernel, its launches (in file order) and what each says."""

    def __init__(self, text: str, kernel_name: str, spec: KernelSpec) -> None:
        self.text, self.spec = text, spec
        self.tree = parse_cuda(text)
        self.host = ProgramHost(self.tree, text.encode("utf-8"))
        self.kernel = next((k for k in find_kernels(text, self.tree) if k.name == kernel_name), None)
        self.calls = (
            sorted(self.host.launches(kernel_name), key=lambda c: c.start_byte) if self.kernel else []
        )
        self.points = [self._points(call) for call in self.calls]

    def declared_before(self, position: int, call: Node, text: str) -> bool:
        """Whether every name `text` uses that the launch can see is also declared before `position` (in
        the launching function, or at file level)."""
        function = self.host.function_around(call)
        if function is None:
            return False
        at_launch = _Scope(self.host, function, call.start_byte, None)
        above = _Scope(self.host, function, position, None)
        for name in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", text)):
            if at_launch.lookup(name) is not None and above.lookup(name) is None:
                return False
        return True

    def _points(self, call: Node) -> list[tuple[_Scope | None, ProgramPoint | str]]:
        """What the launch says in each chain of callers that reaches it (the first few)."""
        assert self.kernel is not None
        types = _template_types(self.kernel, call, self.host)
        found: list[tuple[_Scope | None, ProgramPoint | str]] = []
        for scope in _contexts(call, self.host):
            try:
                found.append((scope, read_launch(self.kernel, call, scope, self.host, types)))
            except NotFollowed as exc:
                found.append((scope, self._partial(call, scope, types) or str(exc)))
            if len(found) >= MAX_CONTEXTS:
                break
        return found or [(None, "it is not inside a function")]

    def _partial(self, call: Node, scope: _Scope, types: Mapping[str, str]) -> ProgramPoint | None:
        """The launch read with the sizes the program does not state (a launcher nothing calls, a tensor's
        `x.size(0)`) taken at the spec's values: its block, grid, shared memory and template arguments
        are still what the program writes over them."""
        assert self.kernel is not None
        try:
            point = read_launch(self.kernel, call, scope, self.host, types, partial=True)
        except NotFollowed:
            return None
        missing = {
            str(size): self.spec.sizes[str(size)]
            for name, size in point.scalars.items()
            if isinstance(size, str) and size not in point.sizes and str(size) in self.spec.sizes
        }
        return replace(point, sizes={**point.sizes, **missing})


MAX_CONTEXTS = 8


def _plan(
    spec: KernelSpec,
    launch: LaunchSpec,
    reading: _Reading,
    call: Node,
    scope: _Scope | None,
    point: ProgramPoint | str,
    remarks: list[str],
) -> Edits | str:
    """The edits that make one launch run `launch`, or why it cannot be changed safely; `remarks` gets
    what a person should know about an edit made (a launch given its own block)."""
    assert reading.kernel is not None
    if isinstance(point, str):
        return _literal_plan(spec, reading, call, launch) or f"its values cannot be read ({point})"
    sizes = _spec_sizes(spec, reading.kernel, point)
    new = _evaluate(launch.block, launch.grid, str(launch.shared_bytes), sizes)
    if new is None:
        return "the new launch uses sizes this launch does not pass"
    if _runs(spec, reading.kernel, launch, point, strict=True):
        return {}
    assert scope is not None
    holders = read_site_holders(reading.kernel.name, call, scope, reading.host)
    edits: Edits = {}
    own_block = False  # the block written at this launch alone: the constant it came from stays as it was
    if new.block != point.block:
        why = _block_edits(holders.block, new.block, edits) if holders.block else holders.why
        if why:
            at_launch, names_at_launch = launch_block_holders(reading.kernel.name, call, scope, reading.host)
            edits.clear()
            if _block_edits(at_launch, new.block, edits):
                return why or "the block is not a number the file states"
            holders = replace(holders, block=at_launch, block_names=names_at_launch)
            own_block = True
            remarks.append(f"the launch at line {call.start_point[0] + 1} got its own block ({why})")
    constants = _template_constants(spec, launch, reading, call, point)
    scalars = _scalar_constants(spec, launch, reading, call, point)
    if isinstance(constants, str):
        return constants
    if isinstance(scalars, str):
        return scalars
    why = _constant_edits([*constants, *scalars], reading, call, scope, edits)
    if why:
        return why
    names: list[str] = []
    for axis, value in enumerate(new.block):
        named = holders.block_names[axis] if axis < len(holders.block_names) else None
        names.append(named or str(value))
    block_terms = {f"block.{a}": names[i] if i < len(names) else "1" for i, a in enumerate("xyz")}
    # What the launch's own grid and shared memory become once the block has its new value (unless the
    # constant they are computed from stays as it was).
    kept = point.block if own_block else new.block
    grid_follows = _agrees(spec, reading.kernel, launch, point, kept, "grid")
    shared_follows = _agrees(spec, reading.kernel, launch, point, kept, "shared")
    at_site = _sizes_in_call(spec, reading.kernel, call, reading.host)
    try:
        literal_terms = {name: str(value) for name, value in block_values(new.block).items()}

        def written_at(holder: Holder, expression: str) -> str:
            """The expression in the launch's terms, with the block's names where they are declared
            before `holder` (a `dim3 grid(...)` above `dim3 block(...)` gets the block's numbers)."""
            text = _bare(_cpp(expression, at_site, block_terms))
            if holder.start < call.start_byte and not reading.declared_before(holder.start, call, text):
                text = _bare(_cpp(expression, at_site, literal_terms))
                if not reading.declared_before(holder.start, call, text):
                    raise NotExpressible(f"{text!r} above the launch")
            return text

        if not grid_follows:
            grid = [str(g) for g in launch.grid]
            while len(grid) > 1 and grid[-1] == "1" and len(holders.grid) == 1:
                grid.pop()
            if holders.grid_whole:
                holder = holders.grid[0]
                edits[(holder.start, holder.end)] = _dims([written_at(holder, g) for g in grid])
            elif len(holders.grid) >= len(grid):
                for axis, holder in enumerate(holders.grid):
                    edits[(holder.start, holder.end)] = (
                        written_at(holder, grid[axis]) if axis < len(grid) else "1"
                    )
            else:
                return "the grid's dim3 has fewer components than the new grid"
        if not shared_follows:
            if holders.shared is not None:
                shared = written_at(holders.shared, str(launch.shared_bytes))
                edits[(holders.shared.start, holders.shared.end)] = shared
            else:
                shared = _bare(_cpp(str(launch.shared_bytes), at_site, block_terms))
                edits[(holders.after_block, holders.after_block)] = f", {shared}"
    except NotExpressible as exc:
        return f"{exc} cannot be written in this launch's terms"
    return edits


def _instance(spec: KernelSpec, instantiate: str | None, block: tuple[int, ...]) -> str | None:
    """An instantiate (`k<block.x>` or `k<256>`) at `block`, spaces left out."""
    try:
        text = instantiation(replace(spec, instantiate=instantiate), block)
    except SpecResolveError:
        return None
    return "".join(text.split()) if text else None


def _same_instance(spec: KernelSpec, launch: LaunchSpec, point: ProgramPoint) -> bool:
    """Whether the launch instantiates what `launch` runs (always, for a kernel that is no template)."""
    if not spec.instantiate or not point.instantiate:
        return True
    return _instance(spec, spec.instantiate, launch.block) == _instance(spec, point.instantiate, point.block)


# A value the launch passes that must change with the block: its expression at the launch, the new
# value, and what it is (for a message).
Constant = tuple[Node, str, str]


def _template_constants(
    spec: KernelSpec, launch: LaunchSpec, reading: _Reading, call: Node, point: ProgramPoint
) -> list[Constant] | str:
    """The launch's template arguments that must change with the block (`k<256><<<g, 256>>>`, or
    `k<kBlock>` with its own constant); or why they cannot."""
    if _same_instance(spec, launch, point) or not spec.instantiate:
        return []
    wanted = _instance(spec, spec.instantiate, launch.block)
    if wanted is None:
        return "the new instantiation cannot be evaluated"
    values = split_template_arguments(wanted.partition("<")[2][:-1])
    given = _template_arguments(call.child_by_field_name("function"))
    if len(given) != len(values):
        return "the launch's template arguments are not all written"
    kinds = [p.kind for p in reading.kernel.template_parameters] if reading.kernel else []
    return [
        (
            argument.named_children[0] if argument.type == "type_descriptor" else argument,
            value,
            "a template argument",
        )
        for index, (argument, value) in enumerate(zip(given, values, strict=True))
        if index >= len(kinds) or kinds[index] != "type"
    ]


def _block_scalars(
    spec: KernelSpec, launch: LaunchSpec, point: ProgramPoint, kernel: Kernel
) -> dict[str, int]:
    """Parameter → the value `launch` gives it, for the integer scalars that follow the block (`value =
    "block.x"`: a tile width, a block size passed as an argument), at the point's sizes."""
    sizes = _spec_sizes(spec, kernel, point)
    values = {**sizes, **block_values(launch.block)}
    wanted = {}
    for argument in spec.arguments:
        if argument.role != "scalar" or not isinstance(argument.value, str) or "block" not in argument.value:
            continue
        try:
            wanted[argument.name] = evaluate(argument.value, values, allow_block=True)
        except (ExpressionError, ArithmeticError):
            continue
    return wanted


def _scalar_values(point: ProgramPoint, names: Iterable[str]) -> dict[str, int | float | str | None]:
    """What the launch passes for these scalar parameters, as numbers where the program states them."""
    found: dict[str, int | float | str | None] = {}
    for name in names:
        value = point.scalars.get(name)
        found[name] = point.sizes.get(value) if isinstance(value, str) else value
    return found


def _scalar_constants(
    spec: KernelSpec, launch: LaunchSpec, reading: _Reading, call: Node, point: ProgramPoint
) -> list[Constant] | str:
    """The launch's arguments for scalars that follow the block, with the new block's values."""
    assert reading.kernel is not None
    wanted = _block_scalars(spec, launch, point, reading.kernel)
    if not wanted or _scalar_values(point, wanted) == wanted:
        return []
    listed = call.child_by_field_name("arguments")
    arguments = [a for a in listed.named_children if a.type != "comment"] if listed is not None else []
    index = {p.name: i for i, p in enumerate(reading.kernel.parameters)}
    if any(index[name] >= len(arguments) for name in wanted):
        return "the launch does not pass every argument"
    return [(arguments[index[name]], str(value), name) for name, value in wanted.items()]


def _constant_edits(
    constants: list[Constant], reading: _Reading, call: Node, scope: _Scope, edits: Edits
) -> str | None:
    """Each value written where its constant is held (a literal at the launch, a local's initializer),
    into `edits`; or why one cannot be changed with this kernel's launch."""
    kernel = reading.kernel.name if reading.kernel else ""
    for node, value, what in constants:
        found = constant_holder(kernel, call, node, scope, reading.host)
        if isinstance(found, str):
            return found
        span = (found.start, found.end)
        if edits.get(span, value) != value:
            return f"{found.owner} sets both the block and {what}, to different values"
        if reading.host.data[found.start : found.end].decode("utf-8", "replace").strip() != value:
            edits[span] = value
    return None


def _block_edits(holders: tuple[Holder, ...], block: tuple[int, ...], edits: Edits) -> str | None:
    """Each axis's new value at its holder, into `edits`; or why that cannot be done."""
    if any(b != 1 for b in block[len(holders) :]):
        return f"the program writes a {len(holders)}-D block and the new one is {len(block)}-D"
    for axis, holder in enumerate(holders):
        if edits.get((holder.start, holder.end), str(block[axis])) != str(block[axis]):
            return f"two axes of the block come from {holder.owner}"
        edits[(holder.start, holder.end)] = str(block[axis])
    return None


def _literal_plan(spec: KernelSpec, reading: _Reading, call: Node, launch: LaunchSpec) -> Edits | None:
    """The older way, where the host code cannot be read: the whole configuration in the call's terms."""
    assert reading.kernel is not None
    site = next(
        (s for s in find_launch_sites(reading.text, reading.tree) if s.span.start_byte == call.start_byte),
        None,
    )
    if site is None:
        return None
    config = site_config(spec, reading.kernel, launch, site)
    if config is None:
        return None
    return {(site.config_span.start_byte, site.config_span.end_byte): config}


def _spec_sizes(spec: KernelSpec, kernel: Kernel, point: ProgramPoint) -> dict[str, int]:
    """The spec's sizes at one launch: those its scalar parameters carry, the rest as the spec says."""
    carried: dict[str, int] = {}
    for parameter in kernel.parameters:
        argument = spec.argument(parameter.name)
        at_launch = point.scalars.get(parameter.name)
        if (
            argument is not None
            and argument.role == "scalar"
            and isinstance(argument.value, str)
            and argument.value in spec.sizes
            and isinstance(at_launch, str)
            and at_launch in point.sizes
        ):
            carried[argument.value] = point.sizes[at_launch]
    if spec.inferred:  # inferred from this program: the same names
        carried = {**{k: v for k, v in point.sizes.items() if k in spec.sizes}, **carried}
    try:
        return complete_sizes(spec, carried)
    except SpecResolveError:
        return carried


def _evaluate(
    block: tuple[int, ...],
    grid: tuple[str, ...] | tuple[int | str, ...],
    shared: str,
    sizes: Mapping[str, int],
) -> _Evaluated | None:
    values = {**sizes, **block_values(tuple(block))}
    try:
        dims = tuple(evaluate(g, values, allow_block=True) for g in grid)
        shared_value = evaluate(shared, values, allow_block=True)
    except (ExpressionError, ArithmeticError):
        return None
    return _Evaluated(tuple(block) + (1,) * (3 - len(block)), dims + (1,) * (3 - len(dims)), shared_value)


def _sizes_in_call(spec: KernelSpec, kernel: Kernel, call: Node, host: ProgramHost) -> dict[str, str]:
    """Size name → the launch's argument text that carries it."""
    listed = call.child_by_field_name("arguments")
    arguments = [host.text(a) for a in listed.named_children if a.type != "comment"] if listed else []
    return _sizes_at(spec, kernel, tuple(arguments))


def _apply(text: str, edits: Edits) -> str:
    data = text.encode("utf-8")
    for (start, end), new in sorted(edits.items(), reverse=True):
        data = data[:start] + new.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def _runs(
    spec: KernelSpec, kernel: Kernel, launch: LaunchSpec, point: ProgramPoint, strict: bool = False
) -> bool:
    """Whether the launch `point` read runs `launch` (the spec's expressions at the point's sizes, at
    several sizes where the program does not state them). Where the spec cannot be evaluated there: True,
    or with `strict`, False."""
    for variant in _variants(spec, point):
        wanted = _evaluate(
            launch.block, launch.grid, str(launch.shared_bytes), _spec_sizes(spec, kernel, variant)
        )
        if wanted is None:
            return not strict
        if wanted != _evaluate(variant.block, variant.grid, variant.shared_bytes, variant.sizes):
            return False
        scalars = _block_scalars(spec, launch, variant, kernel)
        if _scalar_values(variant, scalars) != scalars:
            return False
    return _same_instance(spec, launch, point)


def _agrees(
    spec: KernelSpec,
    kernel: Kernel,
    launch: LaunchSpec,
    point: ProgramPoint,
    block: tuple[int, ...],
    part: str,
) -> bool:
    """Whether the launch's own grid (or shared memory), with `block`, is `launch`'s at every size."""
    for variant in _variants(spec, point):
        wanted = _evaluate(
            launch.block, launch.grid, str(launch.shared_bytes), _spec_sizes(spec, kernel, variant)
        )
        own = _evaluate(block, variant.grid, variant.shared_bytes, variant.sizes)
        if wanted is None or own is None or getattr(wanted, part) != getattr(own, part):
            return False
    return True


SAMPLE_FACTORS = (1.0, 7.0, 0.3, 31.0)


def _variants(spec: KernelSpec, point: ProgramPoint) -> list[ProgramPoint]:
    """The point itself where the program states its sizes; where it does not (a launcher nothing calls)
    the point at the spec's sizes and at a few others, so that two expressions that only agree at one
    size (a grid capped at 1056 blocks) are not taken for the same."""
    if not point.unknown:
        return [point]
    parameters = {reason.split(":", 1)[0] for reason in point.unknown}
    unknown = {str(point.scalars[p]) for p in parameters if isinstance(point.scalars.get(p), str)}
    variants = []
    for factor in SAMPLE_FACTORS:
        sizes = {k: (max(1, int(v * factor)) if k in unknown else v) for k, v in point.sizes.items()}
        variants.append(replace(point, sizes=sizes))
    return variants


def _check(
    edited: str, spec: KernelSpec, kernel_name: str, launch: LaunchSpec, checked: set[int]
) -> list[str]:
    """Read the edited file again: every launch that ran the spec's workload and can be read must now run
    `launch` at its sizes."""
    reading = _Reading(edited, kernel_name, spec)
    assert reading.kernel is not None
    wrong = []
    for index, (call, readings) in enumerate(zip(reading.calls, reading.points, strict=True)):
        point = readings[0][1]
        if isinstance(point, str) or index not in checked:
            continue
        if not _runs(spec, reading.kernel, launch, point):
            wrong.append(
                f"the launch at line {call.start_point[0] + 1} would not run the measured launch once "
                "edited, so no launch was changed"
            )
    return wrong
