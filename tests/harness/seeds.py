"""Per-rank inputs that every rank can rebuild for any rank, so each computes its own reference."""
import zlib


def rank_generator(rank, salt=0):
    """A torch generator whose stream every rank can reproduce for any rank."""
    import torch
    return torch.Generator().manual_seed(1000 * rank + 17 + salt)


def seed_of(*key):
    """A seed that is the same in every process for the same key (Python's hash() is not)."""
    return zlib.crc32(repr(key).encode())
