"""Where a tool's secret arguments sit, at any depth, and how they are shown: masked.

A value is secret when its JSON schema says so: ``writeOnly``, ``format: password`` (what
pydantic writes for ``SecretStr`` / ``SecretBytes``) or ``x-secret``. The schema is compiled
once per tool into a graph of nodes (``$ref`` cycles included) and walked along a call's
arguments, so secrets nested in models, lists, dicts, tuples and unions are found.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

MASK = "**********"
"""What every secret value is shown as."""
SEALED = "$toolq_secret"
"""Key of the one-key object that replaces a secret value in a stored call."""

Path = tuple[str | int, ...]


def is_sealed(value: Any) -> bool:
    """Tell whether ``value`` is a stored, encrypted secret (``{"$toolq_secret": ...}``)."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(SEALED), str)


def path_text(path: Path) -> str:
    """``("creds", "keys", 0)`` → ``creds.keys[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


class _Node:
    """One schema location: secret itself, or children that may be."""

    def __init__(self) -> None:
        self.marked = False
        self.props: dict[str, _Node] = {}
        self.patterns: list[tuple[re.Pattern[str], _Node]] = []
        self.extra: _Node | None = None
        self.items: _Node | None = None
        self.prefix: list[_Node] = []
        self.alts: list[_Node] = []
        self.secret = False
        self.reaches = False

    def children(self) -> Iterator[_Node]:
        yield from self.props.values()
        yield from (node for _, node in self.patterns)
        if self.extra is not None:
            yield self.extra
        if self.items is not None:
            yield self.items
        yield from self.prefix
        yield from self.alts


class SecretPaths:
    """The secret locations of one argument schema, compiled once."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._defs: dict[str, Any] = {
            **schema.get("definitions", {}),
            **schema.get("$defs", {}),
        }
        self._refs: dict[str, _Node] = {}
        self._nodes: list[_Node] = []
        self._root = self._compile(schema)
        self._solve()
        self.any = self._root.reaches
        """True when some argument can hold a secret (most tools: False, nothing to walk)."""
        self.top_level = frozenset(name for name, node in self._root.props.items() if node.secret)
        """Top-level argument names that are secret as a whole."""

    # -- compiling ---------------------------------------------------------------------------

    def _compile(self, schema: Any) -> _Node:
        node = _Node()
        self._nodes.append(node)
        if not isinstance(schema, dict):
            return node  # ``true`` / ``false`` schemas hold nothing secret
        ref = schema.get("$ref")
        if isinstance(ref, str):
            node.alts.append(self._ref(ref))
        node.marked = bool(
            schema.get("writeOnly") or schema.get("x-secret") or schema.get("format") == "password"
        )
        for name, sub in (schema.get("properties") or {}).items():
            node.props[name] = self._compile(sub)
        for pattern, sub in (schema.get("patternProperties") or {}).items():
            node.patterns.append((re.compile(pattern), self._compile(sub)))
        if isinstance(schema.get("additionalProperties"), dict):
            node.extra = self._compile(schema["additionalProperties"])
        if isinstance(schema.get("items"), dict):
            node.items = self._compile(schema["items"])
        node.prefix = [self._compile(sub) for sub in schema.get("prefixItems") or ()]
        for keyword in ("anyOf", "oneOf", "allOf"):
            node.alts += [self._compile(sub) for sub in schema.get(keyword) or ()]
        return node

    def _ref(self, ref: str) -> _Node:
        if ref not in self._refs:
            name = ref.rsplit("/", 1)[-1]
            local = ref.startswith(("#/$defs/", "#/definitions/"))
            # Placeholder first: a model that contains itself refers back to this node.
            placeholder = _Node()
            self._nodes.append(placeholder)
            self._refs[ref] = placeholder
            if local and name in self._defs:
                placeholder.alts.append(self._compile(self._defs[name]))
        return self._refs[ref]

    def _solve(self) -> None:
        """Fixpoint of ``secret`` (through alternatives) and ``reaches`` (any descendant)."""
        changed = True
        while changed:
            changed = False
            for node in self._nodes:
                secret = node.marked or any(alt.secret for alt in node.alts)
                reaches = secret or any(child.reaches for child in node.children())
                if (secret, reaches) != (node.secret, node.reaches):
                    node.secret, node.reaches = secret, reaches
                    changed = True

    # -- walking -----------------------------------------------------------------------------

    def locate(self, arguments: Any, *, conservative: bool = False) -> list[Path]:
        """Paths of the secret values in ``arguments`` (``null`` values hold none).

        ``conservative`` is for arguments that did not validate: a value whose shape does
        not match a schema that leads to a secret (a string where an object with a password
        belongs) is counted secret as a whole.
        """
        if not self.any:
            return []
        found: set[Path] = set()
        self._walk(self._root, arguments, (), found, conservative)
        # A path under another found path is already hidden by it.
        return sorted(
            (p for p in found if not any(p[: len(q)] == q for q in found if len(q) < len(p))),
            key=lambda p: [str(x) for x in p],
        )

    def _walk(
        self, node: _Node, value: Any, path: Path, found: set[Path], conservative: bool
    ) -> None:
        if value is None or not node.reaches or path in found:
            return
        if node.secret:
            found.add(path)
            return
        for alt in node.alts:
            self._walk(alt, value, path, found, conservative)
        takes_object = bool(node.props or node.patterns or node.extra)
        takes_array = bool(node.items or node.prefix)
        if isinstance(value, dict) and takes_object:
            for key, item in value.items():
                for child in self._children_for(node, key):
                    self._walk(child, item, (*path, key), found, conservative)
        elif isinstance(value, list) and takes_array:
            for index, item in enumerate(value):
                at = node.prefix[index] if index < len(node.prefix) else node.items
                if at is not None:
                    self._walk(at, item, (*path, index), found, conservative)
        elif conservative and (takes_object or takes_array):
            found.add(path)  # not the shape that holds the secret: hide all of it

    @staticmethod
    def _children_for(node: _Node, key: str) -> list[_Node]:
        if key in node.props:
            return [node.props[key]]
        matched = [child for pattern, child in node.patterns if pattern.search(key)]
        if not matched and node.extra is not None:
            matched = [node.extra]
        return matched


# -- reading and writing paths ----------------------------------------------------------------


def get_path(value: Any, path: Path) -> Any:
    """The value at ``path`` (``KeyError`` / ``IndexError`` / ``TypeError`` when absent)."""
    for part in path:
        value = value[part]
    return value


def replace_at(value: Any, paths: list[Path], new: Any) -> Any:
    """A copy of ``value`` with each path replaced by ``new(path, old)``; the rest shared."""
    if not paths:
        return value
    if () in paths:
        return new((), value)
    heads: dict[str | int, list[Path]] = {}
    for path in paths:
        heads.setdefault(path[0], []).append(path[1:])
    if isinstance(value, dict):
        out_d = dict(value)
        for head, rest in heads.items():
            if head in out_d:
                out_d[head] = replace_at(
                    out_d[head], rest, lambda p, old, h=head: new((h, *p), old)
                )
        return out_d
    if isinstance(value, list):
        out_l = list(value)
        for head, rest in heads.items():
            if isinstance(head, int) and 0 <= head < len(out_l):
                out_l[head] = replace_at(
                    out_l[head], rest, lambda p, old, h=head: new((h, *p), old)
                )
        return out_l
    return value


def _mask_sealed(value: Any) -> Any:
    if is_sealed(value):
        return MASK
    if isinstance(value, dict):
        return {k: _mask_sealed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_sealed(v) for v in value]
    return value


def mask_arguments(
    arguments: dict[str, Any], paths: SecretPaths | None, *, conservative: bool = False
) -> dict[str, Any]:
    """The one masking helper: a copy with every secret shown as ``MASK``.

    With ``paths``, the secret locations of the tool's schema are masked, encrypted or not,
    and nothing else: a value shaped like a sealed one elsewhere is plaintext that runs as it
    is, and is shown. Without them (a tool this process does not know), sealed values are
    masked wherever they are. A tool without
    secrets costs a shallow copy: nothing of its arguments is ever sealed.
    """
    if paths is None:
        masked: dict[str, Any] = _mask_sealed(arguments)
        return masked
    if not paths.any:
        return dict(arguments)
    # Only the schema's secret locations: a value shaped like a sealed one anywhere else is
    # plaintext a submitter chose, and runs as it is; masked, no approver could see it.
    out: dict[str, Any] = replace_at(
        arguments, paths.locate(arguments, conservative=conservative), lambda _p, _v: MASK
    )
    return out if out is not arguments else dict(arguments)


__all__ = [
    "MASK",
    "SEALED",
    "Path",
    "SecretPaths",
    "get_path",
    "is_sealed",
    "mask_arguments",
    "path_text",
    "replace_at",
]
