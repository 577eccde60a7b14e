"""The shared machinery of spec validation: problems by key path, and integer expressions checked against
the sizes. `arguments.py` and `validate.py` build on `Checker`.

Positions are not known here: each problem names its key path (and, inside an expression string, the
byte range of the bad token) and `parse.py` turns that into a line and column in the .cu file. Validation
goes on after a problem so that one pass reports all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cuda_agent.agent.kernels import Kernel
from cuda_agent.agent.spec.expressions import ExpressionError, describe, nearest, parse_expression
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
        what: str = "",
    ) -> str | None:
        """Validate an integer expression and, when it can be, evaluate it at the benchmark sizes.
        Returns its text, or None after reporting."""
        try:
            expression = parse_expression(value, self.size_names, allow_block=allow_block)
        except ExpressionError as error:
            if isinstance(value, str):
                self.expression_issue(path, error)
            else:
                self.issue(
                    path,
                    f"{what or 'this'} must be an integer or an expression string, not {describe(value)}",
                )
            return None
        values: dict[str, int] = dict(self.sizes)
        values.update({f"block.{axis}": (block[i] if i < len(block) else 1) for i, axis in enumerate("xyz")})
        if minimum is not None and all(name in values for name in expression.names):
            try:
                result = expression.evaluate(values)
            except ExpressionError as error:
                self.expression_issue(path, error, value)
                return None
            if result < minimum:
                self.issue(
                    path,
                    f"{what or expression.text} is {result} at the benchmark sizes; it must be ≥ {minimum}",
                )
        return expression.text

    def value_expression(
        self, path: KeyPath, value: Any, *, integer_only: bool, what: str
    ) -> ValueExpr | None:
        """A number as written, or an integer expression string (validated)."""
        if isinstance(value, float) and not integer_only:
            return value
        if isinstance(value, str) or is_int(value):
            text = self.integer(path, value, minimum=None, what=what)
            return None if text is None else value
        kind = "an integer or an expression of the sizes" if integer_only else "a number or an expression"
        self.issue(path, f"{what} must be {kind}, not {describe(value)}")
        return None

    def evaluate(self, value: ValueExpr) -> float | int | None:
        """The value at the benchmark sizes, or None when it cannot be known (an invalid size)."""
        if not isinstance(value, str):
            return value
        try:
            return parse_expression(value, self.sizes).evaluate(self.sizes)
        except ExpressionError:
            return None
