"""Small architectures built in code (issue 31, item 4): no download, no weights file.

Each entry of `ZOO` builds `(module, example inputs)` with seeded random weights; the test suite
(`tests/test_models_emit.py`) runs every one through both routes (ONNX export -> import -> plan
-> planned.onnx -> onnxruntime; torch -> plan_torch -> GraphModule), and `benchmarks/models.py`
measures them. They are small on purpose (tens of ops, a few hundred KB of activations) and
each carries the feature that makes a plan unsafe or wrong when handled carelessly:

- `branchy_cnn`: a stem, two branches of different depth, in-place ReLUs (`nn.ReLU(inplace=True)`,
  `relu_` in the trace), an in-place residual add (`y += x`, `add_`), concatenation, pooling;
- `attention`: a pre-norm transformer block: fused QKV, heads as views (`view`/`transpose`), a
  causal mask held as a buffer (a constant), softmax, GELU MLP, eval-mode dropout;
- `moe_router`: a top-2 mixture-of-experts layer: gate softmax, `topk`, the routing weights
  scattered in place into `zeros_like` (`scatter_`), four experts combined by their weights;
- `recurrent`: an Elman-style cell unrolled over 6 steps by a Python loop (each step reads a
  slice of the input, a view), the hidden states stacked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def branchy_cnn() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1, bias=False),
                nn.BatchNorm2d(16),
                nn.ReLU(inplace=True),
            )
            self.a = nn.Sequential(nn.Conv2d(16, 8, 1), nn.ReLU(inplace=True))
            self.b = nn.Sequential(
                nn.Conv2d(16, 8, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(8, 8, 3, padding=1),
                nn.ReLU(inplace=True),
            )
            self.mix = nn.Conv2d(16, 16, 1)
            self.head = nn.Linear(16, 10)

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            y = torch.cat([self.a(x), self.b(x)], dim=1)
            y = self.mix(y)
            y += x  # in-place residual
            y = torch.relu_(y)
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    torch.manual_seed(0)
    return Branchy(), (torch.randn(2, 3, 16, 16),)


def attention() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    seq, dim, heads = 8, 32, 4

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(
                nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(0.1)
            )
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), diagonal=1))

        def forward(self, x: Any) -> Any:
            b, n, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            q, k, v = (t.view(b, n, heads, d // heads).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads) + self.mask
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
            x = x + self.proj(y)
            return x + self.mlp(self.norm2(x))

    torch.manual_seed(1)
    return Block(), (torch.randn(2, seq, dim),)


def moe_router() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    dim, experts, top = 16, 4, 2

    class MoE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(dim, experts)
            self.experts = nn.ModuleList(
                nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
                for _ in range(experts)
            )

        def forward(self, x: Any) -> Any:
            probs = self.gate(x).softmax(-1)
            weight, index = probs.topk(top, dim=-1)
            weight = weight / weight.sum(-1, keepdim=True)
            routing = torch.zeros_like(probs)
            routing.scatter_(-1, index, weight)  # in place into a fresh tensor
            out = routing[..., 0:1] * self.experts[0](x)
            for e in range(1, experts):
                out = out + routing[..., e : e + 1] * self.experts[e](x)
            return out, routing

    torch.manual_seed(2)
    return MoE(), (torch.randn(3, 5, dim),)


def recurrent() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    steps, dim, hidden = 6, 8, 16

    class Unrolled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Linear(dim, hidden)
            self.rec = nn.Linear(hidden, hidden, bias=False)
            self.out = nn.Linear(hidden, 4)

        def forward(self, x: Any) -> Any:
            h = torch.zeros(x.shape[0], hidden)
            states = []
            for t in range(steps):
                h = torch.tanh(self.inp(x[:, t]) + self.rec(h))
                states.append(h)
            return self.out(torch.stack(states, dim=1)), h

    torch.manual_seed(3)
    return Unrolled(), (torch.randn(2, steps, dim),)


ZOO: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "branchy_cnn": branchy_cnn,
    "attention": attention,
    "moe_router": moe_router,
    "recurrent": recurrent,
}
"""name -> a function building (module in eval mode, example inputs)."""


def build(name: str) -> tuple[Any, tuple[Any, ...]]:
    module, inputs = ZOO[name]()
    return module.eval(), inputs


def export_onnx(module: Any, inputs: tuple[Any, ...], path: Any) -> Any:
    """`module` exported to `path` with the TorchScript-based exporter (opset 17, weights
    inline); returns the path."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), inputs, str(path), dynamo=False, opset_version=17)
    return path


# --- published architectures from torchvision and transformers (installed by the benchmark,
# --- benchmark-only: never a dependency of tensorplan)


TORCHVISION = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0")
TRANSFORMERS = ("bert",)


def install_hub(folder: Any) -> None:
    """torchvision (the build matching the installed torch, without its dependencies) into
    `folder`, which joins the end of `sys.path` (the environment's own packages come first),
    and transformers there too unless the environment has it (`pip install transformers` into
    the venv is fine: a benchmark-only package, never a dependency of tensorplan). torchvision
    stays out of the venv: the build the index holds is the CUDA one, whose import fails
    against the CPU torch, and an installed, failing torchvision also breaks transformers'
    import. Only the benchmark calls this."""
    import importlib.util
    import subprocess
    import sys
    from pathlib import Path

    import torch

    folder = Path(folder)
    minor = int(torch.__version__.split(".")[1])
    pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(folder)]
    if not (folder / "torchvision").is_dir():
        subprocess.run([*pip, "--no-deps", f"torchvision==0.{minor + 15}.*"], check=True)
    if importlib.util.find_spec("transformers") is None and not (folder / "transformers").is_dir():
        subprocess.run([*pip, "transformers"], check=True)
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    _torchvision_models_only()


def _torchvision_models_only() -> None:
    """Make `torchvision.models` importable without torchvision's compiled operators: the index
    here has its CUDA build only, whose `torchvision::nms` registration fails against the CPU
    torch; the model definitions need none of those operators."""
    import importlib.util
    import sys
    import types

    if "torchvision" in sys.modules:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("torchvision is not installed")
    pkg = types.ModuleType("torchvision")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__version__ = "0"  # type: ignore[attr-defined]
    sys.modules["torchvision"] = pkg


def hub(name: str) -> tuple[Any, tuple[Any, ...]]:
    """A torchvision model (`TORCHVISION`) or a transformers model (`TRANSFORMERS`) built from
    its default configuration, random weights, batch 1 (images 224 x 224, 128 tokens)."""
    import torch

    torch.manual_seed(0)
    if name in TORCHVISION:
        import torchvision.models

        module = getattr(torchvision.models, name)(weights=None)
        return module.eval(), (torch.randn(1, 3, 224, 224),)
    import transformers as tf

    ids = (torch.randint(0, 1000, (1, 128)),)
    if name == "bert":
        eager: dict[str, Any] = {"attn_implementation": "eager"}  # explicit softmax, matmuls
        cfg = tf.BertConfig(**eager)
        return _first_output(tf.BertModel(cfg)), ids
    raise KeyError(name)


def _first_output(model: Any) -> Any:
    """A transformers model returning its first output as a tensor (both exporters take it)."""
    from torch import nn

    class First(nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids: Any) -> Any:
            return self.inner(input_ids=ids, return_dict=False)[0]

    return First(model.eval()).eval()
