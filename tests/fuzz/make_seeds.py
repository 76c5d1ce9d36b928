#!/usr/bin/env python3
"""Builds the GGUF fuzzer's seed corpus from the shared models (nothing here is committed: seeds are regenerated).

usage: make_seeds.py MODELS_DIR OUT_DIR
Seeds: (1) heads of every model truncated at a few sizes, (2) "shrunk" copies that keep every metadata key (arrays
cut to a few elements) and every tensor info but with one small block of data each, (3) tiny complete llama / qwen2
/ qwen3 models that ModelConfig accepts, so the fuzzer starts from inputs that reach the architecture checks.
"""
import os
import random
import struct
import sys

SCALAR = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: 'B', 10: 'Q', 11: 'q', 12: 'd'}
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210)}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from('<' + fmt, self.d, self.p)[0]
        self.p += struct.calcsize('<' + fmt)
        return v

    def string(self):
        n = self.take('Q')
        s = self.d[self.p:self.p + n]
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take('I'), self.take('Q')
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def parse(data):
    r = Reader(data)
    assert r.d[:4] == b'GGUF'
    r.p = 4
    r.take('I')
    n_t, n_kv = r.take('Q'), r.take('Q')
    kvs = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take('I')
        kvs.append((k, t, r.value(t)))
    tensors = []
    for _ in range(n_t):
        name = r.string()
        dims = [r.take('Q') for _ in range(r.take('I'))]
        tensors.append((name, dims, r.take('I'), r.take('Q')))
    return kvs, tensors


def enc_string(s):
    return struct.pack('<Q', len(s)) + s


def enc_value(t, v):
    if t == 8:
        return enc_string(v)
    if t == 9:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(enc_value(et, x) for x in items)
    return struct.pack('<' + SCALAR[t], v)


def write(kvs, tensors, rng, alignment=32):
    """tensors: (name, dims, type); data is random bytes."""
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += enc_string(k) + struct.pack('<I', t) + enc_value(t, v)
    offset, blobs = 0, []
    for name, dims, ty in tensors:
        be, bb = BLOCK[ty]
        n = 1
        for d in dims:
            n *= d
        size = n // be * bb
        out += enc_string(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        out += struct.pack('<IQ', ty, offset)
        blobs.append((offset, bytes(rng.getrandbits(8) for _ in range(size))))
        offset = (offset + size + alignment - 1) // alignment * alignment
    out += b'\0' * (-len(out) % alignment)
    data = bytearray(offset)
    for off, b in blobs:
        data[off:off + len(b)] = b
    return out + bytes(data)


def tiny_model(arch, rng, tied=False):
    dim, ffn, heads, kv, vocab, hd = 32, 32, 2, 1, 8, 16
    a = arch.encode()
    kvs = [(b'general.architecture', 8, a), (a + b'.embedding_length', 4, dim), (a + b'.block_count', 4, 1),
           (a + b'.attention.head_count', 4, heads), (a + b'.attention.head_count_kv', 4, kv),
           (a + b'.feed_forward_length', 4, ffn), (a + b'.context_length', 4, 64),
           (a + b'.attention.layer_norm_rms_epsilon', 6, 1e-5), (a + b'.rope.freq_base', 6, 10000.0),
           (b'tokenizer.ggml.model', 8, b'llama'),
           (b'tokenizer.ggml.tokens', 9, (8, [b'<unk>', b'<s>', b'</s>', b'a', b'b', b'c', b'd', b'e'])),
           (b'tokenizer.ggml.scores', 9, (6, [0.0] * vocab)), (b'tokenizer.ggml.token_type', 9, (5, [1] * vocab))]
    t = [(b'token_embd.weight', [dim, vocab], 0), (b'output_norm.weight', [dim], 0)]
    if not tied:
        t.append((b'output.weight', [dim, vocab], 8))
    p = b'blk.0.'
    t += [(p + b'attn_norm.weight', [dim], 0), (p + b'attn_q.weight', [dim, heads * hd], 1),
          (p + b'attn_k.weight', [dim, kv * hd], 0), (p + b'attn_v.weight', [dim, kv * hd], 30),
          (p + b'attn_output.weight', [heads * hd, dim], 2), (p + b'ffn_norm.weight', [dim], 0),
          (p + b'ffn_gate.weight', [dim, ffn], 8), (p + b'ffn_up.weight', [dim, ffn], 0),
          (p + b'ffn_down.weight', [ffn, dim], 0)]
    if arch == 'qwen2':
        t += [(p + b'attn_q.bias', [heads * hd], 0), (p + b'attn_k.bias', [kv * hd], 0),
              (p + b'attn_v.bias', [kv * hd], 0)]
    if arch == 'qwen3':
        t += [(p + b'attn_q_norm.weight', [hd], 0), (p + b'attn_k_norm.weight', [hd], 0)]
    return write(kvs, t, rng)


def shrink(kvs, tensors, rng):
    small_kvs = []
    for k, t, v in kvs:
        if t == 9:
            v = (v[0], v[1][:6])
        small_kvs.append((k, t, v))
    alignment = next((v for k, t, v in kvs if k == b'general.alignment'), 32)
    small_t = [(name, [BLOCK[ty][0]] + [1] * (len(dims) - 1), ty) for name, dims, ty, _ in tensors[:12]]
    return write(small_kvs, small_t, rng, alignment)


def main():
    models, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    for arch in ('llama', 'qwen2', 'qwen3'):
        with open(os.path.join(out, 'tiny-' + arch), 'wb') as f:
            f.write(tiny_model(arch, rng))
    with open(os.path.join(out, 'tiny-llama-tied'), 'wb') as f:
        f.write(tiny_model('llama', rng, tied=True))
    for name in sorted(os.listdir(models)):
        if not name.endswith('.gguf'):
            continue
        with open(os.path.join(models, name), 'rb') as f:
            data = f.read()
        base = name[:-5]
        for n in (1024, 8192, 32768):
            with open(os.path.join(out, '%s.head%d' % (base, n)), 'wb') as f:
                f.write(data[:n])
        kvs, tensors = parse(data)
        with open(os.path.join(out, base + '.shrunk'), 'wb') as f:
            f.write(shrink(kvs, tensors, rng))


if __name__ == '__main__':
    main()
