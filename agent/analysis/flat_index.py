"""A flat thread index taken apart into locals (`col = idx % W; row = (idx / W) % H; n = idx / (W * H)`):
the fact the rewrites that give each piece its own axis (contraction, implicit GEMM) start from, found once
here instead of matched in each."""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.analysis.analyse import assigned_names, declared_values
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.values import Values, text, unwrap
from tree_sitter import Node

# How deep locals read in a divisor or a modulus are written out (`Wo = W - 2`, `HW = Ho * Wo`).
_LOCALS_DEPTH = 8


@dataclass(frozen=True)
class FlatPiece:
    """A local declared as `(index / divisor) % modulus`: the divisor 1 for `index % modulus`, the modulus
    None for `index / divisor` (the piece that takes what is left)."""

    name: str
    divisor: Form
    modulus: Form | None


def flat_pieces(body: Node, index: str, values: Values, *, through_locals: bool = False) -> list[FlatPiece]:
    """The locals declared in the body as a piece of the flat index, in the order they are declared.

    `through_locals`: the divisors and moduli with the locals they read that are never assigned again
    (`Wo = W - 2`) written out as their values, so that they compare with the bound's sizes; the index
    itself is kept."""
    declared = declared_values(body)
    mutable = assigned_names(body) if through_locals else set()

    def form(node: Node, depth: int = 0) -> Form:
        found = values.form(node)
        if not through_locals:
            return found
        for atom in found.atoms():
            if atom in declared and atom not in mutable and atom != index and depth < _LOCALS_DEPTH:
                found = found.substitute(atom, form(declared[atom], depth + 1))
        return found

    pieces: list[FlatPiece] = []
    for name, value in declared.items():
        node = unwrap(value)
        op = node.child_by_field_name("operator") if node.type == "binary_expression" else None
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if op is None or left is None or right is None:
            continue
        left = unwrap(left)
        if op.type == "%" and text(left) == index:
            pieces.append(FlatPiece(name, Form.constant(1), form(right)))
        elif op.type == "/" and text(left) == index:
            pieces.append(FlatPiece(name, form(right), None))
        elif op.type == "%" and left.type == "binary_expression":
            inner_op = left.child_by_field_name("operator")
            numerator, divisor = left.child_by_field_name("left"), left.child_by_field_name("right")
            if (
                inner_op is not None
                and inner_op.type == "/"
                and numerator is not None
                and divisor is not None
                and text(unwrap(numerator)) == index
            ):
                pieces.append(FlatPiece(name, form(divisor), form(right)))
    return pieces
