"""Safe integer expressions for sizes, shapes and launch shapes, and a checker for PyTorch oracle expressions.

Spec expressions come from files anyone can open, so nothing here evaluates code: the text is parsed with
`ast.parse(mode="eval")` (parsing only) and the tree is walked by hand over a short list of node kinds.
Positions in errors are UTF-8 byte offsets into the expression text, so the caller can add the offset of
the string in the file and point at the exact token.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import cast

BLOCK_NAMES = ("block.x", "block.y", "block.z")
# Results beyond int64 are never a real size; bounding them also keeps `2 ** 10 ** 9` from eating the CPU.
MAX_MAGNITUDE = 1 << 63
# Long enough for any real launch shape; short enough that the tree walks stay far from the recursion limit.
MAX_EXPRESSION_LENGTH = 400
_FUNCTIONS = ("ceil_div", "cdiv", "min", "max")
_BINARY_OPERATORS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
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
    """A validated integer expression. `names` are the sizes it uses; the block appears as "block.x"."""

    text: str
    names: frozenset[str]
    tree: ast.expr = field(compare=False, repr=False)
    offset: int = field(default=0, compare=False, repr=False)  # bytes of leading whitespace stripped

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The value with `values` for the names; ExpressionError for division by zero or huge results."""
        return _Evaluator(self.text, values, self.offset).visit(self.tree)


def parse_expression(
    text: str | int, names: Iterable[str], *, allow_block: bool = False, what: str = "size"
) -> Expression:
    """Parse and validate `text`; `names` are the sizes it may use, `allow_block` admits block.x/y/z.

    `what` names the things in `names` in messages ("unknown size 'colz'").
    Raises ExpressionError at the offending token.
    """
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ExpressionError(f"expected an integer or an expression string, not {describe(text)}")
    # Specs are re-read on every edit and the same expressions come back: parse each text once.
    return _parse_cached(str(text), tuple(dict.fromkeys(names)), allow_block, what)


@lru_cache(maxsize=4096)
def _parse_cached(text: str, names: tuple[str, ...], allow_block: bool, what: str) -> Expression:
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
    stripped = text.lstrip()
    offset = len(text[: len(text) - len(stripped)].encode())
    if not stripped.strip():
        raise ExpressionError('empty expression: write an integer or an expression such as "rows * cols"')
    try:
        tree = ast.parse(stripped, mode="eval").body
    except SyntaxError as error:
        start = offset + _byte_offset(stripped, error.lineno or 1, (error.offset or 1) - 1)
        raise ExpressionError(f"not a valid expression: {error.msg}", start) from None
    checker = _IntegerChecker(stripped, offset, list(names), allow_block, what)
    checker.visit(tree)
    return Expression(text, frozenset(checker.used), tree, offset)


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


class _IntegerChecker(ast.NodeVisitor):
    """Rejects every node that is not integer arithmetic over known names; records the names used."""

    def __init__(self, text: str, offset: int, names: list[str], allow_block: bool, what: str) -> None:
        self.text, self.offset, self.names, self.allow_block, self.what = (
            text,
            offset,
            names,
            allow_block,
            what,
        )
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
        raise self.fail(
            node,
            f"{kind} are not allowed here: use integers, sizes, + - * // % ** << >>, "
            "ceil_div(a, b), min(...), max(...)",
        )

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise self.fail(node, f"{node.value!r} is not an integer: sizes and launch shapes are integers")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.names:
            self.used.add(node.id)
            return
        if node.id == "block":
            raise self.fail(
                node, "write block.x, block.y or block.z" if self.allow_block else self._no_block()
            )
        if node.id in _CUDA_HINTS:
            raise self.fail(node, f"'{node.id}' is not known here: {_CUDA_HINTS[node.id]}")
        if node.id in _FUNCTIONS:
            raise self.fail(node, f"{node.id} is a function: call it, e.g. {node.id}(a, b)")
        known = ", ".join(self.names) if self.names else f"none are defined; add them under [{self.what}s]"
        hint = suggest(node.id, [*self.names, *(BLOCK_NAMES if self.allow_block else ())])
        raise self.fail(node, f"unknown {self.what} '{node.id}' ({self.what}s are: {known}){hint}")

    def _no_block(self) -> str:
        return "the block shape (block.x/y/z) is only known in [launch] grid and shared_bytes"

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
        raise self.fail(node, "attribute access is not allowed here; only block.x, block.y and block.z")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div):
            raise self.fail(node, "'/' is not allowed: use // for integer division or ceil_div(a, b)")
        if type(node.op) not in _BINARY_OPERATORS:
            raise self.fail(node, "only + - * // % ** << >> are allowed")
        self.visit(node.left)
        self.visit(node.right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise self.fail(node, "only unary - and + are allowed")
        self.visit(node.operand)

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in _FUNCTIONS:
            raise self.fail(
                node.func,
                f"unknown function: use one of {', '.join(_FUNCTIONS)}"
                + (suggest(name, _FUNCTIONS) if name else ""),
            )
        if node.keywords or any(isinstance(argument, ast.Starred) for argument in node.args):
            raise self.fail(node, f"{name}() takes plain positional arguments")
        if name in ("ceil_div", "cdiv") and len(node.args) != 2:
            raise self.fail(node, f"{name}(a, b) takes two arguments: the value and the divisor")
        if name in ("min", "max") and len(node.args) < 2:
            raise self.fail(node, f"{name}() takes at least two arguments")
        for argument in node.args:
            self.visit(argument)


def _shown(node: ast.AST) -> str:
    """An expression as it reads in a message, shortened."""
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


class _Evaluator:
    """Evaluates a tree that _IntegerChecker accepted, with Python's integer semantics and bounded results."""

    def __init__(self, text: str, values: Mapping[str, int], offset: int) -> None:
        self.text, self.values, self.offset = text.lstrip(), values, offset

    def fail(self, node: ast.AST, message: str) -> ExpressionError:
        return ExpressionError(message, *_node_span(self.text, self.offset, node))

    def bounded(self, node: ast.AST, value: int) -> int:
        if abs(value) >= MAX_MAGNITUDE:
            raise self.fail(node, f"'{_shown(node)}' is too large (beyond 2**63)")
        return value

    def visit(self, node: ast.expr) -> int:
        if isinstance(node, ast.Constant):
            return self.bounded(node, cast(int, node.value))  # the checker admitted only ints
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else f"block.{node.attr}"
            if name not in self.values:
                raise self.fail(node, f"no value for '{name}'")
            return self.values[name]
        if isinstance(node, ast.UnaryOp):
            operand = self.visit(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            return self.bounded(node, self.binary(node, self.visit(node.left), self.visit(node.right)))
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            arguments = [self.visit(argument) for argument in node.args]
            if node.func.id in ("min", "max"):
                return min(arguments) if node.func.id == "min" else max(arguments)
            if arguments[1] == 0:
                raise self.fail(node, f"division by zero in '{_shown(node)}'")
            return -(-arguments[0] // arguments[1])
        raise self.fail(node, "unexpected expression")  # the checker admits nothing else

    def binary(self, node: ast.BinOp, left: int, right: int) -> int:
        operations: dict[type[ast.operator], Callable[[int, int], int]] = {
            ast.Add: int.__add__,
            ast.Sub: int.__sub__,
            ast.Mult: int.__mul__,
        }
        if type(node.op) in operations:
            return operations[type(node.op)](left, right)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            if right == 0:
                raise self.fail(node, f"division by zero in '{_shown(node)}'")
            return left // right if isinstance(node.op, ast.FloorDiv) else left % right
        if isinstance(node.op, ast.Pow):
            if right < 0:
                raise self.fail(node, f"negative exponent in '{_shown(node)}': the result is not an integer")
            # Decide before computing: a huge power would take seconds and gigabytes.
            if abs(left) > 1 and right * math.log2(abs(left)) >= 64:
                raise self.fail(node, f"'{_shown(node)}' is too large (beyond 2**63)")
            return int(left**right)  # a non-negative exponent: an int
        # Shifts.
        if right < 0:
            raise self.fail(node, f"negative shift count in '{_shown(node)}'")
        if isinstance(node.op, ast.RShift):
            return left >> min(right, 64)
        if left != 0 and right >= 64:
            raise self.fail(node, f"'{_shown(node)}' is too large (beyond 2**63)")
        return left << right


# --- PyTorch oracle expressions -------------------------------------------------------------------------

ORACLE_MODULES = ("torch", "math", "F")  # F is torch.nn.functional
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


def validate_oracle(text: object, names: Iterable[str]) -> ExpressionError | None:
    """None when `text` is an acceptable PyTorch oracle over `names` (arguments and sizes), else the error.

    Allowed: the names, torch, math and F (torch.nn.functional); calls, indexing, arithmetic, constants;
    attribute access whose name does not start with "_" and is not on the deny list (files, code, state).
    """
    if not isinstance(text, str):
        return ExpressionError(f"an oracle is a string holding a PyTorch expression, not {describe(text)}")
    if len(text) > MAX_ORACLE_LENGTH:
        return ExpressionError(f"oracle is longer than {MAX_ORACLE_LENGTH} characters")
    stripped = text.lstrip()
    offset = len(text[: len(text) - len(stripped)].encode())
    if not stripped.strip():
        return ExpressionError('empty oracle: write a PyTorch expression such as "torch.softmax(x, dim=-1)"')
    try:
        tree = ast.parse(stripped, mode="eval").body
    except SyntaxError as error:
        start = offset + _byte_offset(stripped, error.lineno or 1, (error.offset or 1) - 1)
        return ExpressionError(f"not a valid Python expression: {error.msg}", start)
    allowed = list(dict.fromkeys(names))
    for node in ast.walk(tree):
        problem = _oracle_problem(node, allowed)
        if problem:
            return ExpressionError(problem, *_node_span(stripped, offset, node))
    return None


def _oracle_problem(node: ast.AST, names: list[str]) -> str | None:
    if type(node) in _FORBIDDEN_NODES:
        return f"{_FORBIDDEN_NODES[type(node)]} are not allowed in an oracle"
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            return f"names starting with '_' are not allowed: '{node.id}'"
        if node.id not in names and node.id not in ORACLE_MODULES:
            known = [*names, *ORACLE_MODULES]
            return (
                f"unknown name '{node.id}' (an oracle may use: {', '.join(known)}){suggest(node.id, known)}"
            )
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            return f"attributes starting with '_' are not allowed: '.{node.attr}'"
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
