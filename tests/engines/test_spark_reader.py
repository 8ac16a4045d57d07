"""The Estimators' reader (hvdlite/spark/common/reader.py) on real Parquet files written by pyarrow into a
LocalStore, for 3 ranks in this process: every rank takes the same number of steps, an epoch deals every row out
once among the ranks, and with inmemory_cache_all a rank reads each of its row groups once (its files may go after
the first epoch), keeps the same share every epoch and shuffles it anew."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hvdlite.spark.common import reader
from hvdlite.spark.common.store import Store

SIZE, GROUPS, GROUP_ROWS, BATCH = 3, 9, 8, 4
COLUMNS = {"row": [], "features": [2, 2]}


def written(tmp_path):
    """A data set of GROUPS row groups of GROUP_ROWS rows in two files: column row (the row's number) and
    features (4 values a row, to be shaped 2 x 2)."""
    store = Store.create(str(tmp_path / "store"))
    path = store.get_train_data_path("k")
    os.makedirs(path)
    total = GROUPS * GROUP_ROWS
    half = total // 2 - (total // 2) % GROUP_ROWS
    for name, rows in (("part-0.parquet", range(half)), ("part-1.parquet", range(half, total))):
        features = [[r, r + 0.25, r + 0.5, r + 0.75] for r in rows]
        table = pa.table({"row": pa.array(list(rows), pa.int64()),
                          "features": pa.array(features, pa.list_(pa.float32()))})
        pq.write_table(table, os.path.join(path, name), row_group_size=GROUP_ROWS)
    return store, path


def epoch_rows(groups, epoch, steps):
    """{rank: the rows of its batches in order} for one epoch, each batch checked whole; groups: each rank's
    RowGroups."""
    taken = {}
    for rank in range(SIZE):
        batches = list(reader.batches(groups[rank], COLUMNS, rank, SIZE, BATCH, steps, seed=11, epoch=epoch))
        assert len(batches) == steps
        for batch in batches:
            assert batch["row"].shape == (BATCH,) and batch["features"].shape == (BATCH, 2, 2)
            np.testing.assert_array_equal(batch["features"][:, 1, 1], batch["row"] + np.float32(0.75))
        taken[rank] = [int(r) for batch in batches for r in batch["row"]]
    return taken


def test_an_epoch_deals_every_row_once_in_equal_steps_and_a_new_order_each_epoch(tmp_path):
    store, path = written(tmp_path)
    groups = [reader.RowGroups(store, path)] * SIZE
    assert groups[0].rows == GROUPS * GROUP_ROWS and len(groups[0].units) == GROUPS
    steps = GROUPS * GROUP_ROWS // (SIZE * BATCH)
    first, second = epoch_rows(groups, 0, steps), epoch_rows(groups, 1, steps)
    for taken in (first, second):
        assert sorted(r for rows in taken.values() for r in rows) == list(range(GROUPS * GROUP_ROWS))
    assert first != second


def test_inmemory_cache_all_reads_each_row_group_once_and_keeps_each_ranks_share(tmp_path):
    store, path = written(tmp_path)
    steps = GROUPS * GROUP_ROWS // (SIZE * BATCH)
    ranks = [reader.RowGroups(store, path, cache=True) for _ in range(SIZE)]  # each rank has its own
    first = epoch_rows(ranks, 0, steps)
    for name in store.parquet_files(path):
        os.remove(name)  # the later epochs can only come from the ranks' memory
    later = epoch_rows(ranks, 1, steps)
    assert sorted(r for rows in first.values() for r in rows) == list(range(GROUPS * GROUP_ROWS))
    for rank in range(SIZE):
        assert sorted(later[rank]) == sorted(first[rank]), rank  # the same share
        assert later[rank] != first[rank], rank  # in a new order
        assert len(ranks[rank].cache) == GROUPS // SIZE  # its own row groups only
        assert all(not values.flags.writeable for part in ranks[rank].cache.values() for values in part.values())


def test_to_numpy_reshapes_list_columns():
    column = pa.chunked_array([pa.array([[1, 2, 3, 4], [5, 6, 7, 8]])])
    assert reader.to_numpy(column, [2, 2]).tolist() == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
