"""Turn the TOML of one spec (already decoded by tomllib) into a KernelSpec, or say everything wrong with it:
the top-level keys, [sizes], [launch], [verify] and [roofline] here, [args] in `arguments.py`."""

from __future__ import annotations

import keyword
import math
from collections.abc import Mapping
from typing import Any

from cuda_agent.agent.kernels import Kernel, TemplateParameter
from cuda_agent.agent.spec.arguments import ArgumentChecker
from cuda_agent.agent.spec.checks import Issue, below_minimum, block_values, is_int, is_number
from cuda_agent.agent.spec.expressions import (
    MODULE_MEANING,
    ExpressionError,
    describe,
    mentions_block,
    parse_expression,
    suggest,
    uses_block,
    validate_oracle,
)
from cuda_agent.agent.spec.model import (
    ArgumentSpec,
    KernelSpec,
    KeyPath,
    LaunchSpec,
    ToleranceSpec,
)
from cuda_agent.sandbox.harness_options import harness_reason
from cuda_agent.sandbox.oracle_names import ORACLE_MODULES, needs_respelling, oracle_spelling

TOP_LEVEL_KEYS = (
    "kernel", "instantiate", "flags", "include_dirs", "sizes", "args", "launch", "verify", "roofline",
)  # fmt: skip
LAUNCH_KEYS = ("block", "grid", "shared_bytes")
VERIFY_KEYS = ("sizes", "oracle", "intermediates", "tolerance", "reduction")
ROOFLINE_KEYS = ("flops", "bytes")
RESERVED_SIZE_NAMES = frozenset({"block", "ceil_div", "cdiv", "min", "max", *ORACLE_MODULES})
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_INTERMEDIATES = 32


def is_size_name(name: str) -> bool:
    """Whether a size may be called `name`: an identifier that expressions can write (not a Python
    keyword) and that they do not reserve (block, the functions, the oracle's modules)."""
    return name.isidentifier() and not keyword.iskeyword(name) and name not in RESERVED_SIZE_NAMES


def split_template_arguments(text: str) -> list[str]:
    """'float, Pair<int, 2>, (4 > 2)' -> ['float', 'Pair<int, 2>', '(4 > 2)']: commas at nesting depth 0."""
    parts, depth, current = [], 0, ""
    for character in text:
        if character in "<([{":
            depth += 1
        elif character in ">)]}":
            depth -= 1
        if character == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += character
    if current.strip():
        parts.append(current.strip())
    return parts


class SpecBuilder(ArgumentChecker):
    """Validates one spec's decoded TOML against its kernel and builds the KernelSpec."""

    def build(self) -> KernelSpec | None:
        self.unknown_keys(self.data, (), TOP_LEVEL_KEYS, "the spec")
        # Scalars' values and instantiate may follow the block: read it first (launch() checks it).
        self.launch_block = self.written_block()
        instantiate = self.instantiate()
        flags = self.strings("flags", example='flags = ["--use_fast_math", "-DTILE=32"]')
        for position, flag in enumerate(flags):
            self.check_flag(("flags", position), flag)
        include_dirs = self.strings("include_dirs", example='include_dirs = ["../include"]')
        size_expressions = self.parse_sizes()
        arguments = self.arguments()
        launch = self.launch()
        verify = self.table(("verify",), required=False, example="[verify] sizes = [{ n = 1000003 }]") or {}
        self.unknown_keys(verify, ("verify",), VERIFY_KEYS, "[verify]")
        outputs = self.output_names(arguments)
        verify_sizes = self.verify_sizes(verify.get("sizes"))
        if "oracle" in verify or "intermediates" in verify:
            self.oracle_spellings()
        intermediates = self.intermediates(verify.get("intermediates"))
        oracle = self.oracle(verify.get("oracle"), outputs, [name for name, _ in intermediates])
        tolerance, output_tolerances = self.tolerances(verify.get("tolerance"), outputs)
        reduction = None
        if "reduction" in verify:
            reduction = self.integer(
                ("verify", "reduction"),
                verify["reduction"],
                minimum=1,
                what="the reduction length",
                why="the reduction length is an integer",
            )
        flops, bytes_moved = self.roofline()
        if self.issues or launch is None or arguments is None:
            return None
        return KernelSpec(
            kernel=self.kernel.name,
            arguments=arguments,
            launch=launch,
            sizes=dict(self.sizes),
            size_expressions=size_expressions,
            instantiate=instantiate,
            verify_sizes=verify_sizes,
            oracle=oracle,
            intermediates=intermediates,
            tolerance=tolerance,
            output_tolerances=output_tolerances,
            reduction=reduction,
            flops=flops,
            bytes_moved=bytes_moved,
            flags=flags,
            include_dirs=include_dirs,
        )

    def written_block(self) -> tuple[int, ...]:
        """[launch] block when it is a valid block, else () (and `block` reports what is wrong)."""
        launch = self.data.get("launch")
        value = launch.get("block") if isinstance(launch, dict) else None
        if not isinstance(value, list) or not 1 <= len(value) <= 3 or not all(is_int(d) for d in value):
            return ()
        block = tuple(value)
        within = all(1 <= dim <= limit for dim, limit in zip(block, MAX_BLOCK_DIMS, strict=False))
        return block if within and math.prod(block) <= MAX_THREADS_PER_BLOCK else ()

    def strings(self, key: str, *, example: str) -> tuple[str, ...]:
        """A top-level list of non-empty strings (flags, include_dirs); () after reporting."""
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.issue((key,), f"{key} is a list of strings, e.g. {example}; got {describe(value)}")
            return ()
        good = True
        for position, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                shown = "an empty string" if isinstance(item, str) else describe(item)
                self.issue((key, position), f"each of {key} is a non-empty string, not {shown}")
                good = False
            elif any(character in item for character in "\n\r\0"):
                self.issue((key, position), f"each of {key} is one line")
                good = False
        return tuple(value) if good else ()

    def check_flag(self, path: KeyPath, flag: str) -> None:
        """One compiler option: a single word starting with '-', not one the harness owns."""
        if not flag.startswith("-"):
            self.issue(
                path,
                f"flag {flag!r} is not an option (they start with '-'); write an option and its value as "
                'one word: "--maxrregcount=32"',
            )
            return
        if any(character.isspace() for character in flag):
            self.issue(
                path,
                f"flag {flag!r} holds a space: each flag is one command-line word, e.g. "
                '"-DUSE_FAST=1" or ["-Xptxas", "-v"]',
            )
            return
        why = harness_reason(flag, 'include_dirs = ["../include"] (relative to this file\'s folder)')
        if why is not None:
            self.issue(path, f"flag {flag!r} is not allowed: {why}")

    def output_names(self, arguments: tuple[ArgumentSpec, ...] | None) -> list[str]:
        """Outputs and inouts; from the signature (non-const pointers) when [args] has errors."""
        if arguments is None:
            return [p.name for p in self.kernel.parameters if p.is_pointer and not p.is_const]
        return [argument.name for argument in arguments if argument.role in ("output", "inout")]

    def instantiate(self) -> str | None:
        kernel, value = self.kernel, self.data.get("instantiate")
        if kernel.template_arguments is not None and not kernel.template_parameters:
            # An explicit specialisation (`template <> ... k<float, 64>(...)`) is its own instantiation.
            return (
                value if isinstance(value, str) else f"{kernel.qualified_name}<{kernel.template_arguments}>"
            )
        parameters = kernel.template_parameters
        if value is None:
            if parameters:
                written = ", ".join(parameter.text for parameter in parameters)
                example = ", ".join("float" if p.kind == "type" else "256" for p in parameters)
                self.issue(
                    ("kernel",),
                    f"'{kernel.name}' is a template (template <{written}>): "
                    f'add instantiate = "{kernel.qualified_name}<{example}>" to say which one to run',
                )
            return None
        if not parameters:
            self.issue(("instantiate",), f"'{kernel.name}' is not a template: remove instantiate")
            return None
        if not isinstance(value, str):
            self.issue(("instantiate",), f'instantiate is a string like "{kernel.name}<float, 256>"')
            return None
        name, _, rest = value.partition("<")
        if name.strip() not in (kernel.name, kernel.qualified_name) or not rest.rstrip().endswith(">"):
            self.issue(
                ("instantiate",),
                f'write the kernel with its template arguments: "{kernel.qualified_name}<...>"',
            )
            return None
        arguments = split_template_arguments(rest.rstrip()[:-1])
        required = [p for p in parameters if p.default is None]
        if not len(required) <= len(arguments) <= len(parameters):
            self.issue(
                ("instantiate",),
                f"{kernel.name} has {len(parameters)} template parameters "
                f"({', '.join(p.name for p in parameters)}), {len(arguments)} given",
            )
            return None
        cursor = value.index("<") + 1
        for parameter, argument in zip(parameters, arguments, strict=False):  # defaults fill the rest
            start = value.find(argument, cursor)
            cursor = start + len(argument)
            self.block_argument(parameter, argument, len(value[:start].encode()))
            if parameter.kind == "type":
                self.template_types[parameter.name] = argument
        for parameter in parameters[len(arguments) :]:
            if parameter.kind == "type" and parameter.default:
                self.template_types[parameter.name] = parameter.default
        return value

    def block_argument(self, parameter: TemplateParameter, argument: str, start: int) -> None:
        """A template argument that follows the block (`rms_norm<block.x>`): an integer expression of
        block.x/y/z for a value parameter, evaluated at each launch's block. Other arguments are C++ as
        written. `start`: the argument's byte offset in the instantiate string, to point inside it."""
        path: KeyPath = ("instantiate",)
        try:
            expression = parse_expression(
                argument, (), allow_block=True, why="a template value argument is an integer"
            )
        except ExpressionError as error:
            if mentions_block(argument):
                self.issue(
                    path,
                    f'instantiate argument "{argument}": {error.message} (an argument that follows the block '
                    "is an integer expression of block.x/y/z, e.g. block.x * block.y)",
                    within=(start + error.start, start + error.end),
                )
            return
        if not uses_block(expression):
            return
        span = (start + expression.offset, start + len(argument.encode()))
        if parameter.kind == "type":
            self.issue(
                path,
                f"{parameter.name} is a type parameter ({parameter.text}): block.x/y/z can only give a value "
                "parameter such as int BLOCK",
                within=span,
            )
        elif self.launch_block:
            try:
                expression.evaluate(block_values(self.launch_block))
            except ExpressionError as error:
                self.issue(
                    path,
                    f'instantiate argument "{argument}": {error.message}',
                    within=(start + error.start, start + error.end),
                )

    def parse_sizes(self) -> dict[str, str]:
        table = self.table(("sizes",), required=False, example="[sizes] n = 1048576") or {}
        self.size_names = [name for name in table if isinstance(name, str)]
        expressions: dict[str, str] = {}
        for position, (name, value) in enumerate(table.items()):
            path = ("sizes", name)
            if not name.isidentifier():
                self.issue(path, f"size name '{name}' must be an identifier (letters, digits, _)", key=True)
                continue
            if keyword.iskeyword(name):
                self.issue(
                    path,
                    f"'{name}' is a Python keyword, which expressions cannot use: name the size differently",
                    key=True,
                )
                continue
            if name in RESERVED_SIZE_NAMES:
                self.issue(path, f"'{name}' is reserved in expressions; name the size differently", key=True)
                continue
            if isinstance(value, float):
                self.issue(path, f"sizes are integers; {value} is a float")
                continue
            try:
                others = [other for other in self.size_names if other != name]
                expression = parse_expression(value, others, why="sizes are integers")
            except ExpressionError as error:
                if isinstance(value, str):
                    self.written_issue(path, value, error)
                else:
                    self.issue(path, f"a size is an integer or an expression string, not {describe(value)}")
                continue
            later = sorted(expression.names - set(self.size_names[:position]))
            if later:
                self.issue(
                    path,
                    f"size '{name}' uses {', '.join(later)}, defined after it: "
                    "a size may only use the sizes above it",
                )
                continue
            if not expression.names <= self.sizes.keys():
                continue  # it uses a size that is itself wrong; that one is reported
            try:
                result = expression.evaluate(self.sizes)
            except ExpressionError as error:
                self.written_issue(path, value, error)
                continue
            if result < 0:
                self.issue(
                    path, below_minimum(path, value, result, expression.names, self.sizes, "a size", 0)
                )
                continue
            self.sizes[name] = result
            expressions[name] = expression.text
        return expressions

    # --- launch, verify, roofline ----------------------------------------------------------------------

    def launch(self) -> LaunchSpec | None:
        example = '[launch] block = [256], grid = ["ceil_div(n, block.x)"]'
        table = self.table(("launch",), required=True, example=example)
        if table is None:
            return None
        self.unknown_keys(table, ("launch",), LAUNCH_KEYS, "[launch]")
        block = self.block(table.get("block"))
        grid_value = table.get("grid")
        grid: list[str | None] = []
        if grid_value is None:
            self.issue(
                ("launch",),
                'missing grid: add grid = ["ceil_div(n, block.x)"] (one expression per block dim)',
            )
        elif not isinstance(grid_value, list) or not grid_value:
            self.issue(
                ("launch", "grid"),
                f'grid is a list like ["ceil_div(n, block.x)"]; got {describe(grid_value)}',
            )
        else:
            # CUDA pads grid and block to 3-D each; their ranks may differ (a 1-D block over a 2-D grid).
            if len(grid_value) > 3:
                self.issue(("launch", "grid"), f"grid has {len(grid_value)} dims; CUDA grids have 1 to 3")
            grid = [
                self.integer(
                    ("launch", "grid", i),
                    dim,
                    minimum=1,
                    allow_block=True,
                    block=block or (),
                    what="a grid dimension",
                )
                for i, dim in enumerate(grid_value)
            ]
        shared = self.integer(
            ("launch", "shared_bytes"),
            table.get("shared_bytes", 0),
            minimum=0,
            allow_block=True,
            block=block or (),
            what="shared_bytes",
        )
        if block is None or not grid or None in grid or shared is None:
            return None
        return LaunchSpec(block, tuple(dim for dim in grid if dim is not None), shared)

    def block(self, value: Any) -> tuple[int, ...] | None:
        path = ("launch", "block")
        if value is None:
            self.issue(("launch",), "missing block: add block = [256] (1 to 3 ints; the optimizer tunes it)")
            return None
        if not isinstance(value, list) or not 1 <= len(value) <= 3 or not all(is_int(dim) for dim in value):
            self.issue(
                path, f"block is a list of 1 to 3 integers, e.g. [256] or [32, 8]; got {describe(value)}"
            )
            return None
        block = tuple(value)
        for i, (dim, limit) in enumerate(zip(block, MAX_BLOCK_DIMS, strict=False)):
            if not 1 <= dim <= limit:
                self.issue((*path, i), f"block.{'xyz'[i]} must be between 1 and {limit}, not {dim}")
        threads = math.prod(block)
        if threads > MAX_THREADS_PER_BLOCK:
            self.issue(
                path,
                f"a block of {' × '.join(map(str, block))} = {threads} threads is more than "
                f"CUDA's {MAX_THREADS_PER_BLOCK} per block",
            )
        bound = (self.kernel.launch_bounds or "").split(",")[0].strip()
        if bound.isdigit() and threads > int(bound):
            self.issue(
                path, f"{threads} threads per block is more than the kernel's __launch_bounds__({bound})"
            )
        return block

    def verify_sizes(self, value: Any) -> tuple[dict[str, int], ...]:
        path: KeyPath = ("verify", "sizes")
        if value is None:
            return ()
        if not isinstance(value, list):
            self.issue(
                path, f"verify.sizes is a list of tables, e.g. [{{ n = 1000003 }}]; got {describe(value)}"
            )
            return ()
        result = []
        for i, entry in enumerate(value):
            if not isinstance(entry, dict):
                self.issue(
                    (*path, i), f"each verify size is a table like {{ n = 1000003 }}; got {describe(entry)}"
                )
                continue
            for name, size in entry.items():
                if name not in self.size_names:
                    known = ", ".join(self.size_names) or "none"
                    self.issue(
                        (*path, i, name),
                        f"unknown size '{name}' (sizes are: {known}){suggest(name, self.size_names)}",
                        key=True,
                    )
                elif not is_int(size) or size < 0:
                    self.issue((*path, i, name), f"verify sizes are integers ≥ 0, not {describe(size)}")
            result.append(
                {
                    name: size
                    for name, size in entry.items()
                    if name in self.size_names and is_int(size) and size >= 0
                }
            )
        return tuple(result)

    def declared_names(self) -> list[tuple[str, str]]:
        """(kind, name) of what an oracle can refer to: the kernel's parameters, then the sizes."""
        return [
            *(("argument", p.name) for p in self.kernel.parameters if p.name),
            *(("size", name) for name in self.size_names),
        ]

    def oracle_spellings(self) -> None:
        """Two names an oracle would write the same way are refused: an argument F is written F_ there
        (F is torch.nn.functional), which an argument or size F_ already is."""
        by_spelling: dict[str, dict[str, str]] = {}  # spelling -> {name: kind}, first kind of each name
        for kind, name in self.declared_names():
            by_spelling.setdefault(oracle_spelling(name), {}).setdefault(name, kind)
        for spelling, names in by_spelling.items():
            for name, kind in names.items():
                others = [(other_kind, other) for other, other_kind in names.items() if other != name]
                if not others or not needs_respelling(name):
                    continue
                why = (
                    f"{name} there is {MODULE_MEANING[name]}"
                    if name in ORACLE_MODULES
                    else "a Python keyword"
                )
                other_kind, other = others[0]
                self.issue(
                    ("args", name) if kind == "argument" else ("sizes", name),
                    f"{kind} '{name}' is written {spelling} in an oracle ({why}), the same as "
                    f"{other_kind} '{other}': rename one of the two",
                    key=True,
                )

    def intermediates(self, value: Any) -> tuple[tuple[str, str], ...]:
        """[verify.intermediates]: name = "PyTorch expression", each over the arguments, the sizes and the
        intermediates above it. Returns those whose name is usable (so the oracle can still refer to one
        whose expression has an error, without a cascade of unknown names)."""
        path: KeyPath = ("verify", "intermediates")
        if value is None:
            return ()
        if not isinstance(value, dict):
            self.issue(
                path,
                'intermediates is a table of name = "PyTorch expression", e.g. '
                '[verify.intermediates] centered = "x - x.mean(dim=-1, keepdim=True)"',
            )
            return ()
        if len(value) > MAX_INTERMEDIATES:
            self.issue(path, f"{len(value)} intermediates; at most {MAX_INTERMEDIATES}")
            return ()
        taken: dict[str, tuple[str, str]] = {}  # spelling -> (kind, name); an argument before a size
        for kind, name in self.declared_names():
            taken.setdefault(oracle_spelling(name), (kind, name))
        names = [name for _, name in self.declared_names()]
        usable: list[tuple[str, str]] = []
        for position, (name, expression) in enumerate(value.items()):
            entry: KeyPath = (*path, name)
            problem = self.intermediate_name_problem(name, taken)
            if problem:
                self.issue(entry, problem, key=True)
                continue
            if not isinstance(expression, str):
                self.issue(
                    entry,
                    f"an intermediate is a string holding a PyTorch expression, not {describe(expression)}",
                )
            else:
                later = [other for other in list(value)[position + 1 :] if isinstance(other, str)]
                error = validate_oracle(expression, [*names, *(n for n, _ in usable)], later=later)
                if error is not None:
                    self.expression_issue(entry, error, expression)
            usable.append((name, expression if isinstance(expression, str) else ""))
            taken[name] = ("intermediate", name)
        return tuple(usable)

    @staticmethod
    def intermediate_name_problem(name: str, taken: Mapping[str, tuple[str, str]]) -> str | None:
        if not name.isidentifier():
            return f"intermediate name '{name}' must be an identifier (letters, digits, _)"
        if keyword.iskeyword(name):
            return f"'{name}' is a Python keyword: name the intermediate differently"
        if name.startswith("_"):
            return "names starting with '_' are not allowed in an oracle: name the intermediate differently"
        if name in ORACLE_MODULES:
            return f"'{name}' is {MODULE_MEANING[name]} in an oracle: name the intermediate differently"
        if name in taken:
            kind, declared = taken[name]
            also = f" (written {name} in an oracle)" if declared != name else ""
            return f"'{name}' is already the {kind} {declared}{also}: name the intermediate differently"
        return None

    def oracle(self, value: Any, outputs: list[str], intermediates: list[str]) -> dict[str, str] | None:
        path: KeyPath = ("verify", "oracle")
        if value is None:
            return None
        if not isinstance(value, dict):
            self.issue(
                path, 'oracle is a table of output = "PyTorch expression", e.g. { y = "torch.relu(x)" }'
            )
            return None
        names = [*(name for _, name in self.declared_names()), *intermediates]
        for output, expression in value.items():
            if output not in outputs:
                self.issue(
                    (*path, output),
                    f"'{output}' is not an output (outputs: {', '.join(outputs) or 'none'})"
                    f"{suggest(output, outputs)}",
                    key=True,
                )
                continue
            error = validate_oracle(expression, names)
            if error is not None:
                self.expression_issue((*path, output), error, expression)
        return dict(value)

    def tolerances(
        self, value: Any, outputs: list[str]
    ) -> tuple[ToleranceSpec | None, dict[str, ToleranceSpec]]:
        path: KeyPath = ("verify", "tolerance")
        if value is None:
            return None, {}
        if not isinstance(value, dict):
            self.issue(
                path,
                "tolerance is a table: { atol = 1e-5, rtol = 1e-5 } or per output { y = { atol = 1e-3 } }",
            )
            return None, {}
        global_part = {key: value[key] for key in ("atol", "rtol") if key in value}
        per_output: dict[str, ToleranceSpec] = {}
        for name, entry in value.items():
            if name in ("atol", "rtol"):
                continue
            if name not in outputs:
                self.issue(
                    (*path, name),
                    f"unknown key '{name}' in tolerance: atol, rtol or an output "
                    f"({', '.join(outputs)}){suggest(name, ['atol', 'rtol', *outputs])}",
                    key=True,
                )
            elif not isinstance(entry, dict):
                self.issue(
                    (*path, name), f"the tolerance of {name} is a table: {{ atol = 1e-3, rtol = 1e-3 }}"
                )
            else:
                self.unknown_keys(entry, (*path, name), ("atol", "rtol"), f"the tolerance of {name}")
                per_output[name] = self.tolerance(entry, (*path, name))
        return (self.tolerance(global_part, path) if global_part else None), per_output

    def tolerance(self, table: Mapping[str, Any], path: KeyPath) -> ToleranceSpec:
        values: dict[str, float | None] = {}
        for key in ("atol", "rtol"):
            number = table.get(key)
            if number is not None and (not is_number(number) or number < 0):
                self.issue((*path, key), f"{key} is a number ≥ 0, not {describe(number)}")
                number = None
            values[key] = None if number is None else float(number)
        return ToleranceSpec(values["atol"], values["rtol"])

    def roofline(self) -> tuple[str | None, str | None]:
        table = self.table(("roofline",), required=False, example='[roofline] flops = "2 * n"') or {}
        self.unknown_keys(table, ("roofline",), ROOFLINE_KEYS, "[roofline]")
        flops = bytes_moved = None
        if "flops" in table:
            flops = self.integer(
                ("roofline", "flops"), table["flops"], minimum=0, what="flops", why="flops are integers"
            )
        if "bytes" in table:
            bytes_moved = self.integer(
                ("roofline", "bytes"), table["bytes"], minimum=0, what="bytes", why="bytes are integers"
            )
        return flops, bytes_moved


def build_spec(data: Mapping[str, Any], kernel: Kernel) -> tuple[KernelSpec | None, list[Issue]]:
    """The spec of `kernel` from one comment's decoded TOML, or None and every problem found."""
    builder = SpecBuilder(data, kernel)
    spec = builder.build()
    return spec, builder.issues
