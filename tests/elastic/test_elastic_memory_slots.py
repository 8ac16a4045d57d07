"""A host's memory slots and the commit body they hold, in one process on real slot files: what a state copies
straight into a slot is read back as it was written, whatever else the commit holds (arrays of its own, a pickle
larger than the room kept for it, a slot that grows under arrays still in use), and a slot being rewritten is
never read as a commit. Every payload is compared with the arrays it was made from."""
import pickle

import numpy as np
import pytest

from hvdlite.elastic import commit_body, memory_slots
from hvdlite.elastic.array_block import ArrayBlock

SPECS = (("<f4", (3, 5)), ("<f8", (0,)), ("<i2", (7,)), ("|u1", (1,)), ("<f4", (130,)))


def filled(specs, seed):
    random = np.random.default_rng(seed)
    return [(random.standard_normal(shape) * 100).astype(dtype) for dtype, shape in specs]


def read_back(path):
    sequence, body = memory_slots.read(path)
    return sequence, commit_body.decode(body)


def assert_same_arrays(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)


def test_a_body_puts_every_array_at_an_aligned_offset_and_reads_back_what_was_encoded():
    arrays = filled(SPECS, 0)
    payload = {"step": 7, "block": ArrayBlock(arrays), "loose": np.arange(5.0)}
    parts = commit_body.encode(payload)
    body = b"".join(bytes(part) for part in parts)
    data, views = commit_body.pickled(payload)
    offsets, at = commit_body.layout([view.nbytes for view in views])
    assert all(offset % commit_body.ALIGN == 0 for offset in offsets) and at % commit_body.ALIGN == 0
    assert len(body) == at + len(data)
    for view, offset in zip(views, offsets):
        assert body[offset:offset + view.nbytes] == bytes(view)
    decoded = commit_body.decode(body)
    assert decoded["step"] == 7 and np.array_equal(decoded["loose"], np.arange(5.0))
    assert_same_arrays(decoded["block"].arrays, arrays)
    decoded["block"].arrays[0][0, 0] = 1.0  # writable


def test_arrays_filled_in_the_slot_are_committed_without_being_passed_again(tmp_path):
    slot = memory_slots.MemorySlot(str(tmp_path / "slot-0"))
    for sequence in (1, 3, 5):  # the same arrays every commit, new values in them
        arrays = slot.arrays_for(SPECS)
        assert memory_slots.read(slot.path) is None  # cleared: no longer the commit it was
        want = filled(SPECS, sequence)
        for target, value in zip(arrays, want):
            target[...] = value
        data, views = commit_body.pickled({"sequence": sequence, "arrays": ArrayBlock(arrays)})
        slot.store(sequence, data, views)
        got_sequence, payload = read_back(slot.path)
        assert got_sequence == sequence == payload["sequence"]
        assert_same_arrays(payload["arrays"].arrays, want)
    assert slot.arrays_for(SPECS) is arrays  # no new arrays while the layout stays
    slot.close()


def test_a_commit_with_arrays_before_the_slots_own_is_written_whole(tmp_path):
    """An array of the payload's own comes first, so the slot's arrays go elsewhere than where they were filled,
    over each other's places: they are read out before anything is written."""
    slot = memory_slots.MemorySlot(str(tmp_path / "slot-1"))
    arrays = slot.arrays_for(SPECS)
    want = filled(SPECS, 11)
    for target, value in zip(arrays, want):
        target[...] = value
    first = np.arange(1000, dtype=np.float32)
    data, views = commit_body.pickled({"first": first, "arrays": ArrayBlock(arrays)})
    slot.store(4, data, views)
    sequence, payload = read_back(slot.path)
    assert sequence == 4 and np.array_equal(payload["first"], first)
    assert_same_arrays(payload["arrays"].arrays, want)
    slot.close()


def test_a_slot_grows_under_arrays_still_held_and_for_a_large_pickle(tmp_path):
    slot = memory_slots.MemorySlot(str(tmp_path / "slot-0"))
    small = slot.arrays_for(SPECS[:1])[0]
    small[...] = 1.0
    big_specs = (("<f8", (50_000,)), ("<f4", (3, 5)))
    big = slot.arrays_for(big_specs)  # a larger map; `small` still views the old one
    want = filled(big_specs, 2)
    for target, value in zip(big, want):
        target[...] = value
    text = "x" * 300_000  # a pickle larger than the room kept after the arrays: the slot grows again in store()
    data, views = commit_body.pickled({"text": text, "arrays": ArrayBlock(big)})
    slot.store(8, data, views)
    sequence, payload = read_back(slot.path)
    assert sequence == 8 and payload["text"] == text
    assert_same_arrays(payload["arrays"].arrays, want)
    # The old map still works and shows the same file: the big commit's first array starts where `small` did.
    assert small[0, :2].tobytes() == want[0][:1].tobytes()
    slot.close()


def test_a_commit_without_the_slots_arrays_is_copied_in(tmp_path):
    slot = memory_slots.MemorySlot(str(tmp_path / "slot-0"))
    want = filled(SPECS, 5)
    data, views = commit_body.pickled({"arrays": ArrayBlock(want)})
    slot.store(2, data, views)
    sequence, payload = read_back(slot.path)
    assert sequence == 2
    assert_same_arrays(payload["arrays"].arrays, want)
    slot.close()


@pytest.mark.parametrize("damage", ["magic", "length", "short file"])
def test_a_damaged_slot_is_no_commit(tmp_path, damage):
    slot = memory_slots.MemorySlot(str(tmp_path / "slot-0"))
    data, views = commit_body.pickled({"value": 1})
    slot.store(1, data, views)
    slot.close()
    path = tmp_path / "slot-0"
    content = bytearray(path.read_bytes())
    if damage == "magic":
        content[0] ^= 0xFF
    elif damage == "length":
        content[16:24] = (len(content) * 2).to_bytes(8, "little")
    else:
        content = content[:memory_slots.HEADER.size - 1]
    path.write_bytes(bytes(content))
    assert memory_slots.read(str(path)) is None


def test_an_array_block_pickled_again_gives_its_current_values():
    """A block pickled every commit reuses its reduction: the values are those of the moment it is pickled."""
    arrays = [np.zeros(4, np.float32)]
    block = ArrayBlock(arrays)
    for value in (1.0, 2.0):
        arrays[0][...] = value
        data, views = commit_body.pickled(block)
        assert np.array_equal(pickle.loads(data, buffers=[bytes(v) for v in views]).arrays[0], np.full(4, value))
