"""A one-block GPT language model step: token and position embeddings, causal
self-attention with scaled_dot_product_attention, a GELU MLP (tanh form, as GPT-2), and an output layer
tied to the token embedding (one parameter, `tok.weight`)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.heads = heads

    def forward(self, x):
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(dim, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, dim))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 11, dim: int = 8, heads: int = 2, context: int = 6):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([Block(dim, heads)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.tok.weight

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.shape[1])
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return {"lm_loss": F.cross_entropy(logits.flatten(0, 1), targets.flatten())}


def gpt_step():
    torch.manual_seed(0)
    tokens = torch.randint(0, 11, (2, 7))
    return {"module": GPT(), "inputs": (tokens[:, :-1], tokens[:, 1:]),
            "expect": {"lm_loss": {"flows": ["*"]}},
            "description": "one GPT block with causal attention and tied embeddings"}
