"""Where a key or value of a TOML document is, found with tree-sitter-toml.

tomllib gives values without positions; this parses the same text again and maps key paths such as
("args", "x", "shape", 1) to the nodes, so a semantic error can point at the exact token.
"""

from __future__ import annotations

import sys
from functools import lru_cache

import tree_sitter
import tree_sitter_toml
from cuda_agent.agent.spec.model import KeyPath

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Point = tuple[int, int]  # (row, byte column) in the TOML text
Range = tuple[Point, Point]

_KEY_TYPES = ("bare_key", "quoted_key", "dotted_key")


@lru_cache(maxsize=1)
def _toml_parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_toml.language()))


def _range(node: tree_sitter.Node) -> Range:
    return (node.start_point.row, node.start_point.column), (node.end_point.row, node.end_point.column)


def _key_parts(node: tree_sitter.Node) -> list[tuple[str, tree_sitter.Node]]:
    """A key's parts, left to right. `a.b.c` nests one dotted_key a dot: a stack, not recursion."""
    parts, pending = [], [node]
    while pending:
        node = pending.pop()
        if node.type == "dotted_key":
            pending.extend(reversed(node.named_children))
            continue
        text = node.text.decode() if node.text else ""
        if node.type == "quoted_key":
            text = str(tomllib.loads(f"k = {text}")["k"])  # TOML's own unescaping
        parts.append((text, node))
    return parts


class TomlLocator:
    """Positions of keys and values by key path. Tables' values are their `[header]`."""

    def __init__(self, toml: str) -> None:
        self.keys: dict[KeyPath, tree_sitter.Node] = {}
        self.values: dict[KeyPath, tree_sitter.Node] = {}
        self._array_tables: dict[KeyPath, int] = {}
        tree = _toml_parser().parse(toml.encode())
        for child in tree.root_node.named_children:
            self._section(child)

    def _section(self, node: tree_sitter.Node) -> None:
        if node.type == "pair":
            self._pair(node, ())
            return
        if node.type not in ("table", "table_array_element"):
            return
        header = next((child for child in node.named_children if child.type in _KEY_TYPES), None)
        if header is None:
            return
        path = self._key(header, ())
        self.values.setdefault(path, header)
        if node.type == "table_array_element":  # [[verify.sizes]]: one element per header
            index = self._array_tables.get(path, 0)
            self._array_tables[path] = index + 1
            path = (*path, index)
            self.keys[path] = self.values[path] = header
        for child in node.named_children:
            if child.type == "pair":
                self._pair(child, path)

    def _key(self, key: tree_sitter.Node, base: KeyPath) -> KeyPath:
        path = base
        for text, part in _key_parts(key):
            path = (*path, text)
            self.keys.setdefault(path, part)
        return path

    def _pair(self, pair: tree_sitter.Node, base: KeyPath) -> None:
        """A `key = value` pair and, inside inline tables and arrays, every value nested in it, in the order
        written. A stack, not recursion: values nest as deep as the text says."""
        pending: list[tuple[tree_sitter.Node, KeyPath]] = [(pair, base)]
        while pending:
            node, path = pending.pop()
            if node.type == "pair":
                # A comment after the value on the same line is a child of the pair too: never the value.
                named = [child for child in node.named_children if child.type != "comment"]
                if len(named) >= 2 and named[0].type in _KEY_TYPES:
                    pending.append((named[-1], self._key(named[0], path)))
                continue
            self.values[path] = node
            nested: list[tuple[tree_sitter.Node, KeyPath]] = []
            if node.type == "inline_table":
                nested = [(child, path) for child in node.named_children if child.type == "pair"]
            elif node.type == "array":
                elements = [child for child in node.named_children if child.type != "comment"]
                for position, child in enumerate(elements):
                    self.keys[(*path, position)] = child
                    nested.append((child, (*path, position)))
            pending.extend(reversed(nested))

    def find(self, path: KeyPath, *, key: bool = False) -> tuple[Range, tree_sitter.Node] | None:
        """The key's (or value's) range; a missing path falls back to its nearest existing parent's key."""
        table = self.keys if key else self.values
        if path in table:
            return _range(table[path]), table[path]
        for length in range(len(path) - 1, 0, -1):
            parent = path[:length]
            node = self.keys.get(parent) or self.values.get(parent)
            if node is not None:
                return _range(node), node
        return None
