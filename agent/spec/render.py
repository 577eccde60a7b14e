"""Write a KernelSpec back out as a `/* cuda-agent ... */` comment (the editor's "Add benchmark spec" fix).

`parse_specs` of the rendered text gives the same spec back (the round trip is tested), with defaults
left out so the user sees only what matters.
"""

from __future__ import annotations

import json
import re

from cuda_agent.agent.spec.model import ArgumentSpec, InitSpec, KernelSpec, ToleranceSpec, ValueExpr

# How an inference note may end (agent/spec/infer.py); the comment then does not say it a second time.
CHECK_ADVICE = "check roles, shapes and sizes"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INTEGER = re.compile(r"-?[0-9]+")


def render_spec(spec: KernelSpec) -> str:
    """The spec comment, from `/*` to `*/`, without a trailing newline."""
    lines = ["/* cuda-agent"]
    if spec.inferred:
        note = spec.inference_note or "spec inferred from the kernel's signature"
        lines += [f"# {line}" for line in note.splitlines()]
        if not note.rstrip().endswith(CHECK_ADVICE):
            lines.append("# Check the roles, shapes and sizes below, then edit freely.")
    lines.append(f"kernel = {_string(spec.kernel)}")
    if spec.instantiate:
        lines.append(f"instantiate = {_string(spec.instantiate)}")
    # Top-level keys: before the first [table].
    for key, values in (("flags", spec.flags), ("include_dirs", spec.include_dirs)):
        if values:
            lines.append(f"{key} = [{', '.join(_string(value) for value in values)}]")
    if spec.sizes:
        lines.append("[sizes]")
        lines += [
            f"{_key(name)} = {_expression(spec.size_expressions.get(name, value))}"
            for name, value in spec.sizes.items()
        ]
    lines.append("[args]")
    lines += [f"{_key(argument.name)} = {_argument(argument)}" for argument in spec.arguments]
    lines += ["[launch]", f"block = [{', '.join(map(str, spec.launch.block))}]"]
    lines.append(f"grid = [{', '.join(_expression(dim) for dim in spec.launch.grid)}]")
    if spec.launch.shared_bytes.strip() != "0":
        lines.append(f"shared_bytes = {_expression(spec.launch.shared_bytes)}")
    lines += _verify(spec)
    roofline = [(key, value) for key, value in (("flops", spec.flops), ("bytes", spec.bytes_moved)) if value]
    if roofline:
        lines.append("[roofline]")
        lines += [f"{key} = {_expression(value)}" for key, value in roofline]
    lines.append("*/")
    return "\n".join(lines)


def _verify(spec: KernelSpec) -> list[str]:
    lines = []
    if spec.verify_sizes:
        tables = ", ".join(
            _inline({_key(k): str(v) for k, v in sizes.items()}) for sizes in spec.verify_sizes
        )
        lines.append(f"sizes = [{tables}]")
    if spec.oracle:
        lines.append(f"oracle = {_inline({_key(k): _string(v) for k, v in spec.oracle.items()})}")
    tolerance = _tolerance(spec.tolerance) if spec.tolerance else {}
    tolerance.update(
        {_key(name): _inline(_tolerance(value)) for name, value in spec.output_tolerances.items()}
    )
    if tolerance:
        lines.append(f"tolerance = {_inline(tolerance)}")
    if spec.reduction:
        lines.append(f"reduction = {_expression(spec.reduction)}")
    verify = ["[verify]", *lines] if lines else []
    if spec.intermediates:  # a table of its own: one per line, in the order they are evaluated
        verify.append("[verify.intermediates]")
        verify += [f"{_key(name)} = {_string(expression)}" for name, expression in spec.intermediates]
    return verify


def _argument(argument: ArgumentSpec) -> str:
    fields = {"role": _string(argument.role), "dtype": _string(argument.dtype)}
    if argument.shape:
        fields["shape"] = f"[{', '.join(_expression(dim) for dim in argument.shape)}]"
    if argument.init is not None and (
        argument.role == "scalar" or argument.init != InitSpec.default(argument.dtype)
    ):
        fields["init"] = _init(argument.init, argument.dtype)
    if argument.value is not None:
        fields["value"] = _value(argument.value)
    if argument.may_alias:
        fields["may_alias"] = _string(argument.may_alias)
    return _inline(fields)


def _init(init: InitSpec, dtype: str) -> str:
    if init.dist == "fill":
        assert init.fill is not None  # a fill always has its value
        return _inline({"fill": _value(init.fill)})
    default = InitSpec.default(dtype, init.dist)
    if init == default:
        return _string(init.dist)
    keys = ("mean", "std") if init.dist == "normal" else ("low", "high")
    fields = {"dist": _string(init.dist)}
    fields.update({key: _value(getattr(init, key)) for key in keys})
    return _inline(fields)


def _tolerance(tolerance: ToleranceSpec) -> dict[str, str]:
    return {
        key: repr(value)
        for key, value in (("atol", tolerance.atol), ("rtol", tolerance.rtol))
        if value is not None
    }


def _inline(fields: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{key} = {value}" for key, value in fields.items()) + " }"


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else _string(name)


def _value(value: ValueExpr) -> str:
    """Numbers as TOML numbers, expressions as strings."""
    if isinstance(value, bool):  # not a ValueExpr, but never write Python's True into TOML
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)  # also TOML's spelling of inf and -inf
    return _string(value)


def _expression(text: str | int) -> str:
    """An integer expression: a plain integer is written as a number, anything else as a string."""
    return str(text).strip() if _INTEGER.fullmatch(str(text).strip()) else _string(str(text))


def _string(text: str) -> str:
    # JSON's escapes are valid in TOML basic strings. "*/" would end the comment: escape its slash.
    return json.dumps(text, ensure_ascii=False).replace("*/", "*\\u002f")
