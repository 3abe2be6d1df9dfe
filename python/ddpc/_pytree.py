"""Nested containers (tuples, lists, namedtuples, dicts) taken apart into
their leaves and put back together, as torch.utils._pytree does: the
arguments and results of ddpc.func's transforms are such trees of tensors.
Also ``ddpc.utils._pytree``, with torch's names (tree_flatten,
tree_unflatten, tree_leaves, tree_structure, tree_map, tree_map_only,
tree_all, tree_any, TreeSpec); containers of other types are leaves, as
ddpc has no register_pytree_node.

A structure is None for a leaf, else (container type, dict keys or None,
the children's structures)."""


def flatten(tree, is_leaf=None):
    """(the leaves in order, the structure that ``unflatten`` rebuilds from
    them); a node for which ``is_leaf`` is true is a leaf, also a container."""
    leaves = []

    def walk(node):
        if is_leaf is not None and is_leaf(node):
            leaves.append(node)
            return None
        if isinstance(node, (tuple, list)):
            return type(node), None, [walk(child) for child in node]
        if isinstance(node, dict):
            keys = list(node)
            return type(node), keys, [walk(node[k]) for k in keys]
        leaves.append(node)
        return None

    return leaves, walk(tree)


def unflatten(leaves, structure):
    """The tree of ``structure`` with ``leaves`` in place of its leaves."""
    remaining = iter(leaves)

    def build(s):
        if s is None:
            return next(remaining)
        kind, keys, children = s
        values = [build(child) for child in children]
        if keys is not None:
            return kind(zip(keys, values))
        return kind(*values) if hasattr(kind, "_fields") else kind(values)  # a namedtuple takes its fields

    return build(structure)


def tree_map(fn, tree, *rests, is_leaf=None):
    """``tree`` with ``fn(leaf, *rest_leaves)`` in place of each leaf, where
    ``rests`` are trees of the same structure (not deeper ones, as torch allows)."""
    leaves, structure = flatten(tree, is_leaf)
    columns = [leaves]
    for rest in rests:
        rest_leaves, rest_structure = flatten(rest, is_leaf)
        if rest_structure != structure:
            raise ValueError("tree_map: the trees given have different structures")
        columns.append(rest_leaves)
    return unflatten([fn(*args) for args in zip(*columns)], structure)


class TreeSpec:
    """A tree's structure, which ``tree_unflatten`` fills with leaves (torch's TreeSpec)."""

    def __init__(self, structure, num_leaves):
        self.structure, self.num_leaves = structure, num_leaves

    def __eq__(self, other):
        return isinstance(other, TreeSpec) and self.structure == other.structure

    def __repr__(self):
        return f"TreeSpec({self.structure!r}, num_leaves={self.num_leaves})"

    def unflatten(self, leaves):
        return tree_unflatten(leaves, self)


def tree_flatten(tree, is_leaf=None):
    """(the leaves in order, their TreeSpec)."""
    leaves, structure = flatten(tree, is_leaf)
    return leaves, TreeSpec(structure, len(leaves))


def tree_unflatten(leaves, treespec):
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError(f"tree_unflatten: {len(leaves)} leaves for a structure of {treespec.num_leaves}")
    return unflatten(leaves, treespec.structure)


def tree_leaves(tree, is_leaf=None):
    return flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def tree_map_only(types, fn, tree, is_leaf=None):
    """``tree`` with ``fn(leaf)`` in place of each leaf that is an instance of ``types``."""
    return tree_map(lambda leaf: fn(leaf) if isinstance(leaf, types) else leaf, tree, is_leaf=is_leaf)


def tree_all(pred, tree, is_leaf=None):
    return all(pred(leaf) for leaf in flatten(tree, is_leaf)[0])


def tree_any(pred, tree, is_leaf=None):
    return any(pred(leaf) for leaf in flatten(tree, is_leaf)[0])


def leaves_for(prefix, tree, what):
    """One value per leaf of ``tree`` from ``prefix``: a value that is not a
    container stands for the whole subtree under it, as torch.func's in_dims
    and out_dims do."""
    if not isinstance(prefix, (tuple, list, dict)):
        return [prefix] * len(flatten(tree)[0])
    if isinstance(prefix, dict) != isinstance(tree, dict) or not isinstance(tree, (tuple, list, dict)) or \
            len(prefix) != len(tree) or (isinstance(tree, dict) and set(prefix) != set(tree)):
        raise ValueError(f"{what}: {prefix!r} does not match the structure of the value it describes")
    pairs = [(prefix[k], tree[k]) for k in tree] if isinstance(tree, dict) else zip(prefix, tree)
    return [v for p, t in pairs for v in leaves_for(p, t, what)]
