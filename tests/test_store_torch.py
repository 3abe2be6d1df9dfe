"""Optional: the stores' extended API against torch.distributed's (skipped
when torch is not installed): the same calls on a TCPStore, a HashStore and
a PrefixStore over a TCPStore of each library give the same keys in
list_keys, the same appended values, barrier counters and multi_get
results, the same queue order and lengths, check on a queue key, and the
same error classes for an empty queue's pop and a multi_set whose lengths
differ. Left out where torch differs by kind of store: a mismatched
multi_set on its HashStore (std::bad_alloc, a MemoryError), a barrier on
its HashStore (a barrier of one that waits out the timeout) and on its
PrefixStore (generic keys "bar/num_members" and "bar/last_member", where its
TCPStore and ddpc's stores keep one counter "bar").

Each group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test


def script(store, module, mismatch=True, barrier=True):
    """What a PyTorch user would observe of ``store`` (of ``module``, torch.distributed or ddpc.distributed)."""
    seen = []
    store.set("a", "1")
    store.append("b", "po")
    store.append("b", "tato")
    store.multi_set(["c", "d"], ["3", b"4"])
    seen.append(store.multi_get(["b", "c", "d"]))
    keys_before = store.num_keys()
    for item in ("x", "y", "z"):
        store.queue_push("q", item)
    seen.append((store.queue_len("q"), store.queue_len("missing"), store.check(["q"]), store.num_keys() - keys_before))
    seen.append(sorted(store.list_keys()))
    seen.append([store.queue_pop("q"), store.queue_pop("q", False), store.queue_pop("q")])
    seen.append((store.queue_len("q"), store.check(["q"])))
    calls = [lambda: store.queue_pop("q", False)] + [lambda: store.multi_set(["e", "f"], ["1"])] * mismatch
    for call in calls:
        try:
            call()
        except module.DistError as e:
            seen.append([n for n in ("QueueEmptyError", "DistStoreError", "DistError")
                         if isinstance(e, getattr(module, n))])
        else:
            seen.append("no error")
    if barrier:
        store.barrier("bar", 1)
        seen.append((sorted(store.list_keys()), store.get("bar")))
    seen.append(store.has_extended_api())
    return seen


def compare(make, **quirks):
    import torch.distributed as td

    import ddpc.distributed as dd

    theirs, ours = script(make(td), td, **quirks), script(make(dd), dd, **quirks)
    assert theirs == ours, (theirs, ours)


def tcp_store(np, torch, ddpc):
    from datetime import timedelta

    compare(lambda m: m.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30)))


def hash_store(np, torch, ddpc):
    compare(lambda m: m.HashStore(), mismatch=False, barrier=False)


def prefix_store(np, torch, ddpc):
    from datetime import timedelta

    def make(m):
        base = m.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30))
        base.set("outside", "v")
        base.queue_push("job/q", "left behind")  # the prefixed queue: popped first
        store = m.PrefixStore("job", base)
        assert store.queue_pop("q") == b"left behind"
        return store

    compare(make, barrier=False)


GROUPS = {f.__name__: f for f in (tcp_store, hash_store, prefix_store)}

test_matches_pytorch = torch_group_test(__file__, GROUPS)

if __name__ == "__main__":
    run_torch_group(GROUPS)
