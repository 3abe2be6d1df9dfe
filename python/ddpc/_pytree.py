"""Nested containers (tuples, lists, namedtuples, dicts) taken apart into
their leaves and put back together, as torch.utils._pytree does: the
arguments and results of ddpc.func's transforms are such trees of tensors.

A structure is None for a leaf, else (container type, dict keys or None,
the children's structures)."""


def flatten(tree):
    """(the leaves in order, the structure that ``unflatten`` rebuilds from them)."""
    leaves = []

    def walk(node):
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


def tree_map(fn, tree):
    leaves, structure = flatten(tree)
    return unflatten([fn(leaf) for leaf in leaves], structure)


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
