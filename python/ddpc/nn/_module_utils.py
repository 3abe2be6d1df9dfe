"""``ddpc.nn.modules.utils``, torch.nn.modules.utils' helpers that ported
code imports: the argument expanders ``_single``, ``_pair``, ``_triple``,
``_quadruple``, ``_ntuple``, ``_reverse_repeat_tuple``, and
``consume_prefix_in_state_dict_if_present`` (a DistributedDataParallel's
state_dict keys start with ``module.``)."""

import collections.abc
import itertools

__all__ = ["consume_prefix_in_state_dict_if_present"]


def _ntuple(n, name="parse"):
    """A function that gives an iterable as a tuple and repeats anything else ``n`` times."""
    def parse(x):
        if isinstance(x, collections.abc.Iterable):
            return tuple(x)
        return tuple(itertools.repeat(x, n))

    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n):
    """``t`` reversed, each element ``n`` times: a conv's padding in F.pad's order (last dim first)."""
    return tuple(x for x in reversed(t) for _ in range(n))


def consume_prefix_in_state_dict_if_present(state_dict, prefix):
    """Strips ``prefix`` from the keys of ``state_dict`` that start with it, in
    place: a checkpoint of ``ddp.state_dict()`` then loads into the bare
    model. Keys without the prefix stay as they are. As PyTorch's, the keys of
    ``state_dict._metadata`` are renamed too: ``"module"`` (the wrapped
    model's) takes the wrapper's ``""`` over."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        state_dict[key[len(prefix):]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is None:
        return
    for key in [k for k in metadata if k]:
        if key == prefix.replace(".", "") or key.startswith(prefix):
            metadata[key[len(prefix):]] = metadata.pop(key)
