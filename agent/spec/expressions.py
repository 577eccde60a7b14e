"""Safe expressions for sizes, shapes, launch shapes and scalar values, and a checker for PyTorch oracles.

Spec expressions come from files anyone can open, so nothing here evaluates code: the text is parsed with
`ast.parse(mode="eval")` (parsing only) and the tree is walked by hand over a short list of node kinds.
Two kinds of expression share the walker: integer ones (sizes, shapes, the launch, integer scalars: `//`,
no floats) and real ones (float scalars and float init parameters: float literals, `/` as true division,
sqrt, exp, log, pi). Positions in errors are UTF-8 byte offsets into the expression text, so the caller can
add the offset of the string in the file and point at the exact token.
"""

from __future__ import annotations

import ast
import difflib
import io
import keyword
import math
import tokenize
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from cuda_agent.sandbox.oracle_names import (
    FUNCTIONAL_NAMES,
    ORACLE_BUILTINS,
    ORACLE_MODULES,
    oracle_spelling,
)

BLOCK_NAMES = ("block.x", "block.y", "block.z")
# Results beyond int64 are never a real size; bounding them also keeps `2 ** 10 ** 9` from eating the CPU.
MAX_MAGNITUDE = 1 << 63
# Long enough for any real launch shape; short enough that the tree walks stay far from the recursion limit.
MAX_EXPRESSION_LENGTH = 400
_FUNCTIONS = ("ceil_div", "cdiv", "min", "max")
# Real expressions add these (one argument each) and the constant pi; a size of the same name hides pi.
REAL_FUNCTIONS = ("sqrt", "exp", "log", "log2", "abs")
REAL_CONSTANTS = {"pi": math.pi}
_BINARY_OPERATORS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    # integers only: host code rounds sizes up with them (`(V + 63) & ~63`)
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
}
# Names a user may mean when writing CUDA habits into a spec.
_CUDA_HINTS = {
    "blockDim": "write block.x (block.y, block.z) for the block shape",
    "gridDim": "the grid is what [launch] grid computes; it cannot be used in an expression",
    "threadIdx": "expressions are evaluated on the host, once per launch; there is no thread index",
    "blockIdx": "expressions are evaluated on the host, once per launch; there is no block index",
}


class ExpressionError(Exception):
    """A problem in an expression. `start`/`end` are UTF-8 byte offsets into the expression's text."""

    def __init__(self, message: str, start: int = 0, end: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.start = start
        self.end = start + 1 if end is None else end


@dataclass(frozen=True)
class Expression:
    """A validated expression. `names` are the sizes it uses; the block appears as "block.x".
    `real`: a real expression (float scalars), else an integer one."""

    text: str
    names: frozenset[str]
    tree: ast.expr = field(compare=False, repr=False)
    offset: int = field(default=0, compare=False, repr=False)  # bytes of leading whitespace stripped
    real: bool = False

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The value of an integer expression with `values` for the names; ExpressionError for division by
        zero or huge results."""
        assert not self.real, "a real expression: use evaluate_real"
        result = _Evaluator(self.text, values, self.offset, self.tree, real=False).visit(self.tree)
        assert isinstance(result, int)
        return result

    def evaluate_real(self, values: Mapping[str, int]) -> float:
        """The value as a float (of either kind); ExpressionError for division by zero, a result that is
        not a finite real number (log(0), sqrt(-1), overflow) or huge integers on the way."""
        return float(_Evaluator(self.text, values, self.offset, self.tree, self.real).visit(self.tree))


def parse_expression(
    text: str | int,
    names: Iterable[str],
    *,
    allow_block: bool = False,
    what: str = "size",
    why: str | None = None,
) -> Expression:
    """Parse and validate the integer expression `text`; `names` are the sizes it may use, `allow_block`
    admits block.x/y/z.

    `what` names the things in `names` in messages ("unknown size 'colz'"); `why` says why the value is
    an integer ("sizes are integers"), for the messages that refuse a float or a `/`.
    Raises ExpressionError at the offending token.
    """
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ExpressionError(f"expected an integer or an expression string, not {describe(text)}")
    # Specs are re-read on every edit and the same expressions come back: parse each text once.
    return _parse_cached(str(text), tuple(dict.fromkeys(names)), allow_block, what, why, False)


def parse_real_expression(
    text: str | int | float, names: Iterable[str], *, allow_block: bool = False
) -> Expression:
    """Parse and validate a real expression (a float scalar's value, a float init's mean/std/low/high/fill):
    numbers, sizes, + - * / // % ** << >>, ceil_div, cdiv, min, max, sqrt, exp, log, log2, abs, pi;
    `allow_block` admits block.x/y/z (a scalar's value). Raises ExpressionError at the offending token."""
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise ExpressionError(f"expected a number or an expression string, not {describe(text)}")
    return _parse_cached(str(text), tuple(dict.fromkeys(names)), allow_block, "size", None, True)


def uses_block(expression: Expression) -> bool:
    """Whether the expression reads the launch's block (block.x/y/z): its value is then the launch's."""
    return not expression.names.isdisjoint(BLOCK_NAMES)


def mentions_block(text: str) -> bool:
    """Whether `text` (which may not parse as an expression) writes the name `block`: a C++ template
    argument meant to follow the block, as opposed to one such as `float` or `Pair<int, 2>`."""
    names = _name_tokens(text)
    return "block" in names if names is not None else "block" in text


def referenced_names(text: str | int, names: Iterable[str]) -> frozenset[str]:
    """The sizes among `names` that the integer expression `text` uses ("n" for "ceil_div(n, 4)")."""
    return parse_expression(text, names).names


@lru_cache(maxsize=4096)
def _parse_cached(
    text: str, names: tuple[str, ...], allow_block: bool, what: str, why: str | None, real: bool
) -> Expression:
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
    stripped = text.lstrip()
    offset = len(text[: len(text) - len(stripped)].encode())
    if not stripped.strip():
        example = '"1 / sqrt(cols)"' if real else '"rows * cols"'
        raise ExpressionError(f"empty expression: write a number or an expression such as {example}")
    try:
        tree = ast.parse(stripped, mode="eval").body
    except SyntaxError as error:
        start = offset + _byte_offset(stripped, error.lineno or 1, (error.offset or 1) - 1)
        raise ExpressionError(f"not a valid expression: {error.msg}", start) from None
    checker = _Checker(stripped, offset, list(names), allow_block, what, why, real)
    checker.visit(tree)
    return Expression(text, frozenset(checker.used), tree, offset, real)


def evaluate(text: str | int, values: Mapping[str, int], *, allow_block: bool = False) -> int:
    """Parse and evaluate in one step, with `values`' keys as the known names."""
    return parse_expression(text, values.keys(), allow_block=allow_block).evaluate(values)


def describe(value: object) -> str:
    """How a TOML value reads in a message: 'a boolean (true)', 'a list', 'float 1.5'."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f'a string ("{value}")'
    return f"{type(value).__name__} {value!r}"


def _byte_offset(text: str, lineno: int, col_chars: int) -> int:
    """Byte offset of a (1-based line, 0-based character column) position in `text`."""
    lines = text.split("\n")
    before = sum(len(line.encode()) + 1 for line in lines[: lineno - 1])
    line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    return before + len(line[:col_chars].encode())


def _node_span(text: str, offset: int, node: ast.AST) -> tuple[int, int]:
    """Byte offsets of a node in the original text. ast's col_offset is already in UTF-8 bytes."""
    lines = text.encode().split(b"\n")

    def absolute(lineno: int, col: int) -> int:
        return offset + sum(len(line) + 1 for line in lines[: lineno - 1]) + col

    start = absolute(node.lineno, node.col_offset)  # type: ignore[attr-defined]
    end_lineno = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
    end_col = getattr(node, "end_col_offset", None)
    return start, absolute(end_lineno, end_col) if end_col is not None else start + 1


def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to a misspelled `word`, if one is close enough."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def suggest(word: str, choices: Iterable[str]) -> str:
    """ "; did you mean 'cols'?" when a choice is close to `word`, else ""."""
    match = nearest(word, choices)
    return f"; did you mean '{match}'?" if match else ""


class _Checker(ast.NodeVisitor):
    """Rejects every node that is not arithmetic over known names (integer arithmetic unless `real`);
    records the names used."""

    def __init__(
        self,
        text: str,
        offset: int,
        names: list[str],
        allow_block: bool,
        what: str,
        why: str | None,
        real: bool,
    ) -> None:
        self.text, self.offset, self.names, self.allow_block = text, offset, names, allow_block
        self.what, self.why, self.real = what, why, real
        self.functions = (*_FUNCTIONS, *REAL_FUNCTIONS) if real else _FUNCTIONS
        self.used: set[str] = set()

    def fail(self, node: ast.AST, message: str) -> ExpressionError:
        return ExpressionError(message, *_node_span(self.text, self.offset, node))

    def generic_visit(self, node: ast.AST) -> None:
        kind = {
            ast.Compare: "comparisons",
            ast.BoolOp: "and/or",
            ast.IfExp: "conditional expressions",
            ast.Subscript: "indexing",
            ast.List: "lists",
            ast.Tuple: "tuples",
            ast.Lambda: "lambdas",
        }.get(type(node), f"'{type(node).__name__}'")
        allowed = (
            "numbers, sizes, + - * / // % **, sqrt, exp, log, log2, abs, min, max, pi"
            if self.real
            else "integers, sizes, + - * // % ** << >>, ceil_div(a, b), min(...), max(...)"
        )
        raise self.fail(node, f"{kind} are not allowed here: use {allowed}")

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if self.real and isinstance(value, (int, float)) and not isinstance(value, bool):
            return
        if isinstance(value, bool) or not isinstance(value, int):
            if self.real:
                raise self.fail(node, f"{value!r} is not a number")
            reason = self.why or "sizes and launch shapes are integers"
            raise self.fail(node, f"{value!r} is not an integer: {reason}")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.names:
            self.used.add(node.id)
            return
        if self.real and node.id in REAL_CONSTANTS:
            return
        if node.id == "block":
            raise self.fail(
                node, "write block.x, block.y or block.z" if self.allow_block else self._no_block()
            )
        if node.id in _CUDA_HINTS:
            raise self.fail(node, f"'{node.id}' is not known here: {_CUDA_HINTS[node.id]}")
        if node.id in self.functions:
            example = f"{node.id}(a, b)" if node.id in _FUNCTIONS else f"{node.id}(x)"
            raise self.fail(node, f"{node.id} is a function: call it, e.g. {example}")
        known = ", ".join(self.names) if self.names else f"none are defined; add them under [{self.what}s]"
        hint = suggest(node.id, [*self.names, *(BLOCK_NAMES if self.allow_block else ())])
        raise self.fail(node, f"unknown {self.what} '{node.id}' ({self.what}s are: {known}){hint}")

    def _no_block(self) -> str:
        return (
            "the block shape (block.x/y/z) is only known in [launch] grid and shared_bytes, "
            "a scalar's value and instantiate"
        )

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == "block":
            if not self.allow_block:
                raise self.fail(node, self._no_block())
            if node.attr not in ("x", "y", "z"):
                raise self.fail(node, f"block has x, y and z, not '{node.attr}'")
            self.used.add(f"block.{node.attr}")
            return
        if isinstance(node.value, ast.Name) and node.value.id in _CUDA_HINTS:
            raise self.fail(node, f"'{node.value.id}' is not known here: {_CUDA_HINTS[node.value.id]}")
        if isinstance(node.value, ast.Name) and node.value.id == "math" and self.real:
            raise self.fail(node, f"write {node.attr} without 'math.'")
        raise self.fail(node, "attribute access is not allowed here; only block.x, block.y and block.z")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div) and not self.real:
            if self.why is None:
                raise self.fail(node, "'/' is not allowed: use // for integer division or ceil_div(a, b)")
            raise self.fail(node, f"{self.why}: use // for integer division or ceil_div(a, b), not /")
        if type(node.op) not in _BINARY_OPERATORS and not isinstance(node.op, ast.Div):
            operators = "+ - * / // % ** << >> & | ^" if self.real else "+ - * // % ** << >> & | ^"
            raise self.fail(node, f"only {operators} are allowed")
        self.visit(node.left)
        self.visit(node.right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            raise self.fail(node, "only unary -, + and ~ are allowed")
        self.visit(node.operand)

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        function = node.func
        if (
            self.real
            and isinstance(function, ast.Attribute)
            and isinstance(function.value, ast.Name)
            and function.value.id == "math"
            and function.attr in self.functions
        ):
            raise self.fail(function, f"write {function.attr}(...) without 'math.'")
        if name not in self.functions:
            raise self.fail(
                node.func,
                f"unknown function: use one of {', '.join(self.functions)}"
                + (suggest(name, self.functions) if name else ""),
            )
        if node.keywords or any(isinstance(argument, ast.Starred) for argument in node.args):
            raise self.fail(node, f"{name}() takes plain positional arguments")
        if name in ("ceil_div", "cdiv") and len(node.args) != 2:
            raise self.fail(node, f"{name}(a, b) takes two arguments: the value and the divisor")
        if name in ("min", "max") and len(node.args) < 2:
            raise self.fail(node, f"{name}() takes at least two arguments")
        if name in REAL_FUNCTIONS and len(node.args) != 1:
            raise self.fail(node, f"{name}(x) takes one argument")
        for argument in node.args:
            self.visit(argument)


def _shown(node: ast.AST) -> str:
    """An expression as it reads in a message, shortened."""
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


Number = int | float


class _Evaluator:
    """Evaluates a tree that _Checker accepted: integer expressions with Python's integer semantics and
    bounded results; real ones with Python's int/float arithmetic, every step finite."""

    def __init__(self, text: str, values: Mapping[str, int], offset: int, tree: ast.expr, real: bool) -> None:
        self.text, self.values, self.offset, self.tree, self.real = text.lstrip(), values, offset, tree, real

    def fail(self, node: ast.AST, message: str) -> ExpressionError:
        return ExpressionError(message, *_node_span(self.text, self.offset, node))

    def within(self, node: ast.AST) -> str:
        """ " in '(n - 7)'" for a part of the expression; nothing for the whole of it."""
        return "" if node is self.tree else f" in '{_shown(node)}'"

    def too_large(self, node: ast.AST, limit: str = " (beyond 2**63)") -> ExpressionError:
        if node is self.tree:
            return self.fail(node, f"too large{limit}")
        return self.fail(node, f"'{_shown(node)}' is too large{limit}")

    def bounded(self, node: ast.AST, value: Number) -> Number:
        if isinstance(value, int) and abs(value) >= MAX_MAGNITUDE:
            if not self.real:
                raise self.too_large(node)
            try:
                value = float(value)  # a real expression goes on in floating point
            except OverflowError:
                raise self.too_large(node, "") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(node, f"not a finite number{self.within(node)}")
        return value

    def visit(self, node: ast.expr) -> Number:
        if isinstance(node, ast.Constant):
            return self.bounded(node, node.value)  # the checker admitted only numbers
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else f"block.{node.attr}"
            if name in self.values:
                return self.values[name]
            if self.real and name in REAL_CONSTANTS:
                return REAL_CONSTANTS[name]
            raise self.fail(node, f"no value for '{name}'")
        if isinstance(node, ast.UnaryOp):
            operand = self.visit(node.operand)
            if isinstance(node.op, ast.Invert):
                if not isinstance(operand, int):
                    raise self.fail(node, f"~ takes an integer{self.within(node)}")
                return ~operand
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            return self.bounded(node, self.binary(node, self.visit(node.left), self.visit(node.right)))
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            return self.bounded(node, self.call(node, node.func.id, [self.visit(a) for a in node.args]))
        raise self.fail(node, "unexpected expression")  # the checker admits nothing else

    def call(self, node: ast.Call, name: str, arguments: list[Number]) -> Number:
        if name in ("min", "max"):
            return min(arguments) if name == "min" else max(arguments)
        if name == "abs":
            return abs(arguments[0])
        if name in ("ceil_div", "cdiv"):
            value, divisor = arguments
            if not isinstance(value, int) or not isinstance(divisor, int):
                raise self.fail(node, f"{name}(a, b) takes integers")
            if divisor == 0:
                raise self.fail(node, f"division by zero{self.within(node)}")
            return -(-value // divisor)
        (argument,) = arguments
        if name == "sqrt" and argument < 0:
            raise self.fail(node, f"square root of a negative number ({argument}){self.within(node)}")
        if name in ("log", "log2") and argument <= 0:
            raise self.fail(node, f"logarithm of {argument}, not a positive number{self.within(node)}")
        try:
            return {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log2": math.log2}[name](argument)
        except OverflowError:
            raise self.too_large(node, "") from None

    def binary(self, node: ast.BinOp, left: Number, right: Number) -> Number:
        integers = isinstance(left, int) and isinstance(right, int)
        operations: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
        }
        if type(node.op) in operations:
            return operations[type(node.op)](left, right)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod, ast.Div)):
            if right == 0:
                raise self.fail(node, f"division by zero{self.within(node)}")
            if isinstance(node.op, ast.Div):
                return left / right
            return left // right if isinstance(node.op, ast.FloorDiv) else left % right
        if isinstance(node.op, ast.Pow):
            return self.power(node, left, right, integers)
        # Shifts and bitwise operations.
        if not integers:
            kind = "shifts" if isinstance(node.op, (ast.LShift, ast.RShift)) else "bitwise operations"
            raise self.fail(node, f"{kind} take integers{self.within(node)}")
        assert isinstance(left, int) and isinstance(right, int)
        bitwise = {ast.BitAnd: int.__and__, ast.BitOr: int.__or__, ast.BitXor: int.__xor__}
        if type(node.op) in bitwise:
            return bitwise[type(node.op)](left, right)
        if right < 0:
            raise self.fail(node, f"negative shift count{self.within(node)}")
        if isinstance(node.op, ast.RShift):
            return left >> min(right, 64)
        if left != 0 and right >= 64:
            raise self.too_large(node)
        return left << right

    def power(self, node: ast.BinOp, left: Number, right: Number, integers: bool) -> Number:
        huge = abs(left) > 1 and right > 0 and right * math.log2(abs(left)) >= 64
        if integers and right >= 0 and not (huge and self.real):
            # Decide before computing: a huge power would take seconds and gigabytes.
            if huge:
                raise self.too_large(node)
            return int(left**right)  # a non-negative exponent: an int
        if not self.real:
            raise self.fail(node, f"negative exponent{self.within(node)}: the result is not an integer")
        if left == 0 and right < 0:
            raise self.fail(node, f"division by zero{self.within(node)} (0 to a negative power)")
        if left < 0 and not float(right).is_integer():
            raise self.fail(node, f"a negative number to a fractional power{self.within(node)}")
        try:
            return float(left) ** float(right)
        except OverflowError:
            raise self.too_large(node, "") from None


# --- PyTorch oracle expressions -------------------------------------------------------------------------

# Attributes that read or write files, run code, download or change global state: an oracle computes
# a tensor and nothing else. Specs come from files anyone can open, so this is a deny list on top of
# the allow list of root names; the worker must still evaluate oracles with no builtins and under limits.
_FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "load",
        "save",
        "hub",
        "from_file",
        "utils",
        "jit",
        "compile",
        "library",
        "ops",
        "classes",
        "package",
        "multiprocessing",
        "distributed",
        "onnx",
        "export",
        "serialization",
        "fx",
        "backends",
        "cuda",
        "mps",
        "os",
        "sys",
        "subprocess",
        "builtins",
        "eval",
        "exec",
        "open",
        "system",
        "popen",
        "importlib",
        "import_module",
        "storage",
        "untyped_storage",
        "data_ptr",
        "tofile",
        "numpy",
        "register_hook",
        "manual_seed",
        "seed",
        "random",
        "profiler",
        "autograd",
        "overrides",
        "testing",
        "hooks",
    }
)
_FORBIDDEN_NODES: dict[type[ast.AST], str] = {
    ast.Lambda: "lambdas",
    ast.NamedExpr: "assignments (:=)",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.JoinedStr: "f-strings",
    ast.FormattedValue: "f-strings",
    ast.Starred: "* unpacking",
}
MAX_ORACLE_LENGTH = 2000
MODULE_MEANING = {"torch": "the torch module", "math": "the math module", "F": "torch.nn.functional"}


def validate_oracle(
    text: object, names: Iterable[str], *, later: Iterable[str] = ()
) -> ExpressionError | None:
    """None when `text` is an acceptable PyTorch oracle over `names`, else the error.

    `names` are the arguments, sizes and intermediates as declared; the oracle writes each as
    `oracle_spelling` says (an argument `F` is `F_`, an argument `in` is `in_`), and torch, math and F
    (torch.nn.functional) are always the modules. `later`: intermediates defined after this expression,
    named in the message when it uses one. Allowed: calls, indexing, arithmetic, constants; attribute
    access whose name does not start with "_" and is not on the deny list (files, code, state).
    """
    if not isinstance(text, str):
        return ExpressionError(f"an oracle is a string holding a PyTorch expression, not {describe(text)}")
    if len(text) > MAX_ORACLE_LENGTH:
        return ExpressionError(f"oracle is longer than {MAX_ORACLE_LENGTH} characters")
    stripped = text.lstrip()
    offset = len(text[: len(text) - len(stripped)].encode())
    if not stripped.strip():
        return ExpressionError('empty oracle: write a PyTorch expression such as "torch.softmax(x, dim=-1)"')
    declared = list(dict.fromkeys(names))
    try:
        tree = ast.parse(stripped, mode="eval").body
    except SyntaxError as error:
        start = offset + _byte_offset(stripped, error.lineno or 1, (error.offset or 1) - 1)
        written = _name_tokens(stripped)
        hints = [
            f"the argument `{name}` is written `{oracle_spelling(name)}` in an oracle"
            for name in declared
            if keyword.iskeyword(name) and (written is None or name in written)
        ]
        return ExpressionError(
            f"not a valid Python expression: {error.msg}{''.join('; ' + h for h in hints)}", start
        )
    spelled = {oracle_spelling(name): name for name in declared}
    attribute_bases = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    context = _OracleNames(spelled, attribute_bases, frozenset(later))
    for node in ast.walk(tree):
        problem = _oracle_problem(node, context)
        if problem:
            return ExpressionError(problem, *_node_span(stripped, offset, node))
    return None


def _name_tokens(text: str) -> set[str] | None:
    """The names and keywords written in `text` (which may not parse), or None when it cannot be split
    into tokens (an unclosed bracket or string)."""
    try:
        return {
            token.string
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.NAME
        }
    except (tokenize.TokenError, SyntaxError):
        return None


@dataclass(frozen=True)
class _OracleNames:
    spelled: dict[str, str]  # as the oracle writes it -> as declared
    attribute_bases: set[int]  # ids of the nodes that are `x` in some `x.attr`
    later: frozenset[str]


def _oracle_problem(node: ast.AST, names: _OracleNames) -> str | None:
    if type(node) in _FORBIDDEN_NODES:
        return f"{_FORBIDDEN_NODES[type(node)]} are not allowed in an oracle"
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            return f"names starting with '_' are not allowed: '{node.id}'"
        if node.id in ORACLE_MODULES:
            # `F.conv2d(x, F_)` is the module; a bare `F` where an argument F exists meant the argument.
            if node.id in names.spelled.values() and id(node) not in names.attribute_bases:
                return (
                    f"'{node.id}' in an oracle is {MODULE_MEANING[node.id]}: "
                    f"write {oracle_spelling(node.id)} for the argument {node.id}"
                )
            return None
        if node.id in names.spelled or node.id in ORACLE_BUILTINS:
            return None
        if node.id in names.later:
            return (
                f"'{node.id}' is defined below this intermediate: an intermediate may use only those above it"
            )
        if node.id not in names.spelled:
            known = [*names.spelled, *ORACLE_MODULES]
            return (
                f"unknown name '{node.id}' (an oracle may use: {', '.join(known)}, and Python's "
                f"{', '.join(ORACLE_BUILTINS)}){suggest(node.id, [*known, *ORACLE_BUILTINS])}"
            )
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            return f"attributes starting with '_' are not allowed: '.{node.attr}'"
        if (
            isinstance(node.value, ast.Name)
            and node.value.id == "F"
            and "F" in names.spelled.values()
            and node.attr not in FUNCTIONAL_NAMES
        ):  # `F.view(1, 1, -1)` beside an argument F meant the argument
            return (
                f"F in an oracle is torch.nn.functional, which has no '{node.attr}': "
                f"write F_.{node.attr} for the argument F"
            )
        if node.attr in _FORBIDDEN_ATTRIBUTES or node.attr.startswith("set_"):
            return f"'.{node.attr}' is not allowed in an oracle (it reaches outside computing a tensor)"
    if isinstance(node, ast.Constant):
        if (
            isinstance(node.value, int)
            and not isinstance(node.value, bool)
            and abs(node.value) >= MAX_MAGNITUDE
        ):
            return "integer constant too large"
        if isinstance(node.value, (str, bytes)) and len(node.value) > 256:
            return "string constant too long"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        # Python evaluates constant powers eagerly: 10 ** 10 ** 9 would hang the worker.
        exponent = node.right.operand if isinstance(node.right, ast.UnaryOp) else node.right
        if not isinstance(exponent, ast.Constant) or not isinstance(exponent.value, (int, float)):
            return "the exponent of ** must be a number literal (use torch.pow for tensor exponents)"
        if abs(exponent.value) > 64:
            return "exponent too large (at most 64)"
        if not any(isinstance(child, (ast.Name, ast.Call, ast.Attribute)) for child in ast.walk(node.left)):
            return "constant powers are not allowed: write the value"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        # Repeating a sequence ("a" * n, [0] * n) builds it in memory before torch sees anything.
        for side in (node.left, node.right):
            if isinstance(side, (ast.List, ast.Tuple)) or (
                isinstance(side, ast.Constant) and isinstance(side.value, (str, bytes))
            ):
                return "repeating a sequence with * is not allowed in an oracle"
    return None
