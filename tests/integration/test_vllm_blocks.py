# SPDX-License-Identifier: MIT
"""kvfs.blocks (where block b of a KV-cache tensor lies) on real torch
tensors in the layouts vLLM's attention backends hand a connector, and the
bytes moved through a real mount by layouts built from it:

- geometry: FlashAttention (2, nb, bs, H, D), FlashInfer (nb, 2, bs, H, D),
  the HND order as a permuted (non-contiguous) view, MLA (nb, bs, D), one
  tensor across layers (nb, L, 2, bs, H, D), a kernel block size that
  divides the scheduler's (a scheduler block = k kernel blocks), bf16,
  fp16 and fp8 (as a uint8 view: Debian's torch has no float8): the exact
  runs, block stride and bytes; (2, nb, ...) and (nb, 2, ...) share a
  signature, NHD and HND do not; a layout kvfs cannot address is refused
  with the layer, shape and strides in the message;
- allocation: views of one raw buffer name it once;
- end to end: each layout's cache registered once per allocation, a put of
  some blocks from one instance and a get into another instance of the same
  layout bring exactly those blocks of every layer back and touch nothing
  else (every other byte keeps its sentinel).
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvfstest  # noqa: E402

try:
    import torch
except ImportError:  # scripts/deps.sh installs python3-torch
    torch = None

NB, BS, H, D, L = 12, 16, 4, 8, 3  # blocks, block size, kv heads, head size, layers


def runs_of(t, block_dim, name="t", **kw):
    from kvfs.blocks import geometry
    return geometry(t, block_dim, name, **kw)


class GeometryTest(kvfstest.KvfsTestCase):
    def setUp(self):  # no mount
        kvfstest.client()

    def test_flash_attention(self):
        t = torch.zeros(2, NB, BS, H, D, dtype=torch.bfloat16)
        g = runs_of(t, 1)
        half = BS * H * D * 2
        self.assertEqual((g.num_blocks, g.block_stride, g.block_bytes), (NB, half, 2 * half))
        self.assertEqual(g.runs, ((0, half), (NB * half, half)))  # K, then V

    def test_flashinfer_and_hnd(self):
        t = torch.zeros(NB, 2, BS, H, D, dtype=torch.float16)
        g = runs_of(t, 0)
        self.assertEqual((g.block_stride, g.runs), (2 * BS * H * D * 2, ((0, 2 * BS * H * D * 2),)))
        self.assertEqual(g.signature, runs_of(torch.zeros(2, NB, BS, H, D,
                                                          dtype=torch.float16), 1).signature)
        # HND: the same logical shape over (nb, 2, H, bs, D) memory
        hnd = torch.zeros(NB, 2, H, BS, D, dtype=torch.float16).permute(0, 1, 3, 2, 4)
        self.assertFalse(hnd.is_contiguous())
        gh = runs_of(hnd, 0)
        self.assertEqual(gh.runs, g.runs)  # still one run per block
        self.assertNotEqual(gh.signature, g.signature)  # but the bytes are in another order

    def test_mla_cross_layer_fp8(self):
        mla = torch.zeros(NB, BS, 576, dtype=torch.bfloat16)
        self.assertEqual(runs_of(mla, 0).runs, ((0, BS * 576 * 2),))
        cross = torch.zeros(NB, L, 2, BS, H, D, dtype=torch.bfloat16)
        g = runs_of(cross, 0)
        self.assertEqual(g.runs, ((0, L * 2 * BS * H * D * 2),))  # a block of every layer
        fp8 = torch.zeros(2, NB, BS, H, D, dtype=torch.uint8)  # float8 bytes
        self.assertEqual(runs_of(fp8, 1).block_bytes, 2 * BS * H * D)

    def test_kernel_block_smaller_than_schedulers(self):
        # the kernel's blocks of 8 tokens: a scheduler block of 16 is two of them,
        # addressed as a view with the scheduler's block as the block dimension
        kernel = torch.zeros(2, 2 * NB, BS // 2, H, D, dtype=torch.bfloat16)
        sched = kernel.view(2, NB, BS, H, D)
        g = runs_of(sched, 1)
        self.assertEqual(g.block_bytes, 2 * BS * H * D * 2)
        self.assertEqual(g.runs, ((0, BS * H * D * 2), (2 * NB * (BS // 2) * H * D * 2,
                                                         BS * H * D * 2)))

    def test_refusals_name_the_layer(self):
        from kvfs.blocks import LayoutError
        narrow = torch.zeros(NB, H, BS, 2 * D)[:, :, :, :D]  # half of each row
        with self.assertRaises(LayoutError) as e:
            runs_of(narrow, 0, "model.layers.7.attn", max_runs=32)
        for part in ("model.layers.7.attn", str(list(narrow.shape)), str(list(narrow.stride()))):
            self.assertIn(part, str(e.exception))
        self.assertEqual(len(runs_of(narrow, 0).runs), H * BS)  # addressable without a cap
        over = torch.zeros(NB + 1, BS, D).as_strided((NB, BS, D), (D, D, 1))  # blocks overlap
        with self.assertRaises(LayoutError):
            runs_of(over, 0, "over")

    def test_views_of_one_allocation(self):
        from kvfs.blocks import allocation
        raw = torch.zeros(L * 2 * NB * BS * H * D, dtype=torch.bfloat16)
        views = [raw[i * 2 * NB * BS * H * D:(i + 1) * 2 * NB * BS * H * D].view(2, NB, BS, H, D)
                 for i in range(L)]
        self.assertEqual({allocation(v) for v in views}, {(raw.data_ptr(), raw.numel() * 2)})


class EndToEndTest(kvfstest.KvfsTestCase):
    MOUNT_OPTS = ("--mem-size=128M",)

    def instance(self, c, layers, block_dim):
        """Registers each allocation once and one layout of every layer's runs."""
        from kvfs.blocks import allocation, geometry
        regions, segs, sig = {}, [], []
        for i, t in enumerate(layers):
            addr, nbytes = allocation(t)
            if addr not in regions:
                regions[addr] = c.register((ctypes.c_char * nbytes).from_address(addr))
            g = geometry(t, block_dim, "layer%d" % i)
            sig.append(g.signature)
            for off, length in g.runs:
                segs.append((regions[addr], t.data_ptr() - addr + off, g.block_stride, length))
        self.assertEqual(len(regions), 1 if len({allocation(t) for t in layers}) == 1
                         else len(layers))
        return c.layout(segs), sig

    def check_layout(self, name, make, block_dim, blocks=(0, 3, NB - 1)):
        c = kvfstest.client().Client(self.m.mnt)
        self.addCleanup(c.close)
        gen = torch.Generator().manual_seed(len(name))
        src, dst = make(), make()
        for t in src:
            t.view(-1).copy_(torch.randint(0, 255, (t.numel(),), generator=gen).to(t.dtype)) \
                if t.is_contiguous() else t.copy_(torch.randint(0, 255, t.shape,
                                                                generator=gen).to(t.dtype))
        for t in dst:
            t.fill_(7)  # the sentinel every byte not loaded keeps
        before = [t.clone() for t in dst]
        lsrc, sig_src = self.instance(c, src, block_dim)
        ldst, sig_dst = self.instance(c, dst, block_dim)
        self.assertEqual(sig_src, sig_dst)
        keys = ["%s/b%d" % (name, b) for b in blocks]
        self.assertEqual(c.put(keys, layout=lsrc, blocks=blocks, flags=kvfstest.client().PUT_MKDIR).ok, len(blocks))
        self.assertEqual(c.get(keys, layout=ldst, blocks=blocks).ok, len(blocks))
        for s, d, b0 in zip(src, dst, before):
            for b in range(NB):
                want = s.select(block_dim, b) if b in blocks else b0.select(block_dim, b)
                self.assertTrue(torch.equal(d.select(block_dim, b), want), "%s block %d" % (name, b))

    def test_flash_attention_views_of_one_buffer(self):
        def make():
            raw = torch.zeros(L * 2 * NB * BS * H * D, dtype=torch.bfloat16)
            n = 2 * NB * BS * H * D
            return [raw[i * n:(i + 1) * n].view(2, NB, BS, H, D) for i in range(L)]
        self.check_layout("fa", make, 1)

    def test_hnd_views(self):
        self.check_layout("hnd", lambda: [torch.zeros(NB, 2, H, BS, D, dtype=torch.float16)
                                          .permute(0, 1, 3, 2, 4) for _ in range(L)], 0)

    def test_mla(self):
        self.check_layout("mla", lambda: [torch.zeros(NB, BS, 576, dtype=torch.bfloat16)
                                          for _ in range(L)], 0)

    def test_cross_layer(self):
        self.check_layout("cross", lambda: [torch.zeros(NB, L, 2, BS, H, D,
                                                        dtype=torch.bfloat16)], 0)


if __name__ == "__main__":
    kvfstest.main(skip_if=lambda: None if torch else "python3-torch is not installed")
