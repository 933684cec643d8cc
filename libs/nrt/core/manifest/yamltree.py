"""YAML to plain values, keeping the line of every key path (PyYAML drops it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from nrt.core.manifest.errors import Problem

Key = str | int
KeyPath = tuple[Key, ...]


def render_path(path: KeyPath) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


@dataclass(slots=True)
class YamlTree:
    value: object
    lines: dict[KeyPath, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def line(self, path: KeyPath) -> int | None:
        """Line of ``path``, else of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


def parse_yaml(text: str) -> YamlTree:
    """Parse ``text``; syntax errors and duplicate keys become problems with their line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        return YamlTree(None, problems=[Problem("", f"invalid YAML: {exc.problem or exc}", line)])
    tree = YamlTree(None)
    if node is None:
        return tree
    constructor = yaml.SafeLoader("")
    tree.value = _convert(node, (), tree, constructor)
    return tree


def _convert(node: yaml.Node, path: KeyPath, tree: YamlTree, constructor: yaml.SafeLoader) -> object:
    tree.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        mapping: dict[str, object] = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            key_text = str(key)
            child = (*path, key_text)
            if key_text in mapping:
                tree.problems.append(
                    Problem(render_path(child), "duplicate key; each key may appear once", key_node.start_mark.line + 1)
                )
            tree.lines[child] = key_node.start_mark.line + 1
            mapping[key_text] = _convert(value_node, child, tree, constructor)
        return mapping
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), tree, constructor) for i, item in enumerate(node.value)]
    return constructor.construct_object(node, deep=True)
