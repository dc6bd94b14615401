"""Images per second of a training step: vitattn-train's Lightning loop vs a plain PyTorch loop.

Both train the same model (built from the same Hydra config) on the same in-memory batches
with the same on-device augmentation and optimizer; the plain loop has no logging, metrics,
callbacks or checkpoints. Rounds alternate so that machine noise hits both alike.

    python scripts/bench_overhead.py                          # model=vit, batch 128
    python scripts/bench_overhead.py --steps 20 model=vit_pixel data.batch_size=8
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import hydra
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from vitattn.callbacks import ImagesPerSecond
from vitattn.data.augment import normalize
from vitattn.utils.config import CONFIG_DIR
from vitattn.utils.instantiators import instantiate_list
from vitattn.utils.lightning_output import tidy_lightning_output


def compose_train(overrides: list[str], output_dir: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["trainer=cpu", *overrides], return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = output_dir
    return cfg


def plain_loop(cfg, datamodule, steps: int, warmup: int) -> float:
    """A hand-written loop: forward, cross-entropy, backward, AdamW step, LR schedule."""
    module = hydra.utils.instantiate(cfg.module)
    net = module.net.train()
    optimizer = hydra.utils.instantiate(cfg.optimizer)(params=module.parameter_groups())
    scheduler = hydra.utils.instantiate(cfg.scheduler)(optimizer=optimizer, total_steps=steps)
    batches = iter(datamodule.train_dataloader())
    start = None
    for step in range(steps):
        if step == warmup:
            start = time.perf_counter()
        try:
            images, labels = next(batches)
        except StopIteration:
            batches = iter(datamodule.train_dataloader())
            images, labels = next(batches)
        images = datamodule.augment(images)
        images = normalize(images, datamodule.mean, datamodule.std)
        loss = F.cross_entropy(net(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
    elapsed = time.perf_counter() - start
    return (steps - warmup) * datamodule.hparams.batch_size / elapsed


def lightning_loop(cfg, datamodule, steps: int, warmup: int) -> float:
    """vitattn-train's own path: Trainer with the configured callbacks and TensorBoard logger."""
    module = hydra.utils.instantiate(cfg.module)
    callbacks = instantiate_list(cfg.callbacks)
    for callback in callbacks:
        if isinstance(callback, ImagesPerSecond):
            callback.warmup_steps = warmup  # `overall` then counts the same steps as plain_loop
    trainer = hydra.utils.instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=instantiate_list(cfg.logger),
        max_steps=steps,
        val_check_interval=10 * steps,
    )
    trainer.fit(module, datamodule=datamodule)
    throughput = next(c for c in trainer.callbacks if isinstance(c, ImagesPerSecond))
    return throughput.overall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per round, warm-up included")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for vitattn-train")
    args = parser.parse_args()

    tidy_lightning_output()
    with tempfile.TemporaryDirectory() as output_dir:
        cfg = compose_train(["callbacks.progress_bar.refresh_rate=0", *args.overrides], output_dir)
        datamodule = hydra.utils.instantiate(cfg.data)
        datamodule.prepare_data()
        datamodule.setup("fit")
        rates: dict[str, list[float]] = {"plain PyTorch loop": [], "vitattn (Lightning)": []}
        for _ in range(args.rounds):
            torch.manual_seed(0)
            rates["plain PyTorch loop"].append(plain_loop(cfg, datamodule, args.steps, args.warmup))
            torch.manual_seed(0)
            rates["vitattn (Lightning)"].append(
                lightning_loop(cfg, datamodule, args.steps, args.warmup)
            )
    batch = cfg.data.batch_size
    print(f"\nthreads={torch.get_num_threads()} batch={batch} overrides={args.overrides}")
    for name, values in rates.items():
        print(f"{name:22s} median {statistics.median(values):8.1f} images/s  rounds {values}")
    ratio = statistics.median(rates["vitattn (Lightning)"]) / statistics.median(
        rates["plain PyTorch loop"]
    )
    print(f"vitattn / plain = {ratio:.3f}")


if __name__ == "__main__":
    main()
