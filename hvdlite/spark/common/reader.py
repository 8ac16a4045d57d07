"""Each rank's batches from the Parquet a fit wrote (hvdlite/spark/common/data.py), streamed with pyarrow: the data
set's row groups are dealt out to the ranks, in a new seeded order each epoch, and each is read when its turn comes
and its rows shuffled, so a rank holds one row group and one batch at a time, whatever the data set's size. Every
rank takes the same number of steps an epoch (cycling through its row groups where it has fewer rows), so no rank
waits at an epoch's end for another."""
import numpy as np
import pyarrow.parquet as pq


class RowGroups:
    """The row groups of a data set: (file, index, rows), the same list on every rank."""

    def __init__(self, store, path, cache=False):
        self.store, self.units = store, []
        self.cache = {} if cache else None  # unit -> {column: array}, when the rank keeps what it read
        for name in store.parquet_files(path):
            metadata = pq.ParquetFile(name, filesystem=store.fs).metadata
            self.units += [(name, g, metadata.row_group(g).num_rows) for g in range(metadata.num_row_groups)
                           if metadata.row_group(g).num_rows > 0]
        self.rows = sum(rows for _, _, rows in self.units)

    def dealt(self, rank, size, order_seed=None):
        """This rank's row groups: all of them in an order (seeded, or as written), every size-th from rank's; a
        rank left without any (fewer row groups than ranks) takes one, so that it has rows to step with."""
        order = list(range(len(self.units)))
        if order_seed is not None:
            np.random.default_rng(order_seed).shuffle(order)
        mine = order[rank::size] or ([order[rank % len(order)]] if order else [])
        return [self.units[i] for i in mine]

    def read(self, unit, columns):
        """{column: array of (rows, *shape)} of one row group (read-only arrays: a cached part is handed out again)."""
        if self.cache is not None and unit in self.cache:
            return self.cache[unit]
        name, group, _ = unit
        table = pq.ParquetFile(name, filesystem=self.store.fs).read_row_group(group, columns=list(columns))
        part = {column: to_numpy(table.column(column), shape) for column, shape in columns.items()}
        if self.cache is not None:
            for values in part.values():
                values.flags.writeable = False
            self.cache[unit] = part
        return part


def fit_data(spec):
    """(training RowGroups, validation RowGroups or None) of a fit, as its spec (estimator.py) names them."""
    cache = spec["inmemory_cache_all"]
    return (RowGroups(spec["store"], spec["train_path"], cache),
            RowGroups(spec["store"], spec["val_path"], cache) if spec["val_path"] else None)


def to_numpy(chunked, shape):
    """A Parquet column as an array of (rows, *shape): lists flattened and reshaped, scalars as they are."""
    column = chunked.combine_chunks()
    rows = len(column)
    if shape:
        values = column.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(rows, *shape)
    return column.to_numpy(zero_copy_only=False)


def batches(groups, columns, rank, size, batch_size, steps, seed=None, epoch=0, shuffle=True):
    """steps batches ({column: array of batch_size rows}) of this rank's share; rows shuffled each epoch when
    shuffle (seeded by seed and epoch, the same deal on every rank)."""
    seed = 0 if seed is None else seed
    cached = groups.cache is not None
    mine = groups.dealt(rank, size, None if not shuffle else [seed, 0 if cached else epoch])
    if not mine:
        raise ValueError("no rows to read: the data set is empty")
    if cached and shuffle:  # the same share every epoch, in an order of its own
        mine = [mine[i] for i in np.random.default_rng([seed, epoch, rank, 2]).permutation(len(mine))]
    rows_rng = np.random.default_rng([seed, epoch, rank, 1]) if shuffle else None
    pending, held, turn = [], 0, 0  # parts read and not yet batched (views), and their rows
    for _ in range(steps):
        while held < batch_size:
            part = groups.read(mine[turn % len(mine)], columns)
            turn += 1
            if rows_rng is not None:
                permutation = rows_rng.permutation(rows_in(part))
                part = {name: values[permutation] for name, values in part.items()}
            pending.append(part)
            held += rows_in(part)
        pieces, wanted = [], batch_size
        while wanted:
            first = pending[0]
            take = min(wanted, rows_in(first))
            pieces.append({name: values[:take] for name, values in first.items()})
            if take == rows_in(first):
                pending.pop(0)
            else:
                pending[0] = {name: values[take:] for name, values in first.items()}
            wanted -= take
        held -= batch_size
        yield pieces[0] if len(pieces) == 1 else {name: np.concatenate([p[name] for p in pieces]) for name in columns}


def rows_in(part):
    """The rows of a part or a batch ({column: array})."""
    return len(next(iter(part.values())))


def whole_share(groups, columns, rank, size, batch_size, steps=None):
    """Validation: this rank's row groups once, as written, in batches of up to batch_size (at most steps)."""
    done = 0
    for unit in (groups.units[rank::size] if groups.units else []):
        part = groups.read(unit, columns)
        count = rows_in(part)
        for begin in range(0, count, batch_size):
            if steps is not None and done == steps:
                return
            yield {name: values[begin:begin + batch_size] for name, values in part.items()}
            done += 1
