"""Build the shipped real-model graphs: PyTorch modules written here -> graph-only ONNX files ->
schedule and allocation instances (`instances/schedule/model-*.json`,
`instances/allocation/model-*.json`).

    .venv/bin/python instances/tools/build_models.py                  # all (needs torch, onnx)
    .venv/bin/python instances/tools/build_models.py --instances-only # no ONNX export

The modules follow the published architectures (no torchvision, no transformers: written out
below) and are exported once with the TorchScript-based `torch.onnx.export` (opset 17, eval mode,
constant folding, so BatchNorm folds into the convolutions). The weights are then stripped: every
initializer of more than `KEEP` elements is turned into an external-data reference to a file
that is not shipped (`<model>.weights.bin`), so the ONNX file holds the graph and every shape but
no numbers; the importer reads it with `load_external_data=False`. Small constants (reshape
targets, axes, scalars) stay inline because shape inference needs their values.

Every model has a symbolic `batch` dimension; the shipped instances bind batch=1.

ResNet-50 and MobileNetV2 are also shipped as one training step (`model-<name>-train.json`):
the same module in train mode, traced forward + backward by
`tensorplan.import_torch(module, inputs, training=True)` (PyTorch's joint graph; there is no
ONNX file for these, ONNX has no backward pass). Those are the graphs where the order matters:
forward activations stay live until the backward ops that read them.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

INSTANCES = Path(__file__).resolve().parents[1]  # instances/
HERE = INSTANCES / "models"
KEEP = 64  # initializers with at most this many elements stay inline (shape constants)
OPSET = 17

# --- the modules ---------------------------------------------------------------------------------


def _torch() -> Any:
    import torch

    return torch


def resnet50() -> Any:
    """ResNet-50 (He et al. 2016, torchvision's layout: stride on the 3x3 conv, v1.5)."""
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(),
                nn.MaxPool2d(3, 2, 1),
            )
            blocks, cin = [], 64
            for k, n in enumerate(layers):
                width = 64 * 2**k
                for j in range(n):
                    blocks.append(Bottleneck(cin, width, 2 if j == 0 and k > 0 else 1))
                    cin = width * 4
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x: Any) -> Any:
            return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))

    return ResNet()


def mobilenet_v2() -> Any:
    """MobileNetV2 (Sandler et al. 2018): inverted residuals, ReLU6, width 1.0."""
    from torch import nn

    def cbr(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(),
        )

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            layers = [] if expand == 1 else [cbr(cin, hidden, 1)]
            layers += [
                cbr(hidden, hidden, 3, stride, groups=hidden),
                nn.Conv2d(hidden, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        SETTINGS: tuple[tuple[int, int, int, int], ...]  # (expansion, channels, repeats, stride)
        SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1))
        SETTINGS += ((6, 160, 3, 2), (6, 320, 1, 1))

        def __init__(self, classes: int = 1000) -> None:
            super().__init__()
            layers, cin = [cbr(3, 32, 3, 2)], 32
            for t, c, n, s in self.SETTINGS:
                for j in range(n):
                    layers.append(Inverted(cin, c, s if j == 0 else 1, t))
                    cin = c
            layers.append(cbr(cin, 1280, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Linear(1280, classes)

        def forward(self, x: Any) -> Any:
            return self.classifier(self.features(x).mean((2, 3)))

    return MobileNetV2()


def _attention_block(causal: bool, seq: int, hidden: int, heads: int, ff: int) -> Any:
    """One transformer layer: post-LN (BERT) when not causal, pre-LN (GPT-2) when causal."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.up = nn.Linear(hidden, ff)
            self.down = nn.Linear(ff, hidden)
            self.gelu = nn.GELU(approximate="tanh" if causal else "none")
            if causal:
                mask = torch.full((seq, seq), float("-inf")).triu(1)
                self.register_buffer("mask", mask.view(1, 1, seq, seq))

        def attend(self, x: Any) -> Any:
            # static sequence length, batch as -1: the reshape targets fold to constants
            q, k, v = self.qkv(x).split(hidden, dim=2)
            q, k, v = (t.view(-1, seq, heads, hidden // heads).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(2, 3) / math.sqrt(hidden // heads)
            if causal:
                scores = scores + self.mask
            y = scores.softmax(-1) @ v
            return self.proj(y.transpose(1, 2).reshape(-1, seq, hidden))

        def forward(self, x: Any) -> Any:
            if causal:  # GPT-2: pre-LN
                x = x + self.attend(self.ln1(x))
                return x + self.down(self.gelu(self.up(self.ln2(x))))
            x = self.ln1(x + self.attend(x))  # BERT: post-LN
            return self.ln2(x + self.down(self.gelu(self.up(x))))

    return Layer()


def bert_base(seq: int = 128) -> Any:
    """BERT-base encoder (Devlin et al. 2019): 12 layers, hidden 768, 12 heads, FFN 3072."""
    import torch
    from torch import nn

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(30522, 768)
            self.pos = nn.Embedding(512, 768)
            self.register_buffer("positions", torch.arange(seq).unsqueeze(0))
            self.segment = nn.Embedding(2, 768)
            self.ln = nn.LayerNorm(768)
            self.layers = nn.ModuleList(
                _attention_block(False, seq, 768, 12, 3072) for _ in range(12)
            )
            self.pool = nn.Linear(768, 768)

        def forward(self, ids: Any) -> tuple[Any, Any]:
            x = self.ln(
                self.word(ids) + self.pos(self.positions) + self.segment(torch.zeros_like(ids))
            )
            for layer in self.layers:
                x = layer(x)
            return x, torch.tanh(self.pool(x[:, 0]))

    return Bert()


def gpt2_small(seq: int = 128) -> Any:
    """GPT-2 small decoder (Radford et al. 2019): 12 layers, hidden 768, 12 heads, tied LM head."""
    import torch
    from torch import nn

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(50257, 768)
            self.pos = nn.Embedding(1024, 768)
            self.register_buffer("positions", torch.arange(seq).unsqueeze(0))
            self.layers = nn.ModuleList(
                _attention_block(True, seq, 768, 12, 3072) for _ in range(12)
            )
            self.ln = nn.LayerNorm(768)

        def forward(self, ids: Any) -> Any:
            x = self.word(ids) + self.pos(self.positions)
            for layer in self.layers:
                x = layer(x)
            return self.ln(x) @ self.word.weight.t()

    return GPT2()


MODELS: dict[str, tuple[Callable[[], Any], str, str]] = {
    # name: (module factory, input kind, description)
    "resnet50": (resnet50, "image", "ResNet-50, 224x224 image"),
    "mobilenetv2": (mobilenet_v2, "image", "MobileNetV2 (width 1.0), 224x224 image"),
    "bert-base": (bert_base, "tokens", "BERT-base encoder, 12 layers, sequence 128"),
    "gpt2-small": (gpt2_small, "tokens", "GPT-2 small decoder with LM head, sequence 128"),
}


# --- export and strip ----------------------------------------------------------------------------


def example_inputs(kind: str) -> tuple[Any, ...]:
    torch = _torch()
    if kind == "image":
        return (torch.zeros(1, 3, 224, 224),)
    return (torch.zeros(1, 128, dtype=torch.int64),)


def export(module: Any, inputs: tuple[Any, ...], kind: str) -> Any:
    """The module as an ONNX ModelProto (weights still inside), batch dimension symbolic.

    Every parameter and BatchNorm statistic is drawn at random first: the exporter shares
    initializers whose values are equal, so default-initialised ones (LayerNorm weights of 1,
    folded BatchNorm biases of 0) would otherwise collapse into one tensor each.
    """
    import warnings

    import onnx

    torch = _torch()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.02)
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    name = "image" if kind == "image" else "input_ids"
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            inputs,
            buf,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=[name],
            dynamic_axes={name: {0: "batch"}},
        )
    return onnx.load_from_string(buf.getvalue())


def strip_weights(model: Any, location: str) -> Any:
    """Every initializer of more than KEEP elements becomes a reference to absent external data."""
    import onnx
    from onnx.external_data_helper import set_external_data

    offset = 0
    for t in model.graph.initializer:
        if math.prod(t.dims) <= KEEP:
            continue
        raw = onnx.numpy_helper.to_array(t).tobytes()
        t.raw_data = raw  # set_external_data wants raw_data present; cleared just after
        set_external_data(t, location, offset, len(raw))
        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
            t.ClearField(f)
        t.data_location = onnx.TensorProto.EXTERNAL
        offset += len(raw)
    for n in model.graph.node:
        n.doc_string = ""
    model.doc_string = ""
    return model


def simplify(model: Any) -> Any:
    """Drop exporter artefacts that are not computation: `Constant` nodes become initializers
    and `Identity` nodes that only rename an initializer (shared weights) are bypassed."""
    import onnx

    graph = model.graph
    inits = {t.name for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    rename: dict[str, str] = {}
    keep = []
    for n in graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            graph.initializer.append(t)
            inits.add(t.name)
        elif n.op_type == "Identity" and n.input[0] in inits and n.output[0] not in outputs:
            rename[n.output[0]] = n.input[0]
        else:
            keep.append(n)
    for n in keep:
        for k, x in enumerate(n.input):
            n.input[k] = rename.get(x, x)
    del graph.node[:]
    graph.node.extend(keep)
    return model


def build_onnx(name: str) -> Path:
    factory, kind, _ = MODELS[name]
    torch = _torch()
    torch.manual_seed(0)
    model = simplify(export(factory(), example_inputs(kind), kind))
    model = strip_weights(model, f"{name}.weights.bin")
    model.graph.name = name
    path = HERE / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


TRAINING = ("resnet50", "mobilenetv2")
"""Models also shipped as one training step (forward + backward, traced with PyTorch)."""


def write_training_instances(name: str) -> tuple[Path, Path]:
    """`model-<name>-train.json`: one training step of the module (batch 1), traced by
    `tensorplan.import_torch(..., training=True)` (no ONNX file: ONNX has no backward)."""
    from tensorplan.harness.torch_import import import_torch

    factory, kind, _ = MODELS[name]
    _torch().manual_seed(0)
    sched, alloc = import_torch(
        factory(), example_inputs(kind), training=True, name=f"model-{name}-train"
    )
    return _write(f"model-{name}-train", sched, alloc)


def _write(stem: str, sched: Any, alloc: Any) -> tuple[Path, Path]:
    from tensorplan.problems import allocation, schedule

    paths = (INSTANCES / "schedule" / f"{stem}.json", INSTANCES / "allocation" / f"{stem}.json")
    docs = (schedule.instance_to_json(sched), allocation.instance_to_json(alloc))
    for path, doc in zip(paths, docs, strict=True):
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return paths


def write_instances(name: str) -> tuple[Path, Path]:
    """Derive `model-<name>.json` (schedule, objective peak; allocation, model order)."""
    from tensorplan.harness.onnx_import import import_onnx

    sched, alloc = import_onnx(HERE / f"{name}.onnx", dims={"batch": 1}, name=f"model-{name}")
    return _write(f"model-{name}", sched, alloc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(MODELS), help="default: all")
    ap.add_argument(
        "--instances-only",
        action="store_true",
        help="skip the ONNX export: derive the instances from the shipped .onnx files (and trace "
        "the training steps)",
    )
    args = ap.parse_args(argv)
    for name in args.models:
        if not args.instances_only:
            path = build_onnx(name)
            print(f"{path.relative_to(INSTANCES.parent)}: {path.stat().st_size // 1024} KB")
        for p in write_instances(name):
            print(f"  -> {p.relative_to(INSTANCES.parent)}")
        if name in TRAINING:
            for p in write_training_instances(name):
                print(f"  -> {p.relative_to(INSTANCES.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
