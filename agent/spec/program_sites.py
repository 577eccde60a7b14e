"""Where the host code sets a launch's block, grid and dynamic shared memory, to write a new launch back.

A rewrite verified with block 512 is only what the user's program runs if the program launches it with
512, and a user who wrote `const int threads = 128;` and `(rows + threads - 1) / threads` expects
`threads` to become 512, not the launch to become `<<<(rows + 511) / 512, 512>>>` with `threads` left
unused. So for each launch this finds the *holders*: the constant the block comes from (a literal at the
launch, a local's initializer, a dim3's components, a #define's value, an argv default), the variable
or argument the grid and shared memory are written in, and how code at the launch names the block after
the edit (`threads`, `dimBlock.x`). A constant that also sets another kernel's launch, or that device
code reads (a #define used as a tile size inside a kernel), is not a holder: changing it would change
what was not measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuda_agent.agent.parsing import walk
from cuda_agent.agent.spec.program import (
    ProgramHost,
    _Definition,
    _function_name,
    _runtime_default,
    _Scope,
)
from tree_sitter import Node

_CONSTANT_KINDS = frozenset({"number_literal", "binary_expression", "parenthesized_expression",
                             "unary_expression"})  # fmt: skip


@dataclass(frozen=True)
class Holder:
    """The bytes that set one value, and what a person calls them."""

    start: int
    end: int
    owner: str  # "the launch at line 87", "threads (line 80)", "#define BLOCK_SIZE (line 3)"


@dataclass(frozen=True)
class SiteHolders:
    """One launch of the kernel and where each part of its configuration is set."""

    call: Node
    line: int  # 1-based, of the launch
    block: tuple[Holder, ...]  # one per axis the program writes; () when `why` says why not
    block_names: tuple[str | None, ...]  # code naming each axis at the launch after the edit; None: a literal
    grid: tuple[Holder, ...]  # one holder for the whole grid (written dim3(...) past 1-D), or one per axis
    grid_whole: bool
    shared: Holder | None  # None: the launch passes no shared-memory size
    after_block: int  # where `, shared` goes when the launch passes none
    why: str = ""


def read_site_holders(kernel: str, call: Node, scope: _Scope, host: ProgramHost) -> SiteHolders:
    """The holders of one launch of `kernel`, read in `scope` (the function around it, its parameters
    bound to one caller's arguments)."""
    line = call.start_point[0] + 1
    config_node = next(c for c in call.children if c.type == "kernel_call_syntax")
    config = [c for c in config_node.named_children if c.type != "comment"]
    function = host.function_around(call)
    if function is None or len(config) < 2:
        return SiteHolders(call, line, (), (), (), True, None, 0, "the launch is not inside a function")
    uses = _Uses(host, kernel, function)
    block, names, why = _block_holders(config[1], scope, host, uses, line)
    grid, whole = _grid_holders(config[0], scope, host, uses, line)
    shared = _value_holder(config[2], scope, host, uses, line) if len(config) > 2 else None
    return SiteHolders(call, line, block, names, grid, whole, shared, config[1].end_byte, why or "")


def launch_block_holders(
    kernel: str, call: Node, scope: _Scope, host: ProgramHost
) -> tuple[tuple[Holder, ...], tuple[str | None, ...]]:
    """Where this launch alone can be given a block: the components of a local dim3 that only this
    kernel's launches use (`dim3 dimBlock(TILE, TILE)` becomes `dimBlock(32, 8)`), else the launch's block
    argument itself."""
    config_node = next(c for c in call.children if c.type == "kernel_call_syntax")
    config = [c for c in config_node.named_children if c.type != "comment"]
    line = call.start_point[0] + 1
    block = config[1]
    function = host.function_around(call)
    if block.type == "identifier" and function is not None:
        name = host.text(block)
        definition = scope.lookup(name)
        uses = _Uses(host, kernel, function)
        if (
            definition is not None
            and definition.dims is not None
            and definition.key[0] == "local"
            and not uses.anywhere_else(name)
        ):
            owner = f"{name} (line {definition.line})"
            holders = tuple(Holder(d.start_byte, d.end_byte, owner) for d in definition.dims)
            return holders, tuple(f"{name}.{axis}" for axis in "xyz"[: len(holders)])
    return (_site(block, line),), (None,)


def constant_holder(kernel: str, call: Node, node: Node, scope: _Scope, host: ProgramHost) -> Holder | str:
    """Where the constant a launch's expression (a template argument) comes from is written, or why it
    cannot be changed with this kernel's launch."""
    function = host.function_around(call)
    if function is None:
        return "the launch is not inside a function"
    found = _constant_holder(node, scope, host, _Uses(host, kernel, function), call.start_point[0] + 1)
    return found if isinstance(found, str) else found[0]


def _site(node: Node, line: int) -> Holder:
    return Holder(node.start_byte, node.end_byte, f"the launch at line {line}")


def _block_holders(
    node: Node, scope: _Scope, host: ProgramHost, uses: _Uses, line: int
) -> tuple[tuple[Holder, ...], tuple[str | None, ...], str | None]:
    """The constants the block's axes come from, and how the launch's code names each after the edit."""
    if node.type == "call_expression" and host.text(node.child_by_field_name("function")) == "dim3":
        listed = node.child_by_field_name("arguments")
        components = [c for c in listed.named_children if c.type != "comment"] if listed else []
        found = [_constant_holder(c, scope, host, uses, line) for c in components]
        bad = next((f for f in found if isinstance(f, str)), None)
        if bad is not None:
            return (), (), bad
        return tuple(f[0] for f in found), tuple(f[1] for f in found), None  # type: ignore[index]
    if node.type == "identifier":
        definition = scope.lookup(host.text(node))
        if definition is not None and definition.dims is not None:
            name = host.text(node)
            if definition.key[0] != "local":
                return (), (), f"the block {name} is not declared in the launching function"
            found = [_constant_holder(c, definition.scope, host, uses, line) for c in definition.dims]
            bad = next((f for f in found if isinstance(f, str)), None)
            if bad is not None:
                return (), (), bad
            if why := uses.outside_this_kernel(name, definition, scope.function):
                return (), (), why
            holders = tuple(f[0] for f in found)  # type: ignore[index]
            return holders, tuple(f"{name}.{axis}" for axis in "xyz"[: len(holders)]), None
    found = _constant_holder(node, scope, host, uses, line)
    if isinstance(found, str):
        return (), (), found
    return (found[0],), (found[1],), None


def _constant_holder(
    node: Node, scope: _Scope | None, host: ProgramHost, uses: _Uses, line: int
) -> tuple[Holder, str | None] | str:
    """The constant expression a value comes from, following names to their definitions: (its holder, the
    name the launch's code can use for it), or why it cannot be changed safely."""
    named: str | None = None
    current: Node | None = node
    owner = f"the launch at line {line}"
    for _ in range(16):
        if current is None:
            break
        if current.type == "conditional_expression":
            chosen = _runtime_default(current, host)
            if chosen is None:
                return f"the block is chosen at run time ({host.text(current)!r})"
            owner += " (its default)"
            current = chosen
            continue
        if current.type == "parenthesized_expression" and current.named_child_count == 1:
            current = current.named_children[0]
            continue
        if current.type not in ("identifier", "type_identifier"):
            break
        name = host.text(current)
        definition = (
            scope.lookup(name) if scope is not None else host.constants.get(name) or host.define(name)
        )
        if definition is None or definition.value is None:
            return f"the block comes from {name}, which the program does not set"
        if why := uses.outside_this_kernel(name, definition, scope.function if scope else None):
            return why
        named = named or (host.text(node) if node.type == "identifier" else None)
        if definition.key[0] == "define":
            span = host.define_value_span(name)
            if span is None:
                return f"#define {name} has no value"
            text = host.data[span[0] : span[1]].decode("utf-8", "replace")
            if not re.fullmatch(r"\(?\s*\d+[uUlL]*\s*\)?", text):
                return f"#define {name} is not a plain number ({text!r})"
            return Holder(span[0], span[1], f"#define {name} (line {definition.line})"), named
        owner = f"{name} (line {definition.line})"
        current, scope = definition.value, definition.scope
    if current is None or not _is_constant(current):
        shown = host.text(current) if current is not None else "nothing"
        return f"the block is {shown!r}, not a number written in the file"
    return Holder(current.start_byte, current.end_byte, owner), named


def _is_constant(node: Node) -> bool:
    return node.type in _CONSTANT_KINDS and not any(
        n.type in ("identifier", "call_expression") for n in walk(node)
    )


def _grid_holders(
    node: Node, scope: _Scope, host: ProgramHost, uses: _Uses, line: int
) -> tuple[tuple[Holder, ...], bool]:
    """Where the grid is written: a local dim3's components, a local's initializer, or the launch itself;
    a variable only where nothing but this kernel's launches uses it."""
    if node.type == "identifier":
        name = host.text(node)
        definition = scope.lookup(name)
        if definition is not None and definition.key[0] == "local" and not uses.anywhere_else(name):
            if definition.dims is not None:
                return tuple(Holder(d.start_byte, d.end_byte, f"{name} (line {definition.line})")
                             for d in definition.dims), False  # fmt: skip
            value = definition.value
            if value is not None and value.type != "initializer_list":
                return (Holder(value.start_byte, value.end_byte, f"{name} (line {definition.line})"),), True
    return (_site(node, line),), True


def _value_holder(node: Node, scope: _Scope, host: ProgramHost, uses: _Uses, line: int) -> Holder:
    """Where the shared-memory size is written: a local's initializer, or the launch's argument."""
    if node.type == "identifier":
        name = host.text(node)
        definition = scope.lookup(name)
        if (
            definition is not None
            and definition.key[0] == "local"
            and definition.value is not None
            and definition.dims is None
            and not uses.anywhere_else(name)
        ):
            value = definition.value
            return Holder(value.start_byte, value.end_byte, f"{name} (line {definition.line})")
    return _site(node, line)


class _Uses:
    """Where names are used, to tell whether a constant sets only this kernel's launches."""

    def __init__(self, host: ProgramHost, kernel: str, function: Node) -> None:
        self.host, self.kernel, self.function = host, kernel, function
        self._device: list[str] | None = None

    def _identifiers(self, name: str, within: Node) -> list[Node]:
        data = self.host.data
        found = []
        for match in re.finditer(
            rb"\b" + re.escape(name.encode()) + rb"\b", data[within.start_byte : within.end_byte]
        ):
            start = within.start_byte + match.start()
            node = self.host.tree.root_node.descendant_for_byte_range(start, start + len(name.encode()))
            if node is not None and node.type in ("identifier", "type_identifier"):
                found.append(node)
        return found

    def _launch_of(self, node: Node) -> str | None:
        """The kernel whose launch configuration `node` is inside, if any."""
        parent = node.parent
        while parent is not None and parent.type != "function_definition":
            if parent.type == "kernel_call_syntax" and parent.parent is not None:
                function = parent.parent.child_by_field_name("function")
                text = self.host.text(function)
                return re.split(r"\s*<", text)[0].split("::")[-1]
            parent = parent.parent
        return None

    def _launcher_given(self, node: Node) -> str | None:
        """The kernel a launcher of another kernel launches, where `node` is one of its call's arguments
        (`layernorm_forward(..., block_size)`)."""
        parent = node.parent
        while parent is not None and parent.type not in ("argument_list", "function_definition"):
            parent = parent.parent
        call = parent.parent if parent is not None and parent.type == "argument_list" else None
        if call is None or call.type != "call_expression":
            return None
        callee = self.host.text(call.child_by_field_name("function")).split("<")[0].split("::")[-1]
        if callee not in self.host.launchers or callee in self._own_launchers():
            return None
        function = self.host.functions.get(callee)
        launched = sorted(k for k in self.host.launched if any(
            self.host.function_around(c) == function for c in self.host.launches(k)))  # fmt: skip
        return launched[0] if launched else None

    def _own_launchers(self) -> set[str]:
        return {
            _function_name(f.child_by_field_name("declarator"), self.host)
            for f in map(self.host.function_around, self.host.launches(self.kernel))
            if f is not None
        }

    def outside_this_kernel(self, name: str, definition: _Definition, where: Node | None) -> str | None:
        """Why `name` (looked up in the function `where`) cannot change with this kernel's launch: another
        kernel's launch configuration uses it (directly, through a local computed from it, or through a
        launcher of another kernel it is passed to), or device code reads it."""
        region = self.host.tree.root_node
        if definition.key[0] in ("local", "loop", "parameter"):
            region = where or self.function
        for node in self._identifiers(name, region):
            other = self._launch_of(node) or self._launcher_given(node)
            if other is not None and other != self.kernel:
                return f"{name} also sets the launch of {other} (line {node.start_point[0] + 1})"
            declared = _declared_by(node)
            if declared is not None and declared != name:
                for use in self._identifiers(declared, self.host.function_around(node) or region):
                    other = self._launch_of(use)
                    if other is not None and other != self.kernel:
                        return f"{name} also sets the launch of {other} (line {use.start_point[0] + 1})"
        if definition.key[0] in ("define", "global") and self._read_by_device_code(name):
            return f"{name} is also read by device code, which was measured with its current value"
        return None

    def anywhere_else(self, name: str) -> bool:
        """Whether `name` is used in the launching function other than in this kernel's launches and its
        own declaration."""
        for node in self._identifiers(name, self.function):
            if self._launch_of(node) == self.kernel:
                continue
            parent = node.parent
            if (
                parent is not None
                and parent.type in ("init_declarator", "function_declarator")
                and (parent.child_by_field_name("declarator") == node)
            ):
                continue
            return True
        return False

    def _read_by_device_code(self, name: str) -> bool:
        if self._device is None:
            self._device = [
                self.host.text(f)
                for f in walk(self.host.tree.root_node)
                if f.type == "function_definition" and _is_device_function(f, self.host)
            ]
        pattern = re.compile(r"\b" + re.escape(name) + r"\b")
        return any(pattern.search(text) for text in self._device)


def _is_device_function(function: Node, host: ProgramHost) -> bool:
    body = function.child_by_field_name("body")
    end = body.start_byte if body is not None else function.end_byte
    head = host.data[function.start_byte : end]
    parent = function.parent
    if parent is not None and parent.type == "template_declaration":
        head = host.data[parent.start_byte : end]
    return b"__global__" in head or b"__device__" in head


def _declared_by(node: Node) -> str | None:
    """The name a declaration's initializer containing `node` declares (`int blocks = n / threads`)."""
    parent = node.parent
    while parent is not None and parent.type not in ("init_declarator", "function_definition", "declaration"):
        parent = parent.parent
    if parent is None or parent.type != "init_declarator":
        return None
    declarator = parent.child_by_field_name("declarator")
    return declarator.text.decode() if declarator is not None and declarator.text is not None else None
