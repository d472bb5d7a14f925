"""A small GPT-like character model (token and position embeddings, causal
self-attention blocks with layer norm and a GELU MLP, a linear head),
written as ordinary PyTorch. Used by examples/train_gpt.py and
benchmarks/models/saved_activations.py."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, width=32, heads=2, layers=2, context=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[Block(width, heads, context) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        logits = self.head(self.ln(self.blocks(x)))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness, it was the epoch of belief, it was the epoch of "
    "incredulity, it was the season of Light, it was the season of Darkness, it was the "
    "spring of hope, it was the winter of despair, we had everything before us, we had "
    "nothing before us, we were all going direct to Heaven, we were all going direct the "
    "other way."
)


def dataset():
    """The text as a tensor of character ids, and the vocabulary size."""
    chars = sorted(set(TEXT))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in TEXT]), len(chars)


def batch(data, generator, batch_size=8, context=16):
    """A batch of (input, next-character target) windows."""
    starts = torch.randint(0, len(data) - context - 1, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + context] for s in starts])
    y = torch.stack([data[s + 1:s + context + 1] for s in starts])
    return x, y
