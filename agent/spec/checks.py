"""The shared machinery of spec validation: problems by key path, and integer expressions checked against
the sizes. `arguments.py` and `validate.py` build on `Checker`.

Positions are not known here: each problem names its key path (and, inside an expression string, the
byte range of the bad token) and `parse.py` turns that into a line and column in the .cu file. Validation
goes on after a problem so that one pass reports all of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cuda_agent.agent.kernels import Kernel
from cuda_agent.agent.spec.expressions import (
    ExpressionError,
    describe,
    nearest,
    parse_expression,
    parse_real_expression,
)
from cuda_agent.agent.spec.model import (
    KeyPath,
    ValueExpr,
)


@dataclass(frozen=True)
class Issue:
    """One problem at a key path. `key`: point at the key, not its value.
    `within`: the bad token's byte range inside a string value."""

    path: KeyPath
    message: str
    key: bool = False
    within: tuple[int, int] | None = None


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Checker:
    """Collects issues while one spec is validated; knows the sizes declared so far."""

    def __init__(self, data: Mapping[str, Any], kernel: Kernel) -> None:
        self.data, self.kernel = data, kernel
        self.issues: list[Issue] = []
        self.size_names: list[str] = []  # every declared size, valid or not (avoids cascades of "unknown")
        self.sizes: dict[str, int] = {}  # those that evaluated
        self.template_types: dict[str, str] = {}  # template type parameter -> C type of the instantiation
        # The block as written, when it is a valid one: what a scalar's `value = "block.x"` is checked at
        # (the launch is validated after the arguments, and reports a bad block itself).
        self.launch_block: tuple[int, ...] = ()
        self.misspelled: set[KeyPath] = set()  # keys an unknown key probably meant: not reported missing

    # --- reporting -------------------------------------------------------------------------------------

    def issue(
        self, path: KeyPath, message: str, *, key: bool = False, within: tuple[int, int] | None = None
    ) -> None:
        self.issues.append(Issue(path, message, key, within))

    def expression_issue(self, path: KeyPath, error: ExpressionError, value: object = "") -> None:
        """An error in the expression `value`: inside a string it points at the token, else at the value."""
        if isinstance(value, str):
            self.issue(path, error.message, within=(error.start, error.end))
        else:
            self.issue(path, error.message)

    def unknown_keys(
        self, table: Mapping[str, Any], path: KeyPath, allowed: Iterable[str], what: str
    ) -> None:
        allowed = list(allowed)
        for name in table:
            if name not in allowed:
                meant = nearest(name, allowed)
                if meant:  # `valeu`: don't also report `value` as missing
                    self.misspelled.add((*path, meant))
                hint = f"; did you mean '{meant}'?" if meant else f" (allowed: {', '.join(allowed)})"
                self.issue((*path, name), f"unknown key '{name}' in {what}{hint}", key=True)

    def given(self, table: Mapping[str, Any], path: KeyPath, key: str) -> bool:
        """Whether `key` is in `table`, or an unknown key there probably meant it (already reported)."""
        return key in table or (*path, key) in self.misspelled

    def table(self, path: KeyPath, *, required: bool, example: str) -> dict[str, Any] | None:
        value: Any = self.data
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            if required:
                self.issue(path[:-1], f"missing [{'.'.join(map(str, path))}]: add, for example, {example}")
            return None
        if not isinstance(value, dict):
            self.issue(
                path, f"{'.'.join(map(str, path))} must be a table, e.g. {example}; got {describe(value)}"
            )
            return None
        return value

    # --- expressions -----------------------------------------------------------------------------------

    def integer(
        self,
        path: KeyPath,
        value: Any,
        *,
        minimum: int | None,
        allow_block: bool = False,
        block: tuple[int, ...] = (),
        what: str = "it",
        why: str | None = None,
    ) -> str | None:
        """Validate an integer expression and, when it can be, evaluate it at the benchmark sizes.
        `what` names it in "{what} must be ≥ {minimum}"; `why` says why it is an integer (for a float or
        a `/` in it). Returns its text, or None after reporting."""
        try:
            expression = parse_expression(value, self.size_names, allow_block=allow_block, why=why)
        except ExpressionError as error:
            if isinstance(value, str):
                self.written_issue(path, value, error)
            else:
                self.issue(
                    path,
                    f"{value_label(path)} must be an integer or an expression string, not {describe(value)}",
                )
            return None
        values: dict[str, int] = dict(self.sizes)
        values.update(block_values(block))
        if minimum is not None and all(name in values for name in expression.names):
            try:
                result = expression.evaluate(values)
            except ExpressionError as error:
                self.written_issue(path, value, error)
                return None
            if result < minimum:
                self.issue(path, below_minimum(path, value, result, expression.names, values, what, minimum))
        return expression.text

    def value_expression(
        self,
        path: KeyPath,
        value: Any,
        *,
        integer_only: bool,
        why: str | None = None,
        allow_block: bool = False,
    ) -> ValueExpr | None:
        """A number as written, or an expression string (validated): an integer expression when
        `integer_only`, else a real one (float literals, `/`, sqrt, ...); `allow_block`: it may use the
        launch's block (a scalar's value). Returns it as written."""
        if isinstance(value, float) and not integer_only:
            if not math.isfinite(value):
                self.issue(path, f"{value_label(path)} is {value}: it must be a finite number")
                return None
            return value
        if integer_only and (isinstance(value, str) or is_int(value)):
            text = self.integer(
                path, value, minimum=None, why=why, allow_block=allow_block, block=self.launch_block
            )
            return None if text is None else value
        if not integer_only and (isinstance(value, str) or is_int(value)):
            return value if self.real(path, value, allow_block=allow_block) else None
        kind = "an integer or an expression of the sizes" if integer_only else "a number or an expression"
        self.issue(path, f"{value_label(path)} must be {kind}, not {describe(value)}")
        return None

    def real(self, path: KeyPath, value: str | int, *, allow_block: bool = False) -> bool:
        """Validate a real expression and evaluate it at the benchmark sizes (and the written block);
        False after reporting."""
        try:
            expression = parse_real_expression(value, self.size_names, allow_block=allow_block)
            values = self.values()
            if expression.names <= values.keys():
                expression.evaluate_real(values)
        except ExpressionError as error:
            self.written_issue(path, value, error)
            return False
        return True

    def values(self) -> dict[str, int]:
        """The benchmark sizes, and block.x/y/z when the block is known: what expressions evaluate at."""
        values: dict[str, int] = dict(self.sizes)
        if self.launch_block:
            values.update(block_values(self.launch_block))
        return values

    def written_issue(self, path: KeyPath, value: object, error: ExpressionError) -> None:
        """An error in the expression `value`, shown with it ('rows = "n / 2": ...'); inside a string it
        points at the token, else at the value."""
        self.expression_issue(
            path,
            ExpressionError(f"{as_written(path, value)}: {error.message}", error.start, error.end),
            value,
        )

    def evaluate(self, value: ValueExpr, *, real: bool = False) -> float | int | None:
        """The value at the benchmark sizes (and the written block), or None when it cannot be known (an
        invalid size, an invalid block)."""
        if not isinstance(value, str):
            return value
        values = self.values()
        try:
            if real:
                return parse_real_expression(value, values, allow_block=True).evaluate_real(values)
            return parse_expression(value, values, allow_block=True).evaluate(values)
        except ExpressionError:
            return None


def block_values(block: tuple[int, ...]) -> dict[str, int]:
    """block.x/y/z of a block of 1 to 3 dims (missing ones are 1), as expressions name them."""
    return {f"block.{axis}": (block[i] if i < len(block) else 1) for i, axis in enumerate("xyz")}


def value_label(path: KeyPath) -> str:
    """How a value is named in messages: `rows` (a size), `scale` (a scalar's value), `x.shape[1]`,
    `x.init.high`, `launch.grid[0]`."""
    if len(path) == 2 and path[0] == "sizes":
        return str(path[1])
    if len(path) == 3 and path[0] == "args" and path[2] == "value":
        return str(path[1])
    parts = path[1:] if path[:1] == ("args",) else path
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts).lstrip(".")


def as_written(path: KeyPath, value: object) -> str:
    """A value as the spec writes it, with its name: 'rows = "n / 2"', 'x.shape[0] = 0'."""
    text = str(value)
    shown = text if len(text) <= 60 else text[:57] + "..."
    return f'{value_label(path)} = "{shown}"' if isinstance(value, str) else f"{value_label(path)} = {shown}"


def below_minimum(
    path: KeyPath,
    value: object,
    result: int,
    names: Iterable[str],
    values: Mapping[str, int],
    what: str,
    minimum: int,
) -> str:
    """'x.shape[1] = "cols - 2 * pad" is 0 with cols = 2, pad = 1: a buffer dimension must be ≥ 1'."""
    used = [name for name in values if name in set(names)]  # in declaration order, then block.x/y/z
    sizes = f" with {', '.join(f'{name} = {values[name]}' for name in used)}" if used else ""
    shown = (
        as_written(path, value)
        if isinstance(value, str) and str(result) != value.strip()
        else value_label(path)
    )
    return f"{shown} is {result}{sizes}: {what} must be ≥ {minimum}"
