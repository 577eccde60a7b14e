"""What a block's barrier-separated steps leave in a shared array, found by running them.

A first draft combines its block's values in shared memory with a loop of steps and barriers, spelled in
many ways: halving (`for (s = blockDim.x / 2; s > 0; s >>= 1) if (tid < s) a[tid] += a[tid + s];`),
doubling with a modulo (`if (tid % (2 * s) == 0)`) or with a strided index (`int k = 2 * s * tid; if (k <
blockDim.x) a[k] += a[k + s];`), the barrier first or last, `while` loops, `fmaxf` instead of `+`.
Rather than match each spelling, the steps are run here for every thread of the block: the control flow
on integers (it depends only on the thread's index, the block's size and the loops' counters), the
array's elements as symbols, each the multiset of original slots combined into it and by which combine.
Where the run ends with an element holding every slot exactly once under one combine, the steps compute
that combine of the block's values, whatever their spelling.

The run refuses (returns None) whatever it cannot follow exactly: a value from global memory or a
parameter, a float literal, a call it does not know, a barrier some threads of the block skip, and two
threads touching one element between the same barriers (a race: the GPU's result would depend on the
order of the threads, which a run one thread after another does not model).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field

from cuda_agent.agent.analysis.facts import MAX, MIN, SUM
from cuda_agent.agent.analysis.values import text, unwrap
from tree_sitter import Node

STEP_LIMIT = 100_000  # statements and loop tests one thread may run: a loop that never ends is refused
_COMBINERS = {"fmaxf": MAX, "fmax": MAX, "max": MAX, "fminf": MIN, "fmin": MIN, "min": MIN}
_BUILTINS = {"threadIdx.y": 0, "threadIdx.z": 0, "blockDim.y": 1, "blockDim.z": 1}
_COMPOUND = {"+=": "+", "-=": "-", "*=": "*", "/=": "/", "%=": "%", "<<=": "<<", ">>=": ">>"}
_COMPOUND |= {"&=": "&", "|=": "|", "^=": "^"}


class _Refused(Exception):
    """The steps do something the run does not follow exactly."""


@dataclass(frozen=True)
class Combined:
    """An element of the array: the original slots it combines (with their counts), the combine and the
    user's spelling of it (`+`, `fmaxf`); no combine for an element no step combined."""

    slots: Counter[int]
    combine: str | None = None
    combiner: str | None = None

    def is_whole_block(self, block: int) -> bool:
        """Every slot of the block exactly once, under one combine."""
        return self.combine is not None and self.slots == Counter(range(block))


def run_steps(
    statements: list[Node], shared: str, threads: set[str], block: int, constants: dict[str, Node]
) -> list[Combined] | None:
    """The array `shared` after every thread of a `block`-thread block ran `statements`, slot k holding
    thread k's value at the start; `threads` are the locals holding `threadIdx.x`, `constants` the
    file's numeric `#define`s. None where the run refused (see the module's note)."""
    state = _Block(shared, block, constants, {k: Combined(Counter({k: 1})) for k in range(block)})
    runs = [_Thread(state, tid, {name: tid for name in threads}).run(statements) for tid in range(block)]
    try:
        while True:
            finished = [_to_barrier(run) for run in runs]
            state.check_interval()
            if all(finished):
                return [state.slots[k] for k in range(block)]
            if any(finished):
                raise _Refused("a barrier that some threads of the block skip")
    except _Refused:
        return None


def integer_value(node: Node, constants: dict[str, Node]) -> int | None:
    """The value of an integer expression of literals and numeric `#define`s (`THREADS / 2`), else None."""
    try:
        value = _Thread(_Block("", 0, constants, {}), 0, {})._value(node)
    except _Refused:
        return None
    return value if isinstance(value, int) else None


def _to_barrier(run: Generator[None, None, None]) -> bool:
    """Run a thread to its next barrier: True when it finished instead."""
    try:
        next(run)
    except StopIteration:
        return True
    return False


@dataclass
class _Block:
    """The shared array and who touched which element since the last barrier."""

    shared: str
    size: int
    constants: dict[str, Node]
    slots: dict[int, Combined]
    readers: dict[int, set[int]] = field(default_factory=dict)
    writers: dict[int, set[int]] = field(default_factory=dict)

    def read(self, slot: int, tid: int) -> Combined:
        if slot not in self.slots:
            raise _Refused(f"{self.shared}[{slot}] is outside the block's slots")
        self.readers.setdefault(slot, set()).add(tid)
        return self.slots[slot]

    def write(self, slot: int, value: Combined, tid: int) -> None:
        if slot not in self.slots:
            raise _Refused(f"{self.shared}[{slot}] is outside the block's slots")
        self.writers.setdefault(slot, set()).add(tid)
        self.slots[slot] = value

    def check_interval(self) -> None:
        """Between two barriers, an element one thread wrote is touched by no other thread."""
        for slot, writers in self.writers.items():
            if len(writers) > 1 or self.readers.get(slot, set()) - writers:
                raise _Refused(f"threads race on {self.shared}[{slot}]")
        self.readers, self.writers = {}, {}


Value = int | Combined


class _Thread:
    def __init__(self, block: _Block, tid: int, locals_: dict[str, Value]) -> None:
        self.block, self.tid, self.locals = block, tid, dict(locals_)
        self.steps = 0

    def run(self, statements: list[Node]) -> Generator[None, None, None]:
        for statement in statements:
            yield from self._statement(statement)

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > STEP_LIMIT:
            raise _Refused("a loop that runs too long to follow")

    def _statement(self, node: Node) -> Generator[None, None, None]:
        self._tick()
        kind = node.type
        if kind == "comment":
            return
        if kind == "compound_statement":
            saved = dict(self.locals)
            for child in node.named_children:
                yield from self._statement(child)
            # names declared inside go out of scope; assignments to outer ones stay
            self.locals = {name: self.locals[name] for name in saved}
        elif kind == "expression_statement":
            expression = node.named_children[0] if node.named_children else None
            if expression is not None and _is_barrier_call(expression):
                yield
            elif expression is not None:
                self._value(expression)
        elif kind == "declaration":
            self._declare(node)
        elif kind == "if_statement":
            condition = node.child_by_field_name("condition")
            if condition is None:
                raise _Refused("an if without a condition")
            if self._truth(condition):
                branch = node.child_by_field_name("consequence")
            else:
                alternative = node.child_by_field_name("alternative")
                branch = alternative.named_children[-1] if alternative is not None else None
            if branch is not None:
                yield from self._statement(branch)
        elif kind == "for_statement":
            yield from self._for(node)
        elif kind == "while_statement":
            condition, body = node.child_by_field_name("condition"), node.child_by_field_name("body")
            if condition is None or body is None:
                raise _Refused("a while loop without a condition or body")
            while self._truth(condition):
                yield from self._statement(body)
        else:
            raise _Refused(f"a {kind} statement")

    def _for(self, node: Node) -> Generator[None, None, None]:
        saved = dict(self.locals)
        initializer = node.child_by_field_name("initializer")
        condition, update = node.child_by_field_name("condition"), node.child_by_field_name("update")
        body = node.child_by_field_name("body")
        if body is None:
            raise _Refused("a for loop without a body")
        if initializer is not None:
            if initializer.type == "declaration":
                self._declare(initializer)
            else:
                self._value(initializer)
        while condition is None or self._truth(condition):
            yield from self._statement(body)
            if update is not None:
                self._value(update)
        self.locals = {name: self.locals[name] for name in saved}

    def _declare(self, node: Node) -> None:
        if any(text(c) in ("__shared__", "static", "extern") for c in node.children):
            raise _Refused("a declaration the steps cannot repeat per thread")
        for declarator in node.children_by_field_name("declarator"):
            name = (
                declarator.child_by_field_name("declarator") if declarator.type == "init_declarator" else None
            )
            value = declarator.child_by_field_name("value")
            if name is None or name.type != "identifier" or value is None:
                raise _Refused("a declaration without a plain name and value")
            self.locals[text(name)] = self._value(value)

    def _truth(self, node: Node) -> bool:
        value = self._value(node)
        if not isinstance(value, int):
            raise _Refused("a condition on the array's values")
        return value != 0

    def _integer(self, node: Node) -> int:
        value = self._value(node)
        if not isinstance(value, int):
            raise _Refused("arithmetic on the array's values")
        return value

    def _value(self, node: Node) -> Value:
        self._tick()
        node = unwrap(node)
        kind = node.type
        if kind == "condition_clause":
            inner = node.child_by_field_name("value") or (
                node.named_children[-1] if node.named_children else None
            )
            if inner is None:
                raise _Refused("an empty condition")
            return self._value(inner)
        if kind == "number_literal":
            digits = text(node).rstrip("uUlL")
            try:
                return int(digits, 0)
            except ValueError:
                raise _Refused("a floating-point literal") from None
        if kind == "identifier":
            return self._name(text(node))
        if kind == "field_expression":
            return self._builtin("".join(text(node).split()))
        if kind == "cast_expression":
            value = node.child_by_field_name("value")
            if value is None:
                raise _Refused("a cast without a value")
            return self._value(value)
        if kind == "unary_expression":
            return self._unary(node)
        if kind == "binary_expression":
            return self._binary(node)
        if kind == "conditional_expression":
            condition = node.child_by_field_name("condition")
            taken = node.child_by_field_name("consequence")
            other = node.child_by_field_name("alternative")
            if condition is None or taken is None or other is None:
                raise _Refused("an incomplete conditional")
            return self._value(taken if self._truth(condition) else other)
        if kind == "subscript_expression":
            return self.block.read(self._slot(node), self.tid)
        if kind == "call_expression":
            return self._call(node)
        if kind == "assignment_expression":
            return self._assign(node)
        if kind == "update_expression":
            return self._update(node)
        if kind == "comma_expression":
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if left is None or right is None:
                raise _Refused("an incomplete comma expression")
            self._value(left)
            return self._value(right)
        raise _Refused(f"a {kind} expression")

    def _name(self, name: str) -> Value:
        if name in self.locals:
            return self.locals[name]
        constant = self.block.constants.get(name)
        if constant is not None:
            return self._integer(constant)
        raise _Refused(f"{name}, which the steps do not define")

    def _builtin(self, written: str) -> int:
        if written == "threadIdx.x":
            return self.tid
        if written == "blockDim.x":
            return self.block.size
        if written in _BUILTINS:
            return _BUILTINS[written]
        raise _Refused(f"{written}, which differs between blocks")

    def _slot(self, node: Node) -> int:
        array, indices = node.child_by_field_name("argument"), node.child_by_field_name("indices")
        named = [c for c in indices.named_children if c.type != "comment"] if indices is not None else []
        if array is None or text(array) != self.block.shared or len(named) != 1:
            raise _Refused("memory other than the block's array")
        return self._integer(named[0])

    def _unary(self, node: Node) -> int:
        operator, argument = node.child_by_field_name("operator"), node.child_by_field_name("argument")
        if operator is None or argument is None:
            raise _Refused("an incomplete unary expression")
        value = self._integer(argument)
        results = {"-": -value, "+": value, "!": int(not value), "~": ~value}
        if operator.type not in results:
            raise _Refused(f"the operator {operator.type}")
        return results[operator.type]

    def _binary(self, node: Node) -> Value:
        operator = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if operator is None or left is None or right is None:
            raise _Refused("an incomplete binary expression")
        op = operator.type
        if op == "&&":
            return int(self._truth(left) and self._truth(right))
        if op == "||":
            return int(self._truth(left) or self._truth(right))
        return _apply(op, self._value(left), self._value(right), op)

    def _call(self, node: Node) -> Value:
        function, argument_list = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        name = text(function) if function is not None else ""
        arguments = [c for c in argument_list.named_children if c.type != "comment"] if argument_list else []
        if name not in _COMBINERS or len(arguments) != 2:
            raise _Refused(f"a call of {name or 'something'}")
        a, b = (self._value(argument) for argument in arguments)
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b) if _COMBINERS[name] == MAX else min(a, b)
        return _combined(a, b, _COMBINERS[name], name)

    def _assign(self, node: Node) -> Value:
        target, operator = node.child_by_field_name("left"), node.child_by_field_name("operator")
        right = node.child_by_field_name("right")
        if target is None or operator is None or right is None:
            raise _Refused("an incomplete assignment")
        target = unwrap(target)
        value = self._value(right)
        if operator.type != "=":
            if operator.type not in _COMPOUND:
                raise _Refused(f"the operator {operator.type}")
            value = _apply(_COMPOUND[operator.type], self._value(target), value, operator.type)
        if target.type == "identifier":
            if text(target) not in self.locals:
                raise _Refused(f"{text(target)}, which the steps do not define")
            self.locals[text(target)] = value
        elif target.type == "subscript_expression":
            if not isinstance(value, Combined):
                raise _Refused("a number stored in the array")
            self.block.write(self._slot(target), value, self.tid)
        else:
            raise _Refused("a store through something other than a name or the array")
        return value

    def _update(self, node: Node) -> int:
        argument, operator = node.child_by_field_name("argument"), node.child_by_field_name("operator")
        if argument is None or operator is None or unwrap(argument).type != "identifier":
            raise _Refused("++ or -- on something other than a local")
        name = text(unwrap(argument))
        before = self._name(name)
        if not isinstance(before, int) or name not in self.locals:
            raise _Refused("++ or -- on the array's values")
        after = before + (1 if operator.type == "++" else -1)
        self.locals[name] = after
        prefix = node.children[0].type in ("++", "--")
        return after if prefix else before


def _apply(op: str, a: Value, b: Value, spelled: str) -> Value:
    if isinstance(a, Combined) or isinstance(b, Combined):
        if op != "+" or not (isinstance(a, Combined) and isinstance(b, Combined)):
            raise _Refused(f"{spelled} on the array's values")
        return _combined(a, b, SUM, "+")
    if op in ("/", "%"):
        if b == 0:
            raise _Refused("a division by zero")
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C truncates toward zero
        return quotient if op == "/" else a - b * quotient
    if op in ("<<", ">>") and not 0 <= b < 64:
        raise _Refused("a shift out of range")
    operations = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "<<": lambda: a << b,
        ">>": lambda: a >> b,
        "&": lambda: a & b,
        "|": lambda: a | b,
        "^": lambda: a ^ b,
        "<": lambda: int(a < b),
        "<=": lambda: int(a <= b),
        ">": lambda: int(a > b),
        ">=": lambda: int(a >= b),
        "==": lambda: int(a == b),
        "!=": lambda: int(a != b),
    }
    if op not in operations:
        raise _Refused(f"the operator {op}")
    return operations[op]()


def _combined(a: Value, b: Value, combine: str, combiner: str) -> Combined:
    if not (isinstance(a, Combined) and isinstance(b, Combined)):
        raise _Refused("an array value combined with a number")
    for part in (a, b):
        if part.combine not in (None, combine):
            raise _Refused("two different combines")
    return Combined(a.slots + b.slots, combine, combiner)


def _is_barrier_call(node: Node) -> bool:
    node = unwrap(node)
    function, argument_list = node.child_by_field_name("function"), node.child_by_field_name("arguments")
    return (
        node.type == "call_expression"
        and function is not None
        and text(function) == "__syncthreads"
        and argument_list is not None
        and not argument_list.named_children
    )
