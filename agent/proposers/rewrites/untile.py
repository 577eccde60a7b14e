"""A matmul tiled through shared memory -> the contraction its tiles stage, tiled better by `contraction`.

The CUDA guide's tiled matmul, where most course code starts: each thread of a T x T block stores one
element of each operand's tile per phase (`As[ty][tx] = A[row * K + ph * T + tx]`, 0 past the edge), the
block waits, each thread sums its row of one tile times its column of the other, the block waits again.
It reaches about a quarter of the fp32 peak; the register-blocked, double-buffered GEMM of `contraction`
about three quarters, but that rewrite reads only the thread-per-output form `acc += A[f(k)] * B[g(k)]`.

Read through the stores, a tile element is what the thread at its position stored: `As[ty][k]` is the
stored value with the storing thread's x index replaced by k, `A[row * K + ph * T + k]`, and 0 where the
store's guard `ph * T + tx < K` failed, now `ph * T + k < K`. With kk = ph * T + k the phases and the
inner loop are one loop over kk < K, the guards on the output (`row < M`) already implied by the final
bounds check. The kernel is written back as that thread-per-output contraction, in the user's names and
under the user's own check and store, and `contraction`'s candidates for it are returned.

Offered only where every step is proven on the tree and the analysis's forms: a block of exactly the
tiles' shape, each tile stored once a phase by every thread at its own position, read only at thread
positions and the inner loop's index, both barriers in place, the inner loop one sum of two tile
elements, every guard a bound on kk or on an output the final check bounds, and the phases covering kk.

The textbook's first version checks no bounds at all (`ph < Width / TILE_WIDTH`, the store unguarded):
it is right only where its one size is a multiple of the tile. For a square whose phases count exactly
Width / T, the rewrite assumes that (and says so in the candidate) and writes the naive kernel with the
check the original leaves out, which changes nothing where the assumption holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.facts import GuardBound, Loop
from cuda_agent.agent.analysis.forms import THREAD_ATOMS, Atoms, Form
from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.values import Pointer, Values, text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import replace_span
from cuda_agent.agent.proposers.rewrites import contraction
from cuda_agent.agent.proposers.tree import (
    ZERO_LITERALS,
    KernelTree,
    arguments,
    declared_names,
    identifiers,
    is_barrier,
    line_indent,
    operands,
    reindent,
    single_declaration,
    statements,
    walk,
)
from cuda_agent.agent.targets import KernelTarget, load_targets
from tree_sitter import Node

PROPOSER = "rewrite:untile"
PREFIX = "the shared-memory tiles read as the product they stage; "
# Atoms for the reading thread's output row and col and for the merged depth index kk = ph * T + k.
_ROW, _COL, _DEPTH = "@row", "@col", "@depth"
_FMA = frozenset({"fmaf", "fma", "__fmaf_rn"})
_CEIL = frozenset({"ceil", "ceilf"})
# Calls a dropped or re-read declaration may make: they compute a value and nothing else.
_PURE = _CEIL | {"floor", "floorf", "min", "max", "fminf", "fmaxf", "__ldg"}


class _Unsupported(Exception):
    """Not this shape, or not provably the same results; the message says why (for debugging)."""


@dataclass(frozen=True)
class _Tile:
    """A `__shared__` 2-D array and the one store each thread makes to it a phase."""

    shape: tuple[int, int]
    axes: tuple[str, str] = ("", "")  # the thread axis each index is stored at: [threadIdx.y][threadIdx.x]
    value: Node | None = None  # what is stored where the guard holds (0 elsewhere)
    guard: Node | None = None


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        body, assumptions = _Untiled(tree, facts).body()
    except _Unsupported:
        return []
    naive = _as_target(target, body)
    if naive is None:
        return []
    return [
        replace(
            candidate,
            description=PREFIX + candidate.description,
            proposer=PROPOSER,
            assumptions=(*assumptions, *candidate.assumptions),
        )
        for candidate in contraction.propose(naive)
    ]


def _as_target(target: KernelTarget, body: str) -> KernelTarget | None:
    """The file with the kernel's body replaced, read again as a target with the original's spec."""
    source = replace_span(target.source, target.kernel.body_span, body)
    reread = load_targets(target.path, source, infer=False).find(target.kernel.name)
    if reread is None or reread.kernel.has_errors:
        return None
    return replace(reread, spec=target.spec)


class _Untiled:
    """The tiled kernel read as the contraction it computes (see the module's docstring)."""

    def __init__(self, tree: KernelTree, facts: KernelFacts) -> None:
        assert tree.target.spec is not None
        block = tree.target.spec.launch.block
        if len(block) < 2 or any(b != 1 for b in block[2:]):
            raise _Unsupported("not a 2-D block of threads")
        self.tree, self.facts = tree, facts
        self.block = {"x": block[0], "y": block[1]}
        parameters = tree.target.kernel.parameters
        self.sizes = frozenset(p.name for p in parameters if not p.is_pointer)
        self.pointers = frozenset(p.name for p in parameters if p.is_pointer)
        self.values = Values(Atoms(), kernel_definitions(tree), self.pointers)
        self.locals = declared_names(tree.body, tree)
        self.mutable = assigned_names(tree.body)
        self.declared: dict[str, Node] = {}  # each local's value as written, for the phase count
        self.tiles: dict[str, _Tile] = {}
        self.assumptions: list[str] = []
        # set as the kernel is read: the inner loop's variable (also the merged loop's: it is free once the
        # tiles are gone) and what it is in kk, the names to write
        self.k, self.k_is = "", Form()
        self.names: dict[str, str] = {}
        self.accumulator_declaration: Node | None = None

    # -- the kernel's shape ----------------------------------------------------------------------------

    def body(self) -> tuple[str, tuple[str, ...]]:
        """The naive kernel's body, and what it assumes beyond the tiled one."""
        guard = self.facts.guard
        top = _code(self.tree.body)
        last = top[-1] if len(top) >= 2 else None
        checked = guard is not None and not guard.early_return and last == guard.statement
        # A textbook's first tiled matmul checks no bounds: the store alone after the phases.
        unchecked = guard is None and last is not None and last.type == "expression_statement"
        if not (checked or unchecked):
            raise _Unsupported("no bounds check, or more than the store, after the phases")
        phases_node = top[-2]
        declarations = top[:-2]
        if any(s.type != "declaration" for s in declarations):
            raise _Unsupported("a statement other than declarations before the phases")
        for declaration in declarations:
            if _is_shared(declaration):
                self._declare_tiles(declaration)
            else:
                self._bind(declaration)
        if not self.tiles:
            raise _Unsupported("no shared tiles")
        final = statements(guard.statement.child_by_field_name("consequence")) if guard else [top[-1]]
        checks = [b.index for b in guard.bounds] if guard is not None else sorted(identifiers(top[-1]))
        row, col = self._owners(checks)
        phases = self._loop(phases_node)
        if phases.start.value() != 0:
            raise _Unsupported("the phases do not start at 0")
        stores, inner_node = self._phase_body(phases)
        inner = self._loop(inner_node)
        depth = inner.bound.value()
        if inner.start.value() != 0 or inner.step.value() != 1 or depth is None:
            raise _Unsupported("the inner loop does not count from 0 to a constant")
        if {phases.variable, inner.variable} & (self.sizes | self.pointers):
            raise _Unsupported("a loop variable that shadows a parameter")
        step = phases.step.value()
        if step not in (1, depth):
            raise _Unsupported("the phases advance neither by 1 nor by the tile")
        self.k = inner.variable
        # kk = ph * T + k for phases counted one by one; kk = t + k for phases counted in elements
        self.k_is = Form.atom(_DEPTH) - Form.atom(phases.variable) * Form.constant(depth if step == 1 else 1)
        self._check_stores(stores)
        accumulator, left, right = self._accumulation(inner)
        self._check_names(phases, inner, accumulator, {row, col}, final)
        self.names = {_ROW: row, _COL: col, _DEPTH: inner.variable}
        reads = [self._read(read, inner.variable, depth) for read in (left, right)]
        factors = [self._value(tile, read) for tile, read in reads]
        if guard is None:
            extent = self._whole_tiles(phases, step, depth, [tile for tile, _ in reads])
            condition = f"{row} < {self._spelled(extent)} && {col} < {self._spelled(extent)}"
            return self._written(condition, final, accumulator, factors, extent), tuple(self.assumptions)
        bounds = {_ROW: guard.bound_of(row), _COL: guard.bound_of(col)}
        depth_bounds = [self._depth_bound(tile, read, bounds) for tile, read in reads]
        bound = depth_bounds[0]
        if any(b != bound for b in depth_bounds) or not self._covers(phases_node, step, depth, bound):
            raise _Unsupported("the phases do not cover the depth, or the tiles bound it differently")
        condition_node = guard.statement.child_by_field_name("condition")
        assert condition_node is not None
        condition = self.tree.text(condition_node.named_children[0])
        return self._written(condition, final, accumulator, factors, bound), tuple(self.assumptions)

    def _whole_tiles(self, phases: Loop, step: int, depth: int, tiles: list[_Tile]) -> Form:
        """For a kernel that checks no bounds: n, when the phases count `n / T` one at a time, every tile
        is loaded unguarded and the kernel has the one size n (a square). It is right only where n is a
        multiple of T (elsewhere it reads and writes past the matrices), which the rewrite then assumes;
        the naive kernel checks its bounds, so the assumption costs nothing where it holds."""
        if step != 1 or any(tile.guard is not None for tile in tiles) or len(self.sizes) != 1:
            raise _Unsupported("an unchecked kernel other than a square's whole tiles")
        condition = phases.node.child_by_field_name("condition")
        compared = unwrap(condition) if condition is not None else None
        operator = compared.child_by_field_name("operator") if compared is not None else None
        written = compared.child_by_field_name("right") if compared is not None else None
        if written is None or operator is None or operator.type != "<":
            raise _Unsupported("the phases of an unchecked kernel are not counted as `ph < n / T`")
        count = self.values.form(written)  # in this reading's atoms, whose quotients it can take apart
        atom = next(iter(count.atoms()), "") if len(count.terms) == 1 else ""
        split = self.values.atoms.splits.get(atom)
        if split is None or count.coefficient(atom) != Form.constant(1) or split[1].value() != depth:
            raise _Unsupported("the phases of an unchecked kernel are not n / T")
        (side,) = self.sizes
        if split[0] != Form.atom(side):
            raise _Unsupported("the phases of an unchecked kernel do not count the square's side")
        self.assumptions.append(
            f"{side} is a multiple of {depth}, the tile (the original reads past its matrices otherwise)"
        )
        return split[0]

    def _declare_tiles(self, declaration: Node) -> None:
        type_node = declaration.child_by_field_name("type")
        if type_node is None or text(type_node) != "float":
            raise _Unsupported("a shared array that is not float")
        for declarator in declaration.children_by_field_name("declarator"):
            sizes = []
            while declarator.type == "array_declarator":
                size = declarator.child_by_field_name("size")
                inner = declarator.child_by_field_name("declarator")
                if size is None or inner is None:
                    raise _Unsupported("a shared array without a size")
                sizes.insert(0, self.values.form(size).value())
                declarator = inner
            if declarator.type != "identifier" or len(sizes) != 2 or None in sizes:
                raise _Unsupported("a shared array that is not a 2-D tile of constant shape")
            self.tiles[text(declarator)] = _Tile((sizes[0] or 0, sizes[1] or 0))

    def _bind(self, declaration: Node) -> None:
        """Record the values of the declaration's locals (each set once, with no effect)."""
        for node in walk(declaration):
            function = node.child_by_field_name("function") if node.type == "call_expression" else None
            called = text(function) if function is not None else ""
            if node.type in ("assignment_expression", "update_expression") or (
                called and called not in _PURE
            ):
                raise _Unsupported("a declaration with an effect")
        for declarator in declaration.children_by_field_name("declarator"):
            if declarator.type != "init_declarator":
                continue
            target = declarator.child_by_field_name("declarator")
            value = declarator.child_by_field_name("value")
            if target is None or value is None or value.type == "initializer_list":
                continue
            name = target.child_by_field_name("declarator") if target.type == "pointer_declarator" else target
            if name is None or name.type != "identifier" or text(name) in self.mutable:
                continue
            self.declared[text(name)] = value
            if target.type == "pointer_declarator":
                place = self.values.place(value)
                if place is not None:
                    self.values.bindings[text(name)] = place
            else:
                self.values.bindings[text(name)] = self.values.form(value)

    def _owners(self, names: list[str]) -> tuple[str, str]:
        """Of these locals (those the final check bounds, or the store reads), the thread's global row
        and col."""
        found = {}
        for name in names:
            value = self.values.bindings.get(name)
            for axis in "xy":
                expected = Form.atom(f"blockIdx.{axis}") * Form.constant(self.block[axis]) + Form.atom(
                    f"threadIdx.{axis}"
                )
                if isinstance(value, Form) and self._pinned(value) == expected:
                    found.setdefault(axis, name)
        if set(found) != {"x", "y"}:
            raise _Unsupported("the final check does not bound the global row and col")
        return found["y"], found["x"]

    def _loop(self, node: Node) -> Loop:
        loop = next((loop for loop in self.facts.loops if loop.node == node), None)
        if loop is None:
            raise _Unsupported("not a counted loop")
        return loop

    def _phase_body(self, phases: Loop) -> tuple[list[Node], Node]:
        """(the statements before the first barrier, the inner loop between the barriers)."""
        body = _code(phases.body)
        barriers = [n for n, s in enumerate(body) if is_barrier(s, self.tree)]
        if len(barriers) != 2 or barriers[1] != len(body) - 1 or barriers[0] != len(body) - 3:
            raise _Unsupported("not stores, a barrier, one loop and a barrier")
        inner = body[-2]
        if inner.type != "for_statement":
            raise _Unsupported("not one loop between the barriers")
        return body[: barriers[0]], inner

    # -- the stores ------------------------------------------------------------------------------------

    def _check_stores(self, before: list[Node]) -> None:
        """Each tile stored once by every thread at its own position: `S[ty][tx] = E;`, guarded by
        `if (g) ... else S[ty][tx] = 0;`, `S[ty][tx] = g ? E : 0;` or a 0 stored first."""
        stored: dict[str, list[tuple[tuple[str, str], Node, Node | None]]] = {}
        for statement in before:
            if statement.type == "declaration" and not _is_shared(statement):
                self._bind(statement)
                continue
            if statement.type == "expression_statement":
                name, axes, value = self._store(statement)
                stored.setdefault(name, []).append((axes, value, None))
                continue
            if statement.type != "if_statement":
                raise _Unsupported("a statement before the barrier that is not a tile's store")
            condition = statement.child_by_field_name("condition")
            consequence = statement.child_by_field_name("consequence")
            alternative = statement.child_by_field_name("alternative")
            if condition is None or consequence is None or not condition.named_children:
                raise _Unsupported("an if without a condition")
            branch = statements(consequence)
            if len(branch) != 1:
                raise _Unsupported("a guarded branch that does more than store")
            name, axes, value = self._store(branch[0])
            if alternative is not None:
                otherwise = [s for s in alternative.named_children if s.type != "comment"]
                if len(otherwise) == 1:
                    otherwise = statements(otherwise[0])
                if len(otherwise) != 1 or self._store(otherwise[0])[:2] != (name, axes):
                    raise _Unsupported("the else branch stores elsewhere")
                if not _is_zero(self._store(otherwise[0])[2]):
                    raise _Unsupported("the else branch stores something other than 0")
            elif not (stored.get(name) and _is_zero(stored[name][-1][1]) and stored[name][-1][0] == axes):
                raise _Unsupported("a guarded store without a 0 where the guard fails")
            else:
                stored[name].pop()
            stored.setdefault(name, []).append((axes, value, condition.named_children[0]))
        if set(stored) != set(self.tiles) or any(len(s) != 1 for s in stored.values()):
            raise _Unsupported("a tile not stored, or stored more than once")
        for name, ((axes, value, guard),) in stored.items():
            node = unwrap(value)
            if node.type == "conditional_expression" and guard is None:
                alternative = node.child_by_field_name("alternative")
                if alternative is None or not _is_zero(alternative):
                    raise _Unsupported("a conditional store of something other than 0")
                guard, value = node.child_by_field_name("condition"), node.child_by_field_name("consequence")
            assert value is not None
            self.tiles[name] = replace(self.tiles[name], axes=axes, value=value, guard=guard)

    def _store(self, statement: Node) -> tuple[str, tuple[str, str], Node]:
        """`S[i][j] = value;` with i and j thread indices along different axes, inside the tile (a tile may
        be padded: `As[T][T + 1]`)."""
        expression = unwrap(statement.named_children[0]) if statement.named_children else statement
        operator = expression.child_by_field_name("operator")
        left, value = expression.child_by_field_name("left"), expression.child_by_field_name("right")
        if statement.type != "expression_statement" or expression.type != "assignment_expression":
            raise _Unsupported("not a store")
        if operator is None or operator.type != "=" or left is None or value is None:
            raise _Unsupported("not a plain store")
        name, indices = self._tile_element(left)
        axes = tuple(self._thread_axis(i) for i in indices)
        tile = self.tiles[name]
        if axes[0] == axes[1] or any(self.block[a] > n for a, n in zip(axes, tile.shape, strict=True)):
            raise _Unsupported("a tile not stored at the thread's own position")
        return name, (axes[0], axes[1]), value

    def _tile_element(self, node: Node) -> tuple[str, tuple[Node, Node]]:
        """`S[i][j]` of a tile -> (S, (i, j))."""
        node = unwrap(node)
        found: list[Node] = []
        while node.type == "subscript_expression":
            index, node = node.child_by_field_name("indices"), node.child_by_field_name("argument")
            named = [c for c in index.named_children if c.type != "comment"] if index is not None else []
            if node is None or len(named) != 1:
                raise _Unsupported("not a tile's element")
            found.insert(0, named[0])
            node = unwrap(node)
        if node.type != "identifier" or text(node) not in self.tiles or len(found) != 2:
            raise _Unsupported("not a tile's element")
        return text(node), (found[0], found[1])

    def _thread_axis(self, index: Node) -> str:
        form = self._pinned(self.values.form(index))
        axis = next((a for a in "xy" if form == Form.atom(f"threadIdx.{a}")), None)
        if axis is None:
            raise _Unsupported("a tile index that is not a thread's")
        return axis

    # -- the inner loop --------------------------------------------------------------------------------

    def _accumulation(self, inner: Loop) -> tuple[str, Node, Node]:
        """`acc += S1[..] * S2[..]` (or `acc = acc + ...`, `acc = fmaf(S1[..], S2[..], acc)`) -> (acc,
        the two tile elements)."""
        body = _code(inner.body)
        if len(body) != 1 or body[0].type != "expression_statement" or not body[0].named_children:
            raise _Unsupported("the inner loop does more than one sum")
        expression = unwrap(body[0].named_children[0])
        left, operator, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
        if expression.type != "assignment_expression" or left is None or operator is None or right is None:
            raise _Unsupported("the inner loop is not a sum")
        left, right = unwrap(left), unwrap(right)
        if left.type != "identifier":
            raise _Unsupported("the sum is not kept in a local")
        accumulator = text(left)
        product: list[Node] | None = None
        if operator.type == "+=":
            product = operands(right, "*")
        elif operator.type == "=" and right.type == "binary_expression":
            plus = right.child_by_field_name("operator")
            a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
            if plus is not None and plus.type == "+" and a is not None and b is not None:
                for mine, other in ((a, b), (b, a)):
                    if unwrap(mine).type == "identifier" and text(unwrap(mine)) == accumulator:
                        product = operands(other, "*")
        elif operator.type == "=" and right.type == "call_expression":
            function = right.child_by_field_name("function")
            args = arguments(right)
            called = text(function) if function is not None else ""
            if called in _FMA and len(args) == 3 and text(unwrap(args[2])) == accumulator:
                product = args[:2]
        if product is None or len(product) != 2:
            raise _Unsupported("not a sum of products of two tile elements")
        return accumulator, product[0], product[1]

    def _check_names(
        self, phases: Loop, inner: Loop, accumulator: str, owners: set[str], final: list[Node]
    ) -> None:
        """Locals set once, but for the sum and the two loops' variables; the sum declared with its
        identity; and after the phases, only the output's indices and the sum used."""
        if self.mutable - {accumulator, phases.variable, inner.variable}:
            raise _Unsupported("a local set more than once")
        declaration = next(
            (
                s
                for s in _code(self.tree.body)
                if s.type == "declaration" and accumulator in declared_names(s, self.tree)
            ),
            None,
        )
        single = single_declaration(declaration, self.tree) if declaration is not None else None
        zero = single[2] is not None and _zero_initialiser(text(single[2])) if single is not None else False
        if single is None or not zero:
            raise _Unsupported("the sum is not declared alone, from 0, before the phases")
        if single[0] != "float":
            raise _Unsupported("the sum is not a float, as the tiles are")
        self.accumulator_declaration = declaration
        guard = self.facts.guard
        after = [guard.statement] if guard is not None else final
        if set().union(*(identifiers(node) for node in after)) & self.locals - owners - {accumulator}:
            raise _Unsupported("the final store uses other locals")

    def _read(self, node: Node, k: str, depth: int) -> tuple[_Tile, dict[str, Form]]:
        """A tile element read in the inner loop -> (the tile, what each storing thread index is there)."""
        name, indices = self._tile_element(node)
        tile = self.tiles[name]
        reads: dict[str, Form] = {}
        for index, axis in zip(indices, tile.axes, strict=True):
            form = self._pinned(self.values.form(index))
            extent = depth if form == Form.atom(k) else self.block[self._thread_axis(index)]
            if extent != self.block[axis]:
                raise _Unsupported("a tile read over another extent than the threads stored it")
            reads[f"threadIdx.{axis}"] = form
        return tile, reads

    # -- reading through the stores --------------------------------------------------------------------

    def _translated(self, form: Form, reads: dict[str, Form]) -> Form:
        """A form the storing thread evaluated, as the reading thread sees it: the storing thread's
        indices replaced by the read's, k by kk less the phase's start, the reader's indices by its row
        and col. Only the sizes and those three may remain."""
        form = self._pinned(form)
        for axis in "xy":
            form = form.substitute(f"threadIdx.{axis}", Form.atom(f"@thread.{axis}"))
        for axis in "xy":
            form = form.substitute(f"@thread.{axis}", reads[f"threadIdx.{axis}"])
        form = form.substitute(self.k, self.k_is)
        for axis, owner in (("y", _ROW), ("x", _COL)):
            block = Form.atom(f"blockIdx.{axis}") * Form.constant(self.block[axis])
            form = form.substitute(f"threadIdx.{axis}", Form.atom(owner) - block)
        if form.atoms() - self.sizes - {_ROW, _COL, _DEPTH}:
            raise _Unsupported(f"{form.text()} is not in the output's indices, kk and the sizes")
        return form

    def _value(self, tile: _Tile, reads: dict[str, Form]) -> str:
        """The tile element's value in the reading thread's terms: each load re-indexed."""
        assert tile.value is not None

        def substitute(node: Node) -> str | None:
            if node.type == "subscript_expression":
                place = self.values.subscript_place(node)
                if isinstance(place, Pointer) and place.base in self.pointers:
                    return f"{place.base}[{self._spelled(self._translated(place.offset, reads))}]"
            if node.type == "identifier" and text(node) in self.locals:
                raise _Unsupported(f"the stored value reads the local {text(node)}")
            if node.type == "field_expression" and text(node).replace(" ", "") in THREAD_ATOMS:
                raise _Unsupported("the stored value reads a thread index outside a load")
            return None

        written = self.tree.substituted(tile.value, substitute)
        simple = unwrap(tile.value).type in ("subscript_expression", "call_expression", "identifier")
        return written if simple or tile.value.type == "parenthesized_expression" else f"({written})"

    def _depth_bound(self, tile: _Tile, reads: dict[str, Form], bounds: dict[str, GuardBound | None]) -> Form:
        """The bound the store's guard puts on kk; its other conjuncts must bound the output as the final
        check does."""
        found: list[Form] = []
        parts = operands(tile.guard, "&&") if tile.guard is not None else []
        for part in parts:
            holds = self._translated(self._positive(part), reads)  # the conjunct holds where this is > 0
            owners = holds.atoms() & {_ROW, _COL, _DEPTH}
            if not owners and (holds.value() or 0) > 0:
                continue
            if len(owners) != 1:
                raise _Unsupported("a guard on more than one index")
            (owner,) = owners
            bound = holds + Form.atom(owner)
            if holds.coefficient(owner) != Form.constant(-1) or owner in bound.atoms():
                raise _Unsupported("a guard that is not an upper bound")
            if owner == _DEPTH:
                found.append(bound)
            else:
                checked = bounds[owner]
                if checked is None or checked.bound != bound:
                    raise _Unsupported("a guard on the output that the final check does not imply")
        if not found or any(b != found[0] for b in found):
            raise _Unsupported("a tile whose store does not bound kk")
        return found[0]

    def _positive(self, comparison: Node) -> Form:
        """`a < b` -> b - a, and so on: the comparison holds where the form is positive (integers)."""
        node = unwrap(comparison)
        operator = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if node.type != "binary_expression" or operator is None or left is None or right is None:
            raise _Unsupported("a guard that is not a comparison")
        a, b = self.values.form(left), self.values.form(right)
        one = Form.constant(1)
        differences = {"<": b - a, "<=": b - a + one, ">": a - b, ">=": a - b + one}
        if operator.type not in differences:
            raise _Unsupported("a guard that is not an inequality")
        return differences[operator.type]

    def _covers(self, phases: Node, step: int, depth: int, bound: Form) -> bool:
        """Whether the phases reach kk = bound - 1: `ph < (K + T - 1) / T` (or `(K - 1) / T + 1`,
        `ceil(K / (float)T)`) one phase at a time; `t < K` a tile's width at a time."""
        condition = phases.child_by_field_name("condition")
        node = unwrap(condition) if condition is not None else None
        operator = node.child_by_field_name("operator") if node is not None else None
        if node is None or operator is None or operator.type not in ("<", ">"):
            return False
        count = node.child_by_field_name("right" if operator.type == "<" else "left")
        assert count is not None
        while unwrap(count).type == "identifier" and text(unwrap(count)) in self.declared:
            count = self.declared[text(unwrap(count))]  # `int tiles = ceil(K / (float)T);`
        phases_count = self.values.form(count)
        if phases_count == bound:
            return True
        if step != 1:
            return False
        if self._ceiling(count, bound, depth):
            self.assumptions.append(
                f"the phase count {' '.join(text(count).split())} is exact in float (sizes below 2^24)"
            )
            return True
        # floor((bound + c) / T) + d phases of T reach bound when c + d * T >= T - 1
        for atom in phases_count.atoms():
            split = self.values.atoms.splits.get(atom)
            rest = (phases_count - Form.atom(atom)).value()
            if split is None or rest is None or phases_count.coefficient(atom) != Form.constant(1):
                continue
            numerator, denominator, _ = split
            offset = (numerator - bound).value()
            if denominator.value() == depth and offset is not None and offset + rest * depth >= depth - 1:
                return True
        return False

    def _ceiling(self, count: Node, bound: Form, depth: int) -> bool:
        """`ceil(K / (float)T)`: the division in floating point, rounded up."""
        call = unwrap(count)
        function = call.child_by_field_name("function")
        if call.type != "call_expression" or function is None or text(function) not in _CEIL:
            return False
        args = arguments(call)
        quotient = unwrap(args[0]) if len(args) == 1 else None
        operator = quotient.child_by_field_name("operator") if quotient is not None else None
        if quotient is None or operator is None or operator.type != "/":
            return False
        left, right = quotient.child_by_field_name("left"), quotient.child_by_field_name("right")
        assert left is not None and right is not None
        if not (_is_floating(left) or _is_floating(right)):
            return False
        return self.values.form(left) == bound and _number(right, self.values) == depth

    def _pinned(self, form: Form) -> Form:
        """The form with the block's extents (the launch's numbers) and threadIdx.z (0) put in."""
        for axis, extent in (*self.block.items(), ("z", 1)):
            form = form.substitute(f"blockDim.{axis}", Form.constant(extent))
        return form.substitute("threadIdx.z", Form())

    # -- the naive kernel ------------------------------------------------------------------------------

    def _spelled(self, form: Form) -> str:
        """An index in the user's names, the output's indices and kk first: `row * K + k`."""
        order = {_ROW: 0, _DEPTH: 1, _COL: 2}

        def rank(atom: str) -> tuple[int, str]:
            return order.get(atom, 3), atom

        terms = sorted(form.terms.items(), key=lambda item: (-len(item[0]), sorted(map(rank, item[0]))))
        parts = []
        for monomial, coefficient in terms:
            factors = [self.names.get(a, a) for a in sorted(monomial, key=rank)]
            if abs(coefficient) != 1 or not factors:
                factors.insert(0, str(abs(coefficient)))
            parts.append(("- " if coefficient < 0 else "+ ") + " * ".join(factors))
        joined = " ".join(parts) or "0"
        return joined[2:] if joined.startswith("+ ") else "-" + joined[2:]

    def _written(
        self, condition: str, final: list[Node], accumulator: str, factors: list[str], bound: Form
    ) -> str:
        """`row` and `col` from the thread's place, and under the check (the user's) the sum over kk, then
        the user's statements that store it."""
        tree, unit = self.tree, self.tree.indent_unit()
        row, col, k = self.names[_ROW], self.names[_COL], self.names[_DEPTH]
        kept = [reindent(tree.text(s), line_indent(tree, s), unit * 2) for s in final]
        assert self.accumulator_declaration is not None
        lines = [
            "{",
            f"{unit}{self._declared_type(row)}{row} = blockIdx.y * blockDim.y + threadIdx.y;",
            f"{unit}{self._declared_type(col)}{col} = blockIdx.x * blockDim.x + threadIdx.x;",
            f"{unit}if ({condition}) {{",
            f"{unit * 2}{tree.text(self.accumulator_declaration)}",
            f"{unit * 2}for (int {k} = 0; {k} < {self._spelled(bound)}; ++{k})",
            f"{unit * 3}{accumulator} += {factors[0]} * {factors[1]};",
            *kept,
            f"{unit}}}",
            "}",
        ]
        return "\n".join(lines)

    def _declared_type(self, name: str) -> str:
        """How the user declared the local: `const int ` of `const int row = ...;`."""
        for index in self.facts.indices:
            if index.name == name:
                first = index.declaration.children_by_field_name("declarator")[0]
                return self.tree.data[index.declaration.start_byte : first.start_byte].decode("utf-8")
        return "int "


def _zero_initialiser(written: str) -> bool:
    """`0.0f`, or a brace initialiser of nothing or of a zero (`float acc {};`, `{0}`)."""
    inner = written.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
        return not inner or inner in ZERO_LITERALS
    return inner in ZERO_LITERALS


def _code(block: Node) -> list[Node]:
    """The block's statements, comments and `#pragma`s left out."""
    return [s for s in statements(block) if not (s.type == "preproc_call" and text(s).startswith("#pragma"))]


def _is_shared(declaration: Node) -> bool:
    return any(text(c) == "__shared__" for c in declaration.children)


def _is_zero(node: Node) -> bool:
    node = unwrap(node)
    return node.type == "number_literal" and text(node) in ZERO_LITERALS


def _is_floating(node: Node) -> bool:
    """A float cast or a floating literal: `(float)T`, `16.0f`."""
    if node.type == "cast_expression":
        kind = node.child_by_field_name("type")
        return kind is not None and text(kind) in ("float", "double")
    if node.type == "parenthesized_expression" and node.named_children:
        return _is_floating(node.named_children[0])
    return node.type == "number_literal" and any(c in text(node) for c in ".eEfF") and "x" not in text(node)


def _number(node: Node, values: Values) -> float | None:
    """An integer or floating literal's value (or a constant's), else None."""
    node = unwrap(node)
    if node.type == "number_literal":
        try:
            return float(text(node).rstrip("fFlL"))
        except ValueError:
            return None
    return values.form(node).value()
