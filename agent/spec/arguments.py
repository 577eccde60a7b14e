"""Validation of [args]: every kernel parameter's role, dtype, shape, init or value, and aliasing,
checked against the signature (pointer or value, const, C type)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cuda_agent.agent.kernels import Kernel, Parameter
from cuda_agent.agent.spec.checks import Checker, as_written, value_label
from cuda_agent.agent.spec.dtypes import (
    DTYPE_ALIASES,
    DTYPES,
    INTEGER_RANGE,
    canonical_dtype,
    dtype_of_c_type,
    is_float,
    vector_of_c_type,
)
from cuda_agent.agent.spec.expressions import ExpressionError, describe, parse_real_expression, suggest
from cuda_agent.agent.spec.model import (
    DISTRIBUTIONS,
    FLOAT_MAX,
    INFINITIES,
    ROLES,
    ArgumentSpec,
    InitSpec,
    KeyPath,
    ValueExpr,
)

ARGUMENT_KEYS = ("role", "dtype", "shape", "init", "value", "may_alias")
INIT_KEYS = ("dist", "mean", "std", "low", "high", "fill")
# What a fill may be, for messages.
FILL_FORMS = 'a number, "inf", "-inf" or an expression of the sizes'
# Which of those each distribution reads; zeros and ones are constant fills (accumulators start at 0).
INIT_PARAMETERS = {
    "normal": ("mean", "std"),
    "uniform": ("low", "high"),
    "integers": ("low", "high"),
    "offsets": ("low", "high"),
}


def signature(kernel: Kernel) -> str:
    return f"{kernel.name}({', '.join(parameter.text for parameter in kernel.parameters)})"


class ArgumentChecker(Checker):
    """[args]: one entry per parameter of the kernel, each consistent with how the parameter is declared."""

    def arguments(self) -> tuple[ArgumentSpec, ...] | None:
        example = 'x = { role = "input", dtype = "float32", shape = ["n"] }'
        table = self.table(("args",), required=True, example=f"[args] {example}")
        if table is None:
            return None
        names = [parameter.name for parameter in self.kernel.parameters]
        for name in table:
            if name not in names:
                self.issue(
                    ("args", name),
                    f"'{name}' is not a parameter of {signature(self.kernel)}{suggest(name, names)}",
                    key=True,
                )
        built: list[ArgumentSpec] = []
        for index, parameter in enumerate(self.kernel.parameters):
            if not parameter.name:
                self.issue(
                    ("args",),
                    f"parameter {index + 1} of {self.kernel.name} ({parameter.text}) has no name; "
                    "name it so the spec can refer to it",
                )
            elif parameter.name not in table:
                self.issue(
                    ("args",),
                    f"parameter '{parameter.name}' ({parameter.text}) has no entry in [args]: "
                    f"add {self.example_entry(parameter)}",
                )
            else:
                argument = self.argument(parameter, table[parameter.name])
                if argument is not None:
                    built.append(argument)
        self.check_aliases(built)
        return tuple(built) if len(built) == len(self.kernel.parameters) else None

    def c_dtype(self, parameter: Parameter) -> str | None:
        return dtype_of_c_type(self.template_types.get(parameter.type, parameter.type))

    def example_entry(self, parameter: Parameter) -> str:
        vector = vector_of_c_type(self.template_types.get(parameter.type, parameter.type))
        dtype = self.c_dtype(parameter) or (vector[0] if vector else "float32")
        if not parameter.is_buffer:
            value = f'"{parameter.name}"' if parameter.name in self.sizes else "1"
            return f'{parameter.name} = {{ role = "scalar", dtype = "{dtype}", value = {value} }}'
        role = "input" if parameter.is_const else "output"
        shape = ", ".join(f'"{name}"' for name in self.size_names[:2]) or '"n"'
        if parameter.accessor is not None:  # one size a dimension of the accessor
            names = [*self.size_names, *(f"n{i}" for i in range(parameter.accessor.rank))]
            shape = ", ".join(f'"{name}"' for name in names[: parameter.accessor.rank])
        if vector:  # a float4* is float32 with a trailing axis of its 4 components
            shape += f", {vector[1]}"
        return f'{parameter.name} = {{ role = "{role}", dtype = "{dtype}", shape = [{shape}] }}'

    def argument(self, parameter: Parameter, entry: Any) -> ArgumentSpec | None:
        name, path = parameter.name, ("args", parameter.name)
        if not isinstance(entry, dict):
            self.issue(
                path, f"args.{name} is a table: {self.example_entry(parameter)}; got {describe(entry)}"
            )
            return None
        if parameter.pointer_depth > 1:
            self.issue(
                path,
                f"{name} is a pointer to pointers ({parameter.text}): a spec describes flat buffers only",
                key=True,
            )
            return None
        before = len(self.issues)
        self.unknown_keys(entry, path, ARGUMENT_KEYS, f"args.{name}")
        role = self.role(parameter, entry, path)
        dtype = self.dtype(parameter, entry, path)
        shape: tuple[str, ...] = ()
        init = value = None
        if role == "scalar":
            if "shape" in entry:
                self.issue((*path, "shape"), f"{name} is a scalar: scalars have no shape", key=True)
            value, init = self.scalar(parameter, entry, dtype, path)
        elif role is not None:  # a buffer
            shape = self.shape(entry, path)
            accessor = parameter.accessor
            if accessor is not None and shape and len(shape) != accessor.rank:
                self.issue(
                    (*path, "shape"),
                    f"{name} is a {accessor.template} of {accessor.rank} dimension(s) ({parameter.text}): "
                    f"its shape lists {accessor.rank} sizes, the accessor's sizes, not {len(shape)}",
                )
            if "value" in entry:
                self.issue(
                    (*path, "value"), f"only scalars have a value; {name} is a buffer: use init", key=True
                )
            init_table = entry.get("init")
            if role == "output" and isinstance(init_table, dict) and "fill" in init_table:
                # A fill is a start value the kernel reads (a running maximum): an output would never see it.
                self.issue(
                    (*path, "init", "fill"),
                    f"{name} is an output: outputs are not filled but poisoned before every run, to catch "
                    'unwritten elements; a buffer the kernel reads before writing it is role = "inout"',
                    key=True,
                )
            init = self.init(entry.get("init"), dtype, (*path, "init"))
        may_alias = entry.get("may_alias")
        if may_alias is not None and not isinstance(may_alias, str):
            self.issue((*path, "may_alias"), 'may_alias names another argument, e.g. may_alias = "x"')
            may_alias = None
        if len(self.issues) > before or role is None or dtype is None:
            return None
        bits = parameter.accessor.index_bits if parameter.accessor else 0
        return ArgumentSpec(name, role, dtype, shape, init, value, may_alias, bits)  # type: ignore[arg-type]

    def scalar(
        self, parameter: Parameter, entry: dict[str, Any], dtype: str | None, path: KeyPath
    ) -> tuple[ValueExpr | None, InitSpec | None]:
        """A scalar's fixed value or its init distribution: exactly one of the two."""
        name = parameter.name
        if "value" in entry and "init" in entry:
            self.issue(
                (*path, "value"), f"give {name} either a fixed value or an init distribution, not both"
            )
        elif "value" in entry:
            return self.scalar_value(entry["value"], dtype, (*path, "value")), None
        elif "init" in entry:
            return None, self.init(entry["init"], dtype, (*path, "init"))
        elif not self.given(entry, path, "value") and not self.given(entry, path, "init"):
            fix = f'value = "{name}"' if name in self.sizes else "value = 1"
            self.issue(
                path,
                f"scalar {name} needs a value: add {fix} (a number or an expression of the sizes), "
                'or init = "normal" to draw it',
                key=True,
            )
        return None, None

    def role(self, parameter: Parameter, entry: dict[str, Any], path: KeyPath) -> str | None:
        name, role = parameter.name, entry.get("role")
        if role is None:
            if not parameter.is_buffer:
                return "scalar"  # a value parameter can be nothing else
            if self.given(entry, path, "role"):
                return None
            self.issue(
                path,
                f'{name} ({parameter.text}) has no role: add role = "input" '
                '(input, output, inout; an output that is also read is "inout")',
                key=True,
            )
            return None
        if role not in ROLES:
            hint = suggest(str(role), ROLES) or f" (roles: {', '.join(ROLES)})"
            self.issue((*path, "role"), f"unknown role {role!r}{hint}")
            return None
        if parameter.is_buffer and role == "scalar":
            what = "an accessor" if parameter.accessor else "a pointer"
            self.issue(
                (*path, "role"), f"{name} is {what} ({parameter.text}): its role is input, output or inout"
            )
            return None
        if not parameter.is_buffer and role != "scalar":
            self.issue(
                (*path, "role"), f'{name} is not a pointer ({parameter.text}): give it role = "scalar"'
            )
            return None
        if parameter.is_buffer and parameter.is_const and role in ("output", "inout"):
            what = "a const accessor" if parameter.accessor else "a pointer to const"
            self.issue(
                (*path, "role"),
                f"{name} is {what} ({parameter.text}), so the kernel cannot "
                f'write it: role = "input", or drop the const',
            )
            return None
        return str(role)

    def dtype(self, parameter: Parameter, entry: dict[str, Any], path: KeyPath) -> str | None:
        declared = self.c_dtype(parameter)
        written = entry.get("dtype")
        if written is None:
            if declared is None and not self.given(entry, path, "dtype"):
                self.issue(
                    path,
                    f'{parameter.name} ({parameter.text}) needs a dtype: add dtype = "float32" '
                    f"({', '.join(DTYPES)})",
                    key=True,
                )
            return declared
        dtype = canonical_dtype(written) if isinstance(written, str) else None
        if dtype is None:
            hint = suggest(str(written), DTYPE_ALIASES) or f" (dtypes: {', '.join(DTYPES)})"
            self.issue((*path, "dtype"), f"unknown dtype {written!r}{hint}")
            return None
        if declared is not None and declared != dtype:
            type_text = self.template_types.get(parameter.type, parameter.type)
            self.issue(
                (*path, "dtype"),
                f"{parameter.name} is declared {type_text} in the kernel, which is "
                f'{declared}, not {dtype}: dtype = "{declared}"',
            )
            return None
        return dtype

    def shape(self, entry: dict[str, Any], path: KeyPath) -> tuple[str, ...]:
        shape = entry.get("shape")
        if shape is None:
            if self.given(entry, path, "shape"):
                return ()
            self.issue(
                path,
                f'{path[-1]} is a buffer and needs a shape: add shape = ["n"] '
                "(a list of sizes or expressions of them)",
                key=True,
            )
            return ()
        if not isinstance(shape, list) or not shape:
            self.issue(
                (*path, "shape"),
                'shape is a non-empty list, e.g. shape = ["rows", "cols"] or [1] for one '
                f"element; got {describe(shape)}",
            )
            return ()
        dims = [
            self.integer(
                (*path, "shape", i), dim, minimum=1, what="a buffer dimension", why="shapes are integers"
            )
            for i, dim in enumerate(shape)
        ]
        return tuple(dim for dim in dims if dim is not None) if None not in dims else ()

    def scalar_value(self, value: Any, dtype: str | None, path: KeyPath) -> ValueExpr | None:
        """An integer expression for an integer dtype (range-checked), a real one for a float dtype."""
        integer = dtype is not None and not is_float(dtype)
        if integer and isinstance(value, float):
            self.issue(path, f"{path[1]} is {dtype}: its value must be an integer, not {value}")
            return None
        why = f"{path[1]} is {dtype}, an integer"
        # A value may follow the launch (`value = "block.x"`): each kernel then gets its own block's.
        result = self.value_expression(path, value, integer_only=integer, why=why, allow_block=True)
        if result is not None and dtype in INTEGER_RANGE:
            self.check_range(path, self.evaluate(result), dtype, what=f"the value of {path[1]}")
        return result

    def check_range(self, path: KeyPath, value: float | int | None, dtype: str, *, what: str) -> None:
        low, high = INTEGER_RANGE[dtype]
        if value is not None and not low <= value <= high:
            self.issue(path, f"{what} is {value}, outside {dtype}'s range [{low}, {high}]")

    def init(self, value: Any, dtype: str | None, path: KeyPath) -> InitSpec | None:
        if dtype is None:
            return None
        if value is None:
            return InitSpec.default(dtype)
        if isinstance(value, str):
            table: dict[str, Any] = {"dist": value}
        elif isinstance(value, dict):
            table = value
            self.unknown_keys(table, path, INIT_KEYS, "init")
        else:
            self.issue(
                path,
                f'init is "normal", "uniform", "integers" or a table such as '
                f'{{ dist = "uniform", low = -1, high = 1 }} or {{ fill = "-inf" }}; got {describe(value)}',
            )
            return None
        if "fill" in table:
            return self.fill(table, dtype, path)
        dist = table.get("dist") or self.default_dist(table, dtype)
        dist_path = (*path, "dist") if isinstance(value, dict) else path
        if dist == "fill":
            self.issue(
                dist_path, 'a constant fill is written init = { fill = 0.5 } (or "-inf"), without dist'
            )
            return None
        if dist not in DISTRIBUTIONS:
            hint = suggest(str(dist), DISTRIBUTIONS) or f" ({', '.join(DISTRIBUTIONS)}, or {{ fill = 0.5 }})"
            self.issue(dist_path, f"unknown distribution {dist!r}{hint}")
            return None
        if not is_float(dtype) and dist in ("normal", "uniform"):
            self.issue(dist_path, f'{dtype} values are drawn with dist = "integers" ({dist} draws floats)')
            return None
        if is_float(dtype) and dist == "offsets":
            self.issue(dist_path, f"offsets are indices: an integer dtype, not {dtype}")
            return None
        parameters = {key for keys in INIT_PARAMETERS.values() for key in keys}
        for key in sorted(parameters - set(INIT_PARAMETERS.get(dist, ()))):
            if key in table:
                owner = '"normal"' if key in ("mean", "std") else '"uniform", "integers" or "offsets"'
                self.issue((*path, key), f"{key} applies to dist = {owner}, not {dist}", key=True)
        default = InitSpec.default(dtype, dist)
        # mean and std are real expressions (normal draws floats); low and high too, except for integers.
        integer_bounds = dist in ("integers", "offsets")
        why = f'dist = "{dist}" draws integers: its bounds are integers'
        values: dict[str, ValueExpr] = {}
        for key in ("mean", "std", "low", "high"):
            given = table.get(key, getattr(default, key))
            checked = self.value_expression(
                (*path, key), given, integer_only=integer_bounds and key in ("low", "high"), why=why
            )
            values[key] = checked if checked is not None else getattr(default, key)
        std = self.evaluate(values["std"], real=True)
        if dist == "normal" and "std" in table and std is not None and std <= 0:
            shown = (
                f"{as_written((*path, 'std'), values['std'])} is {std}: "
                if isinstance(values["std"], str)
                else ""
            )
            self.issue((*path, "std"), f"{shown}std must be > 0")
        if dist in ("uniform", "integers", "offsets"):
            self.check_bounds(path, values["low"], values["high"], dtype, real=not integer_bounds)
        if dist == "offsets" and (low := self.evaluate(values["low"])) is not None and low < 0:
            self.issue(
                (*path, "low"), f"offsets grow by counts from [low, high): low = {low} would shrink them"
            )
        return InitSpec(dist, values["mean"], values["std"], values["low"], values["high"])  # type: ignore[arg-type]

    def fill(self, table: Mapping[str, Any], dtype: str, path: KeyPath) -> InitSpec | None:
        """`init = { fill = ... }`: every element the same number. Floats take a number (an integer is a
        fine float), "inf", "-inf" (or TOML's bare inf/-inf) or a real expression of the sizes; integer
        dtypes an integer or an integer expression, within the dtype's range."""
        before = len(self.issues)
        for key in table:
            if key != "fill" and key in INIT_KEYS:
                self.issue((*path, key), f"{key} does not apply to a constant fill: remove it", key=True)
        written, fill_path = table["fill"], (*path, "fill")
        checked = self.fill_value(written, dtype, fill_path)
        if checked is None or len(self.issues) > before:
            return None
        return InitSpec("fill", fill=checked)

    def fill_value(self, written: Any, dtype: str, path: KeyPath) -> ValueExpr | None:
        """The fill as written, checked against the dtype; None after reporting."""
        label = value_label(path)
        if isinstance(written, bool) or not isinstance(written, (int, float, str)):
            self.issue(path, f"{label} must be {FILL_FORMS}, not {describe(written)}")
            return None
        if (isinstance(written, float) and math.isnan(written)) or str(written).strip().lower() == "nan":
            self.issue(
                path,
                f"{label} is NaN: every result computed from it is NaN, which matches NaN whatever the "
                'kernel does, so nothing would be checked; fill with a number, "inf" or "-inf"',
            )
            return None
        infinite = (isinstance(written, float) and math.isinf(written)) or (
            isinstance(written, str) and written.strip() in INFINITIES
        )
        if is_float(dtype):
            return written if infinite else self.float_fill(written, dtype, path)
        if infinite:
            low, high = INTEGER_RANGE[dtype]
            self.issue(path, f"{dtype} has no infinity: fill with an integer in [{low}, {high}]")
            return None
        return self.integer_fill(written, dtype, path)

    def integer_fill(self, written: int | float | str, dtype: str, path: KeyPath) -> ValueExpr | None:
        """An integer or an integer expression, within the dtype's range."""
        if isinstance(written, float):
            self.issue(path, f"{path[1]} is {dtype}: its fill must be an integer, not {written}")
            return None
        why = f"{path[1]} is {dtype}: its fill is an integer"
        result = self.value_expression(path, written, integer_only=True, why=why)
        if result is not None:
            self.check_range(path, self.evaluate(result), dtype, what=f"the fill of {path[1]}")
        return result

    def float_fill(self, written: int | float | str, dtype: str, path: KeyPath) -> ValueExpr | None:
        """A finite number or a real expression, within the dtype's finite range (beyond it the store
        would make it infinity, which is "inf" to write)."""
        if isinstance(written, str):
            try:
                parse_real_expression(written, self.size_names)
            except ExpressionError as error:  # the usual message, and what a fill may be
                hint = f" (a fill is {FILL_FORMS})"
                self.written_issue(
                    path, written, ExpressionError(error.message + hint, error.start, error.end)
                )
                return None
        result = self.value_expression(path, written, integer_only=False)
        number = self.evaluate(result, real=True) if result is not None else None
        limit = FLOAT_MAX[dtype]
        if number is not None and abs(number) > limit:
            self.issue(
                path,
                f"{as_written(path, written)} is {number:g}, beyond {dtype}'s largest number ({limit:g}): "
                'it would be stored as infinity; write "inf" or "-inf" if that is meant',
            )
            return None
        return result

    @staticmethod
    def default_dist(table: Mapping[str, Any], dtype: str) -> str:
        """No dist written: integers for integer dtypes; uniform when low/high are given; else normal."""
        if not is_float(dtype):
            return "integers"
        return "uniform" if "low" in table or "high" in table else "normal"

    def check_bounds(self, path: KeyPath, low: ValueExpr, high: ValueExpr, dtype: str, *, real: bool) -> None:
        low_value, high_value = self.evaluate(low, real=real), self.evaluate(high, real=real)
        if low_value is not None and high_value is not None and low_value >= high_value:
            self.issue(
                (*path, "high"), f"the range [low, high) is empty: low = {low_value}, high = {high_value}"
            )
        if dtype in INTEGER_RANGE:
            self.check_range((*path, "low"), low_value, dtype, what="low")
            self.check_range(
                (*path, "high"), None if high_value is None else high_value - 1, dtype, what="high - 1"
            )

    def check_aliases(self, arguments: list[ArgumentSpec]) -> None:
        by_name = {argument.name: argument for argument in arguments}
        for argument in arguments:
            target_name, path = argument.may_alias, ("args", argument.name, "may_alias")
            if target_name is None:
                continue
            target = by_name.get(target_name)
            if argument.role not in ("output", "inout"):
                self.issue(path, f"only an output may alias an input; {argument.name} is {argument.role}")
            elif target is None:
                names = [a.name for a in arguments if a.is_buffer and a.name != argument.name]
                self.issue(
                    path, f"may_alias: no buffer argument named '{target_name}'{suggest(target_name, names)}"
                )
            elif target_name == argument.name or target.role not in ("input", "inout"):
                self.issue(
                    path, f"{argument.name} may only alias an input, and '{target_name}' is {target.role}"
                )
            elif (target.dtype, target.shape) != (argument.dtype, argument.shape):
                self.issue(
                    path, f"{argument.name} and {target_name} must have the same dtype and shape to alias"
                )
