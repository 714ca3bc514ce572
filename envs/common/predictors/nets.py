"""Small MLPs: trained with torch (full batch, Adam, L1 loss), run with numpy.

Inference runs on numpy copies of the weights so that an env's predictor never starts torch
threads in a vectorised-env worker and is safe to share read-only between threads.

Training runs on one torch thread (:func:`single_threaded`): these networks are tiny and
full-batch, and two threads contending for busy cores were measured 10–20× slower than one.

Training is reproducible bit-for-bit from its seed on one machine: weights are initialised under
``torch.manual_seed`` inside :func:`torch.random.fork_rng`, so the caller's global torch RNG
(e.g. a PPO run's) is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from torch import nn

T = TypeVar("T")
R = TypeVar("R")
Layers = list[tuple[np.ndarray, np.ndarray]]  # (W (in, out), b (out,)) per Linear layer


def single_threaded(train: Callable[[T], R], cfg: T) -> R:
    """``train(cfg)`` with torch limited to one thread, restoring the caller's setting after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(cfg)
    finally:
        torch.set_num_threads(threads)


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (len(sizes) − 1 layers)."""
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def fit_regressor(
    x: np.ndarray, y: np.ndarray, sizes: list[int], seed: int, steps: int, lr: float, wd: float
) -> Layers:
    """Train an MLP ``sizes[0] → … → 1`` on (x, y) minimising mean |ŷ − y|; return its layers.

    The output bias starts at median(y) so that the few hundred full-batch steps are spent on
    the signal, not on finding the offset.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = mlp(sizes)
    last = net[-1]
    assert isinstance(last, nn.Linear)
    with torch.no_grad():
        last.bias.fill_(float(np.median(y)))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=wd)
    for _ in range(steps):
        opt.zero_grad()
        loss = (net(xt).squeeze(1) - yt).abs().mean()
        loss.backward()
        opt.step()
    return layers_of(net)


def layers_of(net: nn.Sequential) -> Layers:
    """numpy (W, b) of each Linear layer of ``net``, W transposed to (in, out)."""
    return [
        (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
        for m in net
        if isinstance(m, nn.Linear)
    ]


def forward(layers: Layers, x: np.ndarray) -> np.ndarray:
    """numpy forward pass: ReLU after every layer but the last."""
    h = x
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            np.maximum(h, 0.0, out=h)
    return h


def forward_stacked(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """Forward K same-shaped MLPs at once: W (K, in, out), b (K, out); x (n, d) → (K, n, out)."""
    h = np.einsum("nd,kdo->kno", x, layers[0][0]) + layers[0][1][:, None, :]
    for w, b in layers[1:]:
        np.maximum(h, 0.0, out=h)
        h = np.matmul(h, w) + b[:, None, :]
    return h


def stack(experts: list[Layers]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stack K experts' layers into (K, in, out) weights and (K, out) biases per layer."""
    return [
        (np.stack([e[i][0] for e in experts]), np.stack([e[i][1] for e in experts]))
        for i in range(len(experts[0]))
    ]
