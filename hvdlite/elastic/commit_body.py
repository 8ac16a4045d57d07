"""A commit's body: the bytes that a memory slot and a disk commit hold.

The arrays' memory comes first, each at an offset aligned for any dtype, then the pickle of everything else
(protocol 5, the arrays out of band):

    how many arrays, the pickle's length | each array's length | pad | array 0 | pad | array 1 | ... | pad | pickle

The arrays' offsets depend only on their lengths, so a state can copy its tensors straight into a memory slot
before the rest is pickled (memory_slots.py), and every array is written from where it lies, never copied into
the pickle.
"""
import pickle
import struct

ALIGN = 64
PREFIX = struct.Struct("<QQ")
_PADDING = memoryview(bytes(ALIGN))


def _aligned(offset):
    return -(-offset // ALIGN) * ALIGN


def layout(sizes):
    """(the arrays' offsets, the pickle's offset) in a body whose arrays are ``sizes`` bytes long."""
    at = _aligned(PREFIX.size + 8 * len(sizes))
    offsets = []
    for size in sizes:
        offsets.append(at)
        at = _aligned(at + size)
    return offsets, at


def pickled(payload):
    """(the pickle of payload, its arrays' memory as 1-D byte views, in the pickle's order)."""
    buffers = []
    data = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)
    return data, [buffer.raw() for buffer in buffers]


def prefix(data, views):
    """The body's first bytes: how many arrays, the pickle's length, each array's length."""
    return PREFIX.pack(len(views), len(data)) + struct.pack(f"<{len(views)}Q", *(view.nbytes for view in views))


def parts(data, views):
    """The body of a pickle and its arrays as byte strings and views to write one after the other."""
    offsets, at = layout([view.nbytes for view in views])
    written = [prefix(data, views)]
    position = len(written[0])
    for view, offset in zip(views, offsets):
        written.append(_PADDING[:offset - position])
        written.append(view)
        position = offset + view.nbytes
    written += [_PADDING[:at - position], data]
    return written


def encode(payload):
    """The body of payload, as ``parts`` gives it."""
    return parts(*pickled(payload))


def decode(body):
    """The payload of a body; its arrays are writable (a copy of the body)."""
    body = memoryview(bytearray(body))
    count, length = PREFIX.unpack_from(body)
    sizes = struct.unpack_from(f"<{count}Q", body, PREFIX.size)
    offsets, at = layout(sizes)
    buffers = [body[offset:offset + size] for offset, size in zip(offsets, sizes)]
    return pickle.loads(body[at:at + length], buffers=buffers)
