"""The fetch thread of a DataLoader without worker processes (the default):
it fetches as the caller would, in the caller's grad mode, and a data set's
random draws in it are the same run to run whatever the training loop draws
meanwhile (it draws from a generator of its own, seeded from the loader's)."""

import ddpc
from ddpc.data import DataLoader, Dataset


class Noisy(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return ddpc.rand(3)


def _run(seed):
    ddpc.manual_seed(seed)
    batches, main = [], []
    for epoch in range(2):
        for b in DataLoader(Noisy(), batch_size=4, shuffle=True):
            batches.append(b.tolist())
            main.append(ddpc.rand(2).tolist())  # the training loop's own draws (dropout, noise)
    return batches, main


def test_draws_in_the_fetch_thread_are_the_same_run_to_run():
    first = _run(0)
    for _ in range(3):
        assert _run(0) == first
    assert _run(1) != first
    batches = [row for b in first[0] for row in b]
    assert len({tuple(r) for r in batches}) == len(batches)  # fresh draws for every sample, both epochs


class Quiet(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return ddpc.zeros(3)


def test_the_training_loops_draws_do_not_depend_on_the_data_sets():
    def main_draws(dataset):
        ddpc.manual_seed(5)
        return [ddpc.rand(2).tolist() for _ in DataLoader(dataset, batch_size=4)]

    assert main_draws(Noisy()) == main_draws(Quiet())


class GradMode(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return int(ddpc.is_grad_enabled())


def test_the_fetch_thread_takes_the_callers_grad_mode():
    with ddpc.no_grad():
        assert [b.tolist() for b in DataLoader(GradMode(), batch_size=4)] == [[0] * 4] * 2
    assert [b.tolist() for b in DataLoader(GradMode(), batch_size=4)] == [[1] * 4] * 2
