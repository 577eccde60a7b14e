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
    if node.type == "dotted_key":
        return [part for child in node.named_children for part in _key_parts(child)]
    text = node.text.decode() if node.text else ""
    if node.type == "quoted_key":
        text = str(tomllib.loads(f"k = {text}")["k"])  # TOML's own unescaping
    return [(text, node)]


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
        # A comment after the value on the same line is a child of the pair too: never take it as the value.
        named = [child for child in pair.named_children if child.type != "comment"]
        if len(named) < 2 or named[0].type not in _KEY_TYPES:
            return
        path = self._key(named[0], base)
        self._value(named[-1], path)

    def _value(self, node: tree_sitter.Node, path: KeyPath) -> None:
        self.values[path] = node
        if node.type == "inline_table":
            for child in node.named_children:
                if child.type == "pair":
                    self._pair(child, path)
        elif node.type == "array":
            elements = [child for child in node.named_children if child.type != "comment"]
            for position, child in enumerate(elements):
                self.keys[(*path, position)] = child
                self._value(child, (*path, position))

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
