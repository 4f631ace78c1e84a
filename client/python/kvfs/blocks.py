# SPDX-License-Identifier: MIT
"""
kvfs.blocks — where block b of a KV-cache tensor lies, as byte ranges.

vLLM hands a KV connector one tensor per layer, in whatever layout its
attention backend chose: (2, num_blocks, block_size, heads, head_size) for
FlashAttention, (num_blocks, 2, ...) for FlashInfer, the same logical shape
over another physical order (HND: a permuted view, not contiguous),
(num_blocks, block_size, head_size) for MLA, one tensor across layers, and
often several layers' tensors as views of one allocation. This module
derives, from a tensor's shape, strides and element size alone (no numpy,
any dtype), the ranges of bytes that block b of it occupies:

    [data + b * block_stride + offset, + length)  for each (offset, length) run

in the order of their addresses, adjacent elements merged into one run. A
kvfs layout segment is exactly one such run (kvfs_ioctl.h: base, stride,
length), so a block of every layer is one kvfs value whose bytes are each
layer's block in memory order. Two caches with the same layout name the
same bytes the same way; `signature` names the order, so that caches laid
out otherwise never share keys.

Tensors are duck-typed: anything with .shape, .stride(), .element_size()
and .data_ptr() (torch.Tensor; a test's stand-in). Nothing here touches the
memory.
"""

from dataclasses import dataclass

__all__ = ["BlockGeometry", "LayoutError", "geometry", "allocation"]


class LayoutError(ValueError):
    """A tensor whose blocks kvfs cannot address; the message names the
    layer, the shape and the strides."""


@dataclass(frozen=True)
class BlockGeometry:
    """Where block b of one tensor lies: runs (offset, length) in bytes from
    the tensor's first element, each moved by b * block_stride."""

    num_blocks: int
    block_stride: int  # bytes between block b and block b + 1
    runs: tuple  # ((offset, length), ...) in address order
    block_bytes: int  # the sum of the run lengths
    order: str  # one block's dims in memory order, outer to inner, as index:size (the
    #             index among the dims but the block's), then the element size:
    #             "0:2,1:16,2:4,3:8/2" for (2, nb, 16, 4, 8) bf16 and (nb, 2, 16, 4, 8) alike

    @property
    def signature(self):
        """What a block's byte order depends on: equal for caches whose
        blocks hold the same elements in the same order."""
        return self.order


def geometry(tensor, block_dim, name="", max_runs=None):
    """The BlockGeometry of `tensor`, whose dimension `block_dim` indexes
    blocks. Raises LayoutError (naming `name`, the shape and the strides)
    for what kvfs cannot address: negative strides, blocks that overlap one
    another, or more than max_runs runs."""
    shape, strides = tuple(tensor.shape), tuple(tensor.stride())
    size = tensor.element_size()

    def refuse(why):
        return LayoutError("kvfs: layer %s: %s (shape %s, strides %s, %d-byte elements)"
                           % (name or "?", why, list(shape), list(strides), size))

    if not 0 <= block_dim < len(shape):
        raise refuse("no block dimension %d" % block_dim)
    if any(s < 0 for s in strides):
        raise refuse("negative strides")
    nb, bstride = shape[block_dim], strides[block_dim] * size
    dims = sorted(((shape[i], strides[i] * size, i) for i in range(len(shape))
                   if i != block_dim and shape[i] != 1), key=lambda d: -d[1])
    # merge from the innermost dimension while each is dense over the next
    run, inner = size, len(dims)
    while inner and dims[inner - 1][1] == run:
        inner -= 1
        run *= dims[inner][0]
    offsets = [0]
    for n, stride, _ in dims[:inner]:
        if max_runs and len(offsets) * n > max_runs:
            raise refuse("a block is more than %d separate ranges" % max_runs)
        offsets = [o + j * stride for o in offsets for j in range(n)]
    offsets.sort()
    if any(b - a < run for a, b in zip(offsets, offsets[1:])):
        raise refuse("a block's elements overlap")
    span = offsets[-1] + run
    if nb > 1 and bstride < span and not _interleaves(offsets, run, bstride, nb):
        raise refuse("blocks overlap one another")
    # dims named by their place among the non-block dims: (2, nb, ...) and (nb, 2, ...) agree
    order = ",".join("%d:%d" % (i - (i > block_dim), n) for n, _, i in dims) + "/%d" % size
    return BlockGeometry(nb, bstride, tuple((o, run) for o in offsets), run * len(offsets),
                         order)


def _interleaves(offsets, run, stride, nb):
    """True when the blocks' runs never meet although a block spans more
    than the block stride (K and V halves of a (2, num_blocks, ...) tensor):
    every run of block 0 and of the last block lie apart."""
    ranges = sorted((o + b * stride, o + b * stride + run)
                    for o in offsets for b in (0, 1, nb - 1))
    return all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))


def allocation(tensor):
    """(address, bytes) of the memory block `tensor` is a view of: its
    storage, so that a connector registers each allocation once however
    many layers' views it backs."""
    storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") \
        else tensor.storage()
    nbytes = storage.nbytes() if hasattr(storage, "nbytes") else \
        storage.size() * storage.element_size()
    return storage.data_ptr(), nbytes
