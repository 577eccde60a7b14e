"""The analysis of one kernel: thread indices, the bounds check, loops, reductions and memory accesses.

One pass over the body in source order, propagating the values of locals assigned once, so every access
is an offset from a parameter in terms of the builtins, the parameters and the loop variables however
the index was spelled (in two steps, through a pointer local, a macro or a helper). Loops get their
normalised bounds, their reductions and whether their iterations are independent.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cuda_agent.agent.analysis.constant_arrays import constant_arrays
from cuda_agent.agent.analysis.facts import (
    FIND_FIRST,
    Access,
    Guard,
    GuardBound,
    KernelFacts,
    Loop,
    ThreadIndex,
)
from cuda_agent.agent.analysis.forms import THREAD_ATOMS, Atoms, Form
from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.reductions import classify
from cuda_agent.agent.analysis.values import Pointer, Values, text, unwrap
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.proposers.tree import KernelTree, declarator_name, untemplated_kernel_tree
from cuda_agent.agent.proposers.tree import walk_with_comments as _nodes
from cuda_agent.agent.spec.dtypes import dtype_of_c_type
from cuda_agent.agent.spec.headers import headers_stamp
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.sandbox.plan import DTYPE_BYTES
from tree_sitter import Node

ELEMENT_BYTES = {
    "float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "uint32_t": 4, "int32_t": 4,
    "double": 8, "long": 8, "long long": 8, "int64_t": 8, "size_t": 8, "uint64_t": 8,
    "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "short": 2, "int16_t": 2,
    "char": 1, "unsigned char": 1, "uint8_t": 1, "int8_t": 1, "bool": 1,
    "float2": 8, "float4": 16, "int4": 16, "half2": 4, "__half2": 4,
}  # fmt: skip
_ATOMICS = frozenset({"atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicExch", "atomicCAS"})
_ATOMICS |= {"atomicAnd", "atomicOr", "atomicXor", "atomicInc", "atomicDec"}
_LOOPS = frozenset({"for_statement", "while_statement", "do_statement", "for_range_loop"})
_QUALIFIERS = frozenset({"const", "volatile", "__restrict__", "__restrict", "restrict"})


# Every rewrite asks for the same kernel's facts in turn: parse and analyse the file once for all of them.
_ANALYSED: BoundedMemo[tuple[object, ...], tuple[KernelTree, KernelFacts]] = BoundedMemo(64)


def analysed(target: KernelTarget) -> tuple[KernelTree, KernelFacts] | None:
    """The tree and the facts of a kernel a rewrite may edit (parsed cleanly, not a template, with a
    spec), or None."""
    if target.spec is None:
        return None
    # the file's own headers are read too (their #defines): the same text next to other headers differs
    where = (str(target.path), headers_stamp(target.path, target.source))
    grid_rank = len(target.spec.launch.grid)  # what the launch fixes (fixed_by_launch) is part of the facts
    key = (target.source, target.kernel.name, target.kernel.body_span.start_byte, where, grid_rank)
    found = _ANALYSED.get(key)
    if found is None:
        tree = untemplated_kernel_tree(target, instantiated=True)
        facts = analyse(tree) if tree is not None else None
        if tree is None or facts is None:
            return None
        found = _ANALYSED.get_or_make(key, lambda: (tree, facts))
    # The same text may come with another spec (a launch being tuned): the facts hold, the target is this one.
    return replace(found[0], target=target), found[1]


def analyse(tree: KernelTree) -> KernelFacts | None:
    """The facts of the kernel, or None when its body is beyond the analysis (too deep to walk)."""
    try:
        return _Walker(tree).run()
    except RecursionError:
        return None


@dataclass
class _Walker:
    tree: KernelTree
    atoms: Atoms = field(default_factory=Atoms)
    accesses: dict[tuple[int, int, bool], Access] = field(default_factory=dict)
    loops: list[Loop] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)  # enclosing loop variables
    indices: list[ThreadIndex] = field(default_factory=list)
    uses_shared: bool = False
    barriers: bool = False
    atomics: bool = False
    unmodelled: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        parameters = self.tree.target.kernel.parameters
        spec = self.tree.target.spec
        self.bytes = {p.name: ELEMENT_BYTES.get(p.type) for p in parameters if p.is_pointer}
        for name, size in self.bytes.items():  # `DATA_TYPE* A`: the spec read the type through its alias
            argument = spec.argument(name) if spec is not None and size is None else None
            if argument is not None and argument.dtype in DTYPE_BYTES:
                self.bytes[name] = DTYPE_BYTES[argument.dtype]
        self.values = Values(
            self.atoms,
            kernel_definitions(self.tree),
            frozenset(self.bytes),
            on_load=self._loaded,
            on_unmodelled=self.unmodelled.append,
            fixed=fixed_by_launch(spec.launch.grid) if spec is not None else {},
            constants=frozenset(a.name for a in constant_arrays(self.tree.target.source)),
        )
        self.mutable = assigned_names(self.tree.body)
        self.sequential = sequential_locals(self.tree.body, self.mutable)

    def run(self) -> KernelFacts:
        guard = self._guard()
        self._block(self.tree.body)
        index_bytes = {(i.declaration.start_byte, i.declaration.end_byte) for i in self.indices}
        thread_uses = tuple(
            n
            for n in _nodes(self.tree.body)
            if n.type == "field_expression"
            and text(n).replace(" ", "") in THREAD_ATOMS
            and not any(a <= n.start_byte and n.end_byte <= b for a, b in index_bytes)
        )
        return KernelFacts(
            indices=tuple(self.indices),
            guard=guard,
            loops=tuple(self.loops),
            accesses=tuple(self.accesses.values()),
            uses_shared=self.uses_shared,
            barriers=self.barriers,
            atomics=self.atomics,
            thread_uses=thread_uses,
            unmodelled=tuple(self.unmodelled),
            atoms=self.atoms,
        )

    # -- statements ------------------------------------------------------------------------------------

    def _block(self, node: Node) -> None:
        if node.type == "compound_statement":
            for child in node.named_children:
                self._statement(child)
        else:
            self._statement(node)

    def _statement(self, node: Node) -> None:
        kind = node.type
        if kind == "compound_statement":
            self._block(node)
        elif kind == "declaration":
            self._declaration(node)
        elif kind == "expression_statement":
            for child in node.named_children:
                top = not self.stack and node.parent == self.tree.body
                updated = _sequential_update(child, self.values, self.sequential) if top else None
                self._effects(child)
                if updated is not None:
                    self.values.bindings[updated[0]] = updated[1]
        elif kind == "if_statement":
            condition = node.child_by_field_name("condition")
            if condition is not None:
                for child in condition.named_children:
                    self._effects(child)
            for field_name in ("consequence", "alternative"):
                branch = node.child_by_field_name(field_name)
                if branch is not None:
                    self._statement(branch)
        elif kind == "else_clause":
            for child in node.named_children:
                self._statement(child)
        elif kind == "for_statement":
            self._for(node)
        elif kind in _LOOPS:
            self.stack.append("?")
            for child in node.named_children:
                if child.type in ("compound_statement", "expression_statement", "declaration"):
                    self._statement(child)
                elif child.type == "condition_clause" or child.type == "parenthesized_expression":
                    for inner in child.named_children:
                        self._effects(inner)
            self.stack.pop()
        elif kind == "return_statement":
            for child in node.named_children:
                self._effects(child)
        elif kind in ("labeled_statement", "attributed_statement"):
            for child in node.named_children:
                if child.type not in ("statement_identifier", "attribute_declaration"):
                    self._statement(child)

    def _declaration(self, node: Node) -> None:
        if any(text(c) == "__shared__" for c in node.children):
            self.uses_shared = True
            return
        for declarator in node.children_by_field_name("declarator"):
            if declarator.type != "init_declarator":
                continue
            target, value = (
                declarator.child_by_field_name("declarator"),
                declarator.child_by_field_name("value"),
            )
            if target is None or value is None:
                continue
            is_pointer = target.type == "pointer_declarator"
            name_node = target
            while name_node is not None and name_node.type != "identifier":
                name_node = name_node.child_by_field_name("declarator")
            if name_node is None or value.type == "initializer_list":
                continue
            name = text(name_node)
            if is_pointer:
                place = self.values.place(value)
                self._effects(value)
                if place is not None and name not in self.mutable and self._same_elements(node, place.base):
                    self.values.bindings[name] = place
                continue
            form = self._effects(value)
            if (name not in self.mutable or name in self.sequential) and not self.stack:
                self.values.bindings[name] = form
                index = self.atoms.roots(form) & THREAD_ATOMS and _is_index_type(node)
                if index and name not in self.mutable:
                    direct = any(text(n).replace(" ", "") in THREAD_ATOMS for n in _nodes(value))
                    self.indices.append(ThreadIndex(name, form, _axis(form), node, direct))
            elif name not in self.mutable:
                self.values.bindings[name] = form  # a loop-local value: its own iteration's

    def _same_elements(self, declaration: Node, base: str) -> bool:
        """Whether a pointer local's elements are its parameter's (`const float* row = x + r * n;`), not
        others read through a cast (`const double* g = (const double*)x;`: 8-byte elements of x)."""
        type_node = declaration.child_by_field_name("type")
        declared = " ".join(w for w in text(type_node).split() if w not in _QUALIFIERS) if type_node else ""
        parameter = self.tree.parameter(base)
        if parameter is None or declared in ("", "auto") or declared == parameter.type:
            return True
        size = ELEMENT_BYTES.get(declared)
        return size is not None and size == self.bytes.get(base)

    def _for(self, node: Node) -> None:
        header = _counted(node, self.values)
        body = node.child_by_field_name("body")
        if body is None:
            return
        if header is None:
            self.stack.append("?")
            for field_name in ("initializer", "condition", "update"):
                part = node.child_by_field_name(field_name)
                if part is not None:
                    self._effects(part)
            self._statement(body)
            self.stack.pop()
            return
        variable, start, bound, step = header
        self.values.bindings.pop(variable, None)
        depth = len(self.stack)
        position = len(self.loops)
        self.stack.append(variable)
        self._statement(body)
        self.stack.pop()
        inside = _declared_in(body) | {variable}
        outer = (self.mutable | set(self.values.bindings)) - inside
        found = classify(body, outer, variable)
        loop = Loop(variable, start, bound, step, node, body, depth, found.reductions, found.carried)
        searches = any(r.combine == FIND_FIRST for r in found.reductions)  # its break is the search's
        exits = self._breaks(body) and not searches
        self.loops.insert(position, _with_independence(loop, self._writes_in(node), exits))

    def _writes_in(self, node: Node) -> list[Access]:
        return [
            a
            for a in self.accesses.values()
            if a.write and node.start_byte <= a.node.start_byte < node.end_byte
        ]

    @staticmethod
    def _breaks(body: Node) -> bool:
        for node in _nodes(body):
            if node.type in ("break_statement", "return_statement", "goto_statement"):
                # a break inside an inner loop or switch belongs to it
                owner = node.parent
                while owner is not None and owner != body and owner.type not in (*_LOOPS, "switch_statement"):
                    owner = owner.parent
                if owner is None or owner == body or node.type != "break_statement":
                    return True
        return False

    # -- expressions -----------------------------------------------------------------------------------

    def _effects(self, node: Node) -> Form:
        """Evaluate an expression, recording its loads and stores; its value as a form."""
        node = unwrap(node)
        if node.type == "assignment_expression":
            left, operator, right = (node.child_by_field_name(f) for f in ("left", "operator", "right"))
            value = self._effects(right) if right is not None else Form()
            if left is not None:
                self._store(unwrap(left), compound=operator is not None and operator.type != "=")
            return value
        if node.type == "update_expression":
            argument = node.child_by_field_name("argument")
            if argument is not None:
                self._store(unwrap(argument), compound=True)
            return self.atoms.opaque(text(node), ())
        if node.type == "comma_expression":
            value = Form()
            for child in node.named_children:
                value = self._effects(child)
            return value
        if node.type == "call_expression":
            function = node.child_by_field_name("function")
            name = text(function) if function is not None else ""
            arguments = node.child_by_field_name("arguments")
            args = [c for c in arguments.named_children if c.type != "comment"] if arguments else []
            if name in ("__syncthreads", "__syncwarp", "__threadfence") or name.startswith("__syncthreads"):
                self.barriers = self.barriers or name.startswith("__syncthreads")
            if name in _ATOMICS and args:
                self.atomics = True
                place = self.values.place(args[0])
                if place is not None:
                    self._record(node, place, write=True, read=True)
                else:
                    self.unmodelled.append(node)
                for arg in args[1:]:
                    self._effects(arg)
                return self.atoms.opaque(text(node), (), memory=True)
        for inner in _nodes(node):  # an atomic inside an expression (`if (atomicAdd(&n, 1) == 0)`) stores
            function = inner.child_by_field_name("function") if inner.type == "call_expression" else None
            if inner != node and function is not None and text(function) in _ATOMICS:
                self._effects(inner)
        return self.values.form(node)

    def _store(self, target: Node, compound: bool) -> None:
        if target.type == "subscript_expression":
            place = self.values.subscript_place(target)
            index = target.child_by_field_name("indices")
            if index is not None:
                for child in index.named_children:
                    self._effects(child)
            if place is not None:
                self._record(target, place, write=True, read=compound)
            else:
                self.unmodelled.append(target)
        elif target.type == "pointer_expression":
            argument = target.child_by_field_name("argument")
            place = self.values.place(argument) if argument is not None else None
            if place is not None:
                self._record(target, place, write=True, read=compound)
            else:
                self.unmodelled.append(target)

    def _loaded(self, node: Node, base: str, offset: Form, site: Node | None = None) -> None:
        self._record(node, Pointer(base, offset), write=False, read=True, site=site)

    def _record(
        self, node: Node, place: Pointer, *, write: bool, read: bool, site: Node | None = None
    ) -> None:
        """One access. A load in a macro's or helper's expansion is placed at the kernel's call (`LOGIT(b,
        v)` in a loop): the expansion's own nodes are parsed apart, the same for every call."""
        key: tuple[int, ...] = (node.start_byte, node.end_byte, write)
        if site is not None:
            key = (site.start_byte, site.end_byte, *key)
            node = site
        hidden: set[str] = set()
        for atom in place.offset.atoms():
            if atom.startswith("⟨"):
                hidden |= self.atoms.depends.get(atom, frozenset())
        self.accesses[key] = Access(
            place.base,
            place.offset,
            write,
            read,
            node,
            tuple(self.stack),
            self.bytes.get(place.base),
            frozenset(hidden),
        )

    # -- the bounds check ------------------------------------------------------------------------------

    def _guard(self) -> Guard | None:
        """The first top-level if that bounds the thread indices; evaluated after the declarations above
        it (a pre-pass over them, so the bound forms use their values)."""
        statements = [s for s in self.tree.body.named_children if s.type != "comment"]
        while statements and _no_effect(statements[-1]):  # `__syncthreads();` after the if: still last
            statements.pop()
        probe = Values(self.atoms, self.values.definitions, self.values.pointers, fixed=self.values.fixed)
        for position, statement in enumerate(statements):
            if statement.type == "declaration":
                for declarator in statement.children_by_field_name("declarator"):
                    target = declarator.child_by_field_name("declarator")
                    value = declarator.child_by_field_name("value")
                    if declarator.type != "init_declarator" or target is None or value is None:
                        continue
                    if target.type != "identifier":
                        continue
                    if text(target) not in self.mutable or text(target) in self.sequential:
                        probe.bindings[text(target)] = probe.form(value)
                continue
            if statement.type == "expression_statement":
                for child in statement.named_children:
                    if (updated := _sequential_update(child, probe, self.sequential)) is not None:
                        probe.bindings[updated[0]] = updated[1]
                continue
            if statement.type != "if_statement" or statement.child_by_field_name("alternative") is not None:
                continue
            condition = statement.child_by_field_name("condition")
            consequence = statement.child_by_field_name("consequence")
            if condition is None or consequence is None or not condition.named_children:
                return None
            inner = [s for s in consequence.named_children if s.type != "comment"]
            if consequence.type != "compound_statement":
                inner = [consequence]
            early = len(inner) == 1 and inner[0].type == "return_statement" and not inner[0].named_children
            if not early and position != len(statements) - 1:
                return None
            found = _bounds(condition.named_children[0], negated=early, values=probe)
            if found is None:
                return None
            bounds, others = found
            return Guard(tuple(bounds), statement, early, tuple(others)) if bounds else None
        return None


# -- helpers -------------------------------------------------------------------------------------------


def _no_effect(statement: Node) -> bool:
    """A statement that leaves memory as it is: a barrier, a bare `return;`, an empty `;`."""
    if statement.type == "return_statement":
        return not statement.named_children
    if statement.type != "expression_statement":
        return False
    if not statement.named_children:
        return True
    call = statement.named_children[0]
    function = call.child_by_field_name("function") if call.type == "call_expression" else None
    return function is not None and text(function) in ("__syncthreads", "__syncwarp", "__threadfence")


def assigned_names(body: Node) -> set[str]:
    """Locals assigned after their declaration (or incremented): their value is not propagated."""
    names: set[str] = set()
    for node in _nodes(body):
        target = None
        if node.type == "assignment_expression":
            target = node.child_by_field_name("left")
        elif node.type == "update_expression":
            target = node.child_by_field_name("argument")
        if target is not None:
            target = unwrap(target)
            if target.type == "identifier":
                names.add(text(target))
    return names


def sequential_locals(body: Node, assigned: set[str]) -> set[str]:
    """Locals declared at the top of the body whose every later assignment is a statement of its own at
    the top too (`id /= w;`: darknet's and Caffe's way of taking a flat index apart): their value is known
    at each point, in source order."""
    top = [s for s in body.named_children if s.type != "comment"]
    declared = {
        text(target)
        for statement in top
        if statement.type == "declaration"
        for declarator in statement.children_by_field_name("declarator")
        if declarator.type == "init_declarator"
        and (target := declarator.child_by_field_name("declarator")) is not None
        and target.type == "identifier"
    }
    candidates = assigned & declared
    for node in _nodes(body):
        field_name = {"assignment_expression": "left", "update_expression": "argument"}.get(node.type)
        target = node.child_by_field_name(field_name) if field_name else None
        if target is None or text(unwrap(target)) not in candidates:
            continue
        statement = node.parent
        if statement is None or statement.type != "expression_statement" or statement.parent != body:
            candidates.discard(text(unwrap(target)))
    return candidates


def _sequential_update(node: Node, values: Values, sequential: set[str]) -> tuple[str, Form] | None:
    """(name, its new value) for a top-level `id /= w;`, `id = id / w;` or `id++;` of a sequential local."""
    node = unwrap(node)
    if node.type == "update_expression":
        argument, operator = node.child_by_field_name("argument"), node.child_by_field_name("operator")
        if argument is None or operator is None or text(unwrap(argument)) not in sequential:
            return None
        step = Form.constant(1 if operator.type == "++" else -1)
        return text(unwrap(argument)), values.form(unwrap(argument)) + step
    if node.type != "assignment_expression":
        return None
    left, operator, right = (node.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or operator is None or right is None or text(unwrap(left)) not in sequential:
        return None
    value = values.form(right)
    if operator.type != "=":
        value = values.combined(operator.type[:-1], values.form(unwrap(left)), value)
    return text(unwrap(left)), value


def _declared_in(node: Node) -> set[str]:
    return {
        name for child in _nodes(node) if child.type == "declaration" for name in _declarator_names(child)
    }


def declared_values(node: Node) -> dict[str, Node]:
    """Locals declared with a value inside the node: name -> the value's node (the first, if several)."""
    found: dict[str, Node] = {}
    for child in _nodes(node):
        if child.type != "declaration":
            continue
        for declarator in child.children_by_field_name("declarator"):
            value = declarator.child_by_field_name("value") if declarator.type == "init_declarator" else None
            name = declarator_name(declarator)
            if name is not None and value is not None:
                found.setdefault(name, value)
    return found


def _declarator_names(declaration: Node) -> list[str]:
    names = (declarator_name(d) for d in declaration.children_by_field_name("declarator"))
    return [n for n in names if n is not None]


def _is_index_type(declaration: Node) -> bool:
    """An integer of 32 or 64 bits in any spelling (`int`, `uint32_t`, `unsigned long`, `ptrdiff_t`), or
    `auto`: narrower ones wrap where a thread index would not."""
    type_node = declaration.child_by_field_name("type")
    written = " ".join(text(type_node).split()) if type_node is not None else ""
    return written == "auto" or dtype_of_c_type(written) in _INDEX_DTYPES


_INDEX_DTYPES = frozenset({"int32", "uint32", "int64", "uint64"})


def fixed_by_launch(grid: tuple[str, ...]) -> dict[str, Form]:
    """The block numbers a grid of this rank leaves at 0 and the grid sides it leaves at 1."""
    unused = "yz"[len(grid) - 1 :]
    return {f"blockIdx.{a}": Form() for a in unused} | {f"gridDim.{a}": Form.constant(1) for a in unused}


def _axis(form: Form) -> str | None:
    """'x' when the form is `blockIdx.x * blockDim.x + threadIdx.x`."""
    for axis in "xyz":
        expected = Form.atom(f"blockIdx.{axis}") * Form.atom(f"blockDim.{axis}") + Form.atom(
            f"threadIdx.{axis}"
        )
        if form == expected:
            return axis
    return None


def _counted(node: Node, values: Values) -> tuple[str, Form, Form, Form] | None:
    """`for (int k = a; k < b; k += s)` in its spellings -> (k, a, b exclusive, s)."""
    init, condition, update = (node.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or condition is None or update is None:
        return None
    if init.type == "declaration":
        declarators = init.children_by_field_name("declarator")
        if len(declarators) != 1 or declarators[0].type != "init_declarator":
            return None
        name_node, start = (
            declarators[0].child_by_field_name("declarator"),
            declarators[0].child_by_field_name("value"),
        )
    elif init.type == "assignment_expression":
        name_node, start = init.child_by_field_name("left"), init.child_by_field_name("right")
    else:
        return None
    if name_node is None or start is None or name_node.type != "identifier":
        return None
    variable = text(name_node)
    bound = _upper(unwrap(condition), variable, values)
    step = _step(update, variable, values)
    if bound is None or step is None:
        return None
    return variable, values.form(start), bound, step


def _upper(condition: Node, variable: str, values: Values) -> Form | None:
    """The exclusive upper bound of `k < b`, `k <= b`, `b > k`, `b >= k`, `k != b`."""
    op, left, right = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if condition.type != "binary_expression" or op is None or left is None or right is None:
        return None
    left, right = unwrap(left), unwrap(right)
    forms = {"<": (True, 0), "<=": (True, 1), ">": (False, 0), ">=": (False, 1), "!=": (True, 0)}
    if op.type not in forms:
        return None
    on_left, inclusive = forms[op.type]
    index, limit = (left, right) if on_left else (right, left)
    if index.type != "identifier" or text(index) != variable:
        return None
    if variable in {text(n) for n in _nodes(limit) if n.type == "identifier"}:
        return None
    return values.form(limit) + Form.constant(inclusive)


def _step(update: Node, variable: str, values: Values) -> Form | None:
    update = unwrap(update)
    if update.type == "update_expression":
        op, argument = update.child_by_field_name("operator"), update.child_by_field_name("argument")
        if op is not None and op.type == "++" and argument is not None and text(unwrap(argument)) == variable:
            return Form.constant(1)
        return None
    if update.type != "assignment_expression":
        return None
    op, left, right = (update.child_by_field_name(f) for f in ("operator", "left", "right"))
    if op is None or left is None or right is None or text(unwrap(left)) != variable:
        return None
    if op.type == "+=":
        return values.form(right)
    right = unwrap(right)
    if op.type == "=" and right.type == "binary_expression":
        plus, a, b = (right.child_by_field_name(f) for f in ("operator", "left", "right"))
        if plus is not None and plus.type == "+" and a is not None and b is not None:
            if text(unwrap(a)) == variable:
                return values.form(b)
            if text(unwrap(b)) == variable:
                return values.form(a)
    return None


def _bounds(condition: Node, negated: bool, values: Values) -> tuple[list[GuardBound], list[Node]] | None:
    """`i < n && j < m` (negated: `i >= n || j >= m`) -> the index bounds, exclusive, and the conjuncts
    that bound something else; `i <= n - k` and `n - k >= i` are `i < n - k + 1`."""
    joiner = "||" if negated else "&&"
    forms = (
        {">=": (True, False), "<=": (False, False), ">": (True, True), "<": (False, True)}
        if negated
        else {"<": (True, False), ">": (False, False), "<=": (True, True), ">=": (False, True)}
    )
    found: list[GuardBound] = []
    others: list[Node] = []
    for part in _operands(unwrap(condition), joiner):
        part = unwrap(part)
        op, left, right = (part.child_by_field_name(f) for f in ("operator", "left", "right"))
        if part.type != "binary_expression" or op is None or left is None or right is None:
            others.append(part)
            continue
        form = forms.get(op.type)
        left, right = unwrap(left), unwrap(right)
        if form is None:
            others.append(part)
            continue
        index, limit = (left, right) if form[0] else (right, left)
        limit_form = values.form(limit)
        if index.type != "identifier" or values.atoms.roots(limit_form) & THREAD_ATOMS:
            others.append(part)
            continue
        bound = limit_form + Form.constant(1 if form[1] else 0)
        written = text(limit)
        if form[1]:
            simple = limit.type in ("identifier", "number_literal") or (
                limit.type == "binary_expression"
                and (o := limit.child_by_field_name("operator")) is not None
                and o.type in ("+", "-", "*", "/", "%")
            )
            written = f"{written} + 1" if simple else f"({written}) + 1"
        found.append(GuardBound(text(index), bound, written, values.form(index)))
    return found, others


def _operands(node: Node, operator: str) -> list[Node]:
    op = node.child_by_field_name("operator")
    if node.type == "binary_expression" and op is not None and op.type == operator:
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        assert left is not None and right is not None
        return _operands(unwrap(left), operator) + _operands(unwrap(right), operator)
    return [node]


def _with_independence(loop: Loop, writes: list[Access], exits: bool) -> Loop:
    """The loop with `independent` set: no carried locals, no early exit, and each iteration writes its
    own elements (every write's offset moves with the loop variable; in a nested loop, by the inner
    loop's whole extent, as `out[k * n + j]` does)."""
    if loop.carried or exits:
        return loop
    for access in writes:
        stride = access.stride(loop.variable)
        if stride is None or not stride.terms:
            return loop
        inner = [
            v
            for v in access.loops
            if v != loop.variable and access.loops.index(v) > access.loops.index(loop.variable)
        ]
        if inner and not all(access.stride(v) is not None for v in inner):
            return loop
    return replace(loop, independent=True)
